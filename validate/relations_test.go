package validate_test

import (
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// TestRecordIndex holds the relation rules to their codes, order,
// pointers and the stream sequences they name: a record is checked
// against the records added before it, the first claim of a key, a run or
// an unknown outcome keeps it, and a repeat of a stored record is found by
// its content digest, not refused.
func TestRecordIndex(t *testing.T) {
	key, _ := testKey(1)
	rec := func(changes map[string]any) *events.Record {
		m := recordMembers(t)
		for k, v := range changes {
			m[k] = v
		}
		r, err := events.SignRecord(m, key)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	codes := func(ps []events.Problem) (out []string) {
		for _, p := range ps {
			out = append(out, string(p.Code)+" "+p.At.Pointer)
		}
		return out
	}
	x := validate.NewRecordIndex()
	first := rec(map[string]any{"outcome": "unknown"})
	if ps := x.Problems(first, events.Location{Seq: 7}); len(ps) != 0 {
		t.Fatalf("empty index: %v", ps)
	}
	x.Add(first, 7)
	x.Add(first, 9) // a repeat changes nothing
	if seq, ok := x.Stored(first.ContentDigest()); !ok || seq != 7 {
		t.Fatalf("Stored = %d %v, want 7 true", seq, ok)
	}

	// Same key, run and decision, other content: all three rules, in order.
	again := rec(map[string]any{"outcome": "verified"})
	ps := x.Problems(again, events.Location{Seq: 12})
	want := []string{"idempotency_conflict /idempotency~1key", "run_conflict /run~1ref", "unknown_not_consent /decision~1ref"}
	if got := codes(ps); len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("problems = %v, want %v", got, want)
	}
	for _, p := range ps {
		if p.At.Seq != 12 {
			t.Errorf("%s at seq %d, want 12", p.Code, p.At.Seq)
		}
	}
	if ps[0].Expected != first.ContentDigest() || ps[0].Actual != again.ContentDigest() {
		t.Errorf("idempotency_conflict expected/actual = %q/%q", ps[0].Expected, ps[0].Actual)
	}
	if ps[2].Reason == "" || !strings.Contains(ps[2].Reason, "stream seq 7") {
		t.Errorf("unknown_not_consent reason %q does not name stream seq 7", ps[2].Reason)
	}

	// Other key, run and decision: no problem; once added, it holds its own.
	other := rec(map[string]any{"idempotency/key": "k2", "run/ref": "operator-task-run:run-02", "decision/ref": "d:2", "outcome": "verified"})
	if ps := x.Problems(other, events.Location{}); len(ps) != 0 {
		t.Fatalf("independent record: %v", codes(ps))
	}
	x.Add(other, 8)
	if _, ok := x.Stored(again.ContentDigest()); ok {
		t.Fatal("a record never added is Stored")
	}
	onlyRun := rec(map[string]any{"idempotency/key": "k3", "run/ref": "operator-task-run:run-02", "decision/ref": "d:3", "outcome": "verified"})
	if got := codes(x.Problems(onlyRun, events.Location{})); len(got) != 1 || got[0] != "run_conflict /run~1ref" {
		t.Fatalf("run/ref of the second record: %v", got)
	}
}

// TestRoomConflict: the problem names the room the chain lives in.
func TestRoomConflict(t *testing.T) {
	p := validate.RoomConflict(events.Location{Line: 3}, "room:a", "room:b")
	if p.Code != events.RoomConflict || p.At.Line != 3 || p.Expected != "room:a" || p.Actual != "room:b" || p.Reason != `the capsule's chain already lives in "room:a"` {
		t.Fatalf("RoomConflict = %+v", p)
	}
}
