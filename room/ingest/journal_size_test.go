package ingest

import (
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// TestMessageSizeMatchesMessage holds journalRun.messageSize, which decide
// uses instead of building a message per line, to what tooLarge counts for
// the message it stands for, with and without a publisher key, with and
// without the expected-sequence headers, across the decimal lengths of
// the expected sequence.
func TestMessageSizeMatchesMessage(t *testing.T) {
	line := []byte(`{"capsule_id":"cap-size","entry_hash":"` + fmt.Sprintf("%064x", 7) + `","seq":0}`)
	e, err := events.ParseEntry(line)
	if err != nil {
		t.Fatal(err)
	}
	key, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	subjects := room.Subjects{Prefix: "rooms"}
	for _, g := range []*Gate{{subjects: subjects}, {subjects: subjects, key: key, nodeID: key.NodeID()}} {
		chain := events.ChainKey{RunID: "run-size", CapsuleID: "cap-size"}
		r := &journalRun{g: g, key: chain, subj: subjects.Journal("room:size", chain), anyRoom: subjects.ChainAnyRoom(chain)}
		for _, expect := range []bool{false, true} {
			for _, last := range []uint64{0, 9, 10, 99999, 1<<63 + 5, ^uint64(0)} {
				msg := r.message(e, "", expect, last)
				want := int64(len(msg.Data)) + g.msgHeaderSize(msg, 0, 1)
				if got := r.messageSize(e, expect, last); got != want {
					t.Errorf("key %v, expect %v, last %d: messageSize %d, the message counts %d", g.key != nil, expect, last, got, want)
				}
			}
		}
	}
}
