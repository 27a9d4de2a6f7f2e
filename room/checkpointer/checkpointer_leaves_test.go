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
	"github.com/roompub/roompub/events"
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
	for dir, why := range map[string]string{file: "not a directory", filepath.Join(file, "missing"): "not a directory", "/proc": ""} {
		_, err := checkpointer.Start(ctx, e.Connect(), checkpointer.Options{Key: key, LeafDir: dir})
		want := "the directory for leaves no checkpoint covers yet (--checkpoint-leaf-dir, Options.LeafDir) " + dir + ": "
		if !errors.Is(err, checkpointer.ErrCheckpointer) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), why) {
			t.Fatalf("LeafDir %s: %v", dir, err)
		}
	}
}

// TestCheckpointerLostTree: a room whose tree lost the leaves it wrote to
// its file (checkpoint.ErrLeafSpill) is no contradiction: it is counted
// blocked and logged once, its later leaves are passed over (nothing
// grows for it), and it gets no checkpoint, the final one included; the
// other rooms go on.
func TestCheckpointerLostTree(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	reg := prometheus.NewRegistry()
	contradictions := 0
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 1000, Interval: time.Hour, Registerer: reg,
		OnContradiction: func(string, string) { contradictions++ }})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	const lost, fine = "room:lost", "room:fine"
	ship := func(id string, es []*events.Entry, want uint64) {
		t.Helper()
		if r, err := gate.AppendJournal(ctx, id, roomtest.Lines(es), nil); err != nil || r.Stored != len(es) {
			t.Fatalf("%s: %+v %v", id, r, err)
		}
		roomtest.WaitFor(t, 10*time.Second, fmt.Sprintf("%s: %d leaves", id, want), func() bool {
			size, _, _ := ckp.RoomLeaves(id)
			return size == want
		})
	}
	les, _ := roomtest.Journal(t, "run-lost", "cap", 20)
	fes, _ := roomtest.Journal(t, "run-fine", "cap", 20)
	ship(lost, les[:10], 10)
	why := fmt.Errorf("%w: read: input/output error", checkpoint.ErrLeafSpill)
	ckp.LoseTree(lost, why)
	ckp.LoseTree(lost, why) // logged and counted once
	if r, err := gate.AppendJournal(ctx, lost, roomtest.Lines(les[10:]), nil); err != nil || r.Stored != 10 {
		t.Fatalf("%+v %v", r, err)
	}
	ship(fine, fes, 20) // read after the lost room's second request
	if size, _, _ := ckp.RoomLeaves(lost); size != 10 {
		t.Fatalf("the lost tree grew to %d leaves, want 10", size)
	}
	if v, ok := roomtest.MetricValue(t, reg, "roompub_checkpoint_rooms_blocked"); !ok || v != 1 {
		t.Fatalf("roompub_checkpoint_rooms_blocked %v (present %v), want 1", v, ok)
	}
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n, m := e.CountOn(room.Subjects{}.Checkpoint(lost)), e.CountOn(room.Subjects{}.Checkpoint(fine)); n != 0 || m != 1 {
		t.Fatalf("checkpoints: %d of the lost room, %d of the other; want 0 and 1", n, m)
	}
	l := logs.FilterMessageSnippet("lost the leaves it wrote to its file").All()
	if len(l) != 1 || l[0].ContextMap()["room"] != lost || l[0].ContextMap()["error"] != why.Error() || l[0].ContextMap()["size"] != uint64(10) {
		t.Fatalf("logs: %v", l)
	}
	if contradictions != 0 || logs.FilterMessageSnippet("contradicts").Len() != 0 {
		t.Fatalf("a lost tree reported as a contradiction (%d)", contradictions)
	}
}
