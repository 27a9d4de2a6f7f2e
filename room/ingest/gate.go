package ingest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/validate"
)

// Observer receives one call per decided item, for metrics. Implementations
// must be safe for concurrent use and must not block.
type Observer interface {
	// Item is called with kind KindJournal or KindExecution, the outcome,
	// the refusal code (outcome refused only) and the time the item took.
	Item(kind room.Kind, outcome room.Outcome, code events.Code, took time.Duration)
}

// GateOptions configures a Gate. The zero value of each field is its
// default.
type GateOptions struct {
	Stream   string        // stream name, default DefaultStream
	Subjects room.Subjects // subject layout, default prefix "rooms"
	// Validator applies the record and entry rules. It must check host
	// trust (validate.WithTrustedHosts), or every record is refused.
	Validator *validate.Validator
	Logger    *zap.Logger // nil: no logs
	Observer  Observer    // nil: no metrics
	// PublishTimeout bounds one append round trip (an atomic batch, from
	// its first message to the commit's answer); default 5s.
	PublishTimeout time.Duration
	// Attempts bounds how often one item is retried after a race, a
	// retryable server error or an ambiguous timeout; default 8. Retryable
	// errors (no stream leader, too many batches in flight) count only
	// after 20s of them.
	Attempts int
	// MaxBatch bounds the messages of one atomic batch (ADR-50); default
	// 1,000, the server's default max_batch_size. Set it no higher than
	// the server's limit (a server that says a batch is too large makes
	// the gate halve it).
	MaxBatch int
	// MaxInflightBatches caps the atomic batches this gate has open at
	// once; default 32, below the server's default of 50 per stream
	// (max_batch_inflight_per_stream), so other publishers keep some. A
	// server that answers "too many in flight" anyway is waited out.
	MaxInflightBatches int
	// PublisherKey, when set, attests every message the gate appends
	// (checkpoint.AttestationHeader): journal entries at
	// checkpoint.JournalPosition of their seq, records at
	// checkpoint.RecordPosition of their ordinal on the room's exec
	// subject. Nil: nothing is attested.
	PublisherKey *events.HostKey
	// Attested, when set, is told of each attestation before its message
	// is sent (a Checkpointer in the same process, which then need not
	// verify the gate's own signatures).
	Attested AttestationSink
	// TrustedPublishers are the node ids of the other publishers whose
	// attestations admit journal entries (serve's --trusted-publisher);
	// PublisherKey's own is always trusted. With a PublisherKey, a message
	// on a chain's subject that no trusted publisher attested is not the
	// chain's head: the chain goes on after the last admitted
	// entry, and its next entry is stored after such messages.
	TrustedPublishers []string
	// ChainIdle is how long the gate keeps what it knows of a chain (its
	// head) after the chain was last used; default DefaultChainIdle. A
	// chain no request uses or waits for is dropped once idle that long (a
	// sweep at most every ChainIdle / 2, on the next use of any chain), and
	// read again from the stream on its next use, as after a restart
	// (docs/secure-mode.md, "Fair ingest").
	ChainIdle time.Duration
	// IdleChains bounds the chains the gate keeps state of that no call
	// holds, however recently they were used; default DefaultIdleChains.
	// Past it the one used least recently is dropped, so the gate's memory
	// does not grow with the chains shipped within ChainIdle
	// (docs/design.md, "Chain state").
	IdleChains int
	// Durable, when set, is called before the gate reports any item
	// stored or duplicate, after the server acknowledged it: it makes
	// durable what the server's acknowledgement does not (the embedded
	// server's new file names: embedded.Server.NameSyncer). An error
	// turns those items failed (not decided; sent again, they are
	// duplicates). Nil: the server's acknowledgement is the word.
	Durable func() error
	// SurveyConn, when set, is the connection Survey reads the stream on;
	// nil: the gate's own. The server answers one connection's requests
	// in order, and a survey's first reads after a server start load the
	// message blocks that hold chain heads (seconds on a stream of
	// millions of messages), which on the gate's connection would hold
	// its appends behind them (docs/design.md, "publisher serve").
	SurveyConn *nats.Conn
	// now, when set, is the clock of ChainIdle (tests: WithGateClock).
	now func() time.Time
	// presigned, when set, counts the record appends that carried the
	// attestation AppendRecords's checker signed ahead, stored or not
	// (tests: WithPresignedCount).
	presigned *atomic.Uint64
	// entryReads, when set, counts the messages the gate read to find the
	// stored entry a resent line is decided on (tests: WithEntryReads);
	// leaderGets the messages it got from the stream leader one at a time
	// (tests: WithLeaderGets).
	entryReads *atomic.Uint64
	leaderGets *atomic.Uint64
}

// AttestationSink is told of each message a gate attests, before the
// message is sent: it may be stored, stored by an earlier attempt, or
// never. Checkpointer implements it. Implementations must be safe for
// concurrent use and must not block.
type AttestationSink interface {
	// Expect is called with one attested batch the gate is about to
	// send, msgs[i] its message i: its subject, its
	// checkpoint.AttestationHeader value and its content hash
	// (checkpoint.ContentHash of the data). An atomic batch, or one
	// message alone; the last message's header carries the batch's
	// signature in both forms. The slice is the sink's to keep.
	Expect(msgs []room.StoredMsg)
	// Stored is called once the server acknowledged messages Expect
	// announced as newly stored (not duplicates): msgs[i] is at stream
	// sequence first+i (an atomic batch is stored contiguously). One
	// call is one whole attested batch (an atomic batch, or one message
	// alone), never a part of one. The slice is the sink's to keep.
	Stored(first uint64, msgs []room.StoredMsg)
	// Unstored is called when the server refused a batch Expect announced
	// (an API error, or a duplicate acknowledgement of one message): none
	// of it is stored. header is the attestation header of its last
	// message, the one that carries the batch's signature. An append
	// with no clear answer gets no call.
	Unstored(header string)
}

// Defaults of GateOptions.
const (
	DefaultMaxBatch           = 1000
	DefaultMaxInflightBatches = 32
	DefaultChainIdle          = 2 * time.Minute
	DefaultIdleChains         = 4096
)

// Gate decides every append to the room stream: each item is checked with
// the same code as the offline verifier, then against what the stream
// already holds, and only then appended with headers that let the server
// refuse any race (docs/design.md, "Appends and races"). Nothing refused reaches a room subject.
// A Gate is safe for concurrent use; several gates, in one process or many,
// may serve one stream.
type Gate struct {
	// aheadWait is defaultAheadWait; tests shorten or lengthen it.
	aheadWait atomic.Int64
	js        jetstream.JetStream
	nc        *nats.Conn
	surveyNC  *nats.Conn // Survey's reads: GateOptions.SurveyConn, else nc
	stream    jetstream.Stream
	subjects  room.Subjects
	v         *validate.Validator
	log       *zap.Logger
	obs       Observer
	timeout   time.Duration
	attempts  int

	maxBatch atomic.Int64  // messages per atomic batch (halved if the server says too large)
	inflight chan struct{} // one token per atomic batch open
	noAtomic atomic.Bool   // the stream refused atomic batches: one publish per entry
	// markers: the stream turns record markers on (room.RecordMarkers);
	// rooms whose records are marked keep no index (markers.go).
	markers bool
	// form: the form of the gate's attestations, the stream's
	// (room.CompactAttestations): FormEveryMessage unless it says compact.
	form checkpoint.Form
	// recordsRead counts the records catchUp read (export_test.go's
	// RecordsRead): a marked room reads none.
	recordsRead atomic.Uint64

	paused atomic.Pointer[error] // non-nil: the stream failed its check; no appends
	// claim, set by NewGates on a deployment of several partitions, is
	// asked which room holds a chain before its first entry is appended
	// (Gates.claimChain): the room it returns is the chain's.
	claim func(ctx context.Context, key events.ChainKey, roomID string) (string, error)
	// placeRoom, set with claim, records the room on this gate's partition
	// before its first message is appended; an error when another gate
	// placed it elsewhere first (nothing is appended then).
	placeRoom func(ctx context.Context, roomID string) error

	key      *events.HostKey // attests appends; nil: none
	nodeID   string          // key's (base58 costs a microsecond a call)
	attested AttestationSink // nil: nobody is told
	// trust admits entries as chain heads: key's node id and
	// GateOptions.TrustedPublishers; nil without a key (every entry is).
	trust *checkpoint.Trust
	// presigned is GateOptions.presigned; nil: not counted.
	presigned *atomic.Uint64
	// durable is GateOptions.Durable; nil: none.
	durable func() error

	mu     sync.Mutex
	chains map[events.ChainKey]*chainState
	// idle is GateOptions.ChainIdle, now its clock, and swept when the
	// chains were last swept for idle ones (g.mu).
	idle  time.Duration
	now   func() time.Time
	swept time.Time
	// unheld lists the chains no call holds, least recently used first,
	// at most maxUnheld of them (GateOptions.IdleChains; g.mu).
	unheld    chainList
	maxUnheld int
	// entryReads and leaderGets are GateOptions'; nil: not counted.
	entryReads *atomic.Uint64
	leaderGets *atomic.Uint64
	// orders orders each chain's journal requests in flight (order.go).
	orderMu sync.Mutex
	orders  map[events.ChainKey]*chainOrder
	rooms   map[string]*roomState

	// lossGen is the generation of loss verdicts (Recheck moves it on);
	// damaged holds the chains found damaged (lossMu).
	lossGen atomic.Uint64
	lossMu  sync.Mutex
	damaged map[events.ChainKey]DamagedChain
	// judged keeps the verdict on each damaged chain (keepJudged).
	judged map[events.ChainKey]chainVerdict
	// damagedRooms is what the last Survey found, damagedIn counts the
	// damaged chains of each room, and noticesByRoom the loss notices
	// read of each room (lossMu).
	damagedRooms   []DamagedRoom
	anyDamage      atomic.Bool // damaged or damagedRooms is not empty
	damagedIn      map[string]int
	contradictions map[string]string // room -> NoteContradiction's reason
	noticesByRoom  map[string]*roomNotices
	// deleted is the span of stream seqs the stream shows deleted, as
	// read at loss generation deleted.gen (deletedSpan; lossMu), and
	// unreadable that of those a Scrub found counted but unreadable.
	deleted    deletedSpan
	unreadable deletedSpan
}

// ErrGate is wrapped by NewGate for unusable options.
var ErrGate = errors.New("gate")

// NewGate returns a gate over an existing room stream. It does not create
// the stream (EnsureStream does).
func NewGate(ctx context.Context, nc *nats.Conn, o GateOptions) (*Gate, error) {
	if o.Validator == nil {
		return nil, fmt.Errorf("%w: a validator is required", ErrGate)
	}
	if !o.Validator.ChecksTrust() {
		return nil, fmt.Errorf("%w: the validator must check host trust (validate.WithTrustedHosts)", ErrGate)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGate, err)
	}
	name := o.Stream
	if name == "" {
		name = room.DefaultStream
	}
	cctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	defer cancel()
	st, err := js.Stream(cctx, name)
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %v", ErrGate, name, err)
	}
	g := &Gate{
		js: js, nc: nc, surveyNC: cmp.Or(o.SurveyConn, nc), stream: st, subjects: o.Subjects, v: o.Validator,
		log: o.Logger, obs: o.Observer, timeout: o.PublishTimeout, attempts: o.Attempts, key: o.PublisherKey, attested: o.Attested,
		chains: map[events.ChainKey]*chainState{}, rooms: map[string]*roomState{}, orders: map[events.ChainKey]*chainOrder{},
		damaged: map[events.ChainKey]DamagedChain{}, judged: map[events.ChainKey]chainVerdict{}, damagedIn: map[string]int{}, noticesByRoom: map[string]*roomNotices{},
		contradictions: map[string]string{},
	}
	g.lossGen.Store(1)
	g.aheadWait.Store(int64(defaultAheadWait))
	if g.log == nil {
		g.log = zap.NewNop()
	}
	if g.key != nil {
		g.nodeID = g.key.NodeID()
		if g.trust, err = checkpoint.NewTrust(append([]string{g.nodeID}, o.TrustedPublishers...)...); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrGate, err)
		}
	}
	if g.timeout <= 0 {
		g.timeout = room.DefaultTimeout
	}
	if g.attempts <= 0 {
		g.attempts = 8
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.MaxInflightBatches <= 0 {
		o.MaxInflightBatches = DefaultMaxInflightBatches
	}
	g.maxBatch.Store(int64(o.MaxBatch))
	g.inflight = make(chan struct{}, o.MaxInflightBatches)
	g.idle, g.now, g.presigned, g.durable = o.ChainIdle, o.now, o.presigned, o.Durable
	if g.idle <= 0 {
		g.idle = DefaultChainIdle
	}
	g.maxUnheld, g.entryReads, g.leaderGets = o.IdleChains, o.entryReads, o.leaderGets
	if g.maxUnheld <= 0 {
		g.maxUnheld = DefaultIdleChains
	}
	if g.now == nil {
		g.now = time.Now
	}
	g.swept = g.now()
	g.form = checkpoint.FormEveryMessage
	if info := st.CachedInfo(); info != nil {
		g.markers = room.RecordMarkers(info.Config)
		if room.CompactAttestations(info.Config) {
			g.form = checkpoint.FormCompact
		}
	}
	return g, nil
}

// Pause stops (err != nil) or resumes (nil) appends: while the stream is
// not append-only, nothing is appended and items fail with err (Serve
// pauses the gate when its stream guard finds the stream weakened).
//
// An Observer that is also a PauseObserver is told the new state.
func (g *Gate) Pause(err error) {
	if po, ok := g.obs.(PauseObserver); ok {
		po.Paused(g.streamName(), err != nil)
	}
	if err == nil {
		g.paused.Store(nil)
		return
	}
	g.paused.Store(&err)
}

// PauseObserver may be implemented by an Observer that also wants to know
// whether appends are paused (Gate.Pause): Serve pauses them while the
// stream guard finds the stream weak, replaced or written into by another
// stream (docs/secure-mode.md, "The stream").
type PauseObserver interface {
	// Paused is called on every Gate.Pause with the gate's stream and
	// whether appends are now paused.
	Paused(stream string, paused bool)
}

func (g *Gate) pausedErr() error {
	if p := g.paused.Load(); p != nil {
		return fmt.Errorf("appends paused: %w", *p)
	}
	return nil
}

// chainState is this process's view of one chain. The stream is the
// authority: the view is reloaded whenever the server says it is stale.
//
// Its strings are copies, never parts of a request line or a stored
// message: a chain state outlives both, and a part would keep the whole
// line alive.
type chainState struct {
	mu     sync.Mutex
	loaded bool
	key    events.ChainKey // its key in Gate.chains
	// claimed is the room the placement bucket gave the chain (Gate.claim),
	// "" before the gate asked.
	claimed string
	// chainVerdict is what the stream holds of the chain, as reload
	// decided it and appends keep it; the gate keeps a copy for a damaged
	// chain (keepJudged).
	chainVerdict
	// read is what the judgment under way read of the chain already
	// (lastReadable), for judgeLoss; nil outside reload.
	read *chainRead
	// users counts the calls that hold c (chain, until unchain), and
	// used is when the last of them let go (g.mu guards both): a chain
	// with users is never dropped. A chain without users is on
	// Gate.unheld (prev, after).
	users       int
	used        time.Time
	listed      bool // on Gate.unheld
	prev, after *chainState
}

// chainList is a list of chain states, least recently used first.
type chainList struct {
	first, last *chainState
	n           int
}

// push puts c last.
func (l *chainList) push(c *chainState) {
	c.prev, c.after, c.listed = l.last, nil, true
	if l.last != nil {
		l.last.after = c
	} else {
		l.first = c
	}
	l.last = c
	l.n++
}

// remove takes c, which is on l, off it.
func (l *chainList) remove(c *chainState) {
	if c.prev != nil {
		c.prev.after = c.after
	} else {
		l.first = c.after
	}
	if c.after != nil {
		c.after.prev = c.prev
	} else {
		l.last = c.prev
	}
	c.prev, c.after, c.listed = nil, nil, false
	l.n--
}

// chain returns the gate's state of chain key, made (not loaded) if the
// gate has none, and holds it until unchain: it is not dropped
// meanwhile. It sweeps idle chains first when that was last done
// ChainIdle / 2 ago or more.
func (g *Gate) chain(key events.ChainKey) *chainState {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now := g.now(); now.Sub(g.swept) >= g.idle/2 {
		g.sweepLocked(now)
	}
	c := g.chains[key]
	if c == nil {
		// The key is a part of a request line: the map keeps a copy.
		c = &chainState{key: cloneKey(key)}
		g.chains[c.key] = c
	}
	g.holdLocked(c)
	return c
}

// holdLocked counts one more call holding c, which is in g.chains (g.mu).
func (g *Gate) holdLocked(c *chainState) {
	if c.listed {
		g.unheld.remove(c)
	}
	c.users++
}

// unchain lets go of c, which chain returned. When no call holds it any
// more and more than IdleChains chains are held by none, the one used
// least recently is dropped.
func (g *Gate) unchain(c *chainState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c.users--
	c.used = g.now()
	if c.users > 0 || g.chains[c.key] != c {
		return
	}
	g.unheld.push(c)
	for g.unheld.n > g.maxUnheld {
		g.dropLocked(g.unheld.first)
	}
}

// dropLocked forgets c, which no call holds (g.mu): its next use reads the
// chain from the stream, as after a restart.
func (g *Gate) dropLocked(c *chainState) {
	g.unheld.remove(c)
	delete(g.chains, c.key)
}

// sweepLocked drops the chains idle for ChainIdle at now: no call holds
// them (chain), and no journal request of this gate holds an order ticket
// of them (order.go). g.mu is held; it takes g.orderMu (never the other
// way round). It walks only the chains it drops and those with tickets:
// unheld is in the order of their last use.
func (g *Gate) sweepLocked(now time.Time) {
	g.swept = now
	g.orderMu.Lock()
	defer g.orderMu.Unlock()
	for c := g.unheld.first; c != nil && now.Sub(c.used) >= g.idle; {
		after := c.after
		if g.orders[c.key] == nil {
			g.dropLocked(c)
		}
		c = after
	}
}

// cloneKey returns a copy of k in one allocation, sharing no memory with
// the line it was read from.
func cloneKey(k events.ChainKey) events.ChainKey {
	s := k.RunID + k.CapsuleID
	return events.ChainKey{RunID: s[:len(k.RunID)], CapsuleID: s[len(k.RunID):]}
}

// cloneMeta returns a copy of m in one allocation, sharing no memory with
// the line it was read from.
func cloneMeta(m events.CapsuleMeta) events.CapsuleMeta {
	s := m.RunID + m.CapsuleID + m.HarnessVersion + m.TaskFamily
	a, b := len(m.RunID), len(m.RunID)+len(m.CapsuleID)
	c := b + len(m.HarnessVersion)
	return events.CapsuleMeta{RunID: s[:a], CapsuleID: s[a:b], HarnessVersion: s[b:c], TaskFamily: s[c:]}
}

// keep returns old when it equals s, else a copy of s: the chain state
// holds no part of a line or message, and copies a value only when it
// changes.
func keep(old, s string) string {
	if old == s {
		return old
	}
	return strings.Clone(s)
}

// lastOn returns the last message on subject (wildcards allowed), or nil
// when there is none. It uses direct get with a JSON body, which accepts a
// wildcard filter where the subject-in-subject form cannot. With leader
// set, or when no server answers direct gets yet (the replicas of a stream
// just created start to after a while), the stream leader answers instead
// (see leaderMsg).
func (g *Gate) lastOn(ctx context.Context, subject string, leader bool) (*jetstream.RawStreamMsg, error) {
	if leader {
		return g.leaderMsg(ctx, map[string]any{"last_by_subj": subject})
	}
	dctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	// jsapi takes the sequence and subject the server gives, never the
	// headers a message was stored with (anyone who can write onto a room
	// subject chooses those).
	m, err := jsapi.DirectGet(dctx, g.nc, g.streamName(), map[string]string{"last_by_subj": subject})
	if errors.Is(err, nats.ErrNoResponders) {
		return g.leaderMsg(ctx, map[string]any{"last_by_subj": subject})
	}
	if err != nil || m == nil {
		return nil, err
	}
	return m.Raw(), nil
}

// leaderMsg returns the message req selects ("seq", "next_by_subj",
// "last_by_subj", as direct get takes them) as the stream leader has it
// ($JS.API.STREAM.MSG.GET), or nil when there is none. In a cluster a
// follower may answer a direct get (so nats.go's GetMsg on a stream that
// allows direct gets) from its own copy, which can lag behind the stream:
// what a refusal or a record decision rests on is read here instead.
func (g *Gate) leaderMsg(ctx context.Context, req map[string]any) (*jetstream.RawStreamMsg, error) {
	if g.leaderGets != nil {
		g.leaderGets.Add(1)
	}
	return jsapi.LeaderGetRaw(ctx, g.nc, g.streamName(), g.timeout, req)
}

// reload brings c up to the stream's head for key; with leader set, as the
// stream leader has it (see lastOn). With a publisher key the head is the
// last entry a trusted publisher attested (admittedHead).
//
// A chain decided before, whose subjects hold what they held then (the
// same last message, or the same count with no last message returned)
// at the same loss generation, is not judged again: judging a damaged
// chain reads it whole from the stream leader, one get a message. A state
// that never saw the chain (a Head of a chain the gate does not hold, one
// dropped idle) starts from the verdict kept for a damaged chain
// (keepJudged) when a shortcut holds for it, so that read is paid once
// per damage, not per request; otherwise it is judged afresh.
func (g *Gate) reload(ctx context.Context, key events.ChainKey, c *chainState, leader bool) error {
	last, err := g.lastOn(ctx, g.subjects.ChainAnyRoom(key), leader)
	if err != nil {
		return err
	}
	restored := !c.decided && c.roomID == "" && c.lastSeq == 0 && g.restoreJudged(key, c)
	gen := g.lossGen.Load()
	var counted int64 // > 0: the server counts messages on the chain's subjects it returns none of as their last
	var counts map[string]uint64
	if last == nil {
		if counted, counts, err = g.countChain(ctx, key); err != nil {
			return err
		}
		if counted > 0 && c.decided && counted == c.counted && c.lossGen == gen {
			c.loaded = true // the same count, still no last message: nothing since c was decided
			return nil
		}
		if counted > 0 {
			if last, c.read, err = g.lastReadable(ctx, key, counted); err != nil {
				return err
			}
			defer func() { c.read = nil }() // held for this judgment only
		}
	}
	if last != nil && g.trust != nil && c.decided && last.Sequence == c.lastSeq && c.lossGen == gen && counted == 0 && c.counted == 0 {
		c.loaded = true // nothing since c was decided: the stream only grows
		return nil
	}
	if restored {
		// The kept verdict stands only through the shortcuts above: the
		// chain's subjects changed (a store restored in place, say), so
		// it is judged as a state that never saw it.
		c.chainVerdict = chainVerdict{}
	}
	c.decided, c.counted = false, counted
	if err := g.decide(ctx, key, c, last, counted, counts); err != nil {
		return err
	}
	c.decided = true
	if c.lost != nil {
		g.keepJudged(key, c)
	}
	return nil
}

// decide is reload's judgment of c from last, the last message on the
// chain's subjects (or the last the server returns of the counted ones).
func (g *Gate) decide(ctx context.Context, key events.ChainKey, c *chainState, last *jetstream.RawStreamMsg, counted int64, counts map[string]uint64) error {
	var err error
	m, cut := last, false
	if m != nil && g.trust != nil {
		if m, cut, err = g.admittedHead(ctx, key, c, last); err != nil {
			return err
		}
	}
	if m == nil {
		// Field by field: c.mu is held by the caller.
		c.loaded, c.roomID, c.next, c.head, c.streamSeq, c.meta = true, "", 0, events.ZeroHash, 0, events.CapsuleMeta{}
		c.owner = room.Anonymous
		c.lastSeq = 0
		if last != nil {
			c.lastSeq = last.Sequence
		}
		c.lost, c.lossGen = nil, g.lossGen.Load()
		if last != nil {
			// Entries on the subject, none admitted: a batch of them may
			// have lost a message (its attestation covers it whole).
			return g.judgeUnadmitted(ctx, key, c, last, cut, counted)
		}
		if counted > 0 {
			return g.judgeUnreadable(ctx, key, c, counted, counts)
		}
		return nil
	}
	p, err := g.subjects.Parse(m.Subject)
	if err != nil {
		return fmt.Errorf("chain head at stream seq %d: %w", m.Sequence, err)
	}
	e, err := events.ParseEntry(m.Data)
	if err != nil {
		return fmt.Errorf("chain head at stream seq %d is not an entry: %w", m.Sequence, err)
	}
	seq, ok := e.Seq()
	if !ok {
		return fmt.Errorf("chain head at stream seq %d has no seq", m.Sequence)
	}
	// Copies: the message goes, the chain state stays.
	c.loaded, c.roomID, c.next, c.head, c.streamSeq = true, keep(c.roomID, p.RoomID), seq+1, keep(c.head, e.EntryHash()), m.Sequence
	if meta := e.Metadata(); meta != c.meta {
		c.meta = cloneMeta(meta)
	}
	c.owner = keep(c.owner, m.Header.Get(room.HeaderOwner))
	c.lastSeq = last.Sequence
	if c.lossGen != g.lossGen.Load() || cut || counted > 0 {
		rawNext := counted
		if last != m { // the last message is not the head: what position does it claim?
			if le, err := events.ParseEntry(last.Data); err == nil {
				if s, ok := le.Seq(); ok && s >= 0 {
					// No more positions after the head than stream
					// seqs after it: a claim beyond is no entry of ours.
					tail := g.batchTail(last)
					rawNext = max(rawNext, min(s+1+tail, c.next+int64(last.Sequence-c.streamSeq)+tail))
				}
			}
		}
		if err := g.judgeLoss(ctx, key, c, rawNext, cut || counted > 0); err != nil {
			c.loaded = false
			return err
		}
	}
	return nil
}

// Head reports where a chain stands in the stream, read fresh, including
// the room it lives in ("" when it has no entry yet).
// A read that may be tried again (no responder, no answer in time) is,
// as appends do, for up to 20s and Attempts times.
//
// Head keeps no state of a chain the gate does not know already: it reads
// into a state of its own, so a flood of head requests naming new chains
// holds no memory once answered (docs/secure-mode.md, "Fair ingest").
func (g *Gate) Head(ctx context.Context, key events.ChainKey) (room.ChainHead, error) {
	g.mu.Lock()
	c := g.chains[key]
	if c != nil {
		g.holdLocked(c)
	}
	g.mu.Unlock()
	if c != nil {
		defer g.unchain(c)
	} else {
		c = &chainState{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	until := time.Now().Add(retryWindow)
	for attempt := 0; ; attempt++ {
		err := g.reload(ctx, key, c, false)
		if err == nil {
			return c.view(key), nil
		}
		if attempt+1 >= g.attempts || !g.waitRead(ctx, err, &attempt, until) {
			return room.ChainHead{}, err
		}
	}
}

// chainVerdict is a chain's state as the stream holds it: what reload
// decides and appends move on.
type chainVerdict struct {
	roomID    string // room the chain lives in, "" while it has no entry
	next      int64
	head      string
	streamSeq uint64 // the head entry's stream sequence
	// lastSeq is the last stream sequence on the chain's subjects in every
	// room, which the next append expects: streamSeq, but for messages
	// after the head that are no admitted entry (with a key).
	lastSeq uint64
	// owner is the HeaderOwner of the head entry: the chain's owner
	// (Anonymous for none, or while the chain has no entry).
	owner string
	meta  events.CapsuleMeta
	// lost is what the store lost of the chain below next (nil: nothing),
	// as judged at loss generation lossGen (storeloss.go).
	lost    *room.ChainLoss
	lossGen uint64
	// decided: the fields above are reload's verdict on the chain as the
	// stream held it (lastSeq, or counted), which stands while that holds
	// at loss generation lossGen. counted is the number of messages the
	// server counted on the chain's subjects when it returned none as
	// their last (0 when it did).
	decided bool
	counted int64
}

func (c *chainState) view(key events.ChainKey) room.ChainHead {
	h := room.ChainHead{RoomID: c.roomID, Chain: key, Next: c.next, Head: c.head, StreamSeq: c.streamSeq, Lost: c.lost}
	if c.next > 0 {
		h.Owner = room.IdentityName(c.owner)
	}
	return h
}

// tally sets r's counts from its items.
func tally(r *room.JournalReply) {
	counts := outcomeCounts{&r.Stored, &r.Dupes, &r.Refused, &r.Skipped, &r.Failures, &r.Ahead}
	for _, it := range r.Items {
		counts.add(it.Outcome)
	}
}

// outcomeCounts points at a reply's count of each item outcome
// (JournalReply, RecordsReply; ahead is nil where no item can be ahead).
// An outcome with no count of its own (ahead there, or one not known) is
// not a store: it counts as failed.
type outcomeCounts struct{ stored, dupes, refused, skipped, failed, ahead *int }

func (c outcomeCounts) add(outcome room.Outcome) {
	switch {
	case outcome == room.OutcomeStored:
		*c.stored++
	case outcome == room.OutcomeDuplicate:
		*c.dupes++
	case outcome == room.OutcomeRefused:
		*c.refused++
	case outcome == room.OutcomeSkipped:
		*c.skipped++
	case outcome == room.OutcomeAhead && c.ahead != nil:
		*c.ahead++
	default:
		*c.failed++
	}
}

type line struct {
	data     []byte
	complete bool // ended in "\n"
}

// splitLines splits body into journal lines; a final line without "\n" is
// kept with complete false, so it is refused as truncated_tail.
func splitLines(body []byte) []line {
	out := make([]line, 0, countLines(body))
	for len(body) > 0 {
		i := bytes.IndexByte(body, '\n')
		if i < 0 {
			out = append(out, line{data: body})
			break
		}
		out = append(out, line{data: body[:i], complete: true})
		body = body[i+1:]
	}
	return out
}

// countLines is how many lines splitLines makes of body: one per newline,
// and a partial last line. It allocates nothing, so a body of newlines is
// refused for its line count before a line is made of it.
func countLines(body []byte) int {
	n := bytes.Count(body, []byte{'\n'})
	if len(body) > 0 && body[len(body)-1] != '\n' {
		n++
	}
	return n
}

// parseLine parses one request line into an entry, or refuses it: a
// partial line is truncated_tail, one that does not parse gets
// events.ParseLine's code (non_canonical, corrupt_entry, or invalid_entry
// for JSON that is not an object).
func parseLine(ln line, idx int) (*events.Entry, *room.ItemResult) {
	at := events.Location{Line: idx + 1}
	if !ln.complete {
		r := room.RefusedItem(idx, []events.Problem{{Code: events.TruncatedTail, At: at, Reason: "the last line does not end in a newline: a partial entry"}})
		return nil, &r
	}
	e, problems := events.ParseLineOwned(ln.data, at) // the request body is the gate's for the call
	if e == nil {
		r := room.RefusedItem(idx, problems)
		return nil, &r
	}
	return e, nil
}

func failed(idx int, err error) room.ItemResult {
	return room.ItemResult{Index: idx, Outcome: room.OutcomeFailed, Reason: err.Error()}
}

// resent decides an entry for a position that is already taken: the same
// entry is a duplicate, another is a fork attempt and is refused. stored
// is what the stream holds at seq (entryAt).
func (g *Gate) resent(key events.ChainKey, c *chainState, e *events.Entry, seq int64, stored storedEntry, res room.ItemResult) room.ItemResult {
	if stored.hash == e.EntryHash() {
		res.Outcome, res.StreamSeq = room.OutcomeDuplicate, stored.seq
		res.Subject = g.subjects.Journal(c.roomID, key)
		return res
	}
	r := room.RefusedItem(res.Index, []events.Problem{{Code: events.Fork, At: events.Location{Line: res.Index + 1, Pointer: "/seq"},
		Reason: "chain position " + strconv.FormatInt(seq, 10) + " already holds a different entry", Expected: stored.hash, Actual: e.EntryHash()}})
	r.Seq, r.Hash = res.Seq, res.Hash
	return r
}

// onlyPosition reports whether every problem is about the entry's position
// (reordered, broken_link): an entry that is otherwise sound and names an
// earlier position may be a resend.
func onlyPosition(ps []events.Problem) bool {
	for _, p := range ps {
		if p.Code != events.Reordered && p.Code != events.BrokenLink {
			return false
		}
	}
	return true
}

// tooLarge refuses a message the server would not accept: data and headers
// (with the attestation of message index of a batch of count, which the
// gate may add later: msgHeaderSize) over the connection's max payload
// (refused before it is sent: docs/design.md, "Refusal codes and their
// order").
func (g *Gate) tooLarge(msg *nats.Msg, at events.Location, index, count int) []events.Problem {
	return g.tooLargeSize(int64(len(msg.Data))+g.msgHeaderSize(msg, index, count), at)
}

// tooLargeSize is tooLarge for a message of size bytes, headers included.
func (g *Gate) tooLargeSize(size int64, at events.Location) []events.Problem {
	if max := g.nc.MaxPayload(); size > max {
		return []events.Problem{{Code: events.TooLarge, At: at,
			Reason: fmt.Sprintf("%d bytes with headers; the server accepts at most %d", size, max)}}
	}
	return nil
}

// attest returns the attestation header value of data on subject at
// position, a batch of one, or "" when the gate has no publisher key.
func (g *Gate) attest(roomID, subject, position string, content [32]byte) string {
	if g.key == nil {
		return ""
	}
	return checkpoint.Attest(g.key, roomID, subject, position, content)
}

// expect tells the attestation sink of msgs, one attested batch about to
// be sent, whose message i has content hash and attested position att(i)
// (the position "" when the gate does not say it).
func (g *Gate) expect(msgs []*nats.Msg, att func(i int) ([32]byte, string)) {
	if out, ok := g.attestedMsgs(msgs, att); ok {
		g.attested.Expect(out)
	}
}

// stored tells the attestation sink that msgs[i], whose content hash and
// position are att(i), is stored at stream sequence first+i.
func (g *Gate) stored(first uint64, msgs []*nats.Msg, att func(i int) ([32]byte, string)) {
	if out, ok := g.attestedMsgs(msgs, att); ok {
		g.attested.Stored(first, out)
	}
}

// attestedMsgs is msgs as the attestation sink is told of them; ok is
// false when there is no sink or a message is not attested (the sink is
// told nothing of such a batch).
func (g *Gate) attestedMsgs(msgs []*nats.Msg, att func(i int) ([32]byte, string)) ([]room.StoredMsg, bool) {
	if g.attested == nil {
		return nil, false
	}
	out := make([]room.StoredMsg, 0, len(msgs))
	for i, m := range msgs {
		h := m.Header.Get(checkpoint.AttestationHeader)
		if h == "" {
			return nil, false
		}
		content, position := att(i)
		out = append(out, room.StoredMsg{Subject: m.Subject, Header: h, Content: content, Position: position})
	}
	return out, true
}

// unstored tells the attestation sink that the server refused msg's batch
// (err an API error but a full store, which may keep part of a batch, or
// ack a duplicate): nothing of it was stored.
func (g *Gate) unstored(msg *nats.Msg, ack *jetstream.PubAck, err error) {
	if g.attested == nil {
		return
	}
	h := msg.Header.Get(checkpoint.AttestationHeader)
	var apiErr *jetstream.APIError
	if h != "" && ((err == nil && ack != nil && ack.Duplicate) || (errors.As(err, &apiErr) && !jsapi.IsStoreFull(err))) {
		g.attested.Unstored(h)
	}
}

func (g *Gate) publish(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	// No client-side retries: every retry goes through the gate's own
	// read-before-deciding loop.
	return g.js.PublishMsg(ctx, msg, jetstream.WithRetryAttempts(0))
}

// storedEquals reports whether stream seq holds data on subject.
func (g *Gate) storedEquals(ctx context.Context, seq uint64, subject string, data []byte) (bool, error) {
	m, err := g.leaderMsg(ctx, map[string]any{"seq": seq})
	if err != nil || m == nil {
		return false, err
	}
	return m.Subject == subject && bytes.Equal(m.Data, data), nil
}

func errStoreFull(err error) error {
	return fmt.Errorf("the JetStream store is full (nothing more can be stored until there is space): %w", err)
}

// retryWindow is how long one item waits out a stream that takes no
// appends for now (no leader: an election, a partition) before the
// attempts count down: a leader election takes up to about 10s.
const retryWindow = 20 * time.Second

// waitOut returns the attempt number to go on with after a retryable
// error: while until has not passed, it does not count.
func (g *Gate) waitOut(attempt int, until time.Time) int {
	if time.Now().Before(until) {
		return max(0, min(attempt, g.attempts-2))
	}
	return attempt
}

// waitRead decides after a read of the stream failed: when the read may
// be tried again (retryRead) and until has not passed, it sleeps, sets
// *attempt and returns true; otherwise the item fails.
func (g *Gate) waitRead(ctx context.Context, err error, attempt *int, until time.Time) bool {
	if !retryRead(ctx, err) || !time.Now().Before(until) {
		return false
	}
	*attempt = g.waitOut(*attempt, until)
	return jsapi.Sleep(ctx, jsapi.Backoff(*attempt))
}

// retryRead reports whether a read that failed may be tried again: no
// responder, or no answer in time (a stream without a leader for now
// answers no leader read).
func retryRead(ctx context.Context, err error) bool {
	return ctx.Err() == nil && (jsapi.IsRetryable(err) || errors.Is(err, context.DeadlineExceeded))
}

func (g *Gate) observe(kind room.Kind, res room.ItemResult, start time.Time) {
	if g.obs != nil {
		g.obs.Item(kind, res.Outcome, res.Code, time.Since(start))
	}
}

// makeDurable runs GateOptions.Durable before an item of outcome is
// reported stored or duplicate; when it fails, it logs the error and
// calls undo with it, which turns those items failed (notDurable).
func (g *Gate) makeDurable(outcome room.Outcome, undo func(error)) {
	if g.durable == nil || (outcome != room.OutcomeStored && outcome != room.OutcomeDuplicate) {
		return
	}
	if err := g.durable(); err != nil {
		g.log.Error("the store acknowledged appends that could not be made durable: reported failed, to be sent again", zap.Error(err))
		undo(err)
	}
}

// notDurable is it failed when it was stored or a duplicate: the server
// holds it, but the gate could not make it durable (makeDurable). Sent
// again, it is a duplicate.
func notDurable(it room.ItemResult, err error) room.ItemResult {
	if it.Outcome != room.OutcomeStored && it.Outcome != room.OutcomeDuplicate {
		return it
	}
	return room.ItemResult{Index: it.Index, Outcome: room.OutcomeFailed, Seq: it.Seq, Hash: it.Hash,
		Reason: fmt.Sprintf("the server stored it, but it could not be made durable (%v): send it again", err)}
}
