package node

import (
	"context"
	"maps"
	"os"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestContradictedFile: changes merge into what the file keeps (a reason
// keeps a room, "" forgets it), the file goes once nothing is kept, and a
// file kept for another stream is refused, naming both.
func TestContradictedFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := contradictedFileOf(dir, "ROOMS")
	if got, err := f.load(ctx); err != nil || len(got) != 0 {
		t.Fatalf("no file: %v, %v", got, err)
	}
	steps := []struct {
		changes map[string]string
		want    map[string]string
	}{
		{map[string]string{"room:a": "why a"}, map[string]string{"room:a": "why a"}},
		{map[string]string{"room:b": "why b", "room:c": ""}, map[string]string{"room:a": "why a", "room:b": "why b"}},
		{map[string]string{"room:a": "why a again"}, map[string]string{"room:a": "why a again", "room:b": "why b"}},
		{map[string]string{"room:a": "", "room:b": ""}, map[string]string{}},
	}
	for i, s := range steps {
		if err := f.apply(ctx, s.changes); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got, err := f.load(ctx)
		if err != nil || !maps.Equal(got, s.want) {
			t.Fatalf("step %d: %v, %v; want %v", i, got, err, s.want)
		}
	}
	if _, err := os.Stat(f.path); !os.IsNotExist(err) {
		t.Fatalf("the file stays with nothing kept: %v", err)
	}
	if err := f.apply(ctx, map[string]string{"room:a": "why"}); err != nil {
		t.Fatal(err)
	}
	other := contradictedFile{path: f.path, stream: "ROOMS-1"}
	if _, err := other.load(ctx); err == nil || !strings.Contains(err.Error(), `kept for stream "ROOMS", serve's is "ROOMS-1"`) {
		t.Fatalf("another stream's file: %v", err)
	}
}

// TestContradictionRelayPersists: what the checkpointer notes reaches the
// memory (the last word on a room wins), and a start's remembered rooms
// are handed to the gate's side as found by an earlier run.
func TestContradictionRelayPersists(t *testing.T) {
	f := contradictedFileOf(t.TempDir(), "ROOMS")
	if err := f.apply(context.Background(), map[string]string{"room:old": "it covers 9"}); err != nil {
		t.Fatal(err)
	}
	r := newContradictionRelay(f)
	ids, err := r.remembered(context.Background())
	if err != nil || len(ids) != 1 || ids[0] != "room:old" || r.pending["room:old"] != "an earlier run found: it covers 9" {
		t.Fatalf("remembered %v, %v; pending %v", ids, err, r.pending)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.persist(ctx, zap.NewNop()) }()
	r.note("room:new", "it covers 5")
	r.note("room:old", "")
	r.note("room:flap", "x")
	r.note("room:flap", "")
	cancel()
	<-done
	got, err := f.load(context.Background())
	if err != nil || !maps.Equal(got, map[string]string{"room:new": "it covers 5"}) {
		t.Fatalf("kept %v, %v", got, err)
	}
}

// TestContradictedKey: the streams bucket's key merges changes as the
// file does, beside the stream's mark, which it leaves alone; a key kept
// for another stream is refused.
func TestContradictedKey(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := t.Context()
	kv, err := streamsBucket(ctx, e.Js, 1)
	if err != nil {
		t.Fatal(err)
	}
	mark := kvMemory{kv: kv, key: "ROOMS"}
	if err := mark.save(ctx, room.StreamMark{Stream: "ROOMS", LastSeq: 7}, false); err != nil {
		t.Fatal(err)
	}
	k := contradictedKey{kv: kv, key: "ROOMS.contradicted", stream: "ROOMS"}
	for i, step := range []struct{ changes, want map[string]string }{
		{map[string]string{"room:a": "why a"}, map[string]string{"room:a": "why a"}},
		{map[string]string{"room:b": "why b", "room:a": ""}, map[string]string{"room:b": "why b"}},
	} {
		if err := k.apply(ctx, step.changes); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got, err := k.load(ctx); err != nil || !maps.Equal(got, step.want) {
			t.Fatalf("step %d: %v, %v; want %v", i, got, err, step.want)
		}
	}
	if m, err := mark.load(ctx); err != nil || m == nil || m.LastSeq != 7 {
		t.Fatalf("the mark beside it: %+v, %v", m, err)
	}
	other := contradictedKey{kv: kv, key: "ROOMS.contradicted", stream: "ROOMS-1"}
	if _, err := other.load(ctx); err == nil || !strings.Contains(err.Error(), `kept for stream "ROOMS", serve's is "ROOMS-1"`) {
		t.Fatalf("another stream's key: %v", err)
	}
}
