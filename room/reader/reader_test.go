package reader_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

const evilRoom = "room:evil"

// scenario is a stream written partly through the gate and partly straight
// into the stream by a compromised writer, with what every reader must
// make of it.
type scenario struct {
	last    uint64           // the stream's last sequence
	events  []uint64         // stream seqs of the verified events, in order
	asides  []roomtest.Aside // the set-aside messages, in order
	chains  []chainWant
	records map[string]int // verified records per room
}

// chainWant is one chain summary as an audit must report it.
type chainWant struct {
	room, chain string
	entries     int64
	head        string
	first, last uint64
	verdict     string
	brokenAt    uint64
	brokenCode  events.Code
}

// compromisedStream writes the scenario into e's stream and returns what
// a reader must make of it. Every bad message a reader must set aside is here: a
// tampered entry, a fork, a gap, an entry of one capsule on another's
// subject, a chain in a second room, a record from an untrusted host, the
// reference foreign-evidence.json, a record on another room's subject, the
// same record and the same entry twice, and a subject outside the layout.
func compromisedStream(t *testing.T, e *roomtest.Env) scenario {
	t.Helper()
	js := e.Js
	a, _ := roomtest.Journal(t, "run-a", "cap-a", 5)
	b, _ := roomtest.Journal(t, "run-b", "cap-b", 4)
	c, _ := roomtest.Journal(t, "run-c", "cap-c", 4)
	d, _ := roomtest.Journal(t, "run-d", "cap-d", 3)
	x, _ := roomtest.Journal(t, "run-e", "cap-e", 2)
	const (
		subjA = "rooms.evil.journal.run-a.cap-a"
		subjB = "rooms.evil.journal.run-b.cap-b"
		subjC = "rooms.evil.journal.run-c.cap-c"
		subjD = "rooms.evil.journal.run-d.cap-d"
		exec  = "rooms.evil.exec"
	)
	seq := uint64(0)
	expect := func(got uint64) {
		t.Helper()
		seq++
		if got != seq {
			t.Fatalf("stored at stream seq %d, want %d", got, seq)
		}
	}
	gateJournal := func(es []*events.Entry) {
		t.Helper()
		r := e.ShipJournal(evilRoom, roomtest.Lines(es))
		if r.Stored != len(es) {
			t.Fatalf("gate: %+v", r)
		}
		for _, it := range r.Items {
			expect(it.StreamSeq)
		}
	}
	gateRecord := func(raw []byte) {
		t.Helper()
		r := e.ShipRecord(raw)
		if r.Item.Outcome != room.OutcomeStored {
			t.Fatalf("gate: %+v", r)
		}
		expect(r.Item.StreamSeq)
	}
	raw := func(subject string, data []byte) { t.Helper(); expect(roomtest.PublishRaw(t, js, subject, data)) }

	// Through the gate: seqs 1-9.
	gateJournal(a[:4])                                            // 1-4
	gateJournal(b[:3])                                            // 5-7
	gateRecord(roomtest.ReferenceBytes(t, "verified.json"))       // 8
	evil1 := roomtest.RecordIn(t, e.Key, evilRoom, "evil-1", nil) // 9
	gateRecord(evil1.Canonical())

	// Straight into the stream: seqs 10-28.
	raw(subjA, roomtest.Tampered(t, a[4]))           // 10 invalid_entry: payload changed, entry_hash kept
	raw(subjA, a[4].Canonical())                     // 11 chain_broken: the genuine entry comes too late
	raw(subjB, roomtest.ForkOf(t, b[1]).Canonical()) // 12 fork: position 1 is held (seq 6)
	raw(subjB, b[3].Canonical())                     // 13 chain_broken
	raw(subjC, c[0].Canonical())                     // 14
	raw(subjC, c[1].Canonical())                     // 15
	raw(subjC, c[3].Canonical())                     // 16 gap: position 2 is missing
	raw(subjC, c[2].Canonical())                     // 17 chain_broken: the missing one, too late
	raw(subjD, d[0].Canonical())                     // 18
	raw(subjD, a[0].Canonical())                     // 19 wrong_room: capsule a on capsule d's subject
	raw(subjD, d[1].Canonical())                     // 20: chain d is not touched by 19
	untrusted := roomtest.RecordIn(t, roomtest.NewHostKey(t), evilRoom, "evil-untrusted", nil)
	raw(exec, untrusted.Canonical())                                              // 21 untrusted_host
	raw(roomtest.RefSubject, roomtest.ReferenceBytes(t, "foreign-evidence.json")) // 22 foreign_evidence
	elsewhere := roomtest.RecordIn(t, e.Key, "room:elsewhere", "elsewhere-1", nil)
	raw(exec, elsewhere.Canonical())                         // 23 wrong_room: room/id is room:elsewhere
	raw(exec, evil1.Canonical())                             // 24 replayed: the bytes of seq 9
	raw("rooms.evil.junk", []byte(`{"hello":"world"}`))      // 25 bad_subject
	raw("rooms.other.journal.run-a.cap-a", a[0].Canonical()) // 26 room_conflict: chain a lives in room:evil
	raw(subjD, d[2].Canonical())                             // 27
	raw(subjD, d[2].Canonical())                             // 28 replayed: the head again

	// Through the gate again: good messages after the bad ones.
	gateJournal(x)                                                               // 29-30
	gateRecord(roomtest.RecordIn(t, e.Key, evilRoom, "evil-2", nil).Canonical()) // 31

	ja := func(s uint64, code events.Code, subj, chain string, problems ...events.Code) roomtest.Aside {
		return roomtest.Aside{Seq: s, Code: code, RoomID: evilRoom, Kind: room.KindJournal, Subject: subj, Chain: chain, Problems: append([]events.Code{code}, problems...)}
	}
	ra := func(s uint64, code events.Code, roomID, subj string) roomtest.Aside {
		return roomtest.Aside{Seq: s, Code: code, RoomID: roomID, Kind: room.KindExecution, Subject: subj, Problems: []events.Code{code}}
	}
	sc := scenario{
		last:   31,
		events: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 14, 15, 18, 20, 27, 29, 30, 31},
		asides: []roomtest.Aside{
			ja(10, events.InvalidEntry, subjA, "run-a/cap-a"),
			ja(11, events.ChainBroken, subjA, "run-a/cap-a"),
			ja(12, events.Fork, subjB, "run-b/cap-b"),
			ja(13, events.ChainBroken, subjB, "run-b/cap-b"),
			ja(16, events.Gap, subjC, "run-c/cap-c"),
			ja(17, events.ChainBroken, subjC, "run-c/cap-c"),
			ja(19, events.WrongRoom, subjD, "run-d/cap-d"),
			ra(21, events.UntrustedHost, evilRoom, exec),
			ra(22, events.ForeignEvidence, roomtest.RefRoom, roomtest.RefSubject),
			ra(23, events.WrongRoom, evilRoom, exec),
			ra(24, events.Replayed, evilRoom, exec),
			{Seq: 25, Code: events.BadSubject, Subject: "rooms.evil.junk", Problems: []events.Code{events.BadSubject}},
			{Seq: 26, Code: events.RoomConflict, RoomID: "room:other", Kind: room.KindJournal, Subject: "rooms.other.journal.run-a.cap-a",
				Chain: "run-a/cap-a", Problems: []events.Code{events.RoomConflict}},
			ja(28, events.Replayed, subjD, "run-d/cap-d"),
		},
		chains: []chainWant{
			{room: evilRoom, chain: "run-a/cap-a", entries: 4, head: a[3].EntryHash(), first: 1, last: 4, verdict: "broken", brokenAt: 10, brokenCode: events.InvalidEntry},
			{room: evilRoom, chain: "run-b/cap-b", entries: 3, head: b[2].EntryHash(), first: 5, last: 7, verdict: "broken", brokenAt: 12, brokenCode: events.Fork},
			{room: evilRoom, chain: "run-c/cap-c", entries: 2, head: c[1].EntryHash(), first: 14, last: 15, verdict: "broken", brokenAt: 16, brokenCode: events.Gap},
			{room: evilRoom, chain: "run-d/cap-d", entries: 3, head: d[2].EntryHash(), first: 18, last: 27, verdict: "ok"},
			{room: evilRoom, chain: "run-e/cap-e", entries: 2, head: x[1].EntryHash(), first: 29, last: 30, verdict: "ok"},
		},
		records: map[string]int{evilRoom: 2, roomtest.RefRoom: 1},
	}
	return sc
}

// TestReaderCompromisedWriter feeds the scenario's messages, read back
// from the stream, to a Reader one by one: each is served or set aside as
// the scenario says, with its code and stream sequence.
func TestReaderCompromisedWriter(t *testing.T) {
	// The scenario's stream seqs are fixed by hand: a stream without
	// record markers (the reader judges records alike with them).
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	sc := compromisedStream(t, e)
	r := reader.NewReader(e.V, room.Subjects{})
	var got []uint64
	var asides []roomtest.Aside
	for _, m := range e.Stored() {
		ev, s := r.Verify(reader.StreamMsg{Subject: m.Subject, Seq: m.Sequence, Data: m.Data, Time: m.Time})
		if (ev == nil) == (s == nil) {
			t.Fatalf("stream seq %d: event %v and set-aside %v", m.Sequence, ev, s)
		}
		if s != nil {
			asides = append(asides, roomtest.AsideOf(t, *s))
			continue
		}
		got = append(got, ev.Seq)
		if ev.Subject != m.Subject || !ev.Time.Equal(m.Time) {
			t.Errorf("event %+v of message %d on %s", ev, m.Sequence, m.Subject)
		}
	}
	if !slices.Equal(got, sc.events) {
		t.Errorf("events at %v, want %v", got, sc.events)
	}
	roomtest.DiffAsides(t, "set-aside messages", asides, sc.asides)
}

// TestReaderNoEntryOnAJournalSubject: a message on a chain's subject that
// holds no entry is set aside as what it is: empty_input when it is
// empty (as on a record subject), invalid_entry when it is JSON without
// the envelope (not wrong_room: it names no other chain); only an entry
// of another chain is wrong_room.
func TestReaderNoEntryOnAJournalSubject(t *testing.T) {
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	_, body := roomtest.Journal(t, "run-a", "cap-a", 2)
	other, _ := roomtest.Journal(t, "run-b", "cap-b", 1)
	if r := e.ShipJournal("room:junk", body); r.Stored != 2 {
		t.Fatalf("gate: %+v", r)
	}
	// Each on a chain of its own: a chain is broken from its first
	// failure, and only the first code of each is asked for here.
	for i, data := range [][]byte{nil, []byte(" \n"), []byte(`{"junk":1}`), []byte(`[1]`), other[0].Canonical()} {
		roomtest.PublishRaw(t, e.Js, fmt.Sprintf("rooms.junk.journal.run-a.cap-%d", i), data) // 3-7
	}
	r := reader.NewReader(e.V, room.Subjects{})
	var got []string
	for _, m := range e.Stored() {
		ev, s := r.Verify(reader.StreamMsg{Subject: m.Subject, Seq: m.Sequence, Data: m.Data, Time: m.Time})
		switch {
		case s != nil:
			got = append(got, fmt.Sprintf("%d:%s", s.Seq, s.Code))
		case ev != nil:
			got = append(got, fmt.Sprintf("%d:ok", ev.Seq))
		}
	}
	want := []string{"1:ok", "2:ok", "3:empty_input", "4:empty_input", "5:invalid_entry", "6:invalid_entry", "7:wrong_room"}
	if !slices.Equal(got, want) {
		t.Errorf("verdicts %v, want %v", got, want)
	}
}

// TestReaderEvents: what a verified event carries, for an entry and a
// record.
func TestReaderEvents(t *testing.T) {
	e := roomtest.NewEnv(t)
	es, body := roomtest.Journal(t, "run-1", "cap-1", 2)
	e.ShipJournal("room:alpha", body)
	rec := roomtest.RecordIn(t, e.Key, "room:alpha", "r-1", nil)
	e.ShipRecord(rec.Canonical())
	r := reader.NewReader(e.V, room.Subjects{})
	var evs []*reader.Event
	markers := 0
	for _, m := range e.Stored() {
		ev, s := r.Verify(reader.StreamMsg{Subject: m.Subject, Seq: m.Sequence, Data: m.Data, Time: m.Time})
		if s != nil {
			t.Fatalf("set aside: %v", s)
		}
		if p, _ := (room.Subjects{}).Parse(m.Subject); p.Kind == room.KindMarker {
			// The record's markers: no event, no set-aside.
			if ev != nil {
				t.Fatalf("an event of the marker at stream seq %d: %+v", m.Sequence, ev)
			}
			markers++
			continue
		}
		evs = append(evs, ev)
	}
	if len(evs) != 3 || markers == 0 {
		t.Fatalf("%d events", len(evs))
	}
	for i, ev := range evs[:2] {
		if ev.RoomID != "room:alpha" || ev.Kind != room.KindJournal || ev.Seq != uint64(i+1) ||
			ev.Subject != "rooms.alpha.journal.run-1.cap-1" || *ev.Chain != (events.ChainKey{RunID: "run-1", CapsuleID: "cap-1"}) ||
			*ev.Position != int64(i) || ev.EntryHash != es[i].EntryHash() || ev.Entry == nil || ev.Record != nil || ev.Ref != "" {
			t.Errorf("entry event %d: %+v", i, ev)
		}
	}
	ev := evs[2]
	if ev.RoomID != "room:alpha" || ev.Kind != room.KindExecution || ev.Seq != 3 || ev.Subject != "rooms.alpha.exec" ||
		ev.Ref != rec.ComputedRef() || ev.Digest != rec.ContentDigest() || ev.Instance != "environment:qmail-01" ||
		ev.Outcome != "verified" || ev.Record == nil || ev.Chain != nil || ev.Position != nil || ev.Entry != nil {
		t.Errorf("record event: %+v", ev)
	}
	sums := r.Chains()
	if len(sums) != 1 || sums[0].Entries != 2 || sums[0].Head != es[1].EntryHash() || sums[0].Verdict != "ok" ||
		sums[0].FirstSeq != 1 || sums[0].LastSeq != 2 || sums[0].Broken != nil || sums[0].Anchored {
		t.Errorf("chains: %+v", sums)
	}
}

// TestReaderRecordRules: the room's record rules, which the gate applies
// before storing, are applied again by a reader to records written
// straight into the stream, in stream order: other bytes under a stored
// idempotency/key, a run/ref that already concluded, another execution of
// a decision whose outcome was unknown. The same rules in another room
// are another matter.
func TestReaderRecordRules(t *testing.T) {
	e := roomtest.NewEnv(t)
	const decision = "corpus-experiment-chair-decision:sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	const subj = "rooms.rules.exec"
	first := roomtest.RecordIn(t, e.Key, "room:rules", "r-1", nil)
	unknown := roomtest.RecordIn(t, e.Key, "room:rules", "r-unknown", map[string]any{"outcome": "unknown",
		"decision/ref": decision, "decision/digest": "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"})
	sameKey := roomtest.RecordIn(t, e.Key, "room:rules", "r-1", map[string]any{"recorded-at": "2026-09-25T12:16:00Z"})
	sameRun := roomtest.RecordIn(t, e.Key, "room:rules", "r-1", map[string]any{"idempotency/key": "key-r-1-again"})
	again := roomtest.RecordIn(t, e.Key, "room:rules", "r-again", map[string]any{"decision/ref": decision,
		"decision/digest": "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"})
	elsewhere := roomtest.RecordIn(t, e.Key, "room:rules-2", "r-again", map[string]any{"decision/ref": decision,
		"decision/digest": "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"})
	for i, m := range []struct {
		subject string
		rec     *events.Record
	}{{subj, first}, {subj, unknown}, {subj, sameKey}, {subj, sameRun}, {subj, again}, {"rooms.rules-2.exec", elsewhere}} {
		if s := roomtest.PublishRaw(t, e.Js, m.subject, m.rec.Canonical()); s != uint64(i+1) {
			t.Fatalf("stream seq %d", s)
		}
	}
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V})
	if err != nil {
		t.Fatal(err)
	}
	var got []roomtest.Aside
	for _, v := range rep.Violations {
		got = append(got, roomtest.AsideOf(t, v))
	}
	ra := func(s uint64, codes ...events.Code) roomtest.Aside {
		return roomtest.Aside{Seq: s, Code: codes[0], RoomID: "room:rules", Kind: room.KindExecution, Subject: subj, Problems: codes}
	}
	roomtest.DiffAsides(t, "violations", got, []roomtest.Aside{
		ra(3, events.IdempotencyConflict, events.RunConflict),
		ra(4, events.RunConflict),
		ra(5, events.UnknownNotConsent),
	})
	if p := rep.Violations[0].Problems[0]; p.At.Pointer != "/idempotency~1key" || p.Expected != first.ContentDigest() || p.Actual != sameKey.ContentDigest() {
		t.Errorf("idempotency problem: %+v", p)
	}
	if !maps.Equal(rep.Records, map[string]int{"room:rules": 2, "room:rules-2": 1}) {
		t.Errorf("records %v", rep.Records)
	}
}

// TestReaderRoomConflictNamesTheRoom: a reader that finds a chain's entry
// in a second room sets it aside room_conflict naming the room the chain
// lives in, in the reason and as Expected (Actual: the room it was found
// in).
func TestReaderRoomConflictNamesTheRoom(t *testing.T) {
	v, err := validate.New()
	if err != nil {
		t.Fatal(err)
	}
	es, _ := roomtest.Journal(t, "run-a", "cap-a", 2)
	r := reader.NewReader(v, room.Subjects{})
	if ev, s := r.Verify(reader.StreamMsg{Subject: "rooms.alpha.journal.run-a.cap-a", Seq: 1, Data: es[0].Canonical()}); ev == nil {
		t.Fatalf("first entry set aside: %+v", s)
	}
	_, s := r.Verify(reader.StreamMsg{Subject: "rooms.beta.journal.run-a.cap-a", Seq: 2, Data: es[1].Canonical()})
	if s == nil || s.Code != events.RoomConflict || len(s.Problems) != 1 {
		t.Fatalf("second entry, in room:beta: %+v", s)
	}
	if p := s.Problems[0]; p.Expected != "room:alpha" || p.Actual != "room:beta" || !strings.Contains(p.Reason, `"room:alpha"`) || s.Reason != p.Reason {
		t.Errorf("set aside %+v: want its reason to name room:alpha, expected room:alpha, actual room:beta", s)
	}
}
