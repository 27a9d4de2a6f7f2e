package jsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Getter sends direct gets (ADR-31) to one stream and takes their replies
// on one subscription of its own, each request on a reply subject of its
// own under it: a request costs no subscription (no SUB and UNSUB for the
// server to handle), so many can be in flight on one connection at the
// cost of a publish each. Safe for concurrent use; Close ends it.
type Getter struct {
	stream  string
	subject string // $JS.API.DIRECT.GET.<stream>
	prefix  string // a request's replies come on prefix + "." + its id
	nc      *nats.Conn
	timeout time.Duration
	sub     *nats.Subscription

	mu      sync.Mutex
	next    uint64
	pending map[string]chan *nats.Msg
}

// NewGetter subscribes to the replies of direct gets to stream; timeout
// bounds the wait for each reply message. Errors: the subscription's.
func NewGetter(nc *nats.Conn, stream string, timeout time.Duration) (*Getter, error) {
	g := &Getter{stream: stream, subject: "$JS.API.DIRECT.GET." + stream, prefix: nc.NewInbox(), nc: nc, timeout: timeout, pending: map[string]chan *nats.Msg{}}
	sub, err := nc.Subscribe(g.prefix+".*", g.route)
	if err != nil {
		return nil, err
	}
	// Replies wait in the subscription only as long as route takes to
	// hand them on; its default limits would drop a large batch's.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	g.sub = sub
	return g, nil
}

// Close ends the subscription; requests still waiting time out.
func (g *Getter) Close() { _ = g.sub.Unsubscribe() }

// route hands a reply message to the request waiting for it; one for no
// request (one that gave up) is dropped. A request's channel has room for
// every message its reply can have.
func (g *Getter) route(m *nats.Msg) {
	id := m.Subject[min(len(g.prefix)+1, len(m.Subject)):]
	g.mu.Lock()
	ch := g.pending[id]
	g.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- m:
	default:
	}
}

// Batch is DirectBatch on g's stream: the up to req.Batch messages of the
// reply, in stream order; none when nothing matches. Errors as
// DirectBatch's.
func (g *Getter) Batch(ctx context.Context, req BatchRequest) ([]Msg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var b batchReply
	if err := g.request(ctx, body, req.Batch+2, func(m *nats.Msg) (bool, error) { return b.take(m, body) }); err != nil {
		return nil, err
	}
	return b.messages(ctx, g.nc, g.stream, req, g.timeout)
}

// NextBySubject is the first message on subject at or after seq (a
// single direct get: {"seq": seq, "next_by_subj": subject}), nil when
// there is none. Errors as DirectGet's, nats.ErrTimeout (wrapped) when no
// reply came in g's timeout.
func (g *Getter) NextBySubject(ctx context.Context, seq uint64, subject string) (*Msg, error) {
	body := strconv.AppendUint([]byte(`{"seq":`), seq, 10)
	body = append(body, `,"next_by_subj":`...)
	body = strconv.AppendQuote(body, subject)
	body = append(body, '}')
	return g.single(ctx, body)
}

// Seq is the message at stream sequence seq (a single direct get), nil
// when there is none; errors as NextBySubject's.
func (g *Getter) Seq(ctx context.Context, seq uint64) (*Msg, error) {
	body := strconv.AppendUint([]byte(`{"seq":`), seq, 10)
	return g.single(ctx, append(body, '}'))
}

// single sends a single direct get: its reply is one message or a status.
func (g *Getter) single(ctx context.Context, body []byte) (*Msg, error) {
	var r reply
	err := g.request(ctx, body, 1, func(m *nats.Msg) (bool, error) {
		var err error
		r, err = readReply(m, body)
		return true, err
	})
	switch {
	case err != nil || r.end:
		return nil, err
	case r.suspect:
		return leaderAgain(ctx, g.nc, g.stream, body, r.Data)
	}
	return &r.Msg, nil
}

// request publishes body with a reply subject of its own and hands each
// reply message to take until it reports the reply over or an error; it
// waits at most g.timeout for each message. n bounds the messages the
// reply can have.
func (g *Getter) request(ctx context.Context, body []byte, n int, take func(*nats.Msg) (bool, error)) error {
	ch := make(chan *nats.Msg, n)
	g.mu.Lock()
	g.next++
	id := strconv.FormatUint(g.next, 10)
	g.pending[id] = ch
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.pending, id)
		g.mu.Unlock()
	}()
	if err := g.nc.PublishRequest(g.subject, g.prefix+"."+id, body); err != nil {
		return err
	}
	t := time.NewTimer(g.timeout)
	defer t.Stop()
	for got := 0; ; got++ {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-t.C:
			return fmt.Errorf("direct get %s: %w after %d messages", body, nats.ErrTimeout, got)
		case <-ctx.Done():
			return ctx.Err()
		}
		t.Reset(g.timeout)
		if done, err := take(m); done || err != nil {
			return err
		}
	}
}
