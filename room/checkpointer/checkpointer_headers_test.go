package checkpointer_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestCheckpointerTwoAttestationValues: a copy of a genuine batch of one,
// stored around the gate with its Roompub-Attestation header and a second
// value, is no leaf for the checkpointer, as for the readers
// (checkpoint.AttestationOf): its checkpoints match what an audit admits,
// whether the copy comes while it follows the room or before its start's
// read. A copy with the one value is a leaf for both (the control).
func TestCheckpointerTwoAttestationValues(t *testing.T) {
	for _, c := range []struct {
		name          string
		double, start bool // a second value; the checkpointer starts after the copy
	}{
		{"one value, followed", false, false},
		{"two values, followed", true, false},
		{"two values, read at start", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			e := roomtest.NewEnv(t)
			pub := roomtest.NewPublisherKey(t)
			o := checkpointer.Options{Key: pub, Every: 1000, Interval: time.Hour}
			ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), o)
			gate := roomtest.AttestingGate(e, e.Nc, pub, ckp, ingest.GateOptions{})
			es, _ := roomtest.Journal(t, "run-dh", "cap-dh", 2)
			for i := range 2 { // batches of one ("0/1"), each signed
				if r, err := gate.AppendJournal(ctx, roomtest.AttRoom, roomtest.Lines(es[i:i+1]), nil); err != nil || r.Stored != 1 {
					t.Fatalf("%+v %v", r, err)
				}
			}
			if c.start {
				if err := ckp.Stop(ctx); err != nil {
					t.Fatal(err)
				}
			}
			var orig *nats.Msg
			for _, m := range e.Stored() {
				if orig == nil && m.Header.Get(checkpoint.AttestationHeader) != "" {
					orig = &nats.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header}
				}
			}
			cp := nats.NewMsg(orig.Subject)
			cp.Data = orig.Data
			cp.Header.Set(checkpoint.AttestationHeader, orig.Header.Get(checkpoint.AttestationHeader))
			if c.double {
				cp.Header.Add(checkpoint.AttestationHeader, "junk")
			}
			if _, err := e.Js.PublishMsg(ctx, cp); err != nil {
				t.Fatal(err)
			}
			if c.start {
				ckp, _ = roomtest.StartCheckpointer(t, e.Connect(), o)
				gate = roomtest.AttestingGate(e, e.Connect(), pub, ckp, ingest.GateOptions{})
			}
			other, _ := roomtest.Journal(t, "run-dh2", "cap-dh2", 1)
			if r, err := gate.AppendJournal(ctx, roomtest.AttRoom, roomtest.Lines(other), nil); err != nil || r.Stored != 1 {
				t.Fatalf("%+v %v", r, err)
			}
			if err := ckp.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			rep, err := reader.Audit(ctx, e.Js, reader.AuditOptions{Validator: e.V, Trust: roomtest.Trusting(t, pub)})
			if err != nil {
				t.Fatal(err)
			}
			want := uint64(3) // the two entries and the other chain's
			if !c.double {
				want = 4 // and the copy
			}
			if len(rep.Checkpoints) != 1 {
				t.Fatalf("checkpoints %+v", rep.Checkpoints)
			}
			f := rep.Checkpoints[0]
			if f.Admitted != want || f.CheckpointsRefused != 0 || f.Latest == nil || f.Latest.Size != want {
				t.Fatalf("admitted %d, latest %+v, %d refused; want %d admitted and covered; violations %v",
					f.Admitted, f.Latest, f.CheckpointsRefused, want, rep.Violations)
			}
		})
	}
}
