package checkpointer_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestCheckpointerBoundsUncoveredLeaves: a room's tree keeps at most its
// window of leaves past its latest checkpoint in memory (twice Every,
// here 4,200) and writes older ones to a file, so a room whose
// checkpoints stopped (blocked: the store lost its leaves) does not grow
// serve's memory by 32 bytes a message for as long as it runs; its tree's
// root stays the one an independent rebuild of the stream gives. A room
// whose checkpoints keep up never writes its leaves out.
func TestCheckpointerBoundsUncoveredLeaves(t *testing.T) {
	const every, n, per = 2100, 8000, 500
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	reg := prometheus.NewRegistry()
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: every, Interval: time.Hour, Registerer: reg, LeafDir: t.TempDir()})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	const lost, fine = "room:lost", "room:fine"
	ckp.Block(lost, "its latest checkpoint covers 250 leaves, the stream holds 200")
	for _, id := range []string{lost, fine} {
		es, _ := roomtest.Journal(t, "run-"+id[5:], "cap", n)
		for i := 0; i < n; i += per {
			if r, err := gate.AppendJournal(ctx, id, roomtest.Lines(es[i:i+per]), nil); err != nil || r.Stored != per {
				t.Fatalf("%s: %+v %v", id, r, err)
			}
			want := uint64(i + per)
			roomtest.WaitFor(t, 10*time.Second, fmt.Sprintf("%s: %d leaves, checkpoints caught up", id, want), func() bool {
				size, covered, _ := ckp.RoomLeaves(id)
				return size == want && (id == lost || size-covered < every)
			})
		}
	}
	size, covered, st := ckp.RoomLeaves(lost)
	const window, chunk = 2 * every, checkpoint.DefaultLeafChunk
	if size != n || covered != 0 || st.Spilled == 0 || st.Held > window+chunk || st.Spilled+st.Held != n || st.WriteErr != nil {
		t.Fatalf("blocked room: %d leaves, %d covered, %+v; want %d, 0, at most %d held and the rest spilled", size, covered, st, n, window+chunk)
	}
	_, root, ok := ckp.RoomTree(lost)
	trust := roomtest.Trusting(t, key)
	if want := roomtest.Rebuild(e, lost, trust).Tree.Root(); !ok || root != want {
		t.Fatalf("blocked room's root %x (ok %v), the stream's %x", root, ok, want)
	}
	if _, covered, st := ckp.RoomLeaves(fine); covered < n-every || st.Spilled != 0 {
		t.Fatalf("room with checkpoints: %d covered, %+v; want at least %d covered and nothing spilled", covered, st, n-every)
	}
	if v, ok := roomtest.MetricValue(t, reg, "roompub_checkpoint_leaves_spilled_total"); !ok || v != float64(st.Spilled) {
		t.Fatalf("roompub_checkpoint_leaves_spilled_total %v (present %v), want %d", v, ok, st.Spilled)
	}
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if c := e.CountOn(room.Subjects{}.Checkpoint(lost)); c != 0 {
		t.Fatalf("%d checkpoints of the blocked room", c)
	}
	// A LeafDir that is no directory stops the start.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{file, filepath.Join(file, "missing")} {
		if _, err := checkpointer.Start(ctx, e.Connect(), checkpointer.Options{Key: key, LeafDir: dir}); !errors.Is(err, checkpointer.ErrCheckpointer) || !strings.Contains(err.Error(), "LeafDir") {
			t.Fatalf("LeafDir %s: %v", dir, err)
		}
	}
}
