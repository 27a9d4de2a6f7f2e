package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
)

func TestJournalStoreDuplicateExtend(t *testing.T) {
	e := roomtest.NewEnv(t)
	const subj = "rooms.alpha.journal.run-1.cap-1"
	key := events.ChainKey{RunID: "run-1", CapsuleID: "cap-1"}
	entries, body := roomtest.Journal(t, "run-1", "cap-1", 8)
	first := roomtest.Lines(entries[:5])

	r := e.ShipJournal("room:alpha", first)
	if r.RoomID != "room:alpha" || r.Chain != key || len(r.Items) != 5 ||
		r.Stored != 5 || r.Dupes != 0 || r.Refused != 0 || r.Skipped != 0 || r.Failures != 0 {
		t.Fatalf("first ship: %+v", r)
	}
	roomtest.CheckStored(t, r, entries, 0, 5, 1, subj)
	wantHead := room.ChainHead{RoomID: "room:alpha", Chain: key, Next: 5, Head: entries[4].EntryHash(), StreamSeq: 5, Owner: "(anonymous)"}
	if r.Head != wantHead {
		t.Fatalf("head: %+v, want %+v", r.Head, wantHead)
	}
	before := e.State()
	if before.Msgs != 5 || before.LastSeq != 5 {
		t.Fatalf("stream: %+v", before)
	}
	for i, m := range e.Stored() {
		if m.Subject != subj || !bytes.Equal(m.Data, entries[i].Canonical()) || m.Header.Get(nats.MsgIdHdr) != entries[i].EntryHash() {
			t.Fatalf("message %d: %s %q %v", i+1, m.Subject, m.Data, m.Header)
		}
	}

	// The same lines again: all duplicate, nothing new in the stream.
	r = e.ShipJournal("room:alpha", first)
	if r.Stored != 0 || r.Dupes != 5 || r.Refused != 0 || r.Skipped != 0 || r.Failures != 0 || r.Head != wantHead {
		t.Fatalf("re-ship: %+v", r)
	}
	for i, it := range r.Items {
		if it.Outcome != room.OutcomeDuplicate || roomtest.SeqOf(it) != int64(i) || it.Hash != entries[i].EntryHash() || it.Subject != subj ||
			it.StreamSeq != uint64(i+1) {
			t.Fatalf("re-ship item %d: %+v", i, it)
		}
	}
	if after := e.State(); after != before {
		t.Fatalf("re-ship changed the stream: %+v, was %+v", after, before)
	}

	// The whole journal: the stored prefix is duplicate, the rest extends
	// the chain from its head.
	r = e.ShipJournal("room:alpha", body)
	if r.Stored != 3 || r.Dupes != 5 || r.Refused != 0 || r.Skipped != 0 || r.Failures != 0 {
		t.Fatalf("extend: %+v", r)
	}
	roomtest.CheckStored(t, r, entries, 5, 8, 6, subj)
	wantHead = room.ChainHead{RoomID: "room:alpha", Chain: key, Next: 8, Head: entries[7].EntryHash(), StreamSeq: 8, Owner: "(anonymous)"}
	if r.Head != wantHead {
		t.Fatalf("head after extend: %+v", r.Head)
	}
	// Extend from the head alone (no overlap).
	more, _ := roomtest.Journal(t, "run-1", "cap-1", 10)
	r = e.ShipJournal("room:alpha", roomtest.Lines(more[8:]))
	if r.Stored != 2 || r.Dupes != 0 {
		t.Fatalf("extend from head: %+v", r)
	}
	roomtest.CheckStored(t, r, more[8:], 0, 2, 9, subj)
	if st := e.State(); st.Msgs != 10 || st.LastSeq != 10 {
		t.Fatalf("stream: %+v", st)
	}
}

// TestJournalRefusals covers each line-level refusal of a journal request:
// the prefix before the refused line lands, the refused line and every
// later one ("skipped") do not.
func TestJournalRefusals(t *testing.T) {
	e := roomtest.NewEnv(t)
	join := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
			b = append(b, '\n')
		}
		return b
	}
	c := func(es []*events.Entry, i int) []byte { return es[i].Canonical() }
	cases := []struct {
		name    string
		build   func(t *testing.T, es []*events.Entry) []byte
		lines   int
		code    events.Code
		pointer string
		exp     string
		act     string
	}{
		{"reordered", func(t *testing.T, es []*events.Entry) []byte {
			return join(c(es, 0), c(es, 1), c(es, 2), c(es, 4), c(es, 3), c(es, 5))
		}, 6, events.Reordered, "/seq", "3", "4"},
		{"truncated_tail", func(t *testing.T, es []*events.Entry) []byte {
			return bytes.TrimSuffix(roomtest.Lines(es[:4]), []byte("\n"))
		}, 4, events.TruncatedTail, "", "", ""},
		{"non_canonical", func(t *testing.T, es []*events.Entry) []byte {
			return join(c(es, 0), c(es, 1), c(es, 2), append([]byte(`{ `), c(es, 3)[1:]...), c(es, 4))
		}, 5, events.NonCanonical, "", "", ""},
		{"corrupt_entry", func(t *testing.T, es []*events.Entry) []byte {
			return join(c(es, 0), c(es, 1), c(es, 2), []byte(`{"seq":3,`), c(es, 4))
		}, 5, events.CorruptEntry, "", "", ""},
		{"invalid_entry", func(t *testing.T, es []*events.Entry) []byte {
			bad, err := events.NewEntry(roomtest.Mutate(es[3].Object(), "payload", map[string]any{"stdout": "hello"}))
			if err != nil {
				t.Fatal(err)
			}
			return join(c(es, 0), c(es, 1), c(es, 2), bad.Canonical(), c(es, 4))
		}, 5, events.InvalidEntry, "/payload", "", ""},
		{"broken_link", func(t *testing.T, es []*events.Entry) []byte {
			bad, err := events.NewEntry(roomtest.Mutate(es[3].Object(), "parent_hash", es[1].EntryHash()))
			if err != nil {
				t.Fatal(err)
			}
			return join(c(es, 0), c(es, 1), c(es, 2), bad.Canonical(), c(es, 4), c(es, 5))
		}, 6, events.BrokenLink, "/parent_hash", "", ""},
		{"metadata_mismatch", func(t *testing.T, es []*events.Entry) []byte {
			bad, err := events.NewEntry(roomtest.Mutate(es[3].Object(), "task_family", "other"))
			if err != nil {
				t.Fatal(err)
			}
			return join(c(es, 0), c(es, 1), c(es, 2), bad.Canonical())
		}, 4, events.MetadataMismatch, "/task_family", "slugify", "other"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Each case has its own chain.
			run := fmt.Sprintf("run-%d", i)
			es, _ := roomtest.Journal(t, run, "cap-1", 6)
			if tc.name == "broken_link" {
				tc.exp, tc.act = es[2].EntryHash(), es[1].EntryHash()
			}
			body := tc.build(t, es)
			subj := "rooms.alpha.journal." + run + ".cap-1"
			before := e.State()
			r := e.ShipJournal("room:alpha", body)
			n := tc.lines
			if len(r.Items) != n || r.Stored != 3 || r.Refused != 1 || r.Skipped != n-4 || r.Dupes != 0 || r.Failures != 0 {
				t.Fatalf("reply: %+v", r)
			}
			roomtest.CheckStored(t, r, es, 0, 3, before.LastSeq+1, subj)
			it := r.Items[3]
			if it.Outcome != room.OutcomeRefused || it.Code != tc.code || it.At == nil || it.At.Line != 4 || it.StreamSeq != 0 || it.Subject != "" {
				t.Fatalf("item 3: %+v", it)
			}
			if len(it.Problems) == 0 || it.Problems[0].Code != tc.code || it.Problems[0].At.Pointer != tc.pointer ||
				it.Problems[0].Expected != tc.exp || it.Problems[0].Actual != tc.act {
				t.Fatalf("item 3 problems: %+v", it.Problems)
			}
			for j := 4; j < n; j++ {
				if it := r.Items[j]; it.Outcome != room.OutcomeSkipped || it.Index != j || it.Code != "" {
					t.Fatalf("item %d: %+v", j, it)
				}
			}
			want := room.ChainHead{RoomID: "room:alpha", Chain: events.ChainKey{RunID: run, CapsuleID: "cap-1"}, Next: 3, Head: es[2].EntryHash(), StreamSeq: before.LastSeq + 3, Owner: "(anonymous)"}
			if r.Head != want {
				t.Fatalf("head: %+v, want %+v", r.Head, want)
			}
			if got := e.CountOn(subj); got != 3 {
				t.Fatalf("%d messages on %s, want 3", got, subj)
			}
			if after := e.State(); after.Msgs != before.Msgs+3 {
				t.Fatalf("stream grew by %d, want 3", after.Msgs-before.Msgs)
			}
		})
	}
	// A refused first line: nothing of the request is stored.
	es, _ := roomtest.Journal(t, "run-first", "cap-1", 2)
	before := e.State()
	r := e.ShipJournal("room:alpha", join([]byte(`nope`), c(es, 0), c(es, 1)))
	if r.Refused != 1 || r.Skipped != 2 || r.Items[0].Code != events.CorruptEntry || r.Items[0].At.Line != 1 {
		t.Fatalf("first line corrupt: %+v", r)
	}
	r = e.ShipJournal("room:alpha", bytes.TrimSuffix(roomtest.Lines(es[:1]), []byte("\n")))
	if r.Refused != 1 || len(r.Items) != 1 || r.Items[0].Code != events.TruncatedTail {
		t.Fatalf("single truncated line: %+v", r)
	}
	if after := e.State(); after != before {
		t.Fatalf("stream changed: %+v, was %+v", after, before)
	}
}

func TestJournalBadRequest(t *testing.T) {
	e := roomtest.NewEnv(t)
	_, body := roomtest.Journal(t, "run-1", "cap-1", 2)
	cases := []struct {
		name string
		hdr  nats.Header
		body []byte
	}{
		{"no room header", nats.Header{}, body},
		{"space in room id", nats.Header{room.HeaderRoom: {"room:a b"}}, body},
		{"no-break space in room id", nats.Header{room.HeaderRoom: {"room:a\u00a0b"}}, body},
		{"nothing after room:", nats.Header{room.HeaderRoom: {"room:"}}, body},
		{"no room: prefix", nats.Header{room.HeaderRoom: {"alpha"}}, body},
		{"room id too long", nats.Header{room.HeaderRoom: {"room:" + strings.Repeat("x", 508)}}, body},
		{"empty body", nats.Header{room.HeaderRoom: {"room:alpha"}}, nil},
		{"more lines than MaxBatchLines", nats.Header{room.HeaderRoom: {"room:alpha"}}, bytes.Repeat([]byte("\n"), room.MaxBatchLines+1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, er := e.RequestError(roomtest.SubjJournal, c.hdr, c.body)
			if code != "400" || er.Code != events.BadRequest || er.Reason == "" {
				t.Fatalf("got %q %+v, want 400 bad_request", code, er)
			}
		})
	}
	// 512 characters is the limit, not over it.
	r := e.ShipJournal("room:"+strings.Repeat("x", 507), body)
	if r.Stored != 2 {
		t.Fatalf("512-character room id: %+v", r)
	}
	// A capsule header that is not a capsule.json.
	code, er := e.RequestError(roomtest.SubjJournal, nats.Header{room.HeaderRoom: {"room:alpha"}, room.HeaderCapsule: {`{"run_id":"run-1"}`}}, body)
	if code != "400" || er.Code != events.InvalidCapsule {
		t.Fatalf("bad capsule header: %q %+v", code, er)
	}
	// A head request that names no chain.
	for _, b := range []string{``, `{}`, `{"run_id":"run-1"}`, `not json`} {
		code, er := e.RequestError(roomtest.SubjHead, nil, []byte(b))
		if code != "400" || er.Code != events.BadRequest {
			t.Fatalf("head %q: %q %+v", b, code, er)
		}
	}
	if st := e.State(); st.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2", st.Msgs)
	}
}

func TestJournalCapsuleHeader(t *testing.T) {
	e := roomtest.NewEnv(t)
	_, body := roomtest.Journal(t, "run-1", "cap-1", 3)
	hdr := func(capsule string) nats.Header {
		return nats.Header{room.HeaderRoom: {"room:alpha"}, room.HeaderCapsule: {capsule}}
	}
	var r room.JournalReply
	bad := `{"schema":"capsule/v1","run_id":"run-1","capsule_id":"cap-1","harness_version":"test/2","task_family":"slugify"}`
	if code := e.Request(roomtest.SubjJournal, hdr(bad), body, &r); code != "" {
		t.Fatalf("error %s", code)
	}
	if r.Stored != 0 || r.Refused != 1 || r.Skipped != 2 {
		t.Fatalf("mismatch: %+v", r)
	}
	it := r.Items[0]
	if it.Code != events.MetadataMismatch || len(it.Problems) != 1 || it.Problems[0].At.Pointer != "/harness_version" ||
		it.Problems[0].Expected != "test/2" || it.Problems[0].Actual != "test/1" || it.At.Line != 1 {
		t.Fatalf("mismatch item: %+v", it)
	}
	if st := e.State(); st.Msgs != 0 {
		t.Fatalf("stream holds %d messages, want 0", st.Msgs)
	}
	good := `{"run_id":"run-1","capsule_id":"cap-1","harness_version":"test/1","task_family":"slugify"}`
	r = room.JournalReply{}
	if code := e.Request(roomtest.SubjJournal, hdr(good), body, &r); code != "" || r.Stored != 3 {
		t.Fatalf("matching capsule: %s %+v", code, r)
	}
	// A later request with a mismatching capsule is refused at the head.
	more, _ := roomtest.Journal(t, "run-1", "cap-1", 4)
	r = room.JournalReply{}
	if code := e.Request(roomtest.SubjJournal, hdr(bad), roomtest.Lines(more[3:]), &r); code != "" || r.Refused != 1 || r.Items[0].Code != events.MetadataMismatch {
		t.Fatalf("mismatch after head: %s %+v", code, r)
	}
	if st := e.State(); st.Msgs != 3 {
		t.Fatalf("stream holds %d messages, want 3", st.Msgs)
	}
	// The header and the line both say test/2: the chain's stored entries
	// (every reader's reference) say test/1, so the line is refused, where
	// the header took the chain's place and the line was stored for every
	// reader to refuse.
	evil := roomtest.Rebuilt(t, more[3], map[string]any{"harness_version": "test/2"})
	r = room.JournalReply{}
	if code := e.Request(roomtest.SubjJournal, hdr(bad), roomtest.Lines([]*events.Entry{evil}), &r); code != "" || r.Refused != 1 || r.Items[0].Code != events.MetadataMismatch ||
		r.Items[0].Problems[0].Expected != "test/1" || r.Items[0].Problems[0].Actual != "test/2" {
		t.Fatalf("header and line against the stored chain: %s %+v", code, r)
	}
	// The right header with a line that differs is refused as before.
	r = room.JournalReply{}
	if code := e.Request(roomtest.SubjJournal, hdr(good), roomtest.Lines([]*events.Entry{evil}), &r); code != "" || r.Refused != 1 || r.Items[0].Code != events.MetadataMismatch {
		t.Fatalf("a line that differs from the stored chain: %s %+v", code, r)
	}
	if st := e.State(); st.Msgs != 3 {
		t.Fatalf("stream holds %d messages, want 3", st.Msgs)
	}
}

func TestJournalRoomConflictForkGap(t *testing.T) {
	e := roomtest.NewEnv(t)
	entries, body := roomtest.Journal(t, "run-1", "cap-1", 6)
	const subj = "rooms.alpha.journal.run-1.cap-1"
	if r := e.ShipJournal("room:alpha", roomtest.Lines(entries[:3])); r.Stored != 3 {
		t.Fatalf("ship: %+v", r)
	}
	before := e.State()

	// The same capsule into a second room: refused, nothing lands there.
	r := e.ShipJournal("room:beta", body)
	if r.Stored != 0 || r.Refused != 1 || r.Skipped != 5 {
		t.Fatalf("room conflict: %+v", r)
	}
	if it := r.Items[0]; it.Code != events.RoomConflict || it.Problems[0].Expected != "room:alpha" || it.Problems[0].Actual != "room:beta" {
		t.Fatalf("room conflict item: %+v", it)
	}
	if n := e.CountOn("rooms.beta.>"); n != 0 {
		t.Fatalf("%d messages landed in room beta", n)
	}
	// Also for entries past the head (nothing of them is stored anywhere).
	if r := e.ShipJournal("room:beta", roomtest.Lines(entries[3:])); r.Items[0].Code != events.RoomConflict {
		t.Fatalf("room conflict past the head: %+v", r)
	}

	// A different entry at a taken position: fork.
	alt, err := events.NewEntry(roomtest.Mutate(entries[1].Object(), "kind", "other.kind"))
	if err != nil {
		t.Fatal(err)
	}
	r = e.ShipJournal("room:alpha", roomtest.Lines([]*events.Entry{alt}))
	it := r.Items[0]
	if r.Refused != 1 || it.Code != events.Fork || roomtest.SeqOf(it) != 1 || it.Hash != alt.EntryHash() ||
		it.Problems[0].Expected != entries[1].EntryHash() || it.Problems[0].Actual != alt.EntryHash() || it.Problems[0].At.Pointer != "/seq" {
		t.Fatalf("fork: %+v", r)
	}
	// The same fork after a duplicate prefix in one batch.
	r = e.ShipJournal("room:alpha", roomtest.Lines([]*events.Entry{entries[0], alt, entries[2]}))
	if r.Dupes != 1 || r.Refused != 1 || r.Skipped != 1 || r.Items[1].Code != events.Fork {
		t.Fatalf("fork after duplicate: %+v", r)
	}

	// Beyond the head: a gap is refused as reordered.
	r = e.ShipJournal("room:alpha", roomtest.Lines(entries[4:]))
	it = r.Items[0]
	if r.Refused != 1 || r.Skipped != 1 || it.Code != events.Reordered || it.Problems[0].Expected != "3" || it.Problems[0].Actual != "4" {
		t.Fatalf("gap: %+v", r)
	}
	if after := e.State(); after != before {
		t.Fatalf("refusals changed the stream: %+v, was %+v", after, before)
	}
	if n := e.CountOn(subj); n != 3 {
		t.Fatalf("%d messages on %s, want 3", n, subj)
	}
}

// TestJournalTooLarge uses a server that accepts at most 4 KiB: an entry
// whose request fits but whose message, with the gate's headers, does not
// is refused before it is sent.
func TestJournalTooLarge(t *testing.T) {
	const maxPayload = 4096
	e := roomtest.NewEnvWith(t, embedded.Options{MaxPayload: maxPayload})
	if got := e.Nc.MaxPayload(); got != maxPayload {
		t.Fatalf("max payload %d", got)
	}
	entries, _ := roomtest.Journal(t, "run-1", "cap-1", 1)
	if r := e.ShipJournal("room:alpha", roomtest.Lines(entries)); r.Stored != 1 {
		t.Fatalf("ship: %+v", r)
	}
	big := func(n int) *events.Entry {
		obj := roomtest.Mutate(entries[0].Object(), "seq", json.Number("1"))
		obj = roomtest.Mutate(obj, "parent_hash", entries[0].EntryHash())
		obj = roomtest.Mutate(obj, "payload", map[string]any{"tool": "bash", "status": strings.Repeat("x", n)})
		ent, err := events.NewEntry(obj)
		if err != nil {
			t.Fatal(err)
		}
		return ent
	}
	// Size the entry so that its line and the request's one header fit in
	// max payload, and the same bytes with the append headers do not.
	pad := maxPayload - 100 - len(big(0).Canonical())
	ent := big(pad)
	if n := len(ent.Canonical()); n != maxPayload-100 {
		t.Fatalf("entry is %d bytes", n)
	}
	before := e.State()
	r := e.ShipJournal("room:alpha", roomtest.Lines([]*events.Entry{ent}))
	it := r.Items[0]
	if r.Refused != 1 || r.Stored != 0 || it.Code != events.TooLarge || roomtest.SeqOf(it) != 1 || it.Hash != ent.EntryHash() ||
		!strings.Contains(it.Reason, fmt.Sprintf("the server accepts at most %d", maxPayload)) {
		t.Fatalf("too large: %+v", r)
	}
	if after := e.State(); after != before {
		t.Fatalf("stream changed: %+v, was %+v", after, before)
	}
	// A smaller entry at the same position still goes in.
	small := big(100)
	if r := e.ShipJournal("room:alpha", roomtest.Lines([]*events.Entry{small})); r.Stored != 1 || r.Items[0].StreamSeq != 2 {
		t.Fatalf("small: %+v", r)
	}
}

func TestHeadEndpoint(t *testing.T) {
	e := roomtest.NewEnv(t)
	entries, body := roomtest.Journal(t, "run.1:x", "cap-1", 4)
	if r := e.ShipJournal("room:a.b/c", body); r.Stored != 4 || r.Items[0].Subject != "rooms.a~2Eb~2Fc.journal.run~2E1:x.cap-1" {
		t.Fatalf("ship: %+v", r)
	}
	var h room.ChainHead
	if code := e.Request(roomtest.SubjHead, nil, []byte(`{"run_id":"run.1:x","capsule_id":"cap-1"}`), &h); code != "" {
		t.Fatalf("head: %s", code)
	}
	want := room.ChainHead{RoomID: "room:a.b/c", Chain: events.ChainKey{RunID: "run.1:x", CapsuleID: "cap-1"}, Next: 4, Head: entries[3].EntryHash(), StreamSeq: 4, Owner: "(anonymous)"}
	if h != want {
		t.Fatalf("head %+v, want %+v", h, want)
	}
	// Room ids with wildcards, '~' and non-ASCII characters stay one token.
	es, body2 := roomtest.Journal(t, "run-3", "cap-1", 1)
	r := e.ShipJournal("room:é*>~", body2)
	if r.Stored != 1 || r.Items[0].Subject != "rooms.~C3~A9~2A~3E~7E.journal.run-3.cap-1" {
		t.Fatalf("ship: %+v", r)
	}
	h = room.ChainHead{}
	if code := e.Request(roomtest.SubjHead, nil, []byte(`{"run_id":"run-3","capsule_id":"cap-1"}`), &h); code != "" ||
		h != (room.ChainHead{RoomID: "room:é*>~", Chain: events.ChainKey{RunID: "run-3", CapsuleID: "cap-1"}, Next: 1, Head: es[0].EntryHash(), StreamSeq: 5, Owner: "(anonymous)"}) {
		t.Fatalf("head: %s %+v", code, h)
	}

	// A chain that does not exist, read as raw JSON to see the wire form.
	resp, err := e.Nc.Request(roomtest.SubjHead, []byte(`{"run_id":"run-2","capsule_id":"cap-1"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(resp.Data, &raw); err != nil {
		t.Fatal(err)
	}
	if raw["next"] != 0.0 || raw["head"] != events.ZeroHash || raw["stream_seq"] != 0.0 || raw["room"] != nil {
		t.Fatalf("missing chain: %s", resp.Data)
	}
	h = room.ChainHead{}
	_ = json.Unmarshal(resp.Data, &h)
	if h != (room.ChainHead{Chain: events.ChainKey{RunID: "run-2", CapsuleID: "cap-1"}, Head: events.ZeroHash}) || h.RoomID != "" {
		t.Fatalf("missing chain: %+v", h)
	}
}

// TestGateHeadIgnoresStoredServerHeaders: an entry written straight into
// the stream with headers named like the server's own (Nats-Sequence,
// Nats-Subject) cannot pass for another stream sequence or room: the gate
// reads the server's, which come last in a direct get's reply.
func TestGateHeadIgnoresStoredServerHeaders(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	es, _ := roomtest.Journal(t, "run-hdr", "cap-hdr", 4)
	if r, err := e.Gate.AppendJournal(ctx, "room:hdr", roomtest.Lines(es[:3]), nil); err != nil || r.Stored != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	key := events.ChainKey{RunID: "run-hdr", CapsuleID: "cap-hdr"}
	msg := &nats.Msg{Subject: room.Subjects{}.Journal("room:hdr", key), Data: es[3].Canonical(),
		Header: nats.Header{"Nats-Sequence": []string{"1"}, "Nats-Subject": []string{"rooms.other.journal.run-hdr.cap-hdr"}}}
	ack, err := e.Js.PublishMsg(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.NewGate(e.Connect()).Head(ctx, key)
	if err != nil || h.RoomID != "room:hdr" || h.StreamSeq != ack.Sequence || h.Next != 4 {
		t.Fatalf("head %+v %v, want room:hdr at stream seq %d, next 4", h, err, ack.Sequence)
	}
}
