package reader_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestAttestedEndToEnd: the publisher side (an attesting gate and its
// checkpointer) and the read side agree: a trusting audit of what the gate
// appended is clean, every message is admitted, the checkpoint written on
// Stop covers them all (so no attestation is verified one by one), and a
// sound continuation written straight into the stream is refused by audit
// and follow as checkpoint_mismatch and never served.
func TestAttestedEndToEnd(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	pub := roomtest.NewPublisherKey(t)
	trust := roomtest.Trusting(t, pub)
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: pub, Every: 40, Interval: time.Hour})
	gate := roomtest.AttestingGate(e, e.Nc, pub, ckp, ingest.GateOptions{})
	es, _ := roomtest.Journal(t, "run-e2e", "cap-e2e", 101)
	for from := 0; from < 100; from += 25 {
		if r, err := gate.AppendJournal(ctx, roomtest.AttRoom, roomtest.Lines(es[from:from+25]), nil); err != nil || r.Stored != 25 {
			t.Fatalf("%+v %v", r, err)
		}
	}
	if r := gate.AppendRecord(ctx, roomtest.RecordIn(t, e.Key, roomtest.AttRoom, "e2e", nil).Canonical()); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("%+v", r)
	}
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := reader.Audit(ctx, e.Js, reader.AuditOptions{Validator: e.V, Trust: trust})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.Totals.Entries != 100 || rep.Totals.Records != 1 || len(rep.Checkpoints) != 1 {
		t.Fatalf("audit: clean %v, totals %+v, violations %v, checkpoints %+v", rep.Clean(), rep.Totals, rep.Violations, rep.Checkpoints)
	}
	f := rep.Checkpoints[0]
	// At least one checkpoint on the way (every 40 leaves: at 40 and 80
	// unless a loaded writer finds the tree already past 80 and writes
	// one for both) and the final one at Stop.
	if f.Admitted != 101 || f.Covered != 101 || f.Tail != 0 || f.AttestationsVerified != 0 || f.AdmittedByCheckpoint != 101 ||
		f.Checkpoints != rep.Totals.Checkpoints || f.Checkpoints < 2 || f.Latest.Signer != pub.NodeID() || f.Latest.Size != 101 {
		t.Errorf("facts %+v", f)
	}

	forged := roomtest.PublishRaw(t, e.Js, room.Subjects{}.Journal(roomtest.AttRoom, events.ChainKey{RunID: "run-e2e", CapsuleID: "cap-e2e"}), es[100].Canonical())
	rep, err = reader.Audit(ctx, e.Js, reader.AuditOptions{Validator: e.V, Trust: trust})
	if err != nil {
		t.Fatal(err)
	}
	if got := roomtest.Mismatches(t, rep.Violations); !slices.Equal(got, []uint64{forged}) || len(rep.Violations) != 1 {
		t.Errorf("audit after the forgery: %v", rep.Violations)
	}
	fl := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "e2e", Validator: e.V, Trust: trust, Rooms: []string{roomtest.AttRoom}}, nil)
	fl.WaitSeen(t, 102)
	if got := fl.EventSeqs(); len(got) != 101 || slices.Contains(got, forged) {
		t.Errorf("follow served %d events (forged at %d: %v)", len(got), forged, slices.Contains(got, forged))
	}
	if got := roomtest.Mismatches(t, fl.Asides); !slices.Equal(got, []uint64{forged}) {
		t.Errorf("follow set aside %v", fl.Asides)
	}
}
