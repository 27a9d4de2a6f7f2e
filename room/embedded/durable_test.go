package embedded_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room/embedded"
)

// TestNameSyncer: it finds a stream's msgs/ directory and fsyncs the way
// down to it (no error); for a stream the store does not hold it says
// which; once the stream is removed, the next call says so and a stream
// made anew under the same name is found again. (That the fsyncs keep
// the names through a power loss is TestCrashNATSDirectories, on a
// filesystem that drops what was not fsynced.)
func TestNameSyncer(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(t.TempDir(), "data")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	cfg := jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := srv.NameSyncer("NOPE")(); err == nil || !strings.Contains(err.Error(), "stream NOPE: 0 message directories under") {
		t.Errorf("missing stream: %v", err)
	}
	sync := srv.NameSyncer("S")
	for range 3 {
		if _, err := js.Publish(ctx, "s.a", []byte("m")); err != nil {
			t.Fatal(err)
		}
		if err := sync(); err != nil {
			t.Fatalf("sync: %v", err)
		}
	}
	if err := js.DeleteStream(ctx, "S"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(srv.StoreDir(), "jetstream", "$G", "streams", "S")); !os.IsNotExist(err) {
		t.Fatalf("stream directory after delete: %v", err)
	}
	if err := sync(); err == nil || !strings.Contains(err.Error(), "stream S:") {
		t.Errorf("after the stream was removed: %v", err)
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := sync(); err != nil {
		t.Errorf("the stream made anew: %v", err)
	}
}
