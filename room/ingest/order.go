package ingest

import (
	"bytes"
	"context"
	"sync"

	"github.com/roompub/roompub/events"
)

// A shipper keeps up to ShipOptions.Pipeline requests of one chain in
// flight, so the gate checks the lines of the next request (checkLines,
// parallel, no chain state) while it stores the one before. The
// requests must still be decided in chain order: a request decided before
// the one ahead of it is stored would find its first line ahead of the
// chain's head and be refused. Within one gate the order is kept here:
// every journal request of a chain holds a ticket naming its first
// entry's seq, and waits, after checkLines and before it locks the chain,
// for the requests of that chain with a smaller first seq that took their
// tickets before it. The ingest service takes tickets as requests arrive
// (micro hands them over one by one, in the order the connection sent
// them), so a client's requests are decided in the order it sent them.
// Across gate processes (one micro queue group) nothing orders them: a
// request marked HeaderPipelined whose first line is ahead of the chain
// waits up to defaultAheadWait for the chain to reach it, reading the chain's
// head from the stream leader (the request ahead may be stored by another
// gate: awaitChain), and is answered OutcomeAhead if it does not; the
// shipper then sends it again, in order.

// chainOrder is the tickets of one chain's requests in flight in a gate.
type chainOrder struct {
	held []*orderTicket // in no particular order
	// left is closed and replaced whenever a ticket is given back.
	left chan struct{}
}

// orderTicket is a journal request's place in its chain's order; a nil
// *orderTicket orders nothing (a request whose first line does not parse:
// it is refused without deciding anything).
type orderTicket struct {
	g   *Gate
	key events.ChainKey
	seq int64
	// owner is the requester's identity token: a request waits for, and
	// stalls, only the same identity's requests of the chain. A chain
	// belongs to one identity, so another's request of it is refused
	// not_chain_owner; it must not delay the owner's pipeline or stall
	// it into resending.
	owner string
	// stalled: a request of this gate ahead of this one ended without
	// storing all its lines, so the chain will not reach this one's first
	// line by itself: awaitChain does not wait for it (Gate.orderMu).
	stalled bool
	// hold, when set, is the request's place in the ingest service's
	// concurrency limit, given back while the request waits (idle).
	hold *slotHold
}

// idle runs f, which waits for the requests of the chain ahead, without
// the request's place in the service's concurrency limit (slotHold.idle).
// A running request waits for no ticket, so waiting never blocks a
// request ahead.
func (t *orderTicket) idle(ctx context.Context, f func() error) error {
	if t == nil {
		return f()
	}
	return t.hold.idle(ctx, f)
}

// slots is the request's place in the service's concurrency limit, nil
// for none (t nil: the gate called as a library).
func (t *orderTicket) slots() *slotHold {
	if t == nil {
		return nil
	}
	return t.hold
}

// slotHold is a request's place in the ingest service's concurrency
// limit (fairSlots) and in its identity's concurrency count (quotas). A
// request gives both back while it waits for other requests (idle): for
// the requests of its chain ahead of it, or for its room's records lock
// held by another request. So waiting requests keep no other identity's
// from being decided. A nil *slotHold is none (the gate called as a
// library): idle just runs f.
type slotHold struct {
	slot    *fairSlots
	holding bool // the request holds a place in slot (its goroutine's alone)
	// quota, when set, counts the request in its identity's share
	// (quota.go): while it waits (idle), it is out of the identity's
	// IdentityConcurrency count.
	quota *quotas
	token string
}

// idle runs f, which waits for other requests, without the request's
// place in the service's concurrency limit, and takes a place again
// after it: the error is acquire's (ctx done) before f's. f may return
// holding a lock, as long as no request holding a place waits for that
// lock without idle: a request then waits for a place holding it, and
// the places' holders never wait for it.
func (h *slotHold) idle(ctx context.Context, f func() error) error {
	return h.idleThen(ctx, f, false)
}

// idleThen is idle; first takes the place again first among its
// identity's waiting requests (fairSlots.acquireFirst), for f that returns
// holding a lock others wait for.
func (h *slotHold) idleThen(ctx context.Context, f func() error, first bool) error {
	if h == nil || h.slot == nil || !h.holding {
		return f()
	}
	if h.quota != nil {
		h.quota.idle(h.token, false)
		defer h.quota.idle(h.token, true)
	}
	h.slot.release()
	h.holding = false
	err := f()
	if h.holding {
		return err // f kept a place it took (briefly)
	}
	var aerr error
	if first {
		aerr = h.slot.acquireFirst(ctx, h.token)
	} else {
		aerr = h.slot.acquire(ctx, h.token)
	}
	if aerr != nil {
		return aerr
	}
	h.holding = true
	return err
}

// briefly runs f in a place of the service's concurrency limit taken for
// f, in the identity's turn, for a request that holds none (idle): a
// waiting request's read on its own behalf. The place is given back after
// f, unless f says to keep it (the wait is over: the request goes on to
// be decided in it, and idle takes no other). A nil h, or one holding its
// place, runs f as it is. The error is acquire's (ctx done) or f's.
func (h *slotHold) briefly(ctx context.Context, f func() (keep bool, err error)) error {
	if h == nil || h.slot == nil || h.holding {
		_, err := f()
		return err
	}
	if err := h.slot.acquire(ctx, h.token); err != nil {
		return err
	}
	keep, err := f()
	if keep && err == nil {
		h.holding = true
		return nil
	}
	h.slot.release()
	return err
}

// releases reports whether the request's goroutine must give a place in
// the service's concurrency limit back when it ends: it took one, and
// holds it unless idle gave it back.
func (h *slotHold) releases() bool { return h == nil || h.slot == nil || h.holding }

// lockIdle locks mu, waiting for it without h's place (idle) when another
// request holds it, and takes a place again first among its identity's
// waiting requests: the other requests waiting for mu must not wait
// behind h's identity's whole queue too, and the identities still take
// turns. It returns with mu locked unless it returns an
// error (ctx done while it took a place again).
func lockIdle(ctx context.Context, mu *sync.Mutex, h *slotHold) error {
	if mu.TryLock() {
		return nil
	}
	err := h.idleThen(ctx, func() error {
		mu.Lock()
		return nil
	}, true)
	if err != nil {
		mu.Unlock()
	}
	return err
}

// ticket takes a ticket for the journal request body (the first line's
// chain and seq) of identity owner; nil when the first line does not
// parse or has no seq.
func (g *Gate) ticket(body []byte, owner string) *orderTicket {
	first, _, _ := bytes.Cut(body, []byte{'\n'})
	e, seq := events.LineSeq(first)
	if e == nil {
		return nil
	}
	t := &orderTicket{g: g, key: events.ChainKey{RunID: e.RunID(), CapsuleID: e.CapsuleID()}, seq: seq, owner: owner}
	g.orderMu.Lock()
	defer g.orderMu.Unlock()
	o := g.orders[t.key]
	if o == nil {
		o = &chainOrder{left: make(chan struct{})}
		g.orders[t.key] = o
	}
	o.held = append(o.held, t)
	return t
}

// wait returns once no ticket of the chain with a smaller first seq is
// held, or with ctx's error. A ticket waits only for smaller seqs, so the
// smallest never waits and waiting never goes round in a circle (a
// smaller one taken later, another client's resend, is waited for too:
// it is decided first, as the chain's order has it).
func (t *orderTicket) wait(ctx context.Context) error {
	if t == nil {
		return nil
	}
	g := t.g
	for {
		g.orderMu.Lock()
		ahead, left := t.aheadLocked(), g.orders[t.key].left
		g.orderMu.Unlock()
		if !ahead {
			return nil
		}
		select {
		case <-left:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ahead reports whether a ticket of the chain with a smaller first seq,
// of the same owner, is held: whether wait would wait now.
func (t *orderTicket) ahead() bool {
	if t == nil {
		return false
	}
	t.g.orderMu.Lock()
	defer t.g.orderMu.Unlock()
	return t.aheadLocked()
}

// aheadLocked is ahead with Gate.orderMu held.
func (t *orderTicket) aheadLocked() bool {
	for _, h := range t.g.orders[t.key].held {
		if h.seq < t.seq && h.owner == t.owner {
			return true
		}
	}
	return false
}

// done gives the ticket back; the requests waiting for it look again.
func (t *orderTicket) done() {
	if t == nil {
		return
	}
	g := t.g
	g.orderMu.Lock()
	defer g.orderMu.Unlock()
	o := g.orders[t.key]
	for i, h := range o.held {
		if h == t {
			o.held[i] = o.held[len(o.held)-1]
			o.held = o.held[:len(o.held)-1]
			break
		}
	}
	close(o.left)
	o.left = make(chan struct{})
	if len(o.held) == 0 {
		delete(g.orders, t.key)
	}
}

// stall marks the tickets of the chain behind this one stalled: this
// request ended without storing all its lines.
func (t *orderTicket) stall() {
	if t == nil {
		return
	}
	g := t.g
	g.orderMu.Lock()
	defer g.orderMu.Unlock()
	for _, h := range g.orders[t.key].held {
		if h.seq > t.seq && h.owner == t.owner {
			h.stalled = true
		}
	}
}

// isStalled reports whether a request of this gate ahead of this one
// ended without storing all its lines.
func (t *orderTicket) isStalled() bool {
	if t == nil {
		return false
	}
	t.g.orderMu.Lock()
	defer t.g.orderMu.Unlock()
	return t.stalled
}
