package jsapi

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// batchReply gathers the messages of one batch direct get reply until
// its end (take), then checks where each is stored against the server's
// own account of the batch and reads from the stream leader whatever
// does not hold (messages).
type batchReply struct {
	replies []reply
	endLast uint64 // the end's Nats-Last-Sequence: the seq of the last message sent
	upTo    uint64 // the end's Nats-UpTo-Sequence (multi_last)
	// endPending is the end's Nats-Num-Pending: the messages the request
	// selects after the last one sent.
	endPending uint64
}

// take reads one message of the reply to request body; done once the
// server ended it. Errors as readReply's.
func (b *batchReply) take(m *nats.Msg, body []byte) (done bool, err error) {
	r, err := readReply(m, body)
	if err != nil {
		return true, err
	}
	if r.end {
		b.endLast, b.upTo, b.endPending = r.last, r.upTo, r.Pending
		return true, nil
	}
	b.replies = append(b.replies, r)
	return false, nil
}

// messages returns the reply's messages in stream order. A message is
// taken as read when its reply is not suspect, its seq is above the one
// before it, its subject is one req selects, and the server, in the next
// reply's Nats-Last-Sequence (or the end's), names the same seq: each
// header the server appends comes after the stored ones, so a stored
// message cannot shape them unless it hides them, which makes it
// suspect. Any other is read again from the stream leader: for a
// request by next_by_subj (or from a seq), the first message after the
// one before it; for multi_last, the message at the seq the server named
// for it, or at its own; it must hold the reply's payload. Errors:
// LeaderGet's, or ErrUnreadable (wrapped) when the leader's message is
// not the reply's.
func (b *batchReply) messages(ctx context.Context, nc *nats.Conn, stream string, req BatchRequest, timeout time.Duration) ([]Msg, error) {
	out := make([]Msg, 0, len(b.replies))
	var fromLeader []bool // which of out were read from the leader
	lo := uint64(0)       // the seq of the message before; every message lies above it
	if req.Seq > 0 {
		lo = req.Seq - 1
	}
	for i, r := range b.replies {
		named, known := b.endLast, true // the seq the server names for r
		if i+1 < len(b.replies) {
			next := b.replies[i+1]
			named, known = next.last, !next.suspect
		}
		if !r.suspect && r.Seq > lo && known && r.Seq == named && selects(req, r.Subject) {
			out = append(out, r.Msg)
			lo = r.Seq
			continue
		}
		m, err := b.fromLeader(ctx, nc, stream, req, r, lo, named, known, timeout)
		if err != nil {
			return nil, err
		}
		if fromLeader == nil {
			fromLeader = make([]bool, len(b.replies))
		}
		fromLeader[i] = true
		out = append(out, *m)
		lo = m.Seq
	}
	// A message read from the leader has no Nats-Num-Pending: the server
	// counts one message fewer after each (nats-server getDirectRequest),
	// so it is the next message's plus one, the last's the end's. A
	// reader that stops at none pending must not stop early on one.
	for i := len(out) - 1; i >= 0 && fromLeader != nil; i-- {
		if !fromLeader[i] {
			continue
		}
		if i+1 < len(out) {
			out[i].Pending = out[i+1].Pending + 1
		} else {
			out[i].Pending = b.endPending
		}
	}
	return out, nil
}

// fromLeader reads r, a reply not taken as read, from the stream leader:
// the first message req selects after lo, or for multi_last the message
// at named (when known) or at r's own seq; it must lie above lo, be one
// req selects and hold r's payload.
func (b *batchReply) fromLeader(ctx context.Context, nc *nats.Conn, stream string, req BatchRequest, r reply, lo, named uint64, known bool, timeout time.Duration) (*Msg, error) {
	var asks []any
	if len(req.MultiLast) == 0 {
		filter := req.NextBySubj
		if filter == "" {
			filter = ">"
		}
		asks = append(asks, map[string]any{"seq": lo + 1, "next_by_subj": filter})
	} else {
		if known && named > lo {
			asks = append(asks, map[string]any{"seq": named})
		}
		if !r.suspect && r.Seq > lo && (!known || r.Seq != named) {
			asks = append(asks, map[string]any{"seq": r.Seq})
		}
	}
	for _, ask := range asks {
		m, err := LeaderGet(ctx, nc, stream, timeout, ask)
		if err != nil {
			return nil, err
		}
		if m != nil && m.Seq > lo && selects(req, m.Subject) && bytes.Equal(m.Data, r.Data) {
			return m, nil
		}
	}
	if len(req.MultiLast) > 0 && !known {
		return b.walkLast(ctx, nc, stream, req, r, lo, timeout)
	}
	return nil, fmt.Errorf("direct get of %s after stream seq %d: %w: the stream leader has no message of the reply's payload there",
		stream, lo, ErrUnreadable)
}

// maxWalk bounds the messages walkLast reads on each filter.
const maxWalk = 256

// walkLast finds r, a multi_last reply whose seq neither it nor the
// server (the next reply being suspect too) names, on the stream leader:
// on each of req's filters, the first message after lo that holds r's
// payload and is the last on its subject up to the reply's bound (the
// end's Nats-UpTo-Sequence, req.UpToSeq, or else the stream's last); the
// one of lowest seq, as the reply is in stream order. Each filter is
// walked at most maxWalk messages. Errors: LeaderGet's, or ErrUnreadable.
func (b *batchReply) walkLast(ctx context.Context, nc *nats.Conn, stream string, req BatchRequest, r reply, lo uint64, timeout time.Duration) (*Msg, error) {
	bound := b.upTo
	if req.UpToSeq > 0 {
		bound = req.UpToSeq
	}
	var found *Msg
	for _, f := range req.MultiLast {
		from := lo + 1
		for range maxWalk {
			m, err := LeaderGet(ctx, nc, stream, timeout, map[string]any{"seq": from, "next_by_subj": f})
			if err != nil {
				return nil, err
			}
			if m == nil || (bound > 0 && m.Seq > bound) || (found != nil && m.Seq > found.Seq) {
				break
			}
			from = m.Seq + 1
			if !bytes.Equal(m.Data, r.Data) {
				continue
			}
			after, err := LeaderGet(ctx, nc, stream, timeout, map[string]any{"seq": m.Seq + 1, "next_by_subj": m.Subject})
			if err != nil {
				return nil, err
			}
			if after == nil || (bound > 0 && after.Seq > bound) {
				found = m
				break
			}
		}
	}
	if found == nil {
		return nil, fmt.Errorf("multi_last direct get of %s after stream seq %d: %w: no last message on the stream leader holds the reply's payload",
			stream, lo, ErrUnreadable)
	}
	return found, nil
}

// selects reports whether req's filter (next_by_subj, or one of
// multi_last's) takes subject; a request without one takes any.
func selects(req BatchRequest, subject string) bool {
	if len(req.MultiLast) == 0 {
		return req.NextBySubj == "" || SubjectMatches(req.NextBySubj, subject)
	}
	for _, f := range req.MultiLast {
		if SubjectMatches(f, subject) {
			return true
		}
	}
	return false
}

// SubjectMatches reports whether subject, a literal subject, matches
// filter, whose tokens may be * (one token) and, last, > (one or more), as
// the server matches a stream's or a request's filter.
func SubjectMatches(filter, subject string) bool {
	for {
		f, frest, fmore := strings.Cut(filter, ".")
		t, trest, tmore := strings.Cut(subject, ".")
		switch {
		case f == ">":
			return t != ""
		case t == "" || (f != "*" && f != t):
			return false
		case !fmore || !tmore:
			return fmore == tmore
		}
		filter, subject = frest, trest
	}
}
