package ingest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"go.uber.org/zap"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/validate"
)

// BatchObserver may be implemented by an Observer that also wants one call
// per atomic batch the gate publishes (Metrics does). Implementations must
// be safe for concurrent use and must not block.
type BatchObserver interface {
	// Batch is called with the messages of the batch, the error the
	// publish returned (nil: the server stored the batch) and the time it
	// took.
	Batch(messages int, err error, took time.Duration)
}

// AppendJournal decides a batch of journal lines of one chain, in order.
// body holds the lines exactly as a journal file does: each line the
// canonical JSON of one entry followed by "\n". Lines before the first
// refused or failed one may be stored; that one and every later one are
// not (the later ones are "skipped"). capsule, when not nil, is the
// capsule.json metadata every entry must repeat. A request-level problem
// (bad room id, empty body) is returned as an *events.Refusal with code
// bad_request and no items.
//
// Every line is checked first (the stateless rules in parallel, then the
// chain rules in order); the lines that pass are appended together, as one
// atomic batch (ADR-50), with the expected last sequence of the chain's
// subject on the first message and Nats-Msg-Id = entry_hash on each, so the
// server stores all of them after the chain's head or none. Each line gets
// the outcome one append per line would have given it.
//
// Requests of one chain in flight at once in this gate are decided in the
// order of their first entry's seq (order.go); the ingest service orders
// them as they arrive, with appendJournal.
//
// The gate stores the lines from body itself, without a copy: body must
// not change until AppendJournal returns (it keeps no reference after).
func (g *Gate) AppendJournal(ctx context.Context, roomID string, body []byte, capsule *events.CapsuleMeta) (room.JournalReply, error) {
	t := g.ticket(body, room.Anonymous)
	defer t.done()
	return g.appendJournal(ctx, roomID, room.Anonymous, body, capsule, t, -1)
}

// AppendJournalAs is AppendJournal for the identity owner (an
// IdentityToken, or Anonymous): a chain belongs to the identity that
// stored its first entry, and a request of another identity on it is
// refused events.NotChainOwner (docs/secure-mode.md).
func (g *Gate) AppendJournalAs(ctx context.Context, roomID, owner string, body []byte, capsule *events.CapsuleMeta) (room.JournalReply, error) {
	t := g.ticket(body, owner)
	defer t.done()
	return g.appendJournal(ctx, roomID, owner, body, capsule, t, -1)
}

// appendJournal is AppendJournal with the request's ticket taken (nil:
// no order); after: the HeaderPipelined value, -1 without the header.
func (g *Gate) appendJournal(ctx context.Context, roomID, owner string, body []byte, capsule *events.CapsuleMeta, t *orderTicket, after int64) (reply room.JournalReply, err error) {
	defer func() {
		if err != nil || reply.Stored+reply.Dupes != len(reply.Items) {
			t.stall() // the requests of this chain behind it need not wait for it
		}
	}()
	reply = room.JournalReply{RoomID: roomID}
	if err := validate.CheckRoomID(roomID); err != nil {
		return reply, err
	}
	if err := g.subjects.CheckRoom(roomID); err != nil {
		return reply, events.NewRefusal([]events.Problem{{Code: events.BadRequest, Reason: err.Error()}})
	}
	// Counted before a line is made: a body of 1 MiB of newlines made a
	// million lines (172 MB) before it was refused for their number.
	n := countLines(body)
	if n == 0 {
		return reply, events.NewRefusal([]events.Problem{{Code: events.BadRequest, Reason: "the request holds no journal line"}})
	}
	if n > room.MaxBatchLines {
		return reply, events.NewRefusal([]events.Problem{{Code: events.BadRequest,
			Reason: fmt.Sprintf("the request holds %d lines; at most %d per request", n, room.MaxBatchLines)}})
	}
	lines := splitLines(body)
	start := time.Now()
	reply.Items = make([]room.ItemResult, len(lines))
	for i := range reply.Items {
		reply.Items[i] = room.ItemResult{Index: i, Outcome: room.OutcomeSkipped}
	}
	pre := g.checkLines(roomID, owner, lines)
	// The chain is named by the first line; a later line of another chain
	// fails metadata_mismatch like any entry that differs from its capsule.
	if pre[0].bad != nil {
		reply.Items[0] = *pre[0].bad
		g.observeItems(reply.Items, start)
		tally(&reply)
		return reply, nil
	}
	first := pre[0].e
	key := events.ChainKey{RunID: first.RunID(), CapsuleID: first.CapsuleID()}
	reply.Chain = key
	if problems := outOfOrder(first, lines[0].data, pre[0].problems, capsule, after); problems != nil {
		reply.Items[0] = room.RefusedItem(0, problems)
		g.observeItems(reply.Items, start)
		tally(&reply)
		return reply, nil
	}
	// The requests of this chain ahead of this one are decided first; the
	// lines above were checked meanwhile. A request with nothing to wait
	// for keeps its slot: giving it back sent it behind its identity's
	// whole queue, with its lines checked.
	if after >= 0 || t.ahead() {
		err = t.idle(ctx, func() error {
			if err := t.wait(ctx); err != nil {
				return err
			}
			if after >= 0 && !t.isStalled() {
				return g.awaitChain(ctx, key, after+1, owner, t.slots())
			}
			return nil
		})
	}
	if err != nil {
		reply.Items[0] = failed(0, err) // the later lines stay skipped
		g.observeItems(reply.Items, start)
		tally(&reply)
		return reply, nil
	}
	c := g.chain(key)
	defer g.unchain(c)
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &journalRun{g: g, ctx: ctx, roomID: roomID, owner: owner, key: key, subj: g.subjects.Journal(roomID, key), anyRoom: g.subjects.ChainAnyRoom(key),
		c: c, capsule: capsule, lines: lines, pre: pre, items: reply.Items, after: after}
	r.run()
	durable := room.OutcomeFailed
	for _, it := range reply.Items {
		if it.Outcome == room.OutcomeStored || it.Outcome == room.OutcomeDuplicate {
			durable = it.Outcome
			break
		}
	}
	g.makeDurable(durable, func(err error) {
		for i, it := range reply.Items {
			reply.Items[i] = notDurable(it, err)
		}
	})
	if c.loaded {
		reply.Head = c.view(key)
	}
	g.observeItems(reply.Items, start)
	tally(&reply)
	return reply, nil
}

// outOfOrder returns the problems of a pipelined request's first line e
// (raw bytes ln, entry rules' problems rules) when its seq is not after+1,
// where the request ahead of it, whose last line claims seq after, left
// its sender's file: the sender's own order puts a line at another
// position than it claims (lines swapped in the file, say). Such a request
// is refused reordered at once, with the line's other problems in check
// order, before it can wait for the chain: in the chain's order it might
// land, out of the order the file holds, after the sender saw the line
// ahead refused. nil when after < 0 or the seq is after+1.
func outOfOrder(e *events.Entry, ln []byte, rules []events.Problem, capsule *events.CapsuleMeta, after int64) []events.Problem {
	if after < 0 {
		return nil
	}
	if seq, ok := e.Seq(); ok && seq == after+1 {
		return nil
	}
	meta := e.Metadata()
	if capsule != nil {
		meta = *capsule
	}
	// The chain rules with the position the sender's order gives the line
	// and no parent to compare (the one ahead may not be stored yet).
	v := events.NewChainVerifier(nil, nil)
	v.Resume(after+1, "", meta)
	return v.CheckLineChecked(e, ln, events.Location{Line: 1}, rules)
}

// checkedLine is one request line after the checks that need no chain state:
// parsed (bad when it could not be), with its entry-level problems and,
// when it has none and the gate has a publisher key, what its attestation
// will sign.
type checkedLine struct {
	e        *events.Entry
	bad      *room.ItemResult
	problems []events.Problem // the validator's entry rules, located at the line
	att      lineAttestation  // with a key and no problems
}

// lineAttestation is what a line's attestation signs, made in
// checkLines' parallel step: the statement's digest binds the room, the
// line's own chain subject, its seq and its bytes, none of which depends on
// the chain's state. The batch's one signature over the digests is made
// once the batch is decided (publishBatch, publishOne).
type lineAttestation struct {
	ok       bool
	chain    events.ChainKey // the chain whose subject the digest names
	content  [32]byte        // checkpoint.ContentHash of the entry
	position string          // checkpoint.OwnedJournalPosition of the entry
	digest   [32]byte        // checkpoint.Statement.Digest
}

// checkChunk is how many lines one worker takes at a time.
const checkChunk = 32

// checkLines parses every line and applies the entry-level rules
// (validate.Validator.CheckEntry), in parallel: none of it depends on the
// chain or on other lines. With a publisher key it also hashes, for the
// lines that passed them, what their attestation will sign.
func (g *Gate) checkLines(roomID, owner string, lines []line) []checkedLine {
	pre := make([]checkedLine, len(lines))
	// subject is the journal subject of a request's chain, built once per
	// worker rather than per line: a request is one chain.
	type subject struct {
		key  events.ChainKey
		subj string
	}
	one := func(i int, last *subject) {
		e, bad := parseLine(lines[i], i)
		if bad != nil {
			pre[i].bad = bad
			return
		}
		pre[i].e = e
		pre[i].problems = g.v.CheckEntry(e, events.Location{Line: i + 1})
		if seq, ok := e.Seq(); ok && g.key != nil && len(pre[i].problems) == 0 {
			if key := (events.ChainKey{RunID: e.RunID(), CapsuleID: e.CapsuleID()}); key != last.key || last.subj == "" {
				*last = subject{key, g.subjects.Journal(roomID, key)}
			}
			pre[i].att = g.lineAttestation(roomID, owner, last.key, last.subj, seq, e)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), (len(lines)+checkChunk-1)/checkChunk)
	if workers <= 1 {
		var last subject
		for i := range lines {
			one(i, &last)
		}
		return pre
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var last subject
			for {
				from := int(next.Add(checkChunk)) - checkChunk
				if from >= len(lines) {
					return
				}
				for i := from; i < min(from+checkChunk, len(lines)); i++ {
					one(i, &last)
				}
			}
		})
	}
	wg.Wait()
	return pre
}

// lineAttestation hashes what the attestation of e, entry seq of chain
// key in roomID owned by owner, signs; subject is the chain's journal
// subject there.
func (g *Gate) lineAttestation(roomID, owner string, key events.ChainKey, subject string, seq int64, e *events.Entry) lineAttestation {
	content := checkpoint.ContentHash(e.Canonical())
	st := checkpoint.Statement{Room: roomID, Subject: subject, Position: checkpoint.OwnedJournalPosition(seq, owner), Content: content}
	return lineAttestation{ok: true, chain: key, content: content, position: st.Position, digest: st.Digest()}
}

// attestations signs the first n pending lines as one batch (one
// signature per atomic batch, over the statements in the order they are
// appended) and returns each line's checkpoint.AttestationHeader value; nil
// without a publisher key. A re-formed batch (halved, one by one, decided
// again) is signed again for what it holds.
func (r *journalRun) attestations(n int) []string {
	if r.g.key == nil {
		return nil
	}
	digests := make([][32]byte, n)
	for k := range digests {
		digests[k] = r.pending[k].att.digest
	}
	return checkpoint.AttestDigests(r.g.key, digests, r.g.form)
}

// lineTry is the retry state of the line being decided.
type lineTry struct {
	attempt int
	until   time.Time // retryable errors count against attempt only after this
	// fresh: the chain view was read during this decision from the stream
	// leader, whose word a refusal waits for (a cached view may be stale:
	// another publisher appended; so may a follower's copy, which answers
	// direct gets in a cluster).
	fresh, wantFresh bool
}

func newTry() lineTry { return lineTry{until: time.Now().Add(retryWindow)} }

// pend is a line that passed every check and waits in the next batch.
type pend struct {
	idx int
	e   *events.Entry
	seq int64
	att lineAttestation // with a key: what its attestation signs
	try lineTry         // its retry state, for when the batch must be decided again
}

// journalRun decides the lines of one request with the chain locked.
//
// Invariant: the pending lines passed every check against the chain as c
// has it plus the pending lines before them (cv is positioned after the
// last one), so the first pending line's batch carries c.lastSeq as the
// expected last sequence. Whenever c is reloaded from the stream, nothing
// is pending: the lines are decided again.
type journalRun struct {
	g       *Gate
	ctx     context.Context
	roomID  string
	owner   string // the requester's identity token: the chain's owner, or refused
	key     events.ChainKey
	subj    string
	anyRoom string // the chain's subject in every room (Subjects.ChainAnyRoom)
	c       *chainState
	capsule *events.CapsuleMeta
	lines   []line
	pre     []checkedLine
	items   []room.ItemResult
	pending []pend
	cv      *events.ChainVerifier
	singles bool // publish the pending lines one at a time
	// after is the HeaderPipelined value (-1: none): a first line ahead
	// of a chain that did not get past seq after (awaitChain) is
	// OutcomeAhead.
	after int64
}

// defaultAheadWait bounds how long a pipelined request whose first line is
// ahead of the chain waits for the request ahead of it to land through
// another gate (a batch is stored in milliseconds; a loaded server may
// take more), and aheadPoll how often it reads the chain's head meanwhile.
const defaultAheadWait = 5 * time.Second

// aheadPoll is the wait between two reads of the chain's head for the
// first aheadPollFast of the wait, when the request ahead (through
// another gate) usually lands; after that each wait doubles, up to
// aheadPollMax. A hint that lies (a first line no request ahead will
// reach) cost 900 reads of the stream leader in 5 s at a fixed 5 ms; a
// request deep in a pipeline, waiting longest, still sees the one ahead
// within aheadPollMax.
const (
	aheadPoll     = 5 * time.Millisecond
	aheadPollFast = 100 * time.Millisecond
	aheadPollMax  = 100 * time.Millisecond
)

// awaitChain waits, up to the gate's ahead wait (defaultAheadWait), until the chain's next seq as the
// stream leader has it reaches seq, the end of the request ahead of a
// pipelined one: it may be on its way through another gate. It holds
// the chain's lock only to read: the request ahead may come to this gate.
// It returns ctx's error only; a chain that does not get there is decided
// as it is (OutcomeAhead). A chain another identity than owner started is
// not waited for: the request is refused not_chain_owner at once, and
// another's requests must not hold up the owner's chain with reads.
//
// Each read of the leader takes a place in the service's concurrency
// limit for itself (slotHold.briefly: h, nil for a library caller), as
// the identity's own head requests would: a hint may lie (no request
// ahead of it exists), and a flood of such requests must get no more
// reads from the service than its identity's turns, however many of them
// wait. Between reads the request holds no place. One that gets no place
// within its wait is decided as the chain stands.
func (g *Gate) awaitChain(ctx context.Context, key events.ChainKey, seq int64, owner string, h *slotHold) error {
	c := g.chain(key)
	defer g.unchain(c)
	began := time.Now()
	until := began.Add(time.Duration(g.aheadWait.Load()))
	wctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	// over (c.mu held): the chain got past the request ahead, or the wait
	// ran out.
	over := func() bool {
		behind := c.next < seq && (c.next == 0 || c.owner == owner)
		return !behind || !time.Now().Before(until)
	}
	poll := aheadPoll
	for attempt := 0; ; attempt++ {
		if attempt > 1 {
			if !jsapi.Sleep(ctx, max(0, min(poll, time.Until(until)))) {
				return ctx.Err()
			}
			if time.Since(began) >= aheadPollFast {
				poll = min(2*poll, aheadPollMax)
			}
		}
		var done, known bool
		c.mu.Lock()
		if attempt == 0 && c.loaded { // the chain as this gate has it: no read
			known, done = true, over()
		}
		c.mu.Unlock()
		if !known {
			// The place the read takes is kept when the request goes on to
			// be decided: it is its turn, and another would queue it again.
			err := h.briefly(wctx, func() (keep bool, err error) {
				c.mu.Lock()
				defer c.mu.Unlock()
				if err := g.reload(ctx, key, c, true); err != nil {
					c.loaded = false
					return false, err
				}
				done = over()
				return done, nil
			})
			if err != nil {
				return ctx.Err() // no place in time, or a read failed: decide reads again and says what is wrong
			}
		}
		if done || !time.Now().Before(until) {
			return nil
		}
	}
}

type decision int

const (
	decAccept decision = iota // append the line with the pending ones
	decFinal                  // the line's outcome is decided (not appended now)
	decFlush                  // the pending lines must be appended before the line is decided
)

// flushResult says how the run goes on after flush.
type flushResult struct {
	stop   bool    // an item failed or was refused: the run ends
	rewind bool    // decide again from line idx with try
	idx    int     // the line to decide again
	try    lineTry // its retry state
}

func (r *journalRun) run() {
	i, try := 0, newTry()
	for i < len(r.lines) || len(r.pending) > 0 {
		d := decFlush // every line decided: append the pending ones
		var res room.ItemResult
		if i < len(r.lines) {
			d, res = r.decide(i, &try)
		}
		switch d {
		case decAccept:
			e := r.pre[i].e
			seq, _ := e.Seq()
			att := r.pre[i].att
			if r.g.key != nil && (!att.ok || att.chain != r.key) {
				// Cannot happen: an accepted line passed the entry rules and
				// is of the run's chain (metadata_mismatch otherwise).
				att = r.g.lineAttestation(r.roomID, r.owner, r.key, r.subj, seq, e)
			}
			if r.pending == nil {
				// Made once at the size of the request's first batch: it
				// would otherwise grow by doubling, copying what it holds.
				r.pending = make([]pend, 0, min(len(r.lines)-i, r.g.batchLimit()))
			}
			r.pending = append(r.pending, pend{idx: i, e: e, seq: seq, att: att, try: try})
			r.cv.Accept(e)
			i, try = i+1, newTry()
			if len(r.pending) < r.g.batchLimit() {
				continue
			}
		case decFinal:
			r.items[i] = res
			if res.Outcome != room.OutcomeStored && res.Outcome != room.OutcomeDuplicate {
				return
			}
			i, try = i+1, newTry()
			continue
		case decFlush:
		}
		f := r.flush()
		switch {
		case f.stop:
			return
		case f.rewind:
			i, try = f.idx, f.try
		}
	}
}

// resume positions cv at the chain as c has it: against its stored
// metadata once it has entries (the chain's first entry is every
// reader's reference: a capsule header may not replace it), against the
// capsule header's before.
func (r *journalRun) resume() {
	c := r.c
	r.cv = r.g.v.NewChain(nil)
	switch {
	case c.next > 0:
		r.cv.Resume(c.next, c.head, c.meta)
	case r.capsule != nil:
		r.cv.Resume(0, c.head, *r.capsule)
	}
}

// capsuleProblems are the metadata_mismatch problems of a capsule header
// (capsule.json) that differs from the metadata of chain c, which has
// entries, at line i: publisher verify refuses such a capsule, and its
// lines are checked against the chain's own.
func capsuleProblems(capsule *events.CapsuleMeta, c *chainState, i int) []events.Problem {
	if capsule == nil || c.next == 0 || *capsule == c.meta {
		return nil
	}
	at := events.Location{Line: i + 1}
	var out []events.Problem
	for _, f := range c.meta.Differences(*capsule) {
		out = append(out, events.Problem{Code: events.MetadataMismatch, At: at,
			Reason: "capsule.json's " + f.Key + " differs from the stored chain's entries", Expected: f.Want, Actual: f.Have})
	}
	return out
}

// decide decides line i against the chain and the pending lines. Anything
// but appending the line is decided on the stream as it is, so with lines
// pending it asks for them to be appended first (decFlush).
func (r *journalRun) decide(i int, try *lineTry) (decision, room.ItemResult) {
	g, c := r.g, r.c
	p := r.pre[i]
	flushFirst := len(r.pending) > 0
	if p.bad != nil {
		if flushFirst {
			return decFlush, room.ItemResult{}
		}
		return decFinal, *p.bad
	}
	at := events.Location{Line: i + 1}
	e := p.e
	seq, _ := e.Seq()
	for ; ; try.attempt++ {
		if try.attempt >= g.attempts {
			if flushFirst {
				return decFlush, room.ItemResult{}
			}
			return decFinal, failed(i, fmt.Errorf("gave up after %d attempts", try.attempt))
		}
		if !c.loaded {
			if err := g.reload(r.ctx, r.key, c, try.wantFresh); err != nil {
				if !g.waitRead(r.ctx, err, &try.attempt, try.until) {
					return decFinal, failed(i, err)
				}
				continue
			}
			try.fresh = try.wantFresh
		}
		if !flushFirst {
			r.resume()
		}
		if c.next > 0 && c.owner != r.owner {
			if flushFirst {
				return decFlush, room.ItemResult{}
			}
			if !try.fresh {
				c.loaded, try.wantFresh = false, true // decide on the stream's word, not a cached view
				continue
			}
			rf := room.RefusedItem(i, []events.Problem{{Code: events.NotChainOwner, At: at,
				Reason:   fmt.Sprintf("the chain was started by identity %s in %s: only it may extend the chain or claim its id", room.IdentityName(c.owner), c.roomID),
				Expected: room.IdentityName(c.owner), Actual: room.IdentityName(r.owner)}})
			rf.Seq, rf.Hash = &seq, e.EntryHash()
			return decFinal, rf
		}
		if c.roomID != "" && c.roomID != r.roomID {
			if flushFirst {
				return decFlush, room.ItemResult{}
			}
			if !try.fresh {
				c.loaded, try.wantFresh = false, true // decide on the stream's word, not a cached view
				continue
			}
			return decFinal, room.RefusedItem(i, []events.Problem{validate.RoomConflict(at, c.roomID, r.roomID)})
		}
		if reason, err := g.roomBlocked(r.ctx, r.roomID); err != nil || reason != "" {
			if flushFirst {
				return decFlush, room.ItemResult{}
			}
			if err != nil {
				if !g.waitRead(r.ctx, err, &try.attempt, try.until) {
					return decFinal, failed(i, err)
				}
				continue
			}
			rf := room.RefusedItem(i, []events.Problem{{Code: events.StoreLost, At: at, Reason: reason}})
			rf.Seq, rf.Hash = &seq, e.EntryHash()
			return decFinal, rf
		}
		if c.lost != nil {
			if flushFirst {
				return decFlush, room.ItemResult{}
			}
			if !try.fresh {
				c.loaded, try.wantFresh = false, true // decide on the stream's word, not a cached view
				continue
			}
			return decFinal, storeLostItem(i, c, e)
		}
		// The entry rules ran in checkLines; CheckLineChecked adds the rest
		// in CheckLine's order.
		problems := r.cv.CheckLineChecked(e, r.lines[i].data, at, p.problems)
		if cp := capsuleProblems(r.capsule, c, i); cp != nil {
			problems = append(cp, problems...)
		}
		res := room.ItemResult{Index: i, Seq: &seq, Hash: e.EntryHash()}
		if len(problems) > 0 && flushFirst {
			return decFlush, room.ItemResult{}
		}
		if seq < c.next && onlyPosition(problems) {
			stored, err := g.entryAt(r.ctx, c, r.key, seq)
			if err != nil {
				if g.lossFromRead(r.ctx, r.key, c, err) {
					continue // closed: refused store_lost
				}
				if !g.waitRead(r.ctx, err, &try.attempt, try.until) {
					return decFinal, failed(i, err)
				}
				c.loaded = false
				continue
			}
			return decFinal, g.resent(r.key, c, e, seq, stored, res)
		}
		if len(problems) > 0 && !try.fresh {
			// The view may be stale: a refusal is final, so it is decided
			// on a fresh read.
			c.loaded, try.wantFresh = false, true
			continue
		}
		if i == 0 && r.after >= 0 && seq > c.next && c.next <= r.after && onlyPosition(problems) {
			// A pipelined request's first line ahead of a chain that did
			// not get past the request ahead of it (as the leader has it,
			// after awaitChain): that one has not landed, or will not. (A
			// chain that did is where the request ahead left it: a first
			// line ahead of it is refused, as one request at a time has it.)
			return decFinal, room.ItemResult{Index: i, Outcome: room.OutcomeAhead, Seq: &seq, Hash: e.EntryHash(),
				Reason: fmt.Sprintf("seq %d is ahead of the chain, whose next seq is %d: the request ahead of this one has not landed; send this one again once it is answered", seq, c.next)}
		}
		if len(problems) > 0 && seq > c.next && onlyPosition(problems) {
			// A refusal that rests on what the stream does not hold (the
			// chain has not reached seq) stands only on a leader that
			// heard from a quorum after the read: a leader cut off from
			// its replicas answers from a copy another leader may have
			// moved past, where seq is stored (docs/reliability.md, "A
			// stream leader cut off").
			if err := jsapi.LeaderFresh(r.ctx, g.nc, g.streamName(), g.timeout); err != nil {
				if !g.waitRead(r.ctx, err, &try.attempt, try.until) {
					return decFinal, failed(i, err)
				}
				c.loaded = false
				continue
			}
		}
		if len(problems) > 0 {
			rf := room.RefusedItem(i, problems)
			rf.Seq, rf.Hash = res.Seq, res.Hash
			return decFinal, rf
		}
		if c.next == 0 && g.claim != nil && c.claimed != r.roomID {
			// A chain's first entry: across partitions, the placement
			// bucket says which room holds the chain, then places the
			// room (it may be new) here: a refused entry places nothing.
			owner, err := g.claim(r.ctx, r.key, r.roomID)
			if err != nil {
				if !g.waitRead(r.ctx, err, &try.attempt, try.until) {
					return decFinal, failed(i, err)
				}
				continue
			}
			if owner != r.roomID {
				return decFinal, room.RefusedItem(i, []events.Problem{validate.RoomConflict(at, owner, r.roomID)})
			}
			if err := g.placeRoom(r.ctx, r.roomID); err != nil {
				if errors.Is(err, errMisrouted) || !g.waitRead(r.ctx, err, &try.attempt, try.until) {
					return decFinal, failed(i, err)
				}
				continue
			}
			c.claimed = owner
		}
		// The size of the message one append of this line alone would send
		// (flush checks the exact one again).
		if tl := g.tooLargeSize(r.messageSize(e, true, c.lastSeq+uint64(len(r.pending))), at); tl != nil {
			if flushFirst {
				return decFlush, room.ItemResult{}
			}
			rf := room.RefusedItem(i, tl)
			rf.Seq, rf.Hash = res.Seq, res.Hash
			return decFinal, rf
		}
		return decAccept, room.ItemResult{}
	}
}

// message is the append of e: Nats-Msg-Id = entry_hash, the attestation
// att (when the gate has a publisher key) and, when expect, the expected
// last sequence of the chain's subjects in every room. The header map is
// made with room for the attestation and the three batch headers
// jetstreamext adds, so it never grows.
func (r *journalRun) message(e *events.Entry, att string, expect bool, last uint64) *nats.Msg {
	h := make(nats.Header, 8)
	h[jetstream.MsgIDHeader] = []string{e.EntryHash()}
	if att != "" {
		h[checkpoint.AttestationHeader] = []string{att}
	}
	if r.owner != room.Anonymous {
		h[room.HeaderOwner] = []string{r.owner}
	}
	if expect {
		h[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(last, 10)}
		h[jetstream.ExpectedLastSubjSeqSubjHeader] = []string{r.anyRoom}
	}
	return &nats.Msg{Subject: r.subj, Data: e.Canonical(), Header: h}
}

// messageSize is what tooLarge counts for message(e, "", expect, last)
// as the only message of its append (its payload, its headers and, with a
// publisher key, the attestation of a batch of one), without building it:
// decide checks it for every line.
func (r *journalRun) messageSize(e *events.Entry, expect bool, last uint64) int64 {
	size := int64(len(e.Canonical())) + headerFraming + headerLineSize(jetstream.MsgIDHeader, len(e.EntryHash()))
	if r.owner != room.Anonymous {
		size += headerLineSize(room.HeaderOwner, len(r.owner))
	}
	if expect {
		var digits [20]byte
		size += headerLineSize(jetstream.ExpectedLastSubjSeqHeader, len(strconv.AppendUint(digits[:0], last, 10))) +
			headerLineSize(jetstream.ExpectedLastSubjSeqSubjHeader, len(r.anyRoom))
	}
	if r.g.key != nil {
		size += headerLineSize(checkpoint.AttestationHeader, checkpoint.HeaderLen(r.g.nodeID, 0, 1, r.g.form))
	}
	return size
}

// stored records that the pending line p is stored at stream sequence seq
// by this run, and moves c past it.
func (r *journalRun) stored(p pend, seq uint64) {
	c := r.c
	// Copies: the request's lines go, the chain state stays.
	if c.next == 0 {
		c.meta = cloneMeta(p.e.Metadata())
	}
	c.next, c.head, c.streamSeq, c.lastSeq = p.seq+1, strings.Clone(p.e.EntryHash()), seq, seq
	c.roomID = keep(c.roomID, r.roomID)
	c.owner = keep(c.owner, r.owner) // the owner's own append: a chain it started, or one it owns
	s := p.seq
	r.items[p.idx] = room.ItemResult{Index: p.idx, Outcome: room.OutcomeStored, Seq: &s, Hash: p.e.EntryHash(), StreamSeq: seq, Subject: r.subj}
}

// end sets the outcome of the first pending line and ends the run.
func (r *journalRun) end(res room.ItemResult) flushResult {
	p := r.pending[0]
	s := p.seq
	if res.Outcome == room.OutcomeRefused {
		res.Seq, res.Hash = &s, p.e.EntryHash()
	}
	r.items[p.idx] = res
	r.pending = nil
	return flushResult{stop: true}
}

// again drops the pending lines from the k-th on: they are decided again
// from the chain as the stream has it, from try on (the k-th line's).
func (r *journalRun) again(k int, try lineTry) flushResult {
	idx := r.pending[k].idx
	r.pending = nil
	return flushResult{rewind: true, idx: idx, try: try}
}

// retry is again for the first pending line after a retryable error: it
// waits (backoff) and counts an attempt unless the retry window is open.
func (r *journalRun) retry(wantFresh bool) flushResult {
	g := r.g
	try := r.pending[0].try
	r.c.loaded = false
	try.attempt = g.waitOut(try.attempt, try.until)
	if !jsapi.Sleep(r.ctx, jsapi.Backoff(try.attempt)) {
		return r.end(failed(r.pending[0].idx, r.ctx.Err()))
	}
	try.attempt++
	try.wantFresh = try.wantFresh || wantFresh
	try.fresh = false
	return r.again(0, try)
}

// flush appends the pending lines: as atomic batches, or one at a time
// when batching is off or a batch failed in a way that one append per line
// says more precisely.
func (r *journalRun) flush() flushResult {
	g := r.g
	for len(r.pending) > 0 {
		if perr := g.pausedErr(); perr != nil {
			return r.end(failed(r.pending[0].idx, perr))
		}
		n := min(len(r.pending), g.batchLimit())
		if r.singles || g.noAtomic.Load() {
			n = 1
		}
		var f flushResult
		var done bool
		if n == 1 {
			f, done = r.publishOne()
		} else {
			f, done = r.publishBatch(n)
		}
		if !done {
			return f
		}
	}
	return flushResult{}
}

// publishOne appends the first pending line alone, as the gate did before
// batching. done means it was stored and the next may follow.
func (r *journalRun) publishOne() (flushResult, bool) {
	g, c := r.g, r.c
	p := r.pending[0]
	at := events.Location{Line: p.idx + 1}
	msg := r.message(p.e, "", true, c.lastSeq)
	if tl := g.tooLarge(msg, at, 0, 1); tl != nil {
		return r.end(room.RefusedItem(p.idx, tl)), false
	}
	if atts := r.attestations(1); atts != nil {
		msg.Header.Set(checkpoint.AttestationHeader, atts[0])
		g.expect([]*nats.Msg{msg}, func(int) ([32]byte, string) { return p.att.content, p.att.position })
	}
	ack, err := g.publish(r.ctx, msg)
	g.unstored(msg, ack, err)
	switch {
	case err == nil && !ack.Duplicate:
		g.stored(ack.Sequence, []*nats.Msg{msg}, func(int) ([32]byte, string) { return p.att.content, p.att.position })
		r.stored(p, ack.Sequence)
		r.pending = r.pending[1:]
		return flushResult{}, true
	case err == nil && ack.Duplicate:
		// The server merged it with a message of the same Msg-Id: confirm
		// by reading what is stored there (docs/design.md, "Identity, order and
		// duplicates"), then resync.
		if same, serr := g.storedEquals(r.ctx, ack.Sequence, r.subj, p.e.Canonical()); serr != nil || !same {
			return r.end(failed(p.idx, fmt.Errorf("duplicate ack at stream seq %d does not hold this entry (%v)", ack.Sequence, serr))), false
		}
		c.loaded = false
		s := p.seq
		r.items[p.idx] = room.ItemResult{Index: p.idx, Outcome: room.OutcomeDuplicate, Seq: &s, Hash: p.e.EntryHash(), StreamSeq: ack.Sequence, Subject: r.subj}
		if len(r.pending) == 1 {
			r.pending = nil
			return flushResult{}, true
		}
		return r.again(1, r.pending[1].try), false
	case jsapi.IsWrongLastSequence(err):
		// Someone else appended to the chain (or to another room's copy):
		// reload and decide again, possibly as a duplicate or a fork.
		// From the leader: a lagging replica would say the same again.
		try := p.try
		try.attempt++
		try.fresh, try.wantFresh = false, true
		c.loaded = false
		return r.again(0, try), false
	case jsapi.IsStoreFull(err):
		return r.end(failed(p.idx, errStoreFull(err))), false
	case jsapi.IsRetryable(err):
		return r.retry(false), false
	default:
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
			return r.end(room.RefusedItem(p.idx, []events.Problem{{Code: events.TooLarge, At: at, Reason: apiErr.Description}})), false
		}
		if errors.As(err, &apiErr) || r.ctx.Err() != nil {
			return r.end(failed(p.idx, err)), false
		}
		// Ambiguous: the append may or may not have happened. Read
		// before deciding; the retry carries the same Msg-Id.
		g.log.Warn("ambiguous append, reading back", zap.String("subject", r.subj), zap.Int64("seq", p.seq), zap.Error(err))
		try := p.try
		try.attempt = g.waitOut(try.attempt, try.until) + 1
		try.fresh = false
		c.loaded = false
		return r.again(0, try), false
	}
}

// Error codes of atomic batch publish (nats-server errors.json).
const (
	// errCodeBatchDuplicate is JSAtomicPublishContainsDuplicateMessageErr
	// (10201): a message of the batch has a Nats-Msg-Id the stream holds
	// (within its duplicate window); the whole batch was refused.
	errCodeBatchDuplicate = jetstreamext.JSErrCodeBatchPublishDuplicateMsgID
	// errCodeBatchTooManyInflight is JSAtomicPublishTooManyInflight
	// (10210, status 429): the stream (or server) has as many batches
	// open as it allows; nothing was stored.
	errCodeBatchTooManyInflight = jetstreamext.JSErrCodeAtomicPublishTooManyInflight
	// errCodeBatchIncomplete is JSAtomicPublishIncompleteBatchErr (10176):
	// the server lost track of the batch (a message missing, a leader
	// change, 10s without traffic); nothing was stored.
	errCodeBatchIncomplete = jetstreamext.JSErrCodeBatchPublishIncomplete
	// errCodeBatchDisabled is JSAtomicPublishDisabledErr (10174): the
	// stream does not allow atomic batches.
	errCodeBatchDisabled = jetstreamext.JSErrCodeBatchPublishNotEnabled
	// errCodeBatchTooLarge is JSAtomicPublishTooLargeBatchErrF (10199):
	// more messages than the server's max_batch_size.
	errCodeBatchTooLarge = jetstreamext.JSErrCodeBatchPublishExceedsLimit
)

// batchHeaderRoom is what the batch headers (Nats-Batch-Id, 22 characters;
// Nats-Batch-Sequence; Nats-Batch-Commit) add to a message at most.
const batchHeaderRoom = 128

// publishBatch appends the first n pending lines as one atomic batch.
// done means they were all stored and the rest may follow.
func (r *journalRun) publishBatch(n int) (flushResult, bool) {
	g, c := r.g, r.c
	batch := r.pending[:n]
	msgs := make([]*nats.Msg, n)
	for k, p := range batch {
		// Without its attestation yet: msgHeaderSize counts what it will
		// add.
		msgs[k] = r.message(p.e, "", k == 0, c.lastSeq)
		if int64(len(msgs[k].Data))+g.msgHeaderSize(msgs[k], k, n)+batchHeaderRoom > g.nc.MaxPayload() {
			// One append per line says which line is too large.
			r.singles = true
			return flushResult{}, true
		}
	}
	// The chain is decided: the batch is signed once, before its first
	// message is sent.
	if atts := r.attestations(n); atts != nil {
		for k := range batch {
			msgs[k].Header.Set(checkpoint.AttestationHeader, atts[k])
		}
		g.expect(msgs, func(k int) ([32]byte, string) { return batch[k].att.content, batch[k].att.position })
	}
	select {
	case g.inflight <- struct{}{}:
	case <-r.ctx.Done():
		return r.end(failed(batch[0].idx, r.ctx.Err())), false
	}
	prev := c.lastSeq
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.ctx, g.timeout)
	ack, err := jetstreamext.PublishMsgBatch(ctx, g.js, msgs, jetstreamext.BatchFlowControl{AckFirst: true, AckTimeout: g.timeout})
	cancel()
	if err != nil {
		// The batch's last message carries its signature, by which the
		// attestation sink knows the batch.
		g.unstored(msgs[len(msgs)-1], nil, err)
	}
	<-g.inflight
	if bo, ok := g.obs.(BatchObserver); ok {
		bo.Batch(n, err, time.Since(start))
	}
	var apiErr *jetstream.APIError
	isAPI := errors.As(err, &apiErr)
	switch {
	case err == nil:
		first := ack.Sequence - uint64(n) + 1 // a batch is stored at consecutive sequences
		g.stored(first, msgs, func(k int) ([32]byte, string) { return batch[k].att.content, batch[k].att.position })
		for k, p := range batch {
			r.stored(p, first+uint64(k))
		}
		r.pending = r.pending[n:]
		return flushResult{}, true
	case jsapi.IsWrongLastSequence(err) || (isAPI && apiErr.ErrorCode == errCodeBatchDuplicate):
		// Someone else appended to the chain, or some of these entries are
		// stored already: the whole batch was refused. Read the head from
		// the leader and decide every line again (duplicate, fork, or new).
		try := batch[0].try
		try.attempt++
		try.fresh, try.wantFresh = false, true
		c.loaded = false
		return r.again(0, try), false
	case jsapi.IsStoreFull(err):
		return r.end(failed(batch[0].idx, errStoreFull(err))), false
	case isAPI && apiErr.ErrorCode == errCodeBatchDisabled:
		if !g.noAtomic.Swap(true) {
			g.log.Warn("the stream does not allow atomic batch publish: one append per entry from now on", zap.Error(err))
		}
		return flushResult{}, true
	case isAPI && apiErr.ErrorCode == errCodeBatchTooLarge:
		smaller := max(1, int64(n/2))
		g.maxBatch.Store(smaller)
		g.log.Warn("the server refused a batch as too large: smaller batches from now on", zap.Int("messages", n), zap.Int64("now", smaller), zap.Error(err))
		return flushResult{}, true
	case jsapi.IsRetryable(err):
		return r.retry(false), false
	case isAPI:
		// Refused whole for a reason that concerns one message (too large,
		// a header): one append per line says which, as before batching.
		r.singles = true
		return flushResult{}, true
	case r.ctx.Err() != nil:
		return r.end(failed(batch[0].idx, err)), false
	default:
		// Ambiguous: the batch may or may not have been stored (it is all
		// or nothing, but for a store that fills up while it commits). Read
		// before deciding.
		g.log.Warn("ambiguous batch append, reading back", zap.String("subject", r.subj), zap.Int("messages", n), zap.Error(err))
		return r.readBack(msgs[0].Header.Get(jetstreamext.BatchIDHeader), prev, n), false
	}
}

// readBack decides the first n pending lines after their batch (id) got no
// clear answer: it reads the chain's head from the stream leader and the
// messages after prev, the chain's last stream sequence before the batch.
// The leading ones that carry this batch's id and the line's entry_hash
// were stored by this batch; the other lines are decided again.
func (r *journalRun) readBack(id string, prev uint64, n int) flushResult {
	g, c := r.g, r.c
	batch := r.pending[:n]
	try := batch[0].try
	var seqs []uint64
	for ; ; try.attempt++ {
		if try.attempt >= g.attempts {
			return r.end(failed(batch[0].idx, fmt.Errorf("gave up after %d attempts", try.attempt)))
		}
		c.loaded = false
		err := g.reload(r.ctx, r.key, c, true)
		if err == nil {
			seqs, err = r.ours(id, prev, batch)
		}
		if err == nil {
			break
		}
		if !g.waitRead(r.ctx, err, &try.attempt, try.until) {
			return r.end(failed(batch[0].idx, err))
		}
	}
	for k, seq := range seqs {
		s := batch[k].seq
		r.items[batch[k].idx] = room.ItemResult{Index: batch[k].idx, Outcome: room.OutcomeStored, Seq: &s, Hash: batch[k].e.EntryHash(), StreamSeq: seq, Subject: r.subj}
	}
	k := len(seqs)
	if k == len(r.pending) {
		r.pending = nil
		return flushResult{}
	}
	// c was just read from the stream leader: the lines from the k-th on
	// are decided again on it.
	if k == 0 {
		// Nothing of the batch is stored: this was an attempt, counted only
		// once the retry window has passed (an unanswered batch is what a
		// partition or an election looks like from here).
		try.attempt = g.waitOut(try.attempt, try.until) + 1
	} else {
		try = r.pending[k].try
	}
	try.fresh, try.wantFresh = true, true
	return r.again(k, try)
}

// ours returns the stream sequences of the leading lines of batch that are
// stored, after stream sequence prev, by the batch id.
func (r *journalRun) ours(id string, prev uint64, batch []pend) ([]uint64, error) {
	var seqs []uint64
	after := prev
	for _, p := range batch {
		if p.seq >= r.c.next {
			break
		}
		m, err := r.g.leaderMsg(r.ctx, map[string]any{"seq": after + 1, "next_by_subj": r.subj})
		if err != nil {
			return nil, fmt.Errorf("read back batch %s: %w", id, err)
		}
		if m == nil || m.Header.Get(jetstreamext.BatchIDHeader) != id || m.Header.Get(jetstream.MsgIDHeader) != p.e.EntryHash() {
			break
		}
		seqs = append(seqs, m.Sequence)
		after = m.Sequence
	}
	return seqs, nil
}

// msgHeaderSize is the size of msg's headers on the wire, as tooLarge
// counts them, with the attestation the gate will add when msg has none
// yet: message index of a batch of count, in the gate's form
// (checkpoint.HeaderLen).
func (g *Gate) msgHeaderSize(msg *nats.Msg, index, count int) int64 {
	size := int64(headerFraming)
	for k, vs := range msg.Header {
		for _, v := range vs {
			size += headerLineSize(k, len(v))
		}
	}
	if g.key != nil && msg.Header.Get(checkpoint.AttestationHeader) == "" {
		size += headerLineSize(checkpoint.AttestationHeader, checkpoint.HeaderLen(g.nodeID, index, count, g.form))
	}
	return size
}

// headerFraming is what a header block adds besides its lines: the
// "NATS/1.0\r\n" status line and the blank line that ends it.
const headerFraming = 12

// headerLineSize is the wire size of one header line "key: value\r\n"
// whose value is n bytes long.
func headerLineSize(key string, n int) int64 { return int64(len(key) + n + 4) }

// batchLimit is the number of messages one atomic batch may hold now.
func (g *Gate) batchLimit() int { return int(g.maxBatch.Load()) }

// observeItems reports every decided item of a request; items decided
// together share the request's time equally.
func (g *Gate) observeItems(items []room.ItemResult, start time.Time) {
	if g.obs == nil {
		return
	}
	n := 0
	for _, it := range items {
		if it.Outcome != room.OutcomeSkipped {
			n++
		}
	}
	if n == 0 {
		return
	}
	took := time.Since(start) / time.Duration(n)
	for _, it := range items {
		if it.Outcome != room.OutcomeSkipped {
			g.obs.Item(room.KindJournal, it.Outcome, it.Code, took)
		}
	}
}
