package reader_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// checkChains compares an audit's chain summaries with want.
func checkChains(t *testing.T, got []reader.ChainSummary, want []chainWant) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d chains, want %d: %+v", len(got), len(want), got)
		return
	}
	for i, w := range want {
		g := got[i]
		key := g.Chain.RunID + "/" + g.Chain.CapsuleID
		ok := g.RoomID == w.room && key == w.chain && g.Entries == w.entries && g.Head == w.head &&
			g.FirstSeq == w.first && g.LastSeq == w.last && g.Verdict == w.verdict && !g.Anchored
		if w.verdict == "ok" {
			ok = ok && g.Broken == nil
		} else {
			ok = ok && g.Broken != nil && g.Broken.Seq == w.brokenAt && g.Broken.Code == w.brokenCode
		}
		if !ok {
			t.Errorf("chain %d: %+v (broken %+v)\nwant %+v", i, g, g.Broken, w)
		}
	}
}

// TestAuditCompromisedWriter: an audit of the scenario's stream names
// every bad message with its code and stream sequence, reports each
// chain's verdict (broken from its first failure) and counts the rest.
func TestAuditCompromisedWriter(t *testing.T) {
	// The scenario's stream seqs are fixed by hand: a stream without
	// record markers (the reader judges records alike with them).
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	sc := compromisedStream(t, e)
	var evs []uint64
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, OnEvent: func(ev *reader.Event) { evs = append(evs, ev.Seq) }})
	if err != nil {
		t.Fatal(err)
	}
	var got []roomtest.Aside
	for _, v := range rep.Violations {
		got = append(got, roomtest.AsideOf(t, v))
	}
	roomtest.DiffAsides(t, "violations", got, sc.asides)
	if fmt.Sprint(evs) != fmt.Sprint(sc.events) {
		t.Errorf("events at %v, want %v", evs, sc.events)
	}
	checkChains(t, rep.Chains, sc.chains)
	if !maps.Equal(rep.Records, sc.records) {
		t.Errorf("records %v, want %v", rep.Records, sc.records)
	}
	byCode := map[events.Code]int{}
	for _, a := range sc.asides {
		byCode[a.Code]++
	}
	want := reader.AuditTotals{Messages: sc.last, Entries: 14, Records: 3, SetAside: uint64(len(sc.asides)), ByCode: byCode,
		ChainsOK: 2, ChainsBroken: 3, StreamIsSound: true}
	if fmt.Sprint(rep.Totals) != fmt.Sprint(want) {
		t.Errorf("totals %+v\nwant   %+v", rep.Totals, want)
	}
	if rep.Stream != room.DefaultStream || rep.FromSeq != 1 || rep.LastSeq != sc.last || len(rep.StreamProblems) != 0 || rep.Omitted != 0 || rep.Clean() {
		t.Errorf("report: stream %s from %d last %d problems %v omitted %d clean %v", rep.Stream, rep.FromSeq, rep.LastSeq, rep.StreamProblems, rep.Omitted, rep.Clean())
	}
	if want := "fork at stream seq 12 (rooms.evil.journal.run-b.cap-b): chain position 1 is already held by an earlier entry: the first one stored wins"; rep.Violations[2].Error() != want {
		t.Errorf("violation renders as %q, want %q", rep.Violations[2].Error(), want)
	}
	for _, c := range []struct {
		i                         int
		pointer, expected, actual string
	}{
		{0, "/entry_hash", "", ""},                   // tampered: entry_hash kept, payload changed
		{4, "/seq", "2", "3"},                        // gap
		{6, "", "run-d/cap-d", "run-a/cap-a"},        // wrong_room: an entry of another capsule
		{9, "/room~1id", evilRoom, "room:elsewhere"}, // wrong_room: a record of another room
	} {
		p := rep.Violations[c.i].Problems[0]
		if p.At.Pointer != c.pointer || (c.expected != "" && (p.Expected != c.expected || p.Actual != c.actual)) {
			t.Errorf("violation %d: %+v", c.i, p)
		}
	}
	if want := "the chain is broken at stream seq 16 (gap): later entries are not served"; rep.Violations[5].Reason != want {
		t.Errorf("chain_broken reason %q, want %q", rep.Violations[5].Reason, want)
	}

	// One room only: the other room's messages are not read at all.
	rep, err = reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Rooms: []string{roomtest.RefRoom}})
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, v := range rep.Violations {
		got = append(got, roomtest.AsideOf(t, v))
	}
	roomtest.DiffAsides(t, "violations in "+roomtest.RefRoom, got, []roomtest.Aside{sc.asides[8]})
	if rep.Totals.Messages != 2 || rep.Totals.Records != 1 || len(rep.Chains) != 0 || rep.Clean() {
		t.Errorf("audit of %s: %+v", roomtest.RefRoom, rep.Totals)
	}

	// MaxViolations keeps the first ones and counts the rest.
	rep, err = reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, MaxViolations: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != 3 || rep.Omitted != len(sc.asides)-3 || rep.Violations[2].Seq != 12 || rep.Totals.SetAside != uint64(len(sc.asides)) {
		t.Errorf("max 3 violations: %d kept, %d omitted, totals %+v", len(rep.Violations), rep.Omitted, rep.Totals)
	}
}

// TestAuditFromSeq: an audit that starts mid-stream anchors a chain at its
// first entry seen (its start is unchecked) and still finds what follows.
func TestAuditFromSeq(t *testing.T) {
	// The scenario's stream seqs are fixed by hand: a stream without
	// record markers (the reader judges records alike with them).
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	sc := compromisedStream(t, e)
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, FromSeq: 3})
	if err != nil {
		t.Fatal(err)
	}
	var got []roomtest.Aside
	for _, v := range rep.Violations {
		got = append(got, roomtest.AsideOf(t, v))
	}
	roomtest.DiffAsides(t, "violations from stream seq 3", got, sc.asides)
	if rep.FromSeq != 3 || rep.Totals.Messages != sc.last-2 || rep.Totals.Entries != 12 || len(rep.Chains) != 5 {
		t.Fatalf("from seq 3: from %d, totals %+v, %d chains", rep.FromSeq, rep.Totals, len(rep.Chains))
	}
	a := rep.Chains[0]
	if !a.Anchored || a.Entries != 2 || a.FirstSeq != 3 || a.Broken == nil || a.Broken.Seq != 10 || a.Broken.Code != events.InvalidEntry {
		t.Errorf("chain a from stream seq 3: %+v", a)
	}
	for _, c := range rep.Chains[1:] {
		if c.Anchored {
			t.Errorf("chain %v first seen at its start is anchored", c.Chain)
		}
	}
}

// TestAuditClean: a stream written only through the gate is clean.
func TestAuditClean(t *testing.T) {
	e := roomtest.NewEnv(t)
	es, body := roomtest.Journal(t, "run-1", "cap-1", 5)
	e.ShipJournal("room:alpha", body)
	e.ShipRecord(roomtest.ReferenceBytes(t, "verified.json"))
	e.ShipRecord(roomtest.ReferenceBytes(t, "refused.json"))
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V})
	if err != nil {
		t.Fatal(err)
	}
	// Seven leaves, and the records' markers.
	all := uint64(len(e.Stored()))
	want := reader.AuditTotals{Messages: all, Entries: 5, Records: 2, ByCode: map[events.Code]int{}, ChainsOK: 1, StreamIsSound: true, Markers: all - 7}
	if !rep.Clean() || fmt.Sprint(rep.Totals) != fmt.Sprint(want) || len(rep.Violations) != 0 || rep.LastSeq != all || all <= 7 {
		t.Errorf("clean stream: clean %v totals %+v violations %v", rep.Clean(), rep.Totals, rep.Violations)
	}
	checkChains(t, rep.Chains, []chainWant{{room: "room:alpha", chain: "run-1/cap-1", entries: 5, head: es[4].EntryHash(), first: 1, last: 5, verdict: "ok"}})
	if !maps.Equal(rep.Records, map[string]int{roomtest.RefRoom: 2}) {
		t.Errorf("records %v", rep.Records)
	}

	// An empty stream is clean too.
	e2 := roomtest.NewEnv(t)
	rep, err = reader.Audit(t.Context(), e2.Js, reader.AuditOptions{Validator: e2.V})
	if err != nil || !rep.Clean() || rep.Totals.Messages != 0 || rep.LastSeq != 0 {
		t.Errorf("empty stream: %v %+v", err, rep)
	}
}

// TestReplayLeavesNoConsumer: audits read by ordered consumers, one after
// another as a receipt's polls are, leave no consumer on the stream.
func TestReplayLeavesNoConsumer(t *testing.T) {
	e := roomtest.NewEnv(t)
	_, body := roomtest.Journal(t, "run-1", "cap-1", 5)
	e.ShipJournal("room:alpha", body)
	for range 3 {
		rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Read: reader.ReadConsumer, Rooms: []string{"room:alpha"}})
		if err != nil || rep.ReadBy != reader.ReadByConsumer || rep.Totals.Entries != 5 {
			t.Fatalf("audit: %v %+v", err, rep)
		}
	}
	info, err := e.Stream.Info(t.Context())
	if err != nil || info.State.Consumers != 0 {
		t.Fatalf("%d consumers left after three audits (%v)", info.State.Consumers, err)
	}
}

// TestAuditTrustsOnlyItsOwnHosts: the publisher trusted the record's host;
// an auditor that does not refuses it (untrusted_host), whatever the gate
// accepted.
func TestAuditTrustsOnlyItsOwnHosts(t *testing.T) {
	e := roomtest.NewEnv(t)
	rec := roomtest.RecordIn(t, e.Key, "room:alpha", "r-1", nil)
	if r := e.ShipRecord(rec.Canonical()); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("gate: %+v", r)
	}
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: roomtest.ReferenceOnly(t)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Clean() || len(rep.Violations) != 1 || rep.Violations[0].Code != events.UntrustedHost || rep.Violations[0].Seq != 1 ||
		!strings.Contains(rep.Violations[0].Reason, "not trusted") {
		t.Errorf("audit trusting only the reference host: %+v", rep.Violations)
	}
	if _, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{}); err == nil {
		t.Error("Audit without a validator did not fail")
	}
}

// TestAuditSlowConsumer: while the verdicts are slow to be taken (here
// the first event's handler blocks across two of the replay's idle
// checks), the server has already delivered every message to the client
// and reports none pending; the replay waits for the messages delivered
// and not yet verified, and loses none. A room filter that matches
// nothing ends the replay too.
func TestAuditSlowConsumer(t *testing.T) {
	e := roomtest.NewEnvWith(t, embedded.Options{SyncInterval: time.Minute})
	var subj room.Subjects
	const n = 1500
	g := &chainGen{key: events.ChainKey{RunID: "run-slow", CapsuleID: "cap-slow"}, roomID: "room:slow"}
	for range n {
		roomtest.PublishRaw(t, e.Js, subj.Journal(g.roomID, g.key), g.next(t).Canonical())
	}
	roomtest.PublishRaw(t, e.Js, subj.Records("room:other"), roomtest.RecordIn(t, e.Key, "room:other", "r-1", nil).Canonical())
	var seen []uint64
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Rooms: []string{"room:slow"}, OnEvent: func(ev *reader.Event) {
		if len(seen) == 0 {
			time.Sleep(5 * time.Second) // two of the replay's idle checks (2 s)
		}
		seen = append(seen, ev.Seq)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.Totals.Entries != n || rep.Totals.Messages != n || !slices.Equal(seen, roomtest.SeqRange(1, n)) {
		t.Errorf("slow consumer: clean %v, totals %+v, %d events", rep.Clean(), rep.Totals, len(seen))
	}

	rep, err = reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Rooms: []string{"room:nothing-here"}})
	if err != nil || !rep.Clean() || rep.Totals.Messages != 0 {
		t.Errorf("room without messages: %v %+v", err, rep.Totals)
	}
}

// TestAuditEmpty: an audit that reads nothing of what it was asked for
// says so (Empty), yet stays Clean: an empty stream, a room with no
// message (a typo), and one such room named with a room that has
// messages, reported per room. A room whose only message has a subject of
// no known layout is not empty.
func TestAuditEmpty(t *testing.T) {
	e := roomtest.NewEnv(t)
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V})
	if err != nil || !rep.Clean() || !rep.Empty || len(rep.EmptyRooms) != 0 || len(rep.RoomMessages) != 0 {
		t.Fatalf("empty stream: %v: clean %v, empty %v, rooms %v %v", err, rep.Clean(), rep.Empty, rep.EmptyRooms, rep.RoomMessages)
	}

	_, body := roomtest.Journal(t, "run-1", "cap-1", 3)
	e.ShipJournal("room:alpha", body)
	roomtest.PublishRaw(t, e.Js, "rooms.junk.nothing-known", []byte("x"))
	for _, c := range []struct {
		name  string
		rooms []string
		clean bool
		empty []string
		count map[string]uint64
	}{
		{"the stream", nil, false, nil, map[string]uint64{"room:alpha": 3, "room:junk": 1}},
		{"a room with messages", []string{"room:alpha"}, true, nil, map[string]uint64{"room:alpha": 3}},
		{"a typo", []string{"room:alpah"}, true, []string{"room:alpah"}, map[string]uint64{"room:alpah": 0}},
		{"a typo among rooms", []string{"room:typo", "room:alpha", "room:typo", "room:other"}, true, []string{"room:typo", "room:other"},
			map[string]uint64{"room:alpha": 3, "room:typo": 0, "room:other": 0}},
		{"a room of junk", []string{"room:junk"}, false, nil, map[string]uint64{"room:junk": 1}},
	} {
		for _, read := range []reader.ReadMode{reader.ReadConsumer, reader.ReadDirect} {
			rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Rooms: c.rooms, Read: read})
			if err != nil {
				t.Fatalf("%s (%v): %v", c.name, read, err)
			}
			if rep.Clean() != c.clean || rep.Empty != (len(c.empty) > 0) || !slices.Equal(rep.EmptyRooms, c.empty) || !maps.Equal(rep.RoomMessages, c.count) {
				t.Errorf("%s (%v): clean %v, empty %v %v, room messages %v; want clean %v, empty rooms %v, %v",
					c.name, read, rep.Clean(), rep.Empty, rep.EmptyRooms, rep.RoomMessages, c.clean, c.empty, c.count)
			}
		}
	}

	// From a point past the last message: nothing read.
	rep, err = reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, FromSeq: 5})
	if err != nil || !rep.Empty || rep.Totals.Messages != 0 || !rep.Clean() {
		t.Errorf("from stream seq 5: %v: empty %v, totals %+v", err, rep.Empty, rep.Totals)
	}
}

// On a stream with record markers (as serve makes them), an audit skips
// the markers and counts them apart: not as checkpoints, not as leaves;
// on a stream without, it counts none.
func TestAuditCountsMarkersApart(t *testing.T) {
	for _, marked := range []bool{true, false} {
		t.Run(fmt.Sprintf("marked=%v", marked), func(t *testing.T) {
			e := roomtest.NewEnvUnmarked(t, embedded.Options{})
			if marked {
				e = roomtest.NewEnvMarked(t, embedded.Options{})
			}
			_, body := roomtest.Journal(t, "run-1", "cap-1", 3)
			e.ShipJournal("room:alpha", body)
			e.ShipRecord(roomtest.ReferenceBytes(t, "verified.json"))
			all, leaves := len(e.Stored()), len(e.StoredUnmarked())
			if leaves != 4 || (all > leaves) != marked {
				t.Fatalf("stream of %d messages, %d leaves", all, leaves)
			}
			rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V})
			if err != nil {
				t.Fatal(err)
			}
			tot := rep.Totals
			if tot.Messages != uint64(all) || tot.Entries != 3 || tot.Records != 1 || tot.Markers != uint64(all-leaves) || tot.Checkpoints != 0 || !rep.Clean() {
				t.Fatalf("totals %+v of %d messages, %d leaves", tot, all, leaves)
			}
		})
	}
}

// TestAuditUnreadableMessage: a damaged message the server still counts
// (its state file kept) shows in no stream state; a whole-stream audit,
// which gets every message the server counts, names the stream seq it
// could not read as a stream problem (store lost, not clean), read with a
// consumer or with direct gets. An audit of one room does not count the
// stream's messages (its chain shows the hole).
func TestAuditUnreadableMessage(t *testing.T) {
	e := roomtest.NewEnv(t)
	a, body := roomtest.Journal(t, "run-u", "cap-u", 40)
	if r := e.ShipJournal("room:unread", body); r.Stored != 40 {
		t.Fatalf("%+v", r)
	}
	e.Stop()
	e.DamageKeepingState([]byte(a[20].EntryHash()))
	e.Start()
	want := "the store lost acknowledged messages: the server counts 40 messages in stream seqs 1 to 40, and the read got 39: stream seqs 21 (1 messages) could not be read"
	for _, mode := range []reader.ReadMode{reader.ReadConsumer, reader.ReadDirect} {
		rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Read: mode})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.StreamProblems) != 1 || !strings.HasPrefix(rep.StreamProblems[0], want) || rep.Clean() || rep.Totals.StreamIsSound || rep.Totals.Messages != 39 {
			t.Errorf("%s: problems %q, clean %v, messages %d; want %q", mode, rep.StreamProblems, rep.Clean(), rep.Totals.Messages, want)
		}
	}
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Rooms: []string{"room:unread"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.StreamProblems) != 0 || rep.Totals.ChainsBroken != 1 {
		t.Errorf("one room: problems %q, broken chains %d; want none and 1", rep.StreamProblems, rep.Totals.ChainsBroken)
	}
}
