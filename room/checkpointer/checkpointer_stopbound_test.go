package checkpointer_test

import (
	"context"
	"testing"
	"time"

	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestCheckpointerStopBoundedWhileWriting: Stop's ctx bounds all of it,
// a write the writer has in flight included. With the server gone while
// the writer is in a write (its lease, then its publish), a Stop with a
// 300 ms context returns within 2 s, not after the write's own 5 s
// timeout (room.DefaultTimeout).
func TestCheckpointerStopBoundedWhileWriting(t *testing.T) {
	const roomID = "room:stophang"
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	pub := roomtest.NewPublisherKey(t)
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: pub, Every: 1000, Interval: 400 * time.Millisecond})
	gate := roomtest.AttestingGate(e, e.Nc, pub, ckp, ingest.GateOptions{})
	es, _ := roomtest.Journal(t, "run-s", "cap-s", 5)
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "the tree at 5 leaves", func() bool {
		size, _, ok := ckp.RoomTree(roomID)
		return ok && size == 5
	})
	e.Stop()                           // the server goes away before the checkpoint is due
	time.Sleep(700 * time.Millisecond) // the writer is now in its write
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_ = ckp.Stop(sctx)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Stop with a 300ms context took %v", took)
	}
}
