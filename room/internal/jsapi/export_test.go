package jsapi

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room/embedded"
)

// StreamS starts an embedded server with stream S on s.> (file storage,
// direct gets allowed) and returns a connection to it; both end with t.
func StreamS(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// streamS is StreamS for this package's own tests.
var streamS = StreamS
