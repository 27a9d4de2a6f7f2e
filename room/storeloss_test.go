package room_test

import (
	"errors"
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
	if !errors.Is(err, room.ErrStoreLost) || err.Error() != "the store lost acknowledged messages: 2 messages between stream seqs 1 and 103 are gone (stream seqs [7 9])" {
		t.Fatalf("two lost: %v", err)
	}
	var many []uint64
	for s := uint64(53); s <= 103; s++ {
		many = append(many, s)
	}
	err = room.CheckStoreLoss(jetstream.StreamState{FirstSeq: 1, LastSeq: 103, Msgs: 52, NumDeleted: 51, Deleted: many})
	if err == nil || err.Error() != "the store lost acknowledged messages: 51 messages between stream seqs 1 and 103 are gone (stream seqs [53 54 55 56 57 58 59 60 61 62] …)" {
		t.Fatalf("51 lost: %v", err)
	}
	// Without the details, the count alone.
	err = room.CheckStoreLoss(jetstream.StreamState{FirstSeq: 1, LastSeq: 103, NumDeleted: 4})
	if err == nil || err.Error() != "the store lost acknowledged messages: 4 messages between stream seqs 1 and 103 are gone" {
		t.Fatalf("no details: %v", err)
	}
}
