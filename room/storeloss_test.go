package room_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room"
)

// TestCheckStoreLoss: no interior deletion, no loss; otherwise the error
// wraps ErrStoreLost and names the count, the range and at most ten of
// the lost sequences.
func TestCheckStoreLoss(t *testing.T) {
	if err := room.CheckStoreLoss(jetstream.StreamState{FirstSeq: 1, LastSeq: 103, Msgs: 103}); err != nil {
		t.Fatalf("a whole stream: %v", err)
	}
	err := room.CheckStoreLoss(jetstream.StreamState{FirstSeq: 1, LastSeq: 103, Msgs: 101, NumDeleted: 2, Deleted: []uint64{7, 9}})
	if !errors.Is(err, room.ErrStoreLost) || err.Error() != "the store lost acknowledged messages: 2 messages are gone, between stream seqs 7 and 9 (stream seqs [7 9])" {
		t.Fatalf("two lost: %v", err)
	}
	var many []uint64
	for s := uint64(53); s <= 103; s++ {
		many = append(many, s)
	}
	err = room.CheckStoreLoss(jetstream.StreamState{FirstSeq: 1, LastSeq: 103, Msgs: 52, NumDeleted: 51, Deleted: many})
	if err == nil || err.Error() != "the store lost acknowledged messages: 51 messages are gone, between stream seqs 53 and 103 (stream seqs [53 54 55 56 57 58 59 60 61 62] …)" {
		t.Fatalf("51 lost: %v", err)
	}
	// The first messages gone: the stream starts above 1.
	err = room.CheckStoreLoss(jetstream.StreamState{FirstSeq: 40, LastSeq: 103, Msgs: 64})
	if !errors.Is(err, room.ErrStoreLost) || err.Error() != "the store lost acknowledged messages: the stream's first 39 messages are gone (it starts at stream seq 40)" {
		t.Fatalf("front lost: %v", err)
	}
	// Without the details, the count alone.
	err = room.CheckStoreLoss(jetstream.StreamState{FirstSeq: 1, LastSeq: 103, NumDeleted: 4})
	if err == nil || err.Error() != "the store lost acknowledged messages: 4 messages are gone from inside the stream (stream seqs 1 to 103)" {
		t.Fatalf("no details: %v", err)
	}
}

// TestChainLossLost: a loss whose chain's end is gone is a lower bound,
// and its count says so, as Tally does ("4 lost" on /healthz where the
// audit set aside 1,000).
func TestChainLossLost(t *testing.T) {
	inside := room.ChainLoss{Count: 4, Stored: 10, Missing: []room.LostRun{{From: 3, To: 6, After: 3, Before: 9}}}
	end := room.ChainLoss{Count: 4, Stored: 10, Missing: []room.LostRun{{From: 10, To: 13, After: 12}}}
	if inside.Lost() != "4" || end.Lost() != "at least 4" {
		t.Errorf("lost %q and %q, want 4 and at least 4", inside.Lost(), end.Lost())
	}
	if !strings.HasPrefix(end.Tally(), "at least 4 of the chain's 14 or more") || !strings.HasPrefix(inside.Tally(), "4 of the chain's 14 acknowledged") {
		t.Errorf("tallies %q and %q", inside.Tally(), end.Tally())
	}
}

// TestChainLossString: runs as positions with the stream seqs around
// them (one side only at the chain's start or lost end); past ten runs,
// how many more.
func TestChainLossString(t *testing.T) {
	l := room.ChainLoss{Count: 3, Stored: 5, Missing: []room.LostRun{{From: 1, To: 1, After: 3, Before: 9}, {From: 5, To: 6, After: 31, Before: 70}}}
	if got, want := l.String(), "positions 1 (between stream seqs 3 and 9), 5-6 (between stream seqs 31 and 70)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	l.Missing = []room.LostRun{{From: 0, To: 2, Before: 7}, {From: 9, To: 12, After: 40}}
	if got, want := l.String(), "positions 0-2 (before stream seq 7), 9-12 (after stream seq 40)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	l.Missing = nil
	for i := range int64(12) {
		l.Missing = append(l.Missing, room.LostRun{From: 2 * i, To: 2 * i, After: uint64(2*i + 1), Before: uint64(2*i + 3)})
	}
	if got := l.String(); !strings.HasSuffix(got, "18 (between stream seqs 19 and 21), and 2 more runs") || strings.Contains(got, "20 (") {
		t.Errorf("%q", got)
	}
}
