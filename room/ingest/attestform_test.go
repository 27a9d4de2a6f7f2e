package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestGateAttestationForm: the gate writes the form the room stream sets
// (docs/checkpoints.md, "Two forms"): on a stream StreamConfig makes, the
// batch's signature on its last message only; on a stream made before the
// compact form, on every message, as readers of earlier releases need. In
// both, the checkpointer takes the gate's batches as its own, and a
// trusting audit admits every entry.
func TestGateAttestationForm(t *testing.T) {
	body, err := os.ReadFile(roomtest.Testdata("samples/capsules/csv-dedupe/journal.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := events.ParseEntry(body[:bytes.IndexByte(body, '\n')])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		env     func(*testing.T) *roomtest.Env
		compact bool
	}{
		{"compact", roomtest.NewEnv, true},
		{"every message", roomtest.NewEnvEveryMessage, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.env(t)
			ctx := context.Background()
			pub := roomtest.NewPublisherKey(t)
			const roomID = "room:form"
			ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: pub, Every: 1000, Interval: time.Hour})
			gate := roomtest.AttestingGate(e, e.Nc, pub, ckp, ingest.GateOptions{})
			if r, err := gate.AppendJournal(ctx, roomID, body, nil); err != nil || r.Stored != 14 {
				t.Fatalf("the capsule: %+v %v", r, err)
			}
			subj := room.Subjects{}.Journal(roomID, events.ChainKey{RunID: first.RunID(), CapsuleID: first.CapsuleID()})
			stored := e.OnSubject(subj)
			if len(stored) != 14 {
				t.Fatalf("%d messages stored, want 14", len(stored))
			}
			last, err := checkpoint.ParseAttestation(stored[13].Header.Get(checkpoint.AttestationHeader))
			if err != nil || !last.Signed || last.Count != 14 || last.Signer != pub.NodeID() {
				t.Fatalf("the batch's last attestation: %+v %v", last, err)
			}
			for i, m := range stored {
				h := m.Header.Get(checkpoint.AttestationHeader)
				want := last
				want.Index, want.Signed = i, !tc.compact || i == 13
				if h != want.String() {
					t.Fatalf("message %d: attestation %q, want %q", i, h, want.String())
				}
				if tc.compact && i < 13 && strings.Count(h, " ") != 1 {
					t.Fatalf("message %d: %q is not \"<node id> <i>/<n>\"", i, h)
				}
			}

			// The checkpointer took the batch as the gate's own, and a
			// trusting audit admits all 14.
			if err := ckp.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			rt := roomtest.Rebuild(e, roomID, roomtest.Trusting(t, pub))
			if sizes := rt.CheckCheckpoints(t); fmt.Sprint(sizes) != "[14]" || len(rt.NotLeaves) != 0 {
				t.Fatalf("checkpoints %v, not leaves %v; want [14] and none", sizes, rt.NotLeaves)
			}
			rep, err := reader.Audit(ctx, e.Js, reader.AuditOptions{Validator: e.V, Trust: roomtest.Trusting(t, pub)})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Violations) != 0 || rep.Totals.Entries != 14 || len(rep.Checkpoints) != 1 || rep.Checkpoints[0].Admitted != 14 {
				t.Fatalf("audit: %d entries, violations %v, checkpoints %+v", rep.Totals.Entries, rep.Violations, rep.Checkpoints)
			}
		})
	}
}
