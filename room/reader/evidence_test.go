package reader_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestEvidenceByInstance: two instances in one room (and one of them in a
// second room), records signed by a trusted host whose evidence names
// their own instance; the evidence index keeps them apart, finds a record
// only by its exact ref and digest, and files a record whose evidence
// names another instance (foreign_evidence) nowhere.
func TestEvidenceByInstance(t *testing.T) {
	// The whole-room path: a stream without record markers (the marked
	// path: TestInstanceRecordsMatchTheAudit), stream seqs fixed by hand.
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	const lab, lab2 = "room:lab", "room:lab-2"
	const instA, instB = "environment:a", "environment:b"
	on := func(inst string, n int) map[string]any {
		return map[string]any{"environment/ref": inst, "evidence": roomtest.EvidenceOn(inst, n)}
	}
	a1 := roomtest.RecordIn(t, e.Key, lab, "a-1", on(instA, 2))
	b1 := roomtest.RecordIn(t, e.Key, lab, "b-1", on(instB, 3))
	a2 := roomtest.RecordIn(t, e.Key, lab, "a-2", on(instA, 1))
	a3 := roomtest.RecordIn(t, e.Key, lab2, "a-3", on(instA, 1))
	verified, err := events.ParseRecord(roomtest.ReferenceBytes(t, "verified.json"))
	if err != nil {
		t.Fatal(err)
	}
	refused, err := events.ParseRecord(roomtest.ReferenceBytes(t, "refused.json")) // no instance, no evidence
	if err != nil {
		t.Fatal(err)
	}
	for i, rec := range []*events.Record{a1, b1, a2, a3, verified, refused} {
		if r := e.ShipRecord(rec.Canonical()); r.Item.Outcome != room.OutcomeStored || r.Item.StreamSeq != uint64(i+1) {
			t.Fatalf("gate: %+v", r)
		}
	}
	// Straight into the stream: the reference record whose first evidence
	// item was observed on environment:qmail-00, and one of ours whose
	// instance is a but whose evidence names b.
	foreignRef := roomtest.ReferenceBytes(t, "foreign-evidence.json")
	if s := roomtest.PublishRaw(t, e.Js, roomtest.RefSubject, foreignRef); s != 7 {
		t.Fatalf("stream seq %d", s)
	}
	mixed := roomtest.RecordIn(t, e.Key, lab, "a-mixed", map[string]any{"environment/ref": instA, "evidence": append(roomtest.EvidenceOn(instA, 1), roomtest.EvidenceOn(instB, 1)...)})
	if s := roomtest.PublishRaw(t, e.Js, "rooms.lab.exec", mixed.Canonical()); s != 8 {
		t.Fatalf("stream seq %d", s)
	}

	// The index as the evidence command builds it (Audit's events), and a
	// Reader's own: the same.
	byAudit := reader.NewEvidenceIndex()
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, OnEvent: func(ev *reader.Event) {
		if ev.Record != nil {
			byAudit.Add(ev.RoomID, ev.Record, ev.Seq)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	var got []roomtest.Aside
	for _, v := range rep.Violations {
		got = append(got, roomtest.AsideOf(t, v))
	}
	roomtest.DiffAsides(t, "violations", got, []roomtest.Aside{
		{Seq: 7, Code: events.ForeignEvidence, RoomID: roomtest.RefRoom, Kind: room.KindExecution, Subject: roomtest.RefSubject, Problems: []events.Code{events.ForeignEvidence}},
		{Seq: 8, Code: events.ForeignEvidence, RoomID: lab, Kind: room.KindExecution, Subject: "rooms.lab.exec", Problems: []events.Code{events.ForeignEvidence}},
	})
	if p := rep.Violations[0].Problems[0]; p.At.Pointer != "/evidence/0/environment~1ref" || p.Expected != "environment:qmail-01" || p.Actual != "environment:qmail-00" {
		t.Errorf("foreign-evidence.json: %+v", p)
	}
	if p := rep.Violations[1].Problems[0]; p.At.Pointer != "/evidence/1/environment~1ref" || p.Expected != instA || p.Actual != instB {
		t.Errorf("mixed record: %+v", p)
	}
	r := reader.NewReader(e.V, room.Subjects{})
	for _, m := range e.Stored() {
		r.Verify(reader.StreamMsg{Subject: m.Subject, Seq: m.Sequence, Data: m.Data, Time: m.Time})
	}

	want := func(rec *events.Record, seq uint64) reader.VerifiedRecord {
		inst, _ := rec.EnvironmentRef()
		return reader.VerifiedRecord{RoomID: rec.RoomID(), Ref: rec.ComputedRef(), Digest: rec.ContentDigest(), StreamSeq: seq,
			Instance: inst, Outcome: rec.Outcome(), RunRef: rec.RunRef(), Evidence: rec.Evidence()}
	}
	for name, idx := range map[string]*reader.EvidenceIndex{"audit": byAudit, "reader": r.Evidence()} {
		t.Run(name, func(t *testing.T) {
			for _, tc := range []struct {
				instance, room string
				want           []reader.VerifiedRecord
			}{
				{instA, lab, []reader.VerifiedRecord{want(a1, 1), want(a2, 3)}},
				{instA, "", []reader.VerifiedRecord{want(a1, 1), want(a2, 3), want(a3, 4)}},
				{instA, lab2, []reader.VerifiedRecord{want(a3, 4)}},
				{instB, lab, []reader.VerifiedRecord{want(b1, 2)}},
				{instB, lab2, nil},
				{"environment:qmail-01", "", []reader.VerifiedRecord{want(verified, 5)}},
				{"environment:qmail-00", "", nil},
				{"", "", nil},
			} {
				got := idx.Instance(tc.instance, tc.room)
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Errorf("Instance(%q, %q) = %+v\nwant %+v", tc.instance, tc.room, got, tc.want)
				}
				for _, vr := range got {
					if vr.Instance != tc.instance || len(vr.Evidence) == 0 {
						t.Errorf("Instance(%q): record %s of instance %q with %d evidence items", tc.instance, vr.Ref, vr.Instance, len(vr.Evidence))
					}
					for _, it := range vr.Evidence {
						if it.EnvironmentRef != tc.instance {
							t.Errorf("Instance(%q): evidence item %+v", tc.instance, it)
						}
					}
				}
			}
			if got := idx.Instances(); !slices.Equal(got, []string{instA, instB, "environment:qmail-01"}) {
				t.Errorf("Instances() = %v", got)
			}
			// By exact ref and digest only.
			if got, ok := idx.Get(a1.ComputedRef(), a1.ContentDigest()); !ok || fmt.Sprint(got) != fmt.Sprint(want(a1, 1)) {
				t.Errorf("Get(a1) = %+v, %v", got, ok)
			}
			if got, ok := idx.Get(refused.ComputedRef(), refused.ContentDigest()); !ok || got.Instance != "" || len(got.Evidence) != 0 || got.StreamSeq != 6 {
				t.Errorf("Get(refused.json) = %+v, %v", got, ok)
			}
			foreign, err := events.ParseRecord(foreignRef)
			if err != nil {
				t.Fatal(err)
			}
			for name, key := range map[string][2]string{
				"a1 with b1's digest":        {a1.ComputedRef(), b1.ContentDigest()},
				"a1 without a digest":        {a1.ComputedRef(), ""},
				"a1's digest without ref":    {"", a1.ContentDigest()},
				"a1's claimed ref as digest": {a1.ComputedRef(), a1.ComputedRef()},
				"foreign-evidence.json":      {foreign.ComputedRef(), foreign.ContentDigest()},
				"the mixed record":           {mixed.ComputedRef(), mixed.ContentDigest()},
			} {
				if got, ok := idx.Get(key[0], key[1]); ok {
					t.Errorf("Get(%s) found %+v", name, got)
				}
			}
		})
	}
}
