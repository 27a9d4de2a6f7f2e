package reader_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// loneSpellings are payload strings as the upstream's JSON.stringify
// writes them when they hold lone surrogates: a high one cut from its
// pair, a low one, two in a row, one after a pair, one after a control.
var loneSpellings = []string{`ok \ud83d`, `\ude00 ok`, `\udbff\udbff`, "\U0001F600\\ud800", `\u001f\udfff`}

// withLoneSurrogates returns the lines of es with each payload status
// holding lone surrogates, chained again as the upstream writer chains
// them (each parent_hash the entry_hash before it, each entry_hash the
// hash of its entry): a journal events.NewEntry cannot write, since
// encoding/json writes no lone surrogate.
func withLoneSurrogates(t testing.TB, es []*events.Entry) [][]byte {
	t.Helper()
	out := make([][]byte, len(es))
	prev := events.ZeroHash
	for i, e := range es {
		l := roomtest.ReplaceOnce(t, bytes.Clone(e.Canonical()), `"status":"ok"`, `"status":"`+loneSpellings[i%len(loneSpellings)]+`"`)
		l = roomtest.ReplaceOnce(t, l, `"parent_hash":"`+e.ParentHash()+`"`, `"parent_hash":"`+prev+`"`)
		ne, err := events.ParseEntry(l)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = roomtest.ReplaceOnce(t, l, `"entry_hash":"`+e.EntryHash()+`"`, `"entry_hash":"`+ne.ComputedHash()+`"`)
		prev = ne.ComputedHash()
	}
	return out
}

// TestLoneSurrogatesThroughTheRoom ships a journal whose entries hold lone
// surrogates, as the upstream writer writes them, through the gate: they
// are admitted and stored byte for byte as sent, a resend is a duplicate,
// a gate started afresh continues the chain from the stream, and the
// audit (the readers' path) accepts every entry with its entry_hash the
// hash of its bytes. Spelled otherwise (upper-case hex) the same entry is
// non_canonical.
func TestLoneSurrogatesThroughTheRoom(t *testing.T) {
	e := roomtest.NewEnv(t)
	const roomID = "room:lone"
	key := events.ChainKey{RunID: "run-lone", CapsuleID: "cap-lone"}
	es, _ := roomtest.Journal(t, key.RunID, key.CapsuleID, 8)
	ls := withLoneSurrogates(t, es)
	body := func(ls ...[]byte) []byte { return append(bytes.Join(ls, []byte("\n")), '\n') }

	r := e.ShipJournal(roomID, body(ls[:6]...))
	if r.Stored != 6 || r.Refused != 0 {
		t.Fatalf("ship: %+v", r)
	}
	subj := room.Subjects{}.Journal(roomID, key)
	stored := e.OnSubject(subj)
	if len(stored) != 6 {
		t.Fatalf("%d messages on %s, want 6", len(stored), subj)
	}
	for i, m := range stored {
		if !bytes.Equal(m.Data, ls[i]) {
			t.Fatalf("entry %d stored as %q, sent %q", i, m.Data, ls[i])
		}
	}
	if r := e.ShipJournal(roomID, body(ls[4:6]...)); r.Dupes != 2 || e.CountOn(subj) != 6 {
		t.Fatalf("resend: %+v", r)
	}

	// The uppercase spelling of entry 6 is the same entry, not canonical.
	upper := roomtest.ReplaceOnce(t, bytes.Clone(ls[6]), `\ude00`, `\uDE00`)
	if r := e.ShipJournal(roomID, body(upper)); r.Refused != 1 || r.Items[0].Code != events.NonCanonical {
		t.Fatalf("upper case: %+v", r.Items)
	}

	// A gate started afresh reads the chain's head from the stream.
	e.Stop()
	e.Start()
	if r := e.ShipJournal(roomID, body(ls[6:]...)); r.Stored != 2 {
		t.Fatalf("after restart: %+v", r)
	}

	var got [][]byte
	audit, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Rooms: []string{roomID}, Validator: e.V, OnEvent: func(ev *reader.Event) {
		if ev.Entry == nil || ev.EntryHash != ev.Entry.ComputedHash() || ev.Entry.EntryHash() != ev.EntryHash {
			t.Errorf("event at stream seq %d: %+v", ev.Seq, ev)
			return
		}
		got = append(got, bytes.Clone(ev.Entry.Canonical()))
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !audit.Clean() || audit.Totals.Entries != 8 || audit.Totals.ChainsOK != 1 {
		t.Fatalf("audit: %+v %+v", audit.Totals, audit.Violations)
	}
	if !slices.EqualFunc(got, ls, bytes.Equal) {
		t.Fatalf("the audit served %q, shipped %q", got, ls)
	}
}
