package checkpointer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
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

// ErrCheckpointer is wrapped by Start for unusable options (among them a
// LeafDir that cannot hold a file: CheckLeafDir).
var ErrCheckpointer = errors.New("checkpointer")

// Options configures a Checkpointer. The zero value of each
// field is its default, except Key, which is required.
type Options struct {
	Stream   string        // room stream, default DefaultStream
	Subjects room.Subjects // its layout
	// Key signs the checkpoints: C2SP signed notes named by the room's
	// origin (checkpoint.RoomOrigin) when Origin is set, else by Key's
	// node id with the room id as origin (the form written before
	// deployments had origins; docs/checkpoints.md, "Origins").
	Key *events.HostKey
	// Origin is the deployment's origin (checkpoint.CheckOrigin), e.g.
	// "evidence.example.org/roompub"; "" writes the room-id form and keeps
	// no deployment log.
	Origin string
	// Deployment configures the deployment log, kept with an Origin.
	Deployment DeploymentOptions
	// LogKeeper, on a deployment of several partitions (docs/design.md,
	// "Partitions"), is the checkpointer of another room stream of the
	// same deployment that keeps the deployment log: this one offers it
	// its room checkpoints, and keeps no log of its own. It must be
	// stopped after this one. Nil: this one keeps the log (with Origin).
	LogKeeper *Checkpointer
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
	// OnContradiction, when set, is told when a room's latest checkpoint
	// signed by a trusted publisher contradicts the messages the stream
	// holds (reason set: the store lost or changed messages it
	// acknowledged; no checkpoint is written for the room), and when it
	// matches them again (reason ""), before the checkpointer logs it.
	// Called with the checkpointer's lock held: it must not block or call
	// the checkpointer.
	OnContradiction func(roomID, reason string)
	// FullRead reads every room from its first message at start instead of
	// resuming it from its latest checkpoint (docs/checkpoints.md,
	// "Resuming at start"): the whole stream is read again, and a store
	// that lost or changed acknowledged messages before the rooms' latest
	// checkpoints is found (OnContradiction), as a reader's audit finds it.
	FullRead bool
	// ReadWhole names rooms read from their first message at start even
	// where they could be resumed: rooms an earlier run found contradicting
	// their checkpoint (OnContradiction), whose damage lies before that
	// checkpoint, where a resumed read would not see it. The read finds the
	// contradiction again (OnContradiction with a reason) or, once the
	// catch-up read is done, tells that the room matches (reason "").
	ReadWhole []string

	// LeafDir is where a room's tree writes the leaves no checkpoint
	// covers once they pass its window (checkpoint.LeafBounds: twice
	// Every, from checkpoint.DefaultLeafWindow to 1,048,576 leaves); "" is
	// os.TempDir(). Start refuses one it cannot create a file in
	// (CheckLeafDir). A room whose
	// checkpoints keep up writes there only during the catch-up read at
	// start; one whose checkpoints stop (blocked, failing writes) keeps a
	// file of 32 bytes a leaf instead of that much memory.
	LeafDir string

	// Test seams, set from export_test.go: catchUpBatch sizes the
	// catch-up read's gets (0: ckCatchUpMessages), and with catchUpPause
	// the catch-up read waits on it after each; beforeFinal runs in Stop
	// once the stream is no longer followed, before the final writes.
	catchUpBatch int
	catchUpPause <-chan struct{}
	beforeFinal  func()
}

// Checkpointer writes the signed checkpoints of every room of one stream
// (docs/checkpoints.md). At start it takes each room whose latest
// checkpoint it signed with a resume header (checkpoint.ResumeHeader)
// from that checkpoint, verified (resume), and every other room from its
// first message. It reads the stream in stream order, from the lowest
// sequence a room still needs, with batch direct gets up to the stream's
// end at start (catchUpRead),
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
	dep        *deployment // the deployment log; nil without an origin
	depShared  bool        // dep is another partition's checkpointer's (LogKeeper)
	// stopping is set by Stop before the final checkpoints, which
	// finalWrites keeps for the deployment log (c.mu).
	stopping    bool
	finalWrites []srcCheckpoint
	key         *events.HostKey // signs the leases
	nodeID      string
	trust       *checkpoint.Trust
	trustDigest string // checkpoint.TrustDigest(trust), for the resume headers
	every       uint64
	interval    time.Duration
	// bounds bound each room's leaves in memory (Options.LeafDir).
	bounds checkpoint.LeafBounds
	ttl    time.Duration
	m      *checkpointMetrics

	own ownAttestations
	// acked holds the gate's batches the server acknowledged, whole, by
	// first stream sequence, and the batches it announced and has not had
	// acknowledged: after catch-up the reader takes its own batches from
	// there and reads only the gaps between them (follow).
	acked ackedOwn

	switched chan struct{} // closed when the catch-up read ends and follow begins
	// readFrom is the stream seq the catch-up read starts at (resume);
	// catchUpMsgs counts the messages it read; cdone is closed when it
	// returns.
	readFrom    uint64
	catchUpMsgs atomic.Uint64
	cdone       chan struct{}
	// catchUpBatch, catchUpPause and beforeFinal: Options'.
	catchUpBatch int
	catchUpPause <-chan struct{}
	beforeFinal  func()
	stopF        context.CancelFunc
	fdone        chan struct{}
	// next is the stream sequence follow handles next (c.mu); fromMemory
	// and readGaps count follow's messages taken from acked (whole
	// batches) and read.
	next       uint64
	fromMemory atomic.Uint64
	readGaps   atomic.Uint64
	gapWait    atomic.Int64  // ckGapWait; tests shorten or lengthen it
	leaseSkew  atomic.Int64  // DefaultLeaseSkew; tests shorten it
	handled    atomic.Uint64 // stream seq of the last message handled
	// seen is the last stream sequence known stored: the stream's at
	// start, raised by the reads (a message's sequence and what the
	// server said follows it) and the gate's acknowledgements.
	seen     atomic.Uint64
	due      chan struct{} // a room reached Every: write now
	stopW    context.CancelFunc
	wdone    chan struct{}
	stopOnce sync.Once

	mu    sync.Mutex
	rooms map[string]*ckRoom
	// lost holds the rooms Block named (room -> why): no checkpoint is
	// written for them.
	lost map[string]string
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
	// readErrLogged is the last read error logged at warn level (c.mu),
	// readFailing whether the last read failed (readFailed, readOK).
	readErrLogged string
	readFailing   atomic.Bool
	// onContradiction is Options.OnContradiction; nil: none.
	onContradiction func(roomID, reason string)
	readWhole       []string // Options.ReadWhole
}

// readBudget is ctx for Stop's read of the stream: two thirds of the time
// ctx has left, the rest kept for the final writes.
func readBudget(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, dl.Add(-time.Until(dl)/3))
}

// CheckLeafDir returns why dir cannot hold the rooms' files of leaves
// (Options.LeafDir, --checkpoint-leaf-dir), or nil: it must be a
// directory this process can create a file in (a probe file is made and
// removed); "" (os.TempDir()) is not checked. Errors wrap ErrCheckpointer.
func CheckLeafDir(dir string) error {
	if dir == "" {
		return nil
	}
	bad := func(err error) error {
		return fmt.Errorf("%w: the directory for leaves no checkpoint covers yet (--checkpoint-leaf-dir, Options.LeafDir) %s: %w", ErrCheckpointer, dir, err)
	}
	if fi, err := os.Stat(dir); err != nil {
		return bad(err)
	} else if !fi.IsDir() {
		return bad(errors.New("not a directory"))
	}
	f, err := os.CreateTemp(dir, "roompub-leaves-probe-*")
	if err != nil {
		return bad(err)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return bad(err)
	}
	return nil
}

// maxLeafWindow caps a room's leaves in memory past its latest checkpoint
// (32 MiB of hashes), whatever Options.Every.
const maxLeafWindow = 1 << 20

// ckSubjectCache bounds the checkpointer's cache of parsed subjects (one
// per chain and two per room); it is cleared when full.
const ckSubjectCache = 4096

// ckRoom is the checkpointer's view of one room. Fields under
// Checkpointer.mu, but lease: the writer's alone.
type ckRoom struct {
	id string
	// signer signs the room's checkpoints under its origin; nil until the
	// first write, and always nil without a deployment origin (the
	// checkpointer's signer, named by the node id, signs then).
	signer note.Signer
	// ledger is the room's tree (lean: the compact range of what the
	// latest checkpoint that matched covers, the leaf hashes after it) and
	// that checkpoint.
	ledger    *checkpoint.Ledger
	execCount uint64 // messages read on the exec subject (the next record's position)
	// ckptSeq is the checkpoint subject's last stream sequence read or
	// written: a write expects it.
	ckptSeq uint64
	written uint64 // size of this checkpointer's last write
	bad     string // why the latest checkpoint contradicts the tree; "" if it does not
	// treeErr: the tree's leaves written to its file cannot be read back
	// (loseTree); nil while the tree is whole.
	treeErr  error
	grewAt   time.Time
	waitTill time.Time // after a failed write
	warned   bool      // a message that is no leaf was logged at warn level
	// asideWarned: a message set aside on the checkpoint subject was
	// logged at warn level; spillWarned: the tree's leaves could not be
	// written to its file (checkpoint.LeafStats.WriteErr).
	asideWarned bool
	spillWarned bool
	lease       lease
	// from and resumedAt: the room was resumed (resume) from its
	// checkpoint at stream seq resumedAt and is read from from on (its
	// first message after the checkpoint's last leaf, checkpoints aside);
	// messages before from, checkpoints before resumedAt, are passed over.
	// Zero: the room is read from its first message.
	from, resumedAt uint64
	// leafSeq and leafExec: the stream seq of the tree's last leaf and
	// execCount as it was read (the resume header of a checkpoint of the
	// whole tree).
	leafSeq, leafExec uint64
}

// ckHeld is a room's attested message whose batch is not decided yet.
type ckHeld struct {
	r       *ckRoom
	seq     uint64
	subject string
	leaf    [32]byte // its leaf hash
	exec    uint64   // r.execCount once it was read
}

// Start creates the lease bucket if needed, resumes the rooms from their
// latest checkpoints where it can (resume; all of them are read from
// their first message with Options.FullRead), starts reading the room
// stream from the lowest sequence a room needs and starts the writer. Stop
// ends it.
func Start(ctx context.Context, nc *nats.Conn, o Options) (*Checkpointer, error) {
	if o.Key == nil {
		return nil, fmt.Errorf("%w: a publisher key is required", ErrCheckpointer)
	}
	trust, err := checkpoint.NewTrust(append([]string{o.Key.NodeID()}, o.TrustedPublishers...)...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpointer, err)
	}
	if o.Origin != "" {
		if trust, err = trust.WithOrigin(o.Origin); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCheckpointer, err)
		}
	}
	signer, err := checkpoint.NewNoteSigner(o.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpointer, err)
	}
	c := &Checkpointer{log: o.Logger, subjects: o.Subjects, signer: signer, nodeID: o.Key.NodeID(), trust: trust,
		every: uint64(o.Every), interval: o.Interval, due: make(chan struct{}, 1), wdone: make(chan struct{}),
		rooms: map[string]*ckRoom{}, parsed: map[string]room.Parsed{}, lost: map[string]string{},
		switched: make(chan struct{}), fdone: make(chan struct{}), cdone: make(chan struct{})}
	c.acked.init()
	c.gapWait.Store(int64(ckGapWait))
	c.leaseSkew.Store(int64(DefaultLeaseSkew))
	c.key = o.Key
	c.onContradiction = o.OnContradiction
	c.readWhole = slices.Clone(o.ReadWhole)
	c.batches = checkpoint.NewBatchCollector(trust)
	c.trustDigest = checkpoint.TrustDigest(trust)
	if c.log == nil {
		c.log = zap.NewNop()
	}
	if o.Every <= 0 {
		c.every = DefaultCheckpointEvery
	}
	if err := CheckLeafDir(o.LeafDir); err != nil {
		return nil, err
	}
	// Twice Every: a room whose checkpoints keep up holds no more, so
	// only a room whose checkpoints stopped writes its leaves out (or,
	// past the cap, one whose Every is over half a million).
	c.bounds = checkpoint.LeafBounds{Window: int(min(max(2*c.every, checkpoint.DefaultLeafWindow), maxLeafWindow)), Dir: o.LeafDir}
	if c.interval <= 0 {
		c.interval = DefaultCheckpointInterval
	}
	if c.m, err = newCheckpointMetrics(o.Registerer, c.lag, o.LogKeeper == nil); err != nil {
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
	if o.LogKeeper != nil {
		if o.LogKeeper.dep == nil {
			return nil, fmt.Errorf("%w: the log keeper keeps no deployment log", ErrCheckpointer)
		}
		c.dep, c.depShared = o.LogKeeper.dep, true
	} else if o.Origin != "" {
		if err := c.startDeployment(cctx, o); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCheckpointer, err)
		}
	}
	info, err := c.stream.Info(cctx)
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrCheckpointer, name, err)
	}
	c.startSeq = info.State.LastSeq
	c.seen.Store(c.startSeq)
	c.caughtUp = c.startSeq == 0
	c.readFrom = 1
	c.catchUpBatch, c.catchUpPause, c.beforeFinal = cmp.Or(o.catchUpBatch, ckCatchUpMessages), o.catchUpPause, o.beforeFinal
	if c.startSeq > 0 && !o.FullRead {
		c.readFrom = c.resume(ctx)
	}
	fctx, stopF := context.WithCancel(context.Background())
	c.stopF = stopF
	go c.follow(fctx)
	if c.startSeq == 0 {
		c.next = 1
		close(c.switched)
		close(c.cdone)
	} else {
		go c.catchUpRead(fctx)
	}
	wctx, stopW := context.WithCancel(context.Background())
	c.stopW = stopW
	go c.writer(wctx)
	if c.dep != nil && !c.depShared {
		go c.deploymentLoop(wctx)
	}
	c.log.Info("checkpointer started", zap.String("publisher", c.nodeID), zap.Strings("trusted_publishers", trust.NodeIDs()),
		zap.Uint64("every", c.every), zap.Duration("interval", c.interval), zap.String("lease_bucket", leaseBucketName(o)), zap.Duration("lease_ttl", c.ttl))
	return c, nil
}

// Stop writes the final checkpoints and ends the checkpointer: it stops
// the writer, reads the stream up to its last sequence (the gate should be
// stopped first), writes the checkpoint of every room whose tree grew and
// whose lease it holds or takes, and releases its leases. ctx bounds all
// of it. When ctx has a deadline, the read gets two thirds of the time
// left: if it has not reached the stream's end by then (a stop during the
// catch-up read at start), the checkpoints written are those of what was
// read, each room's tree on whole atomic batches, and the error says how
// far the read got. It returns the errors of what could not be done.
func (c *Checkpointer) Stop(ctx context.Context) error {
	var err error
	c.stopOnce.Do(func() { err = c.stop(ctx) })
	return err
}

func (c *Checkpointer) stop(ctx context.Context) error {
	c.stopW()
	<-c.wdone
	var errs []error
	rctx, cancel := readBudget(ctx)
	err := c.catchUp(rctx)
	cancel()
	// prefix: the read fell short of the stream's end, but there is time
	// and a connection left to write what was read.
	prefix := err != nil && ctx.Err() == nil && !c.js.Conn().IsClosed()
	if err != nil {
		errs = append(errs, fmt.Errorf("final checkpoints: %w", err))
	}
	c.stopF()
	<-c.fdone
	<-c.cdone
	if !prefix {
		// A batch still open at the stream's end never completes. After a
		// prefix the batch the read is in the middle of is left alone: it
		// was not read whole, and no checkpoint covers it.
		c.settleStuck(ctx, true)
	}
	c.mu.Lock()
	c.stopping = true
	if prefix {
		c.caughtUp = true
	}
	c.mu.Unlock()
	if c.beforeFinal != nil {
		c.beforeFinal()
	}
	switch {
	case len(errs) == 0:
		errs = append(errs, c.writeDue(ctx, true))
	case prefix:
		c.log.Warn("checkpointer: stopped before reading the stream to its end: writing the checkpoints of what was read",
			zap.Uint64("stream_seq", c.handled.Load()), zap.Error(err))
		if werr := c.writeDue(ctx, true); werr != nil {
			errs = append(errs, werr)
		}
	}
	if d := c.dep; d != nil && c.depShared {
		c.offerFinal(d)
	} else if d != nil {
		<-d.done
		c.offerFinal(d)
		if len(errs) == 0 || errs[0] == nil {
			if err := c.deploymentStep(ctx, d, true); err != nil {
				errs = append(errs, fmt.Errorf("the deployment log: %w", err))
			}
		}
		if d.lease.rev != 0 {
			lctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
			c.release(lctx, &d.lease, DeploymentLeaseKey, "the deployment log")
			cancel()
			d.lease.rev = 0
			c.m.leases.Dec()
		}
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
	c.mu.Lock()
	for _, r := range c.rooms {
		if err := r.ledger.Close(); err != nil {
			c.log.Warn("checkpointer: removing the room's file of leaves", zap.String("room", r.id), zap.Error(err))
		}
	}
	c.mu.Unlock()
	c.log.Info("checkpointer stopped")
	return errors.Join(errs...)
}

// Block stops the checkpoints of roomID for as long as the checkpointer
// runs: the store lost leaves the room's tree holds (serve's survey found
// the room's latest checkpoint covering more leaves than the stream
// holds, docs/reliability.md), so a checkpoint of it would sign leaves no
// reader can find, and readers refuse it (checkpoint_mismatch). A loss
// notice does not lift it: the tree stays one readers cannot rebuild. The
// room counts in roompub_checkpoint_rooms_blocked, and why is logged once.
func (c *Checkpointer) Block(roomID, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.lost[roomID]; ok {
		return
	}
	c.lost[roomID] = why
	c.m.blocked.Inc()
	c.log.Error("checkpointer: the store lost leaves of the room: no checkpoint will be written for the room",
		zap.String("room", roomID), zap.String("reason", why))
}
