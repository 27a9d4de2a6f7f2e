package ingest_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestJournalBriefReply: Roompub-Reply: brief cuts stored and duplicate
// items to their index and outcome; a refused item stays whole; without
// the header, or with another value, every item is whole. The counts and
// the head are the same either way, and so is what is stored.
func TestJournalBriefReply(t *testing.T) {
	e := roomtest.NewEnv(t)
	es, _ := roomtest.Journal(t, "run-brief", "cap-brief", 6)
	send := func(reply string, body []byte) room.JournalReply {
		t.Helper()
		hdr := nats.Header{room.HeaderRoom: {"room:brief"}}
		if reply != "" {
			hdr.Set(room.HeaderReply, reply)
		}
		var r room.JournalReply
		if code := roomtest.Request(t, e.Nc, "roompub.v1.journal", hdr, body, &r); code != "" {
			t.Fatalf("journal request: %s", code)
		}
		return r
	}
	r := send(room.ReplyBrief, roomtest.Lines(es[:3]))
	want := []room.ItemResult{{Index: 0, Outcome: room.OutcomeStored}, {Index: 1, Outcome: room.OutcomeStored}, {Index: 2, Outcome: room.OutcomeStored}}
	if !reflect.DeepEqual(r.Items, want) || r.Stored != 3 || r.Head.Next != 3 || r.Head.Head != es[2].EntryHash() {
		t.Fatalf("brief reply %+v, want items %+v, 3 stored, head at 3", r, want)
	}
	// Two resent (duplicates), one new, one ahead of the chain (refused).
	r = send(room.ReplyBrief, roomtest.Lines([]*events.Entry{es[1], es[2], es[3], es[5]}))
	want = []room.ItemResult{{Index: 0, Outcome: room.OutcomeDuplicate}, {Index: 1, Outcome: room.OutcomeDuplicate}, {Index: 2, Outcome: room.OutcomeStored}}
	if len(r.Items) != 4 || !reflect.DeepEqual(r.Items[:3], want) {
		t.Fatalf("brief reply items %+v, want %+v first", r.Items, want)
	}
	if rf := r.Items[3]; rf.Outcome != room.OutcomeRefused || rf.Code != events.Reordered || rf.Seq == nil || *rf.Seq != 5 || rf.Hash != es[5].EntryHash() || len(rf.Problems) == 0 {
		t.Fatalf("a refused item of a brief reply is not whole: %+v", rf)
	}
	if r.Stored != 1 || r.Dupes != 2 || r.Refused != 1 || r.Head.Next != 4 {
		t.Fatalf("counts and head %+v", r)
	}
	for _, value := range []string{"", "full"} { // stored, then a duplicate
		r = send(value, roomtest.Lines(es[4:5]))
		it := r.Items[0]
		if (it.Outcome != room.OutcomeStored && it.Outcome != room.OutcomeDuplicate) || it.Seq == nil || *it.Seq != 4 || it.Hash != es[4].EntryHash() || it.StreamSeq == 0 || it.Subject == "" {
			t.Fatalf("Roompub-Reply %q: the item is not whole: %+v", value, it)
		}
	}
	roomtest.ChainInStream(t, e, "room:brief", es[:5])
}

// TestClientJournalReplyItems: the client makes room for one reply item
// per line before decoding; a reply holds them all, and an answer without
// items (an error) leaves Items nil, as it did before the room was made.
func TestClientJournalReplyItems(t *testing.T) {
	e := roomtest.NewEnv(t)
	cl := client.New(e.Nc, client.Options{})
	es, _ := roomtest.Journal(t, "run-items", "cap-items", 3)
	r, err := cl.AppendJournal(context.Background(), "room:items", nil, roomtest.Lines(es))
	if err != nil || len(r.Items) != 3 || r.Stored != 3 {
		t.Fatalf("reply %+v, %v; want 3 items, 3 stored", r, err)
	}
	for i, it := range r.Items {
		if it.Index != i || it.Outcome != room.OutcomeStored {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	r, err = cl.AppendJournal(context.Background(), "", nil, roomtest.Lines(es))
	var se *client.ServiceError
	if !errors.As(err, &se) || r.Items != nil {
		t.Fatalf("a request without a room: %+v, %v; want a service error and nil items", r, err)
	}
}
