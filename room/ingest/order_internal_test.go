package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roompub/roompub/events"
)

// orderLine is a journal line of chain run-o/cap-o at seq (the ticket
// reads the first line's chain and seq only).
func orderLine(t *testing.T, seq int64) []byte {
	t.Helper()
	e, err := events.NewEntry(map[string]any{"schema": events.EntrySchema, "run_id": "run-o", "capsule_id": "cap-o",
		"seq": json.Number(strconv.FormatInt(seq, 10)), "ts": "2026-09-02T00:00:00.000Z", "lineage": "attempt", "kind": "tool.call",
		"effect_class": "SE0", "harness_version": "test/1", "task_family": "slugify", "parent_hash": strings.Repeat("ab", 32),
		"payload": map[string]any{"tool": "bash", "status": "ok"}})
	if err != nil {
		t.Fatal(err)
	}
	return append(e.Canonical(), '\n')
}

// TestOrderTicketsPerIdentity: a request waits for, and is stalled by,
// only its own identity's requests of a chain ahead of it. Another
// identity's request of the chain (refused not_chain_owner when decided)
// made the owner's pipelined request wait behind it, and its refusal
// stalled the owner's later requests into resending.
func TestOrderTicketsPerIdentity(t *testing.T) {
	g := &Gate{orders: map[events.ChainKey]*chainOrder{}}
	other := g.ticket(orderLine(t, 2), "token-b")
	mine := g.ticket(orderLine(t, 5), "token-a")
	next := g.ticket(orderLine(t, 7), "token-a")
	defer other.done()
	defer mine.done()
	defer next.done()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := mine.wait(ctx); err != nil {
		t.Errorf("the owner's request waited for another identity's: %v", err)
	}
	other.stall()
	if mine.isStalled() || next.isStalled() {
		t.Error("another identity's request stalled the owner's")
	}
	// The owner's own order holds: its later request waits for it, and
	// its stall reaches it.
	if err := next.wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the owner's later request did not wait for its earlier one: %v", err)
	}
	mine.stall()
	if !next.isStalled() {
		t.Error("the owner's stall did not reach its later request")
	}
}
