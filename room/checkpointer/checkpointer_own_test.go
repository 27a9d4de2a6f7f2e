package checkpointer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestCheckpointerOwnBatchReadPartly: the gate announces a batch of 3 and
// only its first two messages are stored (a store that filled mid-batch),
// with no acknowledgement: the checkpointer reads them from the stream and,
// as the readers do, refuses them as an incomplete batch although the
// gate announced them (they were leaves, one by one). The same batch
// stored whole later (the same statements signed again: the same
// signature) holds messages 0 and 1 whose announcements were taken and
// message 2 whose was not: its signature is checked, the position of the
// announced message worked out from its entry, and it is admitted. The
// checkpointer's tree is an independent rebuild's.
func TestCheckpointerOwnBatchReadPartly(t *testing.T) {
	e := roomtest.NewEnv(t)
	key := roomtest.NewPublisherKey(t)
	const roomID = "room:own-partly"
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 1000, Interval: time.Hour})
	ckp.SetGapWait(10 * time.Millisecond)
	a := roomtest.NewAttestor(t, e.Js, key, roomID)
	es, _ := roomtest.Journal(t, "run-o", "cap-o", 4)
	ms := []roomtest.AttMsg{a.EntryMsg(es[0]), a.EntryMsg(es[1]), a.EntryMsg(es[2])}
	hs := a.Sign(ms)
	for i, m := range ms {
		ckp.Expect(m.Subject, hs[i], checkpoint.ContentHash(m.Data))
	}
	part := a.Append(ms[:2], hs[:2])
	whole := a.Append(ms, hs)
	for _, m := range ms {
		a.Leaf(checkpoint.LeafHash(roomID, m.Subject, checkpoint.ContentHash(m.Data)))
	}
	a.Entry(es[3])
	subj := a.Subj.Journal(roomID, events.ChainKey{RunID: "run-o", CapsuleID: "cap-o"})
	checkRoom(t, e, ckp, roomID, roomtest.Trusting(t, key), 4, 0, -1)
	rt := roomtest.Rebuild(e, roomID, roomtest.Trusting(t, key))
	if len(rt.NotLeaves) != 2 || rt.NotLeaves[0] != part[0] || rt.NotLeaves[1] != part[1] || rt.Tree.Root() != a.Tree.Root() {
		t.Fatalf("the independent rebuild: no leaves %v, want %v", rt.NotLeaves, part)
	}
	var notLeaves []uint64
	for _, l := range logs.FilterMessageSnippet("is not a leaf").All() {
		m := l.ContextMap()
		notLeaves = append(notLeaves, m["stream_seq"].(uint64))
		if m["subject"] != subj || !strings.Contains(m["error"].(string), "incomplete batch: message ") ||
			!strings.Contains(m["error"].(string), "is not message 2 of it") {
			t.Errorf("no leaf: %v", m)
		}
	}
	if len(notLeaves) != 2 || notLeaves[0] != part[0] || notLeaves[1] != part[1] || whole[0] != part[1]+1 {
		t.Fatalf("no leaves %v, want the part %v", notLeaves, part)
	}
}
