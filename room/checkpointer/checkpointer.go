package checkpointer

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// Defaults of Options.
const (
	// DefaultLeaseTTL is the bucket's TTL when the checkpointer creates
	// it: a lease nobody renews lapses after it.
	DefaultLeaseTTL = 30 * time.Second
	// DefaultCheckpointEvery and DefaultCheckpointInterval: a room's
	// checkpoint is due after this many new leaves, or this long. Each
	// checkpoint is an fsync'd append the reader reads back and checks, so
	// a busy room gets one per 10,000 messages, and a quiet one its last
	// messages' within the interval.
	DefaultCheckpointEvery    = 10000
	DefaultCheckpointInterval = 10 * time.Second
)

// ErrCheckpointer is wrapped by Start for unusable options.
var ErrCheckpointer = errors.New("checkpointer")

// Options configures a Checkpointer. The zero value of each
// field is its default, except Key, which is required.
type Options struct {
	Stream   string        // room stream, default DefaultStream
	Subjects room.Subjects // its layout
	// Key signs the checkpoints (C2SP signed note named by its node id).
	Key *events.HostKey
	// TrustedPublishers are the node ids of the other publishers whose
	// attestations admit messages into the rooms' trees and whose
	// checkpoints count; Key's own node id is always trusted.
	TrustedPublishers []string
	// Every writes a room's checkpoint once its tree has grown by this
	// many leaves since its latest checkpoint; default 10,000.
	Every int
	// Interval writes a checkpoint of every room whose tree has grown
	// for this long without one; default 10s.
	Interval time.Duration
	// LeaseBucket is the lease bucket, default room.DefaultLeaseBucket;
	// LeaseTTL its TTL and Replicas its replicas when the checkpointer
	// creates it (default DefaultLeaseTTL, and 1). An existing bucket
	// keeps its own.
	LeaseBucket string
	LeaseTTL    time.Duration
	Replicas    int
	Logger      *zap.Logger // nil: no logs
	// Registerer, when set, gets the checkpointer's metrics
	// (roompub_checkpoint*).
	Registerer prometheus.Registerer
}

// Checkpointer writes the signed checkpoints of every room of one stream
// (docs/checkpoints.md). It reads the stream in stream order, from its first message
// with batch direct gets up to the stream's end at start (catchUpRead),
// then by stream sequence (follow), creating no consumer, so a stream
// whose consumers are at their limit is read all the same: the gate of the same process tells it where the
// server stored its attested batches (Stored), which it takes from memory
// whole without reading them, and it reads only the rest (others'
// messages, checkpoints, and the gate's batches whose acknowledgement is
// late or that memory had no room for; a batch is never split between
// memory and the read, as its attestation covers it whole). It
// keeps, per room, the RFC 6962 tree (a checkpoint.LeanTree: the compact range of
// what the latest good checkpoint covers and the leaf hashes after it, so
// a long-running publisher's memory does not grow by a node per message;
// roots are checked at no smaller size, as the rules require) of the room's
// admitted messages: journal and exec messages with a valid attestation by
// a trusted publisher, in stream order. The gate of the same process tells
// it its own attestations (Expect), which are then admitted without their
// signature being verified again. Batches are reassembled by the readers'
// rule (checkpoint.BatchCollector, checkpoint.BatchRun), own ones too, and
// each room's tree and checkpoints are a checkpoint.Ledger: the rules the
// readers apply, so a message is a leaf here exactly when it is one for
// them.
//
// For each room whose tree grew it writes a checkpoint every Every leaves
// or Interval, and on Stop, on the room's checkpoint subject, but only
// while it holds the room's lease (a key-value entry with a TTL, created or
// updated by revision, whose value is a lease statement signed by the
// publisher key; a value that is not one a trusted publisher signed within
// the TTL is not honoured: holdLease) and only after the room's latest checkpoint matched
// its own tree (signed by a trusted key, same root at that size, no
// smaller than the one before). A room whose latest checkpoint contradicts
// the tree gets no checkpoint from it, and an error log: a checkpoint never
// contradicts an earlier one. Only a checkpoint signed by a trusted
// publisher can contradict: any other message on a checkpoint subject (not
// a signed note of the room, no or a bad signature by a trusted key) is set
// aside (docs/secure-mode.md, "Checkpoints and leases"): counted, logged,
// and otherwise ignored, so the room goes on from its latest valid
// checkpoint. Every write carries the checkpoint subject's
// last sequence the checkpointer read as Nats-Expected-Last-Subject-
// Sequence, so it lands only on the checkpoint it checked, and two writers
// never both land.
//
// A Checkpointer is safe for concurrent use.
type Checkpointer struct {
	log      *zap.Logger
	subjects room.Subjects
	js       jetstream.JetStream
	stream   jetstream.Stream
	// streamName is the room stream's name, for direct gets.
	streamName string
	kv         jetstream.KeyValue
	signer     note.Signer
	key        *events.HostKey // signs the leases
	nodeID     string
	trust      *checkpoint.Trust
	every      uint64
	interval   time.Duration
	ttl        time.Duration
	m          *checkpointMetrics

	own ownAttestations
	// acked holds the gate's batches the server acknowledged, whole, by
	// first stream sequence, and the batches it announced and has not had
	// acknowledged: after catch-up the reader takes its own batches from
	// there and reads only the gaps between them (follow).
	acked ackedOwn

	switched chan struct{} // closed when the catch-up read ends and follow begins
	stopF    context.CancelFunc
	fdone    chan struct{}
	// next is the stream sequence follow handles next (c.mu); fromMemory
	// and readGaps count follow's messages taken from acked (whole
	// batches) and read.
	next       uint64
	fromMemory atomic.Uint64
	readGaps   atomic.Uint64
	gapWait    atomic.Int64  // ckGapWait; tests shorten or lengthen it
	leaseSkew  atomic.Int64  // DefaultLeaseSkew; tests shorten it
	handled    atomic.Uint64 // stream seq of the last message handled
	due        chan struct{} // a room reached Every: write now
	stopW      context.CancelFunc
	wdone      chan struct{}
	stopOnce   sync.Once

	mu    sync.Mutex
	rooms map[string]*ckRoom
	// batches reassembles the atomic batches of the messages read and
	// verifies those the gate of this process did not make, one signature
	// per batch; held are the messages of the batch it holds open, in
	// stream order (its members: a batch is stored at consecutive stream
	// sequences, so nothing else can be waiting behind them).
	batches *checkpoint.BatchCollector
	held    []ckHeld
	// lastPending and lastAt: NumPending of the last message handled and
	// when it was: a batch still incomplete once the reader has handled
	// all the stream has (an atomic batch is stored whole) never
	// completes, and is refused (settleStuck).
	lastPending uint64
	lastAt      time.Time
	parsed      map[string]room.Parsed // subject cache
	startSeq    uint64                 // the stream's last sequence at start
	caughtUp    bool                   // handled up to startSeq: writes may begin
	consErr     error                  // the last error reading the stream, for Stop
}

// ckPullMessages and ckPullBytes size the reader's batch direct gets:
// few requests while it reads every message of the stream, and replies the
// server sends in one go (it stops at the byte limit, after at least one
// message).
// ckCatchUpMessages is the catch-up read's: the server's cost per batch
// (it counts what is pending under the filter first) then matters little;
// the byte limit still holds each reply to about 4 MiB.
const (
	ckPullMessages    = 1024
	ckCatchUpMessages = 8192
	ckPullBytes       = 4 << 20
)

// ckSubjectCache bounds the checkpointer's cache of parsed subjects (one
// per chain and two per room); it is cleared when full.
const ckSubjectCache = 4096

// ckRoom is the checkpointer's view of one room. Fields under
// Checkpointer.mu, but lease: the writer's alone.
type ckRoom struct {
	id string
	// ledger is the room's tree (lean: the compact range of what the
	// latest checkpoint that matched covers, the leaf hashes after it) and
	// that checkpoint.
	ledger    *checkpoint.Ledger
	execCount uint64 // messages read on the exec subject (the next record's position)
	// ckptSeq is the checkpoint subject's last stream sequence read or
	// written: a write expects it.
	ckptSeq  uint64
	written  uint64 // size of this checkpointer's last write
	bad      string // why the latest checkpoint contradicts the tree; "" if it does not
	grewAt   time.Time
	waitTill time.Time // after a failed write
	warned   bool      // a message that is no leaf was logged at warn level
	// asideWarned: a message set aside on the checkpoint subject was
	// logged at warn level.
	asideWarned bool
	lease       lease
}

// ckHeld is a room's attested message whose batch is not decided yet.
type ckHeld struct {
	r       *ckRoom
	seq     uint64
	subject string
	leaf    [32]byte // its leaf hash
}

// What a message that is no leaf is logged as.
const (
	notLeafUnattested = "checkpointer: a message without attestation is not a leaf"
	notLeafNoEntry    = "checkpointer: an attested journal message that is no entry is not a leaf"
	notLeafRefused    = "checkpointer: a message whose attestation does not verify is not a leaf"
)

// lease is the writer's hold on one room's lease key.
type lease struct {
	rev       uint64 // revision of the last create or update; 0: not held
	renewedAt time.Time
	retryAt   time.Time // not held: do not try to take it before
}

// Start creates the lease bucket if needed, starts reading the
// room stream from its first message and starts the writer. Stop ends it.
func Start(ctx context.Context, nc *nats.Conn, o Options) (*Checkpointer, error) {
	if o.Key == nil {
		return nil, fmt.Errorf("%w: a publisher key is required", ErrCheckpointer)
	}
	trust, err := checkpoint.NewTrust(append([]string{o.Key.NodeID()}, o.TrustedPublishers...)...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpointer, err)
	}
	signer, err := checkpoint.NewNoteSigner(o.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpointer, err)
	}
	c := &Checkpointer{log: o.Logger, subjects: o.Subjects, signer: signer, nodeID: o.Key.NodeID(), trust: trust,
		every: uint64(o.Every), interval: o.Interval, due: make(chan struct{}, 1), wdone: make(chan struct{}),
		rooms: map[string]*ckRoom{}, parsed: map[string]room.Parsed{},
		switched: make(chan struct{}), fdone: make(chan struct{})}
	c.acked.init()
	c.gapWait.Store(int64(ckGapWait))
	c.leaseSkew.Store(int64(DefaultLeaseSkew))
	c.key = o.Key
	c.batches = checkpoint.NewBatchCollector(trust)
	if c.log == nil {
		c.log = zap.NewNop()
	}
	if o.Every <= 0 {
		c.every = DefaultCheckpointEvery
	}
	if c.interval <= 0 {
		c.interval = DefaultCheckpointInterval
	}
	if c.m, err = newCheckpointMetrics(o.Registerer); err != nil {
		return nil, fmt.Errorf("%w: metrics: %w", ErrCheckpointer, err)
	}
	if c.js, err = jetstream.New(nc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpointer, err)
	}
	name := o.Stream
	if name == "" {
		name = room.DefaultStream
	}
	cctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	defer cancel()
	if c.stream, err = c.js.Stream(cctx, name); err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrCheckpointer, name, err)
	}
	if c.kv, c.ttl, err = leaseBucket(cctx, c.js, o); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpointer, err)
	}
	c.streamName = name
	info, err := c.stream.Info(cctx)
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrCheckpointer, name, err)
	}
	c.startSeq = info.State.LastSeq
	c.caughtUp = c.startSeq == 0
	fctx, stopF := context.WithCancel(context.Background())
	c.stopF = stopF
	go c.follow(fctx)
	if c.startSeq == 0 {
		c.next = 1
		close(c.switched)
	} else {
		go c.catchUpRead(fctx)
	}
	wctx, stopW := context.WithCancel(context.Background())
	c.stopW = stopW
	go c.writer(wctx)
	c.log.Info("checkpointer started", zap.String("publisher", c.nodeID), zap.Strings("trusted_publishers", trust.NodeIDs()),
		zap.Uint64("every", c.every), zap.Duration("interval", c.interval), zap.String("lease_bucket", leaseBucketName(o)), zap.Duration("lease_ttl", c.ttl))
	return c, nil
}

func leaseBucketName(o Options) string {
	if o.LeaseBucket == "" {
		return room.DefaultLeaseBucket
	}
	return o.LeaseBucket
}

// leaseBucket binds the lease bucket, creating it when it does not exist,
// and returns it with its TTL.
func leaseBucket(ctx context.Context, js jetstream.JetStream, o Options) (jetstream.KeyValue, time.Duration, error) {
	bucket := leaseBucketName(o)
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		ttl := o.LeaseTTL
		if ttl <= 0 {
			ttl = DefaultLeaseTTL
		}
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      bucket,
			Description: "roompub checkpoint leases: one key per room, the writer's signed lease statement",
			History:     1,
			TTL:         ttl,
			Storage:     jetstream.FileStorage,
			Replicas:    max(o.Replicas, 1),
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, bucket) // another publisher made it first
		}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("lease bucket %s: %w", bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("lease bucket %s: %w", bucket, err)
	}
	if st.TTL() <= 0 {
		return nil, 0, fmt.Errorf("lease bucket %s has no TTL: a lease would never lapse", bucket)
	}
	return kv, st.TTL(), nil
}

// LeaseKey is the lease bucket's key of a room: its subject token (without
// "room:") with '~' written '=' and ':' written '/', two characters a
// key-value key may hold and a token never does, so the key is injective.
func LeaseKey(roomID string) string {
	return leaseKeyReplacer.Replace(room.RoomToken(roomID))
}

var leaseKeyReplacer = strings.NewReplacer("~", "=", ":", "/")

// Expect implements AttestationSink: the gate of this process is about to
// send a message on subject with this attestation and content hash.
func (c *Checkpointer) Expect(subject, header string, content [32]byte) {
	c.own.add(content, subject, header)
	c.acked.expect(header)
}

// Unstored implements AttestationSink: the batch of header was refused,
// so follow does not wait for its acknowledgement at a gap.
func (c *Checkpointer) Unstored(header string) { c.acked.unstored(header) }

// Stored implements AttestationSink: the gate's messages Expect announced
// are stored from stream sequence first on.
func (c *Checkpointer) Stored(first uint64, msgs []room.StoredMsg) {
	c.acked.stored(first, msgs)
}

// ackedOwn is what the gate told of its own messages: the batches the
// server stored, each whole (an atomic batch is stored at consecutive
// stream sequences; a record or a one-by-one append is a batch of one),
// and the batches announced and not acknowledged yet (acknowledgements
// arrive out of order: several batches are in flight). A batch is kept
// whole or not at all: follow takes it from memory whole or reads it from
// the stream whole, since its attestation covers all its messages and a
// part read alone goes to the batch collector incomplete and is refused.
type ackedOwn struct {
	mu sync.Mutex
	// batches holds the kept batches by the stream sequence of their
	// first message; kept counts their messages, at most max.
	batches map[uint64][]room.StoredMsg
	kept    int
	max     int
	// floor is follow's next stream sequence: a batch that starts below
	// it was read from the stream (or by the catch-up read) meanwhile.
	floor    uint64
	skipped  atomic.Uint64        // batches told and not taken from memory (no room, or read)
	inflight map[string]time.Time // batch (header without "i/n") -> when announced
	wake     chan struct{}        // a batch was stored
	expects  atomic.Uint64        // Expect calls so far
}

// ackedMax bounds the messages ackedOwn keeps: beyond it (a reader that
// does not keep up) a batch is not kept, and is read instead, whole.
const ackedMax = 1 << 16

// ckGapWait is how long follow waits, at a gap in the gate's own stored
// messages, for batches announced before the gap was seen to be
// acknowledged, before it reads the gap (reading early is safe: what it
// reads is handled as the catch-up read handles it). ckIdlePoll is how
// often it looks for others' messages when it has nothing to read;
// ckOwnWait how long it waits for the gate's next acknowledgement after
// one it took from memory.
const (
	ckOwnWait  = 5 * time.Millisecond
	ckGapWait  = time.Second
	ckIdlePoll = 50 * time.Millisecond
)

// init makes a's maps, with the cap at ackedMax.
func (a *ackedOwn) init() {
	a.batches, a.max = map[uint64][]room.StoredMsg{}, ackedMax
	a.inflight, a.wake = map[string]time.Time{}, make(chan struct{}, 1)
}

// expect notes the batch of an attestation the gate is about to send as
// in flight (a gap is not read before its acknowledgement, for a while).
func (a *ackedOwn) expect(header string) {
	batch, _, _, ok := splitOwn(header)
	if !ok {
		return
	}
	a.expects.Add(1)
	a.mu.Lock()
	if _, ok := a.inflight[batch]; !ok {
		a.inflight[batch] = time.Now()
	}
	a.mu.Unlock()
}

// stored keeps msgs, one batch stored from stream sequence first on,
// whole if it fits under max and follow has not passed first; else not at
// all.
func (a *ackedOwn) stored(first uint64, msgs []room.StoredMsg) {
	a.mu.Lock()
	for _, m := range msgs {
		if batch, _, _, ok := splitOwn(m.Header); ok {
			delete(a.inflight, batch)
		}
	}
	switch {
	case len(msgs) == 0:
	case first < a.floor || a.kept+len(msgs) > a.max:
		a.skipped.Add(1)
	default:
		a.batches[first] = msgs
		a.kept += len(msgs)
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// unstored forgets the batch of header as in flight: it was refused.
func (a *ackedOwn) unstored(header string) {
	if batch, _, _, ok := splitOwn(header); ok {
		a.mu.Lock()
		delete(a.inflight, batch)
		a.mu.Unlock()
	}
}

// take returns and forgets the batch that starts at stream sequence seq,
// if one is kept; follow goes on after it.
func (a *ackedOwn) take(seq uint64) ([]room.StoredMsg, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := a.batches[seq]
	if ok {
		delete(a.batches, seq)
		a.kept -= len(b)
		a.floor = seq + uint64(len(b))
	}
	return b, ok
}

// advance tells that follow read the stream up to before seq: the kept
// batches that start below it were read (whole, or their first part and
// so the rest too) and are forgotten, and so are those told later.
func (a *ackedOwn) advance(seq uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if seq <= a.floor {
		return
	}
	// Every kept batch starts at floor or later: look up the sequences
	// passed, or scan the map if it is the shorter.
	if seq-a.floor <= uint64(len(a.batches)) {
		for s := a.floor; s < seq; s++ {
			a.forget(s)
		}
	} else {
		for s := range a.batches {
			if s < seq {
				a.forget(s)
			}
		}
	}
	a.floor = seq
}

// forget drops the batch kept at seq, if any. a.mu is held.
func (a *ackedOwn) forget(seq uint64) {
	if b, ok := a.batches[seq]; ok {
		delete(a.batches, seq)
		a.kept -= len(b)
		a.skipped.Add(1)
	}
}

// nextKept returns the first stream sequence of the first batch kept
// after seq, if any.
func (a *ackedOwn) nextKept(seq uint64) (uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	first, ok := uint64(0), false
	for s := range a.batches {
		if s > seq && (!ok || s < first) {
			first, ok = s, true
		}
	}
	return first, ok
}

// waiting reports whether a batch announced no later than since is still
// unacknowledged and younger than gapWait; it forgets older ones (never
// stored, or acknowledged to nobody).
func (a *ackedOwn) waiting(since, now time.Time, gapWait time.Duration) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	wait := false
	for b, at := range a.inflight {
		switch {
		case now.Sub(at) >= gapWait:
			delete(a.inflight, b)
		case !at.After(since):
			wait = true
		}
	}
	return wait
}

// follow handles the stream from where the catch-up read ended, in stream
// order: a batch the gate told it stored (Stored) that starts exactly at
// the next sequence is taken from memory whole, without reading it;
// anything else (others' messages, checkpoints, the gate's batches whose
// acknowledgement has not come or that were not kept) is read from the
// stream leader, once the batches announced before the gap was seen are
// acknowledged or ckGapWait has passed. It returns when ctx is done.
func (c *Checkpointer) follow(ctx context.Context) {
	defer close(c.fdone)
	select {
	case <-c.switched:
	case <-ctx.Done():
		return
	}
	nc, name, all := c.js.Conn(), c.stream.CachedInfo().Config.Name, c.subjects.All()
	c.mu.Lock()
	c.acked.advance(c.next) // what the gate stored before was read by the catch-up
	c.mu.Unlock()
	var gapSince time.Time
	retried := false
	run := 0 // messages read from the stream since the last from memory
	// fromGate: the last message handled came from memory. The next one
	// is most likely the gate's next append, whose acknowledgement has
	// not come yet (one record at a time, the next is acknowledged about
	// a millisecond later): wait for it, up to ckOwnWait, before asking
	// the leader, or each append costs a read of the stream that finds
	// nothing. Short, as others' messages wait for it too.
	fromGate := false
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-c.acked.wake:
		case <-t.C:
		case <-ctx.Done():
			return false
		}
		return true
	}
	for ctx.Err() == nil {
		c.mu.Lock()
		next := c.next
		c.mu.Unlock()
		if b, ok := c.acked.take(next); ok {
			// The whole batch, in stream order, as if read.
			gapSince = time.Time{}
			n := uint64(len(b))
			c.mu.Lock()
			c.lastPending, c.lastAt = 0, time.Now()
			// One atomic batch, stored whole at consecutive sequences (the
			// server's acknowledgement says where): it ends the batch held
			// open, if any, and needs no reassembly.
			c.decide(nil, c.batches.Pass(next))
			for i := range b {
				c.handleLocked(next+uint64(i), b[i].Subject, nil, b[i].Header, "", &b[i].Content)
			}
			c.next = next + n
			c.handled.Store(next + n - 1)
			c.mu.Unlock()
			c.fromMemory.Add(n)
			fromGate, run = true, 0
			continue
		}
		if fromGate {
			fromGate = false
			if !wait(ckOwnWait) {
				return
			}
			continue
		}
		now := time.Now()
		if gapSince.IsZero() {
			gapSince = now
		}
		gen := c.acked.expects.Load()
		if gw := time.Duration(c.gapWait.Load()); c.acked.waiting(gapSince, now, gw) {
			if !wait(gw / 20) {
				return
			}
			continue
		}
		// The gap runs up to the next batch kept in memory. A message (a
		// checkpoint, say) is read with a leader read, and so is the
		// first of a run, or nothing, when idle (the leader has what was
		// just acknowledged); once a run goes on it is read with batch
		// direct gets, at the catch-up read's pace.
		upTo, kept := c.acked.nextKept(next)
		var msgs []gapMsg
		var err error
		if run < 2 || (kept && upTo == next+1) {
			var m *jetstream.RawStreamMsg
			if m, err = jsapi.LeaderGetRaw(ctx, nc, name, room.DefaultTimeout, map[string]any{"seq": next, "next_by_subj": all}); m != nil {
				msgs = []gapMsg{{seq: m.Sequence, subject: m.Subject, data: m.Data, header: m.Header.Get(checkpoint.AttestationHeader), owner: m.Header.Get(room.HeaderOwner)}}
			}
		} else {
			limit := ckPullMessages
			if kept {
				limit = int(min(uint64(limit), upTo-next))
			}
			msgs, err = c.readBatch(ctx, next, limit)
		}
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("checkpointer: reading the room stream", zap.Uint64("stream_seq", next), zap.Error(err))
				c.mu.Lock()
				c.consErr = err
				c.mu.Unlock()
				wait(time.Second)
			}
			continue
		}
		if len(msgs) == 0 { // nothing at or after next yet
			gapSince, run = time.Time{}, 0
			if !wait(ckIdlePoll) {
				return
			}
			continue
		}
		if !retried && len(msgs) == 1 && c.acked.expects.Load() != gen {
			// The gate announced a batch since the wait was decided: the
			// message read may be its first, stored before its
			// acknowledgement came. Decide again (once: others' messages
			// are read on). A pull of a run is handled as read: dropping
			// it would read it twice.
			retried, gapSince = true, time.Time{}
			continue
		}
		retried, gapSince = false, time.Time{}
		c.mu.Lock()
		c.lastPending, c.lastAt = 0, time.Now()
		for _, m := range msgs {
			c.handleLocked(m.seq, m.subject, m.data, m.header, m.owner, nil)
		}
		last := msgs[len(msgs)-1].seq
		c.next = last + 1
		c.handled.Store(last)
		c.mu.Unlock()
		c.readGaps.Add(uint64(len(msgs)))
		run += len(msgs)
		// A kept batch this read passed, or landed in, is read on from
		// the stream (take wants a batch starting exactly at next).
		c.acked.advance(last + 1)
	}
}

// gapMsg is a message follow read from the stream.
type gapMsg struct {
	seq     uint64
	subject string
	data    []byte
	header  string // its checkpoint.AttestationHeader value
	owner   string // its HeaderOwner value (an owned chain's entry)
	pending uint64 // messages of the room subjects after it, as the read was served
}

// catchUpRead is the read at start: the stream's room messages from the
// first on, in stream order, with batch direct gets (catchUpFetch, which
// fetches the next batch while this one is handled), up to the stream's
// last sequence at start; then follow goes on from there. It creates no
// consumer. It returns when it is over or ctx is done.
func (c *Checkpointer) catchUpRead(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches, end := make(chan []gapMsg, 2), make(chan uint64, 1)
	go c.catchUpFetch(ctx, batches, end)
	for msgs := range batches {
		c.mu.Lock()
		c.handleRun(msgs)
		c.mu.Unlock()
	}
	select {
	case seq := <-end:
		c.mu.Lock()
		c.switchLocked(seq)
		c.mu.Unlock()
	default: // ctx is done
	}
}

// catchUpFetch reads batches for catchUpRead, in stream order, from the
// first message to the stream's last sequence at start, then sends the
// last sequence read on end and closes batches (without end when ctx is
// done). If the replica that served a read has nothing more short of the
// last sequence, the leader is asked whether anything is left: a replica
// that lags is read again after ckIdlePoll; the stream's last messages may
// be on other subjects.
func (c *Checkpointer) catchUpFetch(ctx context.Context, batches chan<- []gapMsg, end chan<- uint64) {
	defer close(batches)
	nc, name, all := c.js.Conn(), c.stream.CachedInfo().Config.Name, c.subjects.All()
	next := uint64(1)
	fail := func(err error) {
		if ctx.Err() == nil {
			c.log.Warn("checkpointer: reading the room stream", zap.Uint64("stream_seq", next), zap.Error(err))
			c.mu.Lock()
			c.consErr = err
			c.mu.Unlock()
			jsapi.Sleep(ctx, time.Second)
		}
	}
	send := func(msgs []gapMsg) bool {
		select {
		case batches <- msgs:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		msgs, err := c.readBatch(ctx, next, ckCatchUpMessages)
		if err != nil {
			fail(err)
			continue
		}
		if len(msgs) > 0 {
			last := msgs[len(msgs)-1]
			if !send(msgs) {
				return
			}
			if last.seq >= c.startSeq {
				end <- last.seq
				return
			}
			next = last.seq + 1
			if last.pending > 0 {
				continue
			}
		}
		m, err := jsapi.LeaderGetRaw(ctx, nc, name, room.DefaultTimeout, map[string]any{"seq": next, "next_by_subj": all})
		switch {
		case err != nil:
			fail(err)
		case m == nil:
			end <- next - 1
			return
		default:
			jsapi.Sleep(ctx, ckIdlePoll)
		}
	}
}

// handleRun handles msgs, read in stream order, as catchUpRead does. c.mu
// is held.
func (c *Checkpointer) handleRun(msgs []gapMsg) {
	for _, m := range msgs {
		c.lastPending, c.lastAt = m.pending, time.Now()
		c.handleLocked(m.seq, m.subject, m.data, m.header, m.owner, nil)
		c.handled.Store(m.seq)
	}
}

// switchLocked ends the catch-up read, which handled the stream up to
// seq: writes may begin, follow goes on at seq+1. c.mu is held.
func (c *Checkpointer) switchLocked(seq uint64) {
	if !c.caughtUp {
		c.caughtUp = true
		c.log.Info("checkpointer caught up with the stream", zap.Uint64("stream_seq", seq), zap.Int("rooms", len(c.rooms)))
	}
	c.next = seq + 1
	close(c.switched)
}

// readBatch reads up to limit messages of the room subjects from stream
// sequence next on, those stored already (it does not wait for more), with
// one batch direct get (ADR-31, "Direct Get": {"seq", "next_by_subj",
// "batch", "max_bytes"} on $JS.API.DIRECT.GET.<stream>; the room stream
// has allow_direct, CheckStreamConfig), so reading needs no consumer: a
// stream whose consumers are at their limit (nats-server's
// default_max_consumers, 1,000 per stream unless the stream or account
// sets one) is read all the same. The byte limit holds at least one
// message of the largest size. None: nothing is there yet (where the read
// was served: any replica may answer).
func (c *Checkpointer) readBatch(ctx context.Context, next uint64, limit int) ([]gapMsg, error) {
	nc := c.js.Conn()
	msgs, err := jsapi.DirectBatch(ctx, nc, c.streamName, jsapi.BatchRequest{Seq: next, NextBySubj: c.subjects.All(), Batch: limit,
		MaxBytes: max(ckPullBytes, 2*int(nc.MaxPayload()))}, room.DefaultTimeout)
	if err != nil {
		return nil, err
	}
	out := make([]gapMsg, len(msgs))
	for i, m := range msgs {
		out[i] = gapMsg{seq: m.Seq, subject: m.Subject, data: m.Data, header: m.Header.Get(checkpoint.AttestationHeader),
			owner: m.Header.Get(room.HeaderOwner), pending: m.Pending}
	}
	return out, nil
}

// ownAttestations holds the attestations the gate made and the reader has
// not seen yet, by batch (the header without its "i/n" suffix), in two
// generations: the older one is dropped when the newer has grown by
// ownGeneration messages or a minute has passed, so an attestation whose
// message never landed costs memory only for a while (a batch seen later
// than that has its signature verified instead). A batch the reader has
// begun to take is never dropped: its messages are stored together, so
// the rest follow, and a batch is admitted as the gate's own whole or not
// at all (a part of a batch cannot be verified on its own).
type ownAttestations struct {
	mu       sync.Mutex
	cur, old map[string]*ownBatch
	curSize  int // messages expected in cur
	since    time.Time
}

// ownBatch is one batch the gate attested: members[i] is message i.
type ownBatch struct {
	members []ownAttestation
	taken   int
}

type ownAttestation struct {
	subject string
	content [32]byte
	set     bool
}

const (
	ownGeneration    = 1 << 16
	ownGenerationAge = time.Minute
)

// splitOwn splits an attestation header the gate made into its batch
// ("<node id> <sig>"), index and count.
func splitOwn(header string) (batch string, index, count int, ok bool) {
	sp := strings.LastIndexByte(header, ' ')
	if sp < 0 {
		return "", 0, 0, false
	}
	is, ns, ok := strings.Cut(header[sp+1:], "/")
	i, err1 := strconv.Atoi(is)
	n, err2 := strconv.Atoi(ns)
	if !ok || err1 != nil || err2 != nil || i < 0 || i >= n || n > checkpoint.MaxBatch {
		return "", 0, 0, false
	}
	return header[:sp], i, n, true
}

func (o *ownAttestations) add(content [32]byte, subject, header string) {
	batch, i, n, ok := splitOwn(header)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur == nil {
		o.cur, o.since = make(map[string]*ownBatch), time.Now()
	}
	b := o.cur[batch]
	if b == nil {
		b = o.old[batch]
	}
	if b == nil {
		if o.curSize >= ownGeneration || time.Since(o.since) > ownGenerationAge {
			o.rotate()
		}
		b = &ownBatch{members: make([]ownAttestation, n)}
		o.cur[batch] = b
		o.curSize += n
	}
	if len(b.members) == n {
		b.members[i] = ownAttestation{subject: subject, content: content, set: true}
	}
}

// rotate drops the old generation but for the batches begun.
func (o *ownAttestations) rotate() {
	next := make(map[string]*ownBatch)
	size := 0
	for k, b := range o.old {
		if b.taken > 0 {
			next[k] = b
			size += len(b.members)
		}
	}
	o.old, o.cur, o.curSize, o.since = o.cur, next, size, time.Now()
}

// take reports whether the gate attested exactly this header for content
// on subject, and forgets it.
func (o *ownAttestations) take(content [32]byte, subject, header string) bool {
	batch, i, n, ok := splitOwn(header)
	if !ok {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, m := range []map[string]*ownBatch{o.cur, o.old} {
		b := m[batch]
		if b == nil || len(b.members) != n {
			continue
		}
		if a := b.members[i]; !a.set || a.subject != subject || a.content != content {
			return false
		}
		b.members[i] = ownAttestation{}
		if b.taken++; b.taken == n {
			delete(m, batch)
		}
		return true
	}
	return false
}

// handleLocked handles the message at stream sequence seq, in stream
// order: data, its attestation header and its HeaderOwner as read, or,
// with own, a message of a batch the gate of this process stored (own its
// content hash; data nil), which is admitted without reading it (the
// caller has ended the batch held open: follow). c.mu is held.
func (c *Checkpointer) handleLocked(seq uint64, subject string, data []byte, header, owner string, own *[32]byte) {
	var err error
	p, ok := c.parsed[subject]
	if !ok {
		if p, err = c.subjects.Parse(subject); err != nil {
			return // not a room subject: nothing of any room's tree
		}
		if len(c.parsed) >= ckSubjectCache {
			clear(c.parsed)
		}
		c.parsed[subject] = p
	}
	r := c.rooms[p.RoomID]
	if r == nil {
		r = &ckRoom{id: p.RoomID, ledger: checkpoint.NewLedger()}
		c.rooms[p.RoomID] = r
	}
	if p.Kind == room.KindCheckpoint {
		c.decide(nil, c.batches.Pass(seq))
		c.readCheckpoint(r, seq, data)
		return
	}
	position := ""
	if p.Kind == room.KindExecution {
		position = checkpoint.RecordPosition(r.execCount)
		r.execCount++
	}
	var content [32]byte
	if own != nil {
		content = *own
	} else {
		content = checkpoint.ContentHash(data)
	}
	q := ckHeld{r: r, seq: seq, subject: subject, leaf: checkpoint.LeafHash(r.id, subject, content)}
	st := checkpoint.Statement{Room: r.id, Subject: subject, Position: position, Content: content}
	switch {
	case own != nil:
		// The gate attested it and the server acknowledged it stored at
		// seq, in a whole batch: a leaf. Its announcement is forgotten.
		c.own.take(content, subject, header)
		c.take(r, q)
	case header == "":
		c.decide(nil, c.batches.Pass(seq))
		c.notLeaf(r, notLeafUnattested, seq, subject, nil)
	case c.own.take(content, subject, header):
		// The gate's own, read from the stream: admitted without its
		// signature checked once its batch is read whole (a journal
		// entry's position is worked out only if the batch turns out to
		// hold messages the gate did not announce).
		if p.Kind == room.KindJournal {
			c.decide(&q, c.batches.Vouch(seq, header, st, data, owner))
		} else {
			c.decide(&q, c.batches.Vouch(seq, header, st, nil, ""))
		}
	default:
		// Another publisher's, or this one's before a restart: verified
		// once its whole batch has been read.
		if p.Kind == room.KindJournal {
			if st.Position, err = checkpoint.EntryPosition(data, owner); err != nil {
				c.decide(nil, c.batches.Pass(seq))
				c.notLeaf(r, notLeafNoEntry, seq, subject, err)
				return
			}
		}
		c.decide(&q, c.batches.Add(seq, header, st))
	}
}

// decide applies the collector's verdicts vs, which decide, in stream
// order, the messages held and then q (nil: a message that is no batch's,
// already told to the collector), all of them or all but the batch it
// holds open now, and keeps the undecided ones held. c.mu is held.
func (c *Checkpointer) decide(q *ckHeld, vs []checkpoint.BatchVerdict) {
	all := c.held
	if q != nil {
		all = append(all, *q)
	}
	i := 0
	for _, v := range vs {
		for i < len(all) && all[i].seq != v.ID {
			i++ // cannot happen: verdicts come in stream order, one per message
		}
		if i == len(all) {
			break
		}
		h := all[i]
		i++
		if v.Err != nil {
			c.notLeaf(h.r, notLeafRefused, h.seq, h.subject, v.Err)
			continue
		}
		c.take(h.r, h)
	}
	keep := all[len(all)-c.batches.Pending():]
	n := copy(all, keep)
	clear(all[n:])
	c.held = all[:n]
}

// settleStuck refuses the batches still incomplete once the reader has
// handled the last message on the room subjects, as the stream leader has
// it, and nothing came for a second: an atomic batch is stored whole
// before any of it can be read, so they never complete (a forged header).
// NumPending alone does not tell: a message of a batch just stored may be
// delivered saying fewer of it follow. With force (Stop, after catchUp),
// they are refused at once.
func (c *Checkpointer) settleStuck(ctx context.Context, force bool) {
	c.mu.Lock()
	quiet := c.batches.Pending() > 0 && c.lastPending == 0 && time.Since(c.lastAt) >= time.Second
	c.mu.Unlock()
	if !force && !quiet {
		return
	}
	if !force {
		last, err := jsapi.LeaderGetRaw(ctx, c.js.Conn(), c.stream.CachedInfo().Config.Name, room.DefaultTimeout, map[string]any{"last_by_subj": c.subjects.All()})
		if err != nil || last == nil || c.handled.Load() < last.Sequence {
			return // not read whole yet (or no answer): later
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.batches.Pending() > 0 {
		c.decide(nil, c.batches.Flush())
	}
}

// take adds an admitted message to r's tree.
func (c *Checkpointer) take(r *ckRoom, q ckHeld) {
	r.ledger.Append(q.leaf)
	if r.grewAt.IsZero() {
		r.grewAt = time.Now()
	}
	if r.ledger.Size()-max(r.ledger.Covered(), r.written) >= c.every {
		select {
		case c.due <- struct{}{}:
		default:
		}
	}
}

// notLeaf counts and logs a message that is no leaf: the room's first at
// warn level, later ones at debug level, so writing into a room raw cannot
// flood the log (roompub_checkpoint_unadmitted_messages_total counts them
// all).
func (c *Checkpointer) notLeaf(r *ckRoom, what string, seq uint64, subject string, err error) {
	c.m.unadmitted.Inc()
	log := c.log.Debug
	if !r.warned {
		r.warned, log = true, c.log.Warn
		what += " (the room's first; later ones are logged at debug level)"
	}
	log(what, zap.String("room", r.id), zap.Uint64("stream_seq", seq), zap.String("subject", subject), zap.Error(err))
}

// readCheckpoint checks a checkpoint read at seq against the room's tree,
// which holds every leaf before it in stream order, by the readers' rules
// (checkpoint.(*Ledger).Check: no smaller than the latest that matched, no
// larger than the tree, consistent with the latest, the tree's root at its
// size); one that matches becomes the latest.
func (c *Checkpointer) readCheckpoint(r *ckRoom, seq uint64, data []byte) {
	r.ckptSeq = max(r.ckptSeq, seq)
	ck, err := checkpoint.Parse(data, r.id, c.trust)
	if err != nil {
		// Not a checkpoint a trusted publisher signed for this room:
		// anyone who can get a message onto the subject could write it,
		// so it tells nothing of the room and is set aside. Only a
		// trusted signature makes a contradiction evidence of a fork.
		c.setAside(r, seq, data, err)
		return
	}
	if err := r.ledger.Check(ck); err != nil {
		if r.bad == "" {
			c.m.blocked.Inc()
		}
		r.bad = err.Error()
		c.log.Error("checkpointer: the room's latest checkpoint contradicts its messages: no checkpoint will be written for the room",
			zap.String("room", r.id), zap.Uint64("stream_seq", seq), zap.String("signer", ck.Signer), zap.String("reason", r.bad))
		return
	}
	if err := r.ledger.Accept(ck, seq); err != nil { // cannot fail: Check passed
		c.log.Error("checkpointer: accepting the room's checkpoint", zap.String("room", r.id), zap.Error(err))
		return
	}
	if r.bad != "" {
		c.m.blocked.Dec()
		c.log.Info("checkpointer: the room's latest checkpoint matches its messages again", zap.String("room", r.id), zap.Uint64("stream_seq", seq))
	}
	r.bad = ""
	if ck.Size == r.ledger.Size() {
		r.grewAt = time.Time{}
	}
}

// Reasons a message on a checkpoint subject is set aside, the values of
// the reason label of roompub_checkpoint_set_aside_total.
const (
	asideMalformed    = "malformed"     // not a signed note in the form Sign writes
	asideOtherRoom    = "other_room"    // its origin line names another room
	asideUntrusted    = "untrusted"     // no signature by a trusted publisher
	asideBadSignature = "bad_signature" // a signature under a trusted name that does not verify
)

// setAside passes over the message at seq on r's checkpoint subject, which
// is not a checkpoint of r signed by a trusted publisher (err says why): it
// is counted, logged (the room's first at warn level, later ones at debug
// level, so writing junk onto the subject cannot flood the log) and
// otherwise ignored: the room's latest checkpoint stays the last valid
// one, and the room's checkpoints go on. r.ckptSeq has moved past it: the
// next write expects it as the subject's last message. c.mu is held.
func (c *Checkpointer) setAside(r *ckRoom, seq uint64, data []byte, err error) {
	why, signer := asideMalformed, ""
	var badSig *note.InvalidSignatureError
	u, uerr := checkpoint.ParseUnverified(data)
	if uerr == nil {
		signer = u.Signer
	}
	switch {
	case uerr == nil && u.Room != r.id:
		why = asideOtherRoom
	case errors.Is(err, checkpoint.ErrUntrustedPublisher):
		why = asideUntrusted
	case errors.As(err, &badSig):
		why = asideBadSignature
	}
	c.m.setAside.WithLabelValues(why).Inc()
	log, msg := c.log.Debug, "checkpointer: a message on the room's checkpoint subject is not a checkpoint signed by a trusted publisher: set aside"
	if !r.asideWarned {
		r.asideWarned, log = true, c.log.Warn
		msg += " (the room's first; later ones are logged at debug level)"
	}
	log(msg, zap.String("room", r.id), zap.Uint64("stream_seq", seq), zap.String("why", why), zap.String("signer", signer), zap.Error(err))
}

// writer writes due checkpoints until ctx is done.
func (c *Checkpointer) writer(ctx context.Context) {
	defer close(c.wdone)
	tick := time.NewTicker(min(max(c.interval/4, 10*time.Millisecond), time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			c.settleStuck(ctx, false)
		case <-c.due:
		}
		_ = c.writeDue(ctx, false)
	}
}

// dueCheckpoint is a checkpoint to write: a room's tree as it was.
type dueCheckpoint struct {
	r      *ckRoom
	size   uint64
	root   [32]byte
	expect uint64
}

// writeDue writes the checkpoint of every room that is due (every room
// whose tree grew, with final) and whose lease it holds or takes. It
// returns the errors of writes that failed.
func (c *Checkpointer) writeDue(ctx context.Context, final bool) error {
	now := time.Now()
	var due []dueCheckpoint
	c.mu.Lock()
	if !c.caughtUp {
		c.mu.Unlock()
		return nil
	}
	for _, r := range c.rooms {
		size, covered := r.ledger.Size(), max(r.ledger.Covered(), r.written)
		if size <= covered || r.bad != "" || (!final && now.Before(r.waitTill)) {
			continue
		}
		if r.lease.rev == 0 && now.Before(r.lease.retryAt) {
			continue // another publisher's lease, for now (lease is the writer's: this is it)
		}
		if final || size-covered >= c.every || now.Sub(r.grewAt) >= c.interval {
			root, err := r.ledger.RootAt(size)
			if err != nil { // cannot happen: the base is a checkpoint's size, below size
				c.log.Error("checkpointer: the room's root", zap.String("room", r.id), zap.Error(err))
				continue
			}
			due = append(due, dueCheckpoint{r: r, size: size, root: root, expect: r.ckptSeq})
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, d := range due {
		if ctx.Err() != nil {
			break
		}
		if !c.holdLease(ctx, d.r) {
			continue
		}
		if err := c.write(ctx, d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// write appends one checkpoint.
func (c *Checkpointer) write(ctx context.Context, d dueCheckpoint) error {
	r := d.r
	signed, err := checkpoint.Sign(c.signer, r.id, d.size, d.root)
	if err != nil {
		c.log.Error("checkpointer: cannot sign the room's checkpoint", zap.String("room", r.id), zap.Error(err))
		c.mu.Lock()
		r.waitTill = time.Now().Add(c.interval)
		c.mu.Unlock()
		return err
	}
	msg := &nats.Msg{Subject: c.subjects.Checkpoint(r.id), Data: signed, Header: nats.Header{}}
	// From content, as every roompub append (docs/design.md, "Appends and
	// races"): the same
	// checkpoint written twice is stored once.
	msg.Header.Set(jetstream.MsgIDHeader, "ckpt:"+hex.EncodeToString(d.root[:])+":"+strconv.FormatUint(d.size, 10)+":"+room.RoomToken(r.id))
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(d.expect, 10))
	pctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	ack, err := c.js.PublishMsg(pctx, msg, jetstream.WithRetryAttempts(0))
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		r.written = max(r.written, d.size)
		r.ckptSeq = max(r.ckptSeq, ack.Sequence)
		if r.ledger.Size() == d.size {
			r.grewAt = time.Time{}
		} else {
			r.grewAt = time.Now()
		}
		if !ack.Duplicate {
			c.m.written.Inc()
			c.log.Debug("checkpoint written", zap.String("room", r.id), zap.Uint64("size", d.size), zap.Uint64("stream_seq", ack.Sequence))
		}
		return nil
	case jsapi.IsWrongLastSequence(err):
		// A checkpoint this reader has not read yet: it is checked when
		// read, and the room is decided again after.
		r.waitTill = time.Now().Add(time.Second)
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("checkpoint of %s at size %d: %w", r.id, d.size, err)
	default:
		r.waitTill = time.Now().Add(min(c.interval, 5*time.Second))
		c.log.Warn("checkpointer: writing the room's checkpoint failed", zap.String("room", r.id), zap.Uint64("size", d.size), zap.Error(err))
		return fmt.Errorf("checkpoint of %s at size %d: %w", r.id, d.size, err)
	}
}

// DefaultLeaseSkew is how far a lease's signed time may lie ahead of this
// publisher's clock, and past the lease bucket's TTL, before the lease is
// not honoured (clocks of publishers differ by that much at most).
const DefaultLeaseSkew = 5 * time.Second

// Reasons a lease value is not honoured, the values of the reason label of
// roompub_checkpoint_leases_overridden_total.
const (
	leaseUnsigned  = "unsigned"  // not a lease statement whose signature verifies for the key (a bare node id included)
	leaseUntrusted = "untrusted" // signed by a key that is not trusted
	leaseStale     = "stale"     // older than the bucket's TTL plus the skew: replayed
	leaseFuture    = "future"    // later than now plus the skew
)

// judgeLease decides whether the lease value of key, read at now, is
// honoured: a lease statement signed by a trusted publisher for key
// (checkpoint.SignLease) whose time is within the bucket's TTL plus the
// skew before now and no more than the skew after it. It returns "" and
// the holder, or the reason it is not honoured and the error behind it.
func (c *Checkpointer) judgeLease(key string, value []byte, now time.Time) (why, holder string, err error) {
	l, err := c.trust.VerifyLease(key, value)
	skew := time.Duration(c.leaseSkew.Load())
	switch {
	case errors.Is(err, checkpoint.ErrUntrustedPublisher):
		return leaseUntrusted, "", err
	case err != nil:
		return leaseUnsigned, "", err
	case l.At.Before(now.Add(-c.ttl - skew)):
		return leaseStale, l.NodeID, fmt.Errorf("taken or renewed at %s, more than the TTL (%s) and %s before now", l.At.Format(time.RFC3339Nano), c.ttl, skew)
	case l.At.After(now.Add(skew)):
		return leaseFuture, l.NodeID, fmt.Errorf("taken or renewed at %s, more than %s after now", l.At.Format(time.RFC3339Nano), skew)
	}
	return "", l.NodeID, nil
}

// holdLease reports whether this checkpointer holds r's lease now, renewing
// it when a third of the TTL has passed and taking it when it is free or
// its value is not honoured (judgeLease): then by revision, so a lease
// another publisher took meanwhile is left alone.
func (c *Checkpointer) holdLease(ctx context.Context, r *ckRoom) bool {
	l := &r.lease
	now := time.Now()
	key := LeaseKey(r.id)
	lctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	defer cancel()
	if l.rev != 0 && now.Sub(l.renewedAt) < c.ttl/3 {
		return true
	}
	value, err := checkpoint.SignLease(c.key, key, now)
	if err != nil { // cannot happen: LeaseKey holds no space or control character
		c.log.Error("checkpointer: cannot sign the room's lease", zap.String("room", r.id), zap.Error(err))
		return false
	}
	if l.rev != 0 {
		rev, err := c.kv.Update(lctx, key, []byte(value), l.rev)
		if err == nil {
			l.rev, l.renewedAt = rev, now
			return true
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !jsapi.IsWrongLastSequence(err) {
			// No answer: the lease may still be ours; do not write on it.
			if ctx.Err() == nil {
				c.log.Warn("checkpointer: renewing a lease failed", zap.String("room", r.id), zap.Error(err))
			}
			return false
		}
		// Lapsed, or taken by another publisher: take it again if free.
		l.rev = 0
		c.m.leases.Dec()
		c.log.Info("checkpointer: lease lapsed", zap.String("room", r.id))
	}
	if now.Before(l.retryAt) {
		return false
	}
	rev, err := c.kv.Create(lctx, key, []byte(value))
	if errors.Is(err, jetstream.ErrKeyExists) {
		rev, err = c.overrideLease(lctx, r, key, value, now)
	}
	if err != nil {
		l.retryAt = now.Add(c.ttl / 3)
		if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
			c.log.Warn("checkpointer: taking a lease failed", zap.String("room", r.id), zap.Error(err))
		}
		return false
	}
	if rev == 0 {
		// Not honoured, and changed before it could be taken over: try
		// again at the next write (a writer of junk goes on writing).
		return false
	}
	l.rev, l.renewedAt = rev, now
	c.m.leases.Inc()
	c.log.Info("checkpointer: lease taken", zap.String("room", r.id), zap.String("key", key))
	return true
}

// overrideLease reads the lease of key that Create found and takes it over
// with value, by revision, when judgeLease does not honour it. It returns
// the new revision; 0 and no error when the key changed before the update
// (decided again at the next write); ErrKeyExists when the lease is
// honoured.
func (c *Checkpointer) overrideLease(ctx context.Context, r *ckRoom, key, value string, now time.Time) (uint64, error) {
	en, err := c.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil // lapsed or released since Create
	}
	if err != nil {
		return 0, err
	}
	why, holder, verr := c.judgeLease(key, en.Value(), now)
	if why == "" {
		return 0, jetstream.ErrKeyExists
	}
	rev, err := c.kv.Update(ctx, key, []byte(value), en.Revision())
	if errors.Is(err, jetstream.ErrKeyExists) || jsapi.IsWrongLastSequence(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	c.m.overridden.WithLabelValues(why).Inc()
	c.log.Warn("checkpointer: the room's lease was not held by a trusted publisher: taken over",
		zap.String("room", r.id), zap.String("key", key), zap.Uint64("revision", en.Revision()), zap.String("why", why),
		zap.String("holder", holder), zap.Error(verr))
	return rev, nil
}

// Stop writes the final checkpoints and ends the checkpointer: it stops
// the writer, reads the stream up to its last sequence (the gate should be
// stopped first), writes the checkpoint of every room whose tree grew and
// whose lease it holds or takes, and releases its leases. ctx bounds all
// of it. It returns the errors of what could not be done.
func (c *Checkpointer) Stop(ctx context.Context) error {
	var err error
	c.stopOnce.Do(func() { err = c.stop(ctx) })
	return err
}

func (c *Checkpointer) stop(ctx context.Context) error {
	c.stopW()
	<-c.wdone
	var errs []error
	if err := c.catchUp(ctx); err != nil {
		errs = append(errs, fmt.Errorf("final checkpoints: %w", err))
	}
	c.stopF()
	<-c.fdone
	c.settleStuck(ctx, true)
	if len(errs) == 0 {
		errs = append(errs, c.writeDue(ctx, true))
	}
	// Release the leases, so another publisher need not wait for the TTL.
	c.mu.Lock()
	var held []*ckRoom
	for _, r := range c.rooms {
		if r.lease.rev != 0 {
			held = append(held, r)
		}
	}
	c.mu.Unlock()
	for _, r := range held {
		lctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
		c.releaseLease(lctx, r)
		cancel()
		r.lease.rev = 0
		c.m.leases.Dec()
	}
	c.log.Info("checkpointer stopped")
	return errors.Join(errs...)
}

// releaseLease deletes r's lease by the revision this checkpointer last
// wrote. A lease that is no longer at that revision lapsed (its TTL ran
// out since the last renewal: a quiet room's lease is renewed only when a
// checkpoint is due) or was taken over by another publisher: there is
// nothing of ours to release, which is normal at shutdown and logged at
// debug. Any other failure is a warning: the lease lingers until its TTL.
func (c *Checkpointer) releaseLease(ctx context.Context, r *ckRoom) {
	err := c.kv.Delete(ctx, LeaseKey(r.id), jetstream.LastRevision(r.lease.rev))
	switch {
	case err == nil:
		c.log.Debug("checkpointer: lease released", zap.String("room", r.id))
	case errors.Is(err, jetstream.ErrKeyExists) || jsapi.IsWrongLastSequence(err):
		c.log.Debug("checkpointer: lease not released: it lapsed or another publisher took it over",
			zap.String("room", r.id), zap.Uint64("revision", r.lease.rev))
	default:
		c.log.Warn("checkpointer: releasing a lease failed: it lingers until its TTL",
			zap.String("room", r.id), zap.Error(err))
	}
}

// catchUp waits until the reader has handled the stream's last message.
func (c *Checkpointer) catchUp(ctx context.Context) error {
	ictx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	info, err := c.stream.Info(ictx)
	cancel()
	if err != nil {
		return err
	}
	last := info.State.LastSeq
	for c.handled.Load() < last {
		if c.js.Conn().IsClosed() {
			return fmt.Errorf("read %d of %d messages: the connection is closed", c.handled.Load(), last)
		}
		if !jsapi.Sleep(ctx, 10*time.Millisecond) {
			c.mu.Lock()
			cerr := c.consErr
			c.mu.Unlock()
			return fmt.Errorf("read %d of %d messages: %w (%v)", c.handled.Load(), last, ctx.Err(), cerr)
		}
	}
	c.mu.Lock()
	c.caughtUp = true
	c.mu.Unlock()
	return nil
}

// checkpointMetrics are the checkpointer's Prometheus metrics.
type checkpointMetrics struct {
	written    prometheus.Counter
	leases     prometheus.Gauge
	blocked    prometheus.Gauge
	unadmitted prometheus.Counter
	setAside   *prometheus.CounterVec
	overridden *prometheus.CounterVec
}

func newCheckpointMetrics(reg prometheus.Registerer) (*checkpointMetrics, error) {
	m := &checkpointMetrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "roompub", Name: "checkpoints_written_total", Help: "Signed room checkpoints this publisher wrote.",
		}),
		leases: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "roompub", Name: "checkpoint_leases_held", Help: "Room checkpoint leases this publisher holds.",
		}),
		blocked: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "roompub", Name: "checkpoint_rooms_blocked",
			Help: "Rooms whose latest checkpoint contradicts their messages as this publisher reads them: it writes none for them.",
		}),
		unadmitted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "roompub", Name: "checkpoint_unadmitted_messages_total",
			Help: "Messages on room subjects without a valid attestation by a trusted publisher: not leaves of any checkpoint.",
		}),
		setAside: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "roompub", Name: "checkpoint_set_aside_total",
			Help: "Messages on room checkpoint subjects that are not checkpoints of the room signed by a trusted publisher, by reason " +
				"(malformed, other_room, untrusted, bad_signature): set aside, they neither count as the room's latest checkpoint nor stop its checkpoints.",
		}, []string{"reason"}),
	}
	m.overridden = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "roompub", Name: "checkpoint_leases_overridden_total",
		Help: "Room checkpoint leases this publisher took over because their value was not honoured, by reason " +
			"(unsigned, untrusted, stale, future).",
	}, []string{"reason"})
	for _, why := range []string{asideMalformed, asideOtherRoom, asideUntrusted, asideBadSignature} {
		m.setAside.WithLabelValues(why)
	}
	for _, why := range []string{leaseUnsigned, leaseUntrusted, leaseStale, leaseFuture} {
		m.overridden.WithLabelValues(why)
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.written, m.leases, m.blocked, m.unadmitted, m.setAside, m.overridden} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}
