package checkpointer_test

import (
	"context"
	"testing"
	"time"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestCheckpointerFinalAfterAStoredCheckpoint: a message stored on the
// room's checkpoint subject after Stop's read of the stream (a write of the
// writer cut off before its answer and stored anyway, another writer's,
// junk) does not cost the room its final checkpoint: the final write,
// refused for expecting the subject's earlier message, reads the subject on
// and is written again, covering every leaf. Written once with the expected
// sequence it expected, the final write was refused and Stop returned nil.
func TestCheckpointerFinalAfterAStoredCheckpoint(t *testing.T) {
	const roomID = "room:final"
	for _, tc := range []struct {
		name string
		junk bool // junk stored, else a checkpoint of 20 leaves
	}{
		{"own checkpoint of fewer leaves", false},
		{"junk", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := roomtest.NewEnv(t)
			ctx := context.Background()
			pub := roomtest.NewPublisherKey(t)
			signer, err := checkpoint.NewNoteSigner(pub)
			if err != nil {
				t.Fatal(err)
			}
			ckSubj := room.Subjects{}.Checkpoint(roomID)
			var root20 [32]byte
			stored := uint64(0)
			hook := func() {
				data := []byte("not a checkpoint")
				if !tc.junk {
					if data, err = checkpoint.Sign(signer, roomID, 20, root20); err != nil {
						t.Error(err)
						return
					}
				}
				ack, err := e.Js.Publish(ctx, ckSubj, data)
				if err != nil {
					t.Error(err)
					return
				}
				stored = ack.Sequence
			}
			ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.WithBeforeFinal(checkpointer.Options{Key: pub, Every: 1000, Interval: time.Hour}, hook))
			gate := roomtest.AttestingGate(e, e.Nc, pub, ckp, ingest.GateOptions{})
			es, _ := roomtest.Journal(t, "run-f", "cap-f", 25)
			if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[:20]), nil); err != nil || r.Stored != 20 {
				t.Fatalf("%+v %v", r, err)
			}
			roomtest.WaitFor(t, 10*time.Second, "the tree at 20 leaves", func() bool {
				size, root, ok := ckp.RoomTree(roomID)
				root20 = root
				return ok && size == 20
			})
			if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[20:]), nil); err != nil || r.Stored != 5 {
				t.Fatalf("%+v %v", r, err)
			}
			if err := ckp.Stop(ctx); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if stored == 0 {
				t.Fatal("the hook stored nothing")
			}
			st, err := e.Js.Stream(ctx, room.DefaultStream)
			if err != nil {
				t.Fatal(err)
			}
			last, err := st.GetLastMsgForSubject(ctx, ckSubj)
			if err != nil {
				t.Fatal(err)
			}
			ck, err := checkpoint.Parse(last.Data, roomID, roomtest.Trusting(t, pub))
			if err != nil || ck.Size != 25 || last.Sequence <= stored {
				size := uint64(0)
				if ck != nil {
					size = ck.Size
				}
				t.Fatalf("the subject's last message at seq %d (the stored one at %d): size %d, %v; want the final checkpoint of 25 leaves", last.Sequence, stored, size, err)
			}
			if got := e.CountOn(ckSubj); got != 2 {
				t.Errorf("%d messages on the checkpoint subject, want the stored one and the final one", got)
			}
			if n := logs.FilterMessageSnippet("set aside").Len(); (n > 0) != tc.junk {
				t.Errorf("%d set-aside logs, want some: %v", n, tc.junk)
			}
			rep, err := reader.Audit(ctx, e.Js, reader.AuditOptions{Validator: e.V, Trust: roomtest.Trusting(t, pub)})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Checkpoints) != 1 || rep.Checkpoints[0].Covered != 25 || rep.Checkpoints[0].Latest.Size != 25 {
				t.Errorf("audit: %+v", rep.Checkpoints)
			}
		})
	}
}
