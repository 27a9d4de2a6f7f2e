package ingest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestDurableFailureFailsItems: when GateOptions.Durable cannot make what
// the server acknowledged durable, the gate reports those items failed
// (not decided), never stored; sent again through a gate whose Durable
// works, they are duplicates of what the server holds. Durable runs only
// when something is reported stored or duplicate.
func TestDurableFailureFailsItems(t *testing.T) {
	e := roomtest.NewEnv(t)
	calls := 0
	broken := func() error { calls++; return errors.New("fsync msgs: input/output error") }
	g, err := ingest.NewGate(context.Background(), e.Nc, ingest.GateOptions{Validator: e.V, Durable: broken})
	if err != nil {
		t.Fatal(err)
	}
	entries, body := roomtest.Journal(t, "run-durable", "cap-durable", 5)
	r, err := g.AppendJournal(context.Background(), "room:durable", body, nil)
	if err != nil || r.Stored != 0 || r.Dupes != 0 || r.Failures != 5 || calls != 1 {
		t.Fatalf("broken Durable: %+v, %v, %d calls", r, err, calls)
	}
	for i, it := range r.Items {
		if it.Outcome != room.OutcomeFailed || it.Hash != entries[i].EntryHash() || !strings.Contains(it.Reason, "the server stored it, but it could not be made durable (fsync msgs: input/output error)") {
			t.Errorf("item %d: %+v", i, it)
		}
	}
	rec := e.ShipJournal("room:durable", body) // e's gate: no Durable
	if rec.Dupes != 5 || rec.Stored != 0 {
		t.Fatalf("sent again: %+v", rec)
	}
	// A refusal calls nothing.
	if r, _ := g.AppendJournal(context.Background(), "room:durable", roomtest.Lines(entries[4:5])[:10], nil); r.Refused != 1 || calls != 1 {
		t.Fatalf("refused line: %+v, %d calls", r, calls)
	}
}
