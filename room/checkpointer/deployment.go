package checkpointer

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/witness"
)

// DeploymentLeaseKey is the lease bucket's key of the deployment log's
// writer. A room's key (LeaseKey) never holds '.', so none is this one.
const DeploymentLeaseKey = "deployment.log"

// retryRounds is how many intervals pass before a witness round that
// missed a witness is run again for the same checkpoint.
const retryRounds = 5

// DefaultDeploymentInterval is how often the deployment log's writer signs
// a checkpoint of the log when it grew: each is one witness round.
const DefaultDeploymentInterval = time.Second

// maxDeploymentPending bounds the room checkpoints a checkpointer keeps
// while another writes the deployment log (it learns from the log which
// are in): past it the oldest are dropped, with an error log.
const maxDeploymentPending = 1 << 16

// DeploymentOptions configures the deployment log (docs/witnesses.md, "The
// deployment log"), kept when Options.Origin is set: one log per
// deployment whose entries are the rooms' checkpoints in the order they
// were read, with checkpoints of its own that witnesses cosign.
type DeploymentOptions struct {
	Log room.DeploymentLog // stream and subjects; zero: the defaults
	// Interval is the least time between two checkpoints of the log;
	// default DefaultDeploymentInterval.
	Interval time.Duration
	// Witnesses cosign each checkpoint of the log (C2SP tlog-witness);
	// none: the log's checkpoints carry the publisher's signature only.
	Witnesses []witness.Witness
	// WitnessTimeout bounds one witness round; default 10s.
	WitnessTimeout time.Duration
}

// srcCheckpoint is a room checkpoint the checkpointer accepted, at seq of
// the room stream.
type srcCheckpoint struct {
	stream string // "" in finalWrites: the checkpointer's own stream
	seq    uint64
	note   []byte
}

// deployment is the checkpointer's part of the deployment log: what it
// read of the log (its tree and where it stands), the room checkpoints not
// yet in it, and, while it holds the log's lease, the writing.
type deployment struct {
	log      room.DeploymentLog
	interval time.Duration
	signer   note.Signer
	cosigner *witness.Cosigner
	wtimeout time.Duration
	kick     chan struct{}
	done     chan struct{}

	mu       sync.Mutex
	tree     *checkpoint.Tree // every entry read, in stream order
	next     uint64           // next stream seq of the log to read
	entrySeq uint64           // the entry subject's last stream seq
	ckptSeq  uint64           // the checkpoint subject's last stream seq
	// sources is, by room stream, the stream seq of the last room
	// checkpoint of that stream in the log (SourceHeader): each partition's
	// checkpointer offers its stream's, in that stream's order.
	sources map[string]uint64
	pending []srcCheckpoint // accepted, not yet in the log, in stream order
	latest  *checkpoint.Checkpoint
	bad     string // why the log's latest checkpoint contradicts its entries
	// otherOrigin is the origin of a checkpoint of the log a trusted
	// publisher signed under another deployment origin.
	otherOrigin string
	// incomplete: the latest witness round missed a witness, which a
	// later round of the same checkpoint may still reach.
	incomplete bool
	warnedJunk bool // an entry no trusted publisher signed was logged
	signedAt   time.Time
	lease      lease
	lastResult []witness.Result // the latest witness round's
}

// offer queues a room checkpoint a checkpointer accepted (read at seq of
// room stream) for the log. c.mu is held (the deployment's own lock is
// taken inside).
func (d *deployment) offer(stream string, seq uint64, data []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if seq <= d.sources[stream] {
		return
	}
	d.pending = append(d.pending, srcCheckpoint{stream: stream, seq: seq, note: bytes.Clone(data)})
	if len(d.pending) > maxDeploymentPending {
		d.pending = d.pending[len(d.pending)-maxDeploymentPending:]
	}
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// startDeployment binds (or creates) the log's stream, reads it whole, and
// starts the loop that writes it.
func (c *Checkpointer) startDeployment(ctx context.Context, o Options) error {
	do := o.Deployment
	signer, err := checkpoint.NewNamedNoteSigner(o.Key, o.Origin)
	if err != nil {
		return err
	}
	d := &deployment{log: do.Log, sources: map[string]uint64{}, interval: do.Interval, signer: signer,
		wtimeout: do.WitnessTimeout, kick: make(chan struct{}, 1), done: make(chan struct{}),
		tree: checkpoint.NewTree(), next: 1}
	if d.interval <= 0 {
		d.interval = DefaultDeploymentInterval
	}
	if d.wtimeout <= 0 {
		d.wtimeout = 10 * time.Second
	}
	if len(do.Witnesses) > 0 {
		if d.cosigner, err = witness.NewCosigner(do.Witnesses); err != nil {
			return err
		}
	}
	if err := c.deploymentLost(ctx, d, o.Origin); err != nil {
		return err
	}
	cfg := d.log.StreamConfig(o.Replicas)
	if _, err := room.EnsureStream(ctx, c.js, cfg, d.log.Subjects()); err != nil {
		return fmt.Errorf("deployment log: %w", err)
	}
	if err := c.readDeployment(ctx, d); err != nil {
		return fmt.Errorf("deployment log: %w", err)
	}
	if d.otherOrigin != "" {
		return fmt.Errorf("%w: the deployment log %s holds checkpoints a trusted publisher signed for origin %q, not %q: "+
			"a deployment keeps its origin (its witnesses and readers know the log by it); start serve with --origin %s",
			ErrDeployment, d.log.StreamName(), d.otherOrigin, o.Origin, d.otherOrigin)
	}
	c.dep = d
	return nil
}

// ErrDeployment is wrapped by Start when the deployment log cannot be
// kept as it is: it holds another origin's checkpoints, or it is gone
// while the rooms show it existed.
var ErrDeployment = errors.New("deployment log")

// deploymentLost refuses to make the deployment log anew when it is gone
// but the room stream holds room checkpoints in this origin's form, which
// only a deployment that kept the log writes: the log was deleted or
// lost, and its witnesses would refuse a new one (it does not extend
// what they cosigned). The check reads the latest checkpoint of up to
// 1,024 rooms (batch direct get, multi_last).
func (c *Checkpointer) deploymentLost(ctx context.Context, d *deployment, origin string) error {
	_, err := c.js.Stream(ctx, d.log.StreamName())
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // there, or not known to be gone: EnsureStream decides
	}
	msgs, err := jsapi.DirectBatch(ctx, c.js.Conn(), c.streamName, jsapi.BatchRequest{
		MultiLast: []string{c.subjects.Root() + ".*.checkpoint"}, Batch: 1024, MaxBytes: ckPullBytes}, room.DefaultTimeout)
	if err != nil {
		return fmt.Errorf("deployment log: the rooms' checkpoints: %w", err)
	}
	for _, m := range msgs {
		u, err := checkpoint.ParseUnverified(m.Data)
		if err != nil {
			continue
		}
		if _, dep, ok := checkpoint.RoomOfOrigin(u.Origin); ok && dep == origin {
			if _, err := checkpoint.Parse(m.Data, u.Room, c.trust); err == nil {
				return fmt.Errorf("%w: the deployment log %s is gone, but %s's checkpoint at stream seq %d has origin %s: "+
					"the log was deleted or lost, and its witnesses will refuse a new one; restore the stream, or start a new log with another --origin",
					ErrDeployment, d.log.StreamName(), u.Room, m.Seq, u.Origin)
			}
		}
	}
	return nil
}

// deploymentLoop appends the pending room checkpoints and signs the log's
// checkpoints while it holds the log's lease, until ctx is done.
func (c *Checkpointer) deploymentLoop(ctx context.Context) {
	d := c.dep
	defer close(d.done)
	t := time.NewTicker(d.interval)
	defer t.Stop()
	failing := "" // the error last logged
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.kick:
		}
		err := c.deploymentStep(ctx, d, false)
		switch {
		case ctx.Err() != nil:
		case err == nil:
			if failing != "" {
				c.log.Info("checkpointer: the deployment log is written again")
			}
			failing = ""
		case err.Error() != failing:
			// Once per failure, not every second: a log that cannot be
			// read or written is an error (a deleted stream, say).
			failing = err.Error()
			c.log.Error("checkpointer: the deployment log cannot be kept: witnessing stops until it can", zap.Error(err))
		default:
			c.log.Debug("checkpointer: the deployment log", zap.Error(err))
		}
	}
}

// deploymentStep reads what is new in the log, then, holding the lease,
// appends the pending room checkpoints and, once the interval has passed
// since the last (or final), signs the log's checkpoint and has it
// cosigned.
func (c *Checkpointer) deploymentStep(ctx context.Context, d *deployment, final bool) error {
	if err := c.readDeployment(ctx, d); err != nil {
		return err
	}
	d.mu.Lock()
	grown := d.latest == nil && d.tree.Size() > 0 || d.latest != nil && d.tree.Size() > d.latest.Size
	// A round that missed a witness is run again for the same checkpoint
	// now and then, so a witness back from an outage cosigns it without
	// waiting for the log to grow.
	again := !grown && d.incomplete && d.latest != nil && d.latest.Size == d.tree.Size() && time.Since(d.signedAt) >= retryRounds*d.interval
	work := len(d.pending) > 0 || grown || again
	d.mu.Unlock()
	if !work || !c.holdDeploymentLease(ctx, d) {
		return nil
	}
	if err := c.appendEntries(ctx, d); err != nil {
		return err
	}
	if err := c.readDeployment(ctx, d); err != nil {
		return err
	}
	d.mu.Lock()
	due := d.bad == "" && (d.latest == nil || d.tree.Size() > d.latest.Size) && d.tree.Size() > 0 &&
		(final || time.Since(d.signedAt) >= d.interval) || d.bad == "" && again
	d.mu.Unlock()
	if !due {
		return nil
	}
	return c.signDeployment(ctx, d)
}

// appendEntries appends the pending room checkpoints in order, each
// expecting the entry subject's last sequence read, so that two writers
// never interleave; the log is read back afterwards.
func (c *Checkpointer) appendEntries(ctx context.Context, d *deployment) error {
	d.mu.Lock()
	pending, expect := d.pending, d.entrySeq
	d.mu.Unlock()
	for _, p := range pending {
		msg := &nats.Msg{Subject: d.log.Entry(), Data: p.note, Header: nats.Header{}}
		msg.Header.Set(room.SourceHeader, room.FormatSource(p.stream, p.seq))
		msg.Header.Set(jetstream.MsgIDHeader, "dl:"+room.FormatSource(p.stream, p.seq))
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
		pctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
		ack, err := c.js.PublishMsg(pctx, msg, jetstream.WithRetryAttempts(0))
		cancel()
		if err != nil {
			if jsapi.IsWrongLastSequence(err) {
				return nil // another writer: read it, then decide again
			}
			return fmt.Errorf("append room checkpoint (room stream seq %d): %w", p.seq, err)
		}
		expect = ack.Sequence
	}
	return nil
}

// signDeployment signs the log's tree as read, has the witnesses cosign
// it, and appends it with the cosignatures it got.
func (c *Checkpointer) signDeployment(ctx context.Context, d *deployment) error {
	d.mu.Lock()
	size := d.tree.Size()
	root := d.tree.Root()
	expect := d.ckptSeq
	d.mu.Unlock()
	signed, err := checkpoint.Sign(d.signer, c.trust.Origin(), size, root)
	if err != nil {
		return err
	}
	if d.cosigner != nil {
		signed = c.cosign(ctx, d, signed, size)
	}
	d.mu.Lock()
	latest := d.latest
	d.mu.Unlock()
	if latest != nil && latest.Size == size && latest.Root == root {
		// A round run again for the checkpoint the log holds: what it
		// stores keeps every cosignature the stored one has, and adds
		// the new witnesses'. A round that adds none stores nothing (a
		// copy with fewer would lose a quorum the log had, for the tiles'
		// /checkpoint and whoever takes the newest of a size; one with
		// the same is noise, every retry while a witness is down).
		merged, added := mergeCosignatures(latest.Note, signed, c.trust.OriginVerifiers())
		if added == 0 {
			d.mu.Lock()
			d.signedAt = time.Now()
			d.mu.Unlock()
			return nil
		}
		signed = merged
	}
	msg := &nats.Msg{Subject: d.log.Checkpoint(), Data: signed, Header: nats.Header{}}
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
	pctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	_, err = c.js.PublishMsg(pctx, msg, jetstream.WithRetryAttempts(0))
	cancel()
	d.mu.Lock()
	d.signedAt = time.Now()
	d.mu.Unlock()
	if err != nil && !jsapi.IsWrongLastSequence(err) {
		return fmt.Errorf("append the deployment checkpoint of size %d: %w", size, err)
	}
	c.m.deploymentCheckpoints.Inc()
	return c.readDeployment(ctx, d)
}

// mergeCosignatures returns stored (a signed note) with the signatures
// of fresh (a signed note of the same text) by keys stored has none of,
// and how many it added; a key is its name and hash (C2SP signed-note).
// Both are opened with vs, the log's keys (golang.org/x/mod/sumdb/note:
// the publisher's signature verified, the witnesses' kept as they are),
// and the merge is encoded by note.Sign. A note that does not open, or
// another text, gives fresh whole, as added.
func mergeCosignatures(stored, fresh []byte, vs note.Verifiers) ([]byte, int) {
	s, err := note.Open(stored, vs)
	if err != nil {
		return fresh, 1
	}
	f, err := note.Open(fresh, vs)
	if err != nil || f.Text != s.Text {
		return fresh, 1
	}
	type key struct {
		name string
		hash uint32
	}
	have := map[key]bool{}
	for _, sig := range slices.Concat(s.Sigs, s.UnverifiedSigs) {
		have[key{sig.Name, sig.Hash}] = true
	}
	added := 0
	for _, sig := range slices.Concat(f.Sigs, f.UnverifiedSigs) {
		if !have[key{sig.Name, sig.Hash}] {
			have[key{sig.Name, sig.Hash}] = true
			s.UnverifiedSigs = append(s.UnverifiedSigs, sig)
			added++
		}
	}
	if added == 0 {
		return stored, 0
	}
	out, err := note.Sign(s)
	if err != nil {
		return fresh, 1
	}
	return out, added
}

// cosign runs one witness round on signed and returns it with every
// cosignature that verified appended (C2SP tlog-cosignature lines after
// the publisher's). Every witness that did not cosign is logged and
// counted by its answer; a conflict (the witness saw another history) is
// an error log: it is never hidden.
func (c *Checkpointer) cosign(ctx context.Context, d *deployment, signed []byte, size uint64) []byte {
	wctx, cancel := context.WithTimeout(ctx, d.wtimeout)
	defer cancel()
	prove := func(_ context.Context, old uint64) ([][32]byte, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if old > size {
			return nil, fmt.Errorf("the witness has size %d, above the checkpoint's %d", old, size)
		}
		if old == 0 {
			return nil, nil
		}
		return d.tree.ConsistencyProof(old, size)
	}
	results, err := d.cosigner.Cosign(wctx, signed, prove)
	if err != nil {
		c.log.Error("checkpointer: cosigning the deployment checkpoint", zap.Uint64("size", size), zap.Error(err))
		return signed
	}
	out := bytes.Clone(signed)
	got := 0
	for _, r := range results {
		if r.Err != nil {
			var conflict *witness.ConflictError
			switch {
			case errors.As(r.Err, &conflict):
				c.m.witnessAnswers.WithLabelValues("conflict").Inc()
				c.log.Error("checkpointer: a witness saw another history of the deployment log: it refuses to cosign",
					zap.String("witness", r.Witness), zap.Uint64("size", size), zap.Uint64("witness_size", conflict.KnownSize), zap.Error(r.Err))
			case errors.Is(r.Err, witness.ErrInconsistent):
				c.m.witnessAnswers.WithLabelValues("inconsistent").Inc()
				c.log.Error("checkpointer: a witness found the deployment checkpoint inconsistent with what it saw",
					zap.String("witness", r.Witness), zap.Uint64("size", size), zap.Error(r.Err))
			default:
				c.m.witnessAnswers.WithLabelValues("failed").Inc()
				c.log.Warn("checkpointer: a witness did not cosign the deployment checkpoint",
					zap.String("witness", r.Witness), zap.Uint64("size", size), zap.Error(r.Err))
			}
			continue
		}
		c.m.witnessAnswers.WithLabelValues("cosigned").Inc()
		out = fmt.Appendf(out, "— %s %s\n", r.Cosignature.Name, r.Cosignature.Base64)
		got++
	}
	d.mu.Lock()
	d.lastResult = results
	d.incomplete = got < len(results)
	d.mu.Unlock()
	c.m.witnessRoundCosigs.Set(float64(got))
	if got > 0 {
		c.m.witnessCosignedSize.Set(float64(size))
		c.m.witnessCosignedTime.Set(float64(time.Now().UnixNano()) / 1e9)
	}
	c.log.Debug("checkpointer: deployment checkpoint cosigned", zap.Uint64("size", size), zap.Int("cosignatures", got), zap.Int("witnesses", len(results)))
	return out
}

// readDeployment reads the log from where it stands to its end: entries
// grow the tree and say which room checkpoint is in (SourceHeader); each
// checkpoint of the log is checked against the tree (signed by a trusted
// key under the deployment origin, the tree's root at its size, no
// smaller than the latest). A replica that lags only delays: every append
// expects the last sequence of its subject.
func (c *Checkpointer) readDeployment(ctx context.Context, d *deployment) error {
	nc, name := c.js.Conn(), d.log.StreamName()
	for ctx.Err() == nil {
		d.mu.Lock()
		next := d.next
		d.mu.Unlock()
		msgs, err := jsapi.DirectBatch(ctx, nc, name, jsapi.BatchRequest{Seq: next, NextBySubj: d.log.Subjects().All(), Batch: ckPullMessages, MaxBytes: ckPullBytes}, room.DefaultTimeout)
		if err != nil {
			return fmt.Errorf("read %s from seq %d: %w", name, next, err)
		}
		if len(msgs) == 0 {
			return nil
		}
		d.mu.Lock()
		for _, m := range msgs {
			c.deploymentMsg(d, m)
		}
		last := msgs[len(msgs)-1]
		d.next = last.Seq + 1
		d.mu.Unlock()
		if last.Pending == 0 {
			return nil
		}
	}
	return ctx.Err()
}

// deploymentMsg handles one message of the log. d.mu is held.
func (c *Checkpointer) deploymentMsg(d *deployment, m jsapi.Msg) {
	switch m.Subject {
	case d.log.Entry():
		d.tree.Append(checkpoint.EntryLeaf(m.Data))
		d.entrySeq = m.Seq
		u, err := checkpoint.ParseUnverified(m.Data)
		if err == nil {
			_, err = checkpoint.Parse(m.Data, u.Room, c.trust)
		}
		if err != nil {
			// Its Roompub-Source header is no one's word: a junk entry
			// naming the last seq of a room stream stopped the log from
			// taking any later checkpoint of it.
			c.junkEntry(d, m.Seq, err)
			return
		}
		if stream, seq, ok := room.ParseSource(m.Header.Get(room.SourceHeader)); ok && seq > d.sources[stream] && seq < math.MaxUint64 {
			d.sources[stream] = seq
			if len(d.pending) > 0 {
				d.pending = slices.DeleteFunc(d.pending, func(p srcCheckpoint) bool { return p.stream == stream && p.seq <= seq })
			}
		}
	case d.log.Checkpoint():
		d.ckptSeq = m.Seq
		ck, err := checkpoint.ParseDeployment(m.Data, c.trust)
		if err != nil {
			if u, uerr := checkpoint.ParseUnverified(m.Data); uerr == nil && u.Origin != c.trust.Origin() {
				if other, terr := c.trust.WithOrigin(u.Origin); terr == nil {
					if _, perr := checkpoint.ParseDeployment(m.Data, other); perr == nil {
						d.otherOrigin = u.Origin
					}
				}
			}
			c.log.Warn("checkpointer: a message on the deployment log's checkpoint subject is not a checkpoint signed by a trusted publisher: set aside",
				zap.Uint64("stream_seq", m.Seq), zap.Error(err))
			return
		}
		bad := ""
		switch root, err := d.tree.RootAt(ck.Size); {
		case err != nil:
			bad = fmt.Sprintf("size %d is beyond the %d entries read", ck.Size, d.tree.Size())
		case root != ck.Root:
			bad = fmt.Sprintf("its root at size %d is not the entries' root", ck.Size)
		case d.latest != nil && ck.Size < d.latest.Size:
			bad = fmt.Sprintf("size %d is smaller than the latest checkpoint's %d", ck.Size, d.latest.Size)
		}
		if bad != "" {
			if d.bad == "" {
				c.log.Error("checkpointer: the deployment log's checkpoint contradicts its entries: no checkpoint of the log will be written",
					zap.Uint64("stream_seq", m.Seq), zap.String("reason", bad))
			}
			d.bad = bad
			return
		}
		d.bad, d.latest = "", ck
	}
}

// holdDeploymentLease is holdLease for the deployment log's key.
func (c *Checkpointer) holdDeploymentLease(ctx context.Context, d *deployment) bool {
	return c.hold(ctx, &d.lease, DeploymentLeaseKey, "the deployment log")
}

// offerFinal offers the room checkpoints Stop wrote, which are not read
// back, to the deployment log, but only when they are the stream's next
// messages after the last one read, one after another: then no other
// publisher's checkpoint lies between them, which the log would skip (a
// writer resumes after the last room stream seq it holds). Otherwise they
// enter the log when a serve next reads them.
func (c *Checkpointer) offerFinal(d *deployment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.finalWrites
	slices.SortFunc(ws, func(a, b srcCheckpoint) int { return cmp.Compare(a.seq, b.seq) })
	next := c.handled.Load() + 1
	for _, w := range ws {
		if w.seq != next {
			c.log.Debug("checkpointer: the final room checkpoints enter the deployment log at the next start",
				zap.Uint64("stream_seq", w.seq), zap.Uint64("expected", next))
			return
		}
		next++
	}
	for _, w := range ws {
		d.offer(c.streamName, w.seq, w.note)
	}
}

// junkEntry logs an entry of the log that is no room checkpoint a
// trusted publisher signed: someone wrote it around serve (secure mode
// leaves no one the right to). It stays in the log, append-only; readers
// report it. The first is an error log, later ones debug. d.mu is held.
func (c *Checkpointer) junkEntry(d *deployment, seq uint64, err error) {
	log := c.log.Debug
	if !d.warnedJunk {
		d.warnedJunk, log = true, c.log.Error
	}
	log("checkpointer: an entry of the deployment log is no room checkpoint a trusted publisher signed: written around serve; readers will report it",
		zap.Uint64("stream_seq", seq), zap.Error(err))
}
