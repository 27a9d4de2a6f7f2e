package jsapi

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBatchReplyTakesTheServersSeqs: a reply that reads whole but claims
// a seq the server's next reply (or the batch's end) does not name for
// it, or a seq out of order, or a subject the request does not select,
// is read again from the stream leader where the server stored it; a
// leader's message without the reply's payload is ErrUnreadable, never
// taken. This is what a stored header that forges the server's and
// still adds up to the bytes sent (lines ending in a bare LF, which
// nats.go reads as CRLF ones) would give.
func TestBatchReplyTakesTheServersSeqs(t *testing.T) {
	nc, js := streamS(t)
	ctx := context.Background()
	for _, p := range []struct{ subj, data string }{{"s.a", "one"}, {"s.b", "two"}, {"s.a", "three"}} {
		if _, err := js.Publish(ctx, p.subj, []byte(p.data)); err != nil {
			t.Fatal(err)
		}
	}
	at := func(seq, last uint64, subj, data string) reply {
		return reply{Msg: Msg{Seq: seq, Subject: subj, Data: []byte(data)}, last: last}
	}
	req := BatchRequest{Seq: 1, NextBySubj: "s.>", Batch: 10}
	for _, c := range []struct {
		name    string
		replies []reply
		endLast uint64
		want    []uint64
		bad     bool
	}{
		{"as stored", []reply{at(1, 0, "s.a", "one"), at(2, 1, "s.b", "two"), at(3, 2, "s.a", "three")}, 3, []uint64{1, 2, 3}, false},
		{"seq the next reply contradicts", []reply{at(1, 0, "s.a", "one"), at(7, 1, "s.b", "two"), at(3, 2, "s.a", "three")}, 3, []uint64{1, 2, 3}, false},
		{"last seq the end contradicts", []reply{at(1, 0, "s.a", "one"), at(2, 1, "s.b", "two"), at(9, 2, "s.a", "three")}, 3, []uint64{1, 2, 3}, false},
		{"seq going back", []reply{at(1, 0, "s.a", "one"), at(1, 1, "s.b", "two"), at(3, 1, "s.a", "three")}, 3, []uint64{1, 2, 3}, false},
		{"subject not asked for", []reply{at(1, 0, "s.a", "one"), at(2, 1, "t.b", "two"), at(3, 2, "s.a", "three")}, 3, []uint64{1, 2, 3}, false},
		{"payload the leader does not have there", []reply{at(1, 0, "s.a", "one"), at(7, 1, "s.b", "forged"), at(3, 2, "s.a", "three")}, 3, nil, true},
	} {
		b := batchReply{replies: c.replies, endLast: c.endLast}
		ms, err := b.messages(ctx, nc, "S", req, 5*time.Second)
		if c.bad {
			if !errors.Is(err, ErrUnreadable) {
				t.Errorf("%s: %d messages, %v; want ErrUnreadable", c.name, len(ms), err)
			}
			continue
		}
		var got []uint64
		for _, m := range ms {
			got = append(got, m.Seq)
		}
		if err != nil || len(got) != len(c.want) {
			t.Errorf("%s: seqs %v, %v; want %v", c.name, got, err, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] || ms[i].Subject != []string{"s.a", "s.b", "s.a"}[i] {
				t.Errorf("%s: seqs %v, message %d on %s; want %v", c.name, got, i, ms[i].Subject, c.want)
			}
		}
	}
}
