package ingest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/roompub/roompub/room"
)

// Fair ingest (docs/secure-mode.md, "Fair ingest"): the ingest service
// keeps a share of itself for each identity. A request is admitted on the
// endpoint's subscription goroutine, before anything in it is looked at,
// and holds its identity's share from then until it is answered: while it
// waits for a slot, while it waits for the requests of its chain ahead of
// it (order.go), and while it is decided. A request beyond its identity's
// share, or beyond the service's total, is answered events.OverQuota at
// once, so one identity's flood neither stalls the subscription nor
// holds the slots another identity's requests wait for.

// RequestOverheadBytes is what every request held by the ingest service
// counts against the pending-bytes bounds besides its body, in bytes: the
// request, its goroutine and its order ticket (ServiceOptions
// IdentityPendingBytes, PendingBytes). An empty body still counts, so the
// bounds also bound how many requests are held. A request counts until
// its answer goes out; what it holds past that (its body, its slot, the
// answer being sent) lasts while it holds one of the Concurrency slots,
// so at most that many requests are past their count at once.
const RequestOverheadBytes = 1024

// identityUse is what one identity's requests hold in the service.
type identityUse struct {
	requests int // admitted, not answered, and not waiting for their chain
	held     int // admitted and not answered
	bytes    int // their bodies plus RequestOverheadBytes each
}

// quotas admits requests within their identity's share and the service's
// total (docs/secure-mode.md, "Fair ingest"). It is safe for concurrent use.
type quotas struct {
	perRequests int // ServiceOptions.IdentityConcurrency
	perBytes    int // ServiceOptions.IdentityPendingBytes
	totalBytes  int // ServiceOptions.PendingBytes

	mu    sync.Mutex
	total int                     // bytes held by every identity
	ids   map[string]*identityUse // identities with a request held only
}

func newQuotas(perRequests, perBytes, totalBytes int) *quotas {
	return &quotas{perRequests: perRequests, perBytes: perBytes, totalBytes: totalBytes, ids: map[string]*identityUse{}}
}

// charge is what a request with a body of n bytes holds, in bytes.
func charge(n int) int { return n + RequestOverheadBytes }

// admit takes the share a request of identity token with a body of n bytes
// holds, and returns "", or leaves everything as it was and returns the
// reason of its events.OverQuota answer. A request that finds its
// identity (or the service) holding nothing in bytes is admitted whatever
// its size, so that no request is refused forever for its size alone (the
// server's max payload bounds it). The service's total keeps a reserve of
// one identity's share (IdentityPendingBytes) for identities holding
// nothing: five identities at their share fill PendingBytes, and a sixth
// must still be served.
func (q *quotas) admit(token string, n int) string {
	c := charge(n)
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.ids[token]
	if u == nil {
		u = &identityUse{}
	}
	switch {
	case u.requests >= q.perRequests:
		return fmt.Sprintf("identity %s already has %d requests waiting or being decided, its share (IdentityConcurrency): send it again once one is answered",
			room.IdentityName(token), u.requests)
	case u.bytes > 0 && u.bytes+c > q.perBytes:
		return fmt.Sprintf("identity %s already has %d bytes of requests held, and this one (%d bytes) would take it past its share of %d (IdentityPendingBytes): send it again once one is answered",
			room.IdentityName(token), u.bytes, c, q.perBytes)
	case q.total > 0 && q.total+c > q.totalBytes && (u.bytes > 0 || q.total+c > q.totalBytes+q.perBytes):
		// What the other identities hold is theirs: the answer names the
		// bounds, not the service's total (serve's log has it).
		return fmt.Sprintf("this request (%d bytes) would take the service past the bytes of requests it holds at once, %d (PendingBytes, and a reserve of %d for identities holding nothing): send it again once one is answered",
			c, q.totalBytes, q.perBytes)
	}
	u.requests++
	u.held++
	u.bytes += c
	q.total += c
	q.ids[token] = u
	return ""
}

// idle moves a request of identity token out of (busy false) or back into
// (true) its identity's IdentityConcurrency count: a request waiting for
// the requests of its chain ahead of it, or for its room (slotHold.idle),
// does not count, or a shipper's own pipelined requests, waiting for the
// one ahead, would keep it out. Its bytes count all along.
func (q *quotas) idle(token string, busy bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if busy {
		q.ids[token].requests++
	} else {
		q.ids[token].requests--
	}
}

// release gives back what admit took for the same token and n.
func (q *quotas) release(token string, n int) {
	c := charge(n)
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.ids[token]
	u.requests--
	u.held--
	u.bytes -= c
	q.total -= c
	if u.held == 0 {
		delete(q.ids, token)
	}
}

// held returns the requests and bytes identity token holds, and the bytes
// every identity holds.
func (q *quotas) held(token string) (requests, bytes, total int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if u := q.ids[token]; u != nil {
		requests, bytes = u.requests, u.bytes
	}
	return requests, bytes, q.total
}

// fairSlots is the ingest service's concurrency limit, handed out fairly
// across identities (docs/secure-mode.md, "Fair ingest"): a free slot goes
// to the request waiting first, unless several identities have requests
// waiting, when they take turns (round robin over identities, first come
// first served within one). An identity alone may use every slot, and one
// identity's flood makes another's request wait for at most one slot to
// free per identity with requests waiting. It is safe for concurrent use.
type fairSlots struct {
	mu     sync.Mutex
	free   int
	queues map[string][]chan struct{} // waiting requests per identity, in arrival order
	turns  []string                   // identities with requests waiting, in turn order
}

func newFairSlots(n int) *fairSlots {
	return &fairSlots{free: n, queues: map[string][]chan struct{}{}}
}

// acquire takes a slot for a request of identity token, waiting for one
// (ctx bounds the wait; its error is returned, with no slot taken).
func (f *fairSlots) acquire(ctx context.Context, token string) error {
	return f.wait(ctx, token, false)
}

// wait is acquire; front queues the request first among its identity's.
func (f *fairSlots) wait(ctx context.Context, token string, front bool) error {
	f.mu.Lock()
	if f.free > 0 && len(f.turns) == 0 {
		f.free--
		f.mu.Unlock()
		return nil
	}
	ch := make(chan struct{}, 1) // release hands the slot over without waiting
	if len(f.queues[token]) == 0 {
		f.turns = append(f.turns, token)
	}
	if front {
		f.queues[token] = append([]chan struct{}{ch}, f.queues[token]...)
	} else {
		f.queues[token] = append(f.queues[token], ch)
	}
	f.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	f.mu.Lock()
	q := f.queues[token]
	if i := slices.Index(q, ch); i >= 0 {
		q = slices.Delete(q, i, i+1)
		if len(q) == 0 {
			delete(f.queues, token)
			f.turns = slices.DeleteFunc(f.turns, func(t string) bool { return t == token })
		} else {
			f.queues[token] = q
		}
		f.mu.Unlock()
		return ctx.Err()
	}
	f.mu.Unlock()
	// Handed a slot as ctx ended: give it on.
	<-ch
	f.release()
	return ctx.Err()
}

// acquireFirst takes a slot for a request of identity token that holds a
// room's records lock: at the front of its identity's queue, not behind
// its identity's other requests, which others' requests for that room
// would wait for too. The identities still take turns: another
// identity's request waits for at most one slot per identity waiting, as
// with acquire. ctx as acquire.
func (f *fairSlots) acquireFirst(ctx context.Context, token string) error {
	return f.wait(ctx, token, true)
}

// release gives a slot back: to the first waiting request of the identity
// whose turn it is, or to the free slots.
func (f *fairSlots) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.turns) == 0 {
		f.free++
		return
	}
	token := f.turns[0]
	f.turns = f.turns[1:]
	q := f.queues[token]
	ch := q[0]
	if q = q[1:]; len(q) == 0 {
		delete(f.queues, token)
	} else {
		f.queues[token] = q
		f.turns = append(f.turns, token) // its next request waits for its next turn
	}
	ch <- struct{}{}
}
