package reader

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
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

// FollowOptions configures Follow; the zero value of each field is its
// default, except Durable and Validator, which are required.
type FollowOptions struct {
	Stream   string        // default DefaultStream
	Subjects room.Subjects // default prefix "rooms"
	// Rooms to follow; empty follows every room.
	Rooms []string
	// Durable names the durable consumer: the server remembers, under this
	// name, what the application has acknowledged.
	Durable string
	// Validator verifies every message; it should check host trust.
	Validator *validate.Validator
	// OnSetAside receives every message that fails verification (after
	// the rebuild, so each once per delivery), and every message of
	// SetAsideList re-examined and set aside again (SetAside.Reexamined).
	// It must not block long.
	OnSetAside func(SetAside)
	// SetAsideList, when set, is the follower's list of what it set aside:
	// every set-aside message is appended to it, fsynced, before it is
	// acknowledged, and the rebuild keeps the messages it lists set aside
	// (see SetAsideList). Follow opens and closes it.
	SetAsideList *SetAsideList
	// Reexamine, with SetAsideList, decides the listed messages again
	// during the rebuild, in stream order, with this Validator and Trust:
	// handle receives those that pass now (Event.Reexamined), before any
	// live event, and each is then marked served in the list; the others
	// go to OnSetAside again and stay listed.
	Reexamine bool
	// AckWait is how long the server waits for an ack before it delivers a
	// message again; default 30s.
	AckWait time.Duration
	Logger  *zap.Logger
	// Ready, when set, is called once the rebuild is done and live
	// delivery starts, with the stream sequence the rebuild reached.
	Ready func(rebuiltTo uint64)

	// Trust, when it holds a key, checks the publishers' attestations and
	// checkpoints: a message not attested by these publishers, or a
	// checkpoint that does not cover its room as read, is set aside
	// (checkpoint_mismatch). A live message is handed out once its whole
	// atomic batch has arrived and the batch's signature verified (a batch
	// that can no longer be whole, because another message came or none
	// for a second, or of more than 4,032 messages, is set aside); the
	// rebuild relies on checkpoints where they cover it.
	Trust *checkpoint.Trust
	// State, when set (with Trust), keeps the last checkpoint verified per
	// room: at the start, a room whose newest checkpoint on the stream is
	// smaller than (or, at the same size, differs from) the stored one is
	// refused as rolled back, and a later checkpoint not consistent with
	// it refuses the room from there on; every checkpoint verified beyond
	// it is stored.
	State *CheckpointState
	// Read chooses how the rebuild reads the stream (see
	// AuditOptions.Read); live delivery always uses the durable.
	Read ReadMode
	// Witnessing, when set (with Trust naming the deployment origin),
	// reads the deployment log after the rebuild and then every
	// WitnessEvery as it grows: a room checkpoint it holds that the room
	// as followed does not match refuses the room (a split view,
	// checkpoint_mismatch), and a latest deployment checkpoint short of the
	// policy's quorum is logged (witness_quorum). The rooms' trees are then
	// kept whole (about 64 bytes per admitted message) to check any size.
	Witnessing   *Witnessing
	WitnessEvery time.Duration // default 1s
	// OnWitnessQuorum, when set, is told why the deployment log's latest
	// checkpoint is short of the policy's quorum each time that changes,
	// and "" once it is witnessed again. It must not block long.
	OnWitnessQuorum func(reason string)
	// OnResync, when set, is told why Follow has its durable deliver again
	// from the acknowledgement floor while it runs: a delivery went to a
	// pull request not its own (docs/cli.md, "One run per durable"). It
	// must not block long. Told, a resync is logged at info level; not
	// told, at warn.
	OnResync func(reason string)

	// settle bounds how long Follow waits for other pull requests on its
	// consumer to lapse (default followSettle); tests shorten it.
	settle time.Duration
}

// Handler receives verified events in stream order. Returning nil
// acknowledges the event: it is never delivered again, also not after a
// restart. Returning an error stops Follow without acknowledging it, so
// it is delivered again on the next start; Follow returns it (wrapped in
// ErrHandler), unless Follow's context is done and the error is the
// context's (a handler that honours the context it is given): that is a
// stop, and Follow returns nil.
type Handler func(context.Context, *Event) error

// ErrHandler wraps the error a Handler returned.
var ErrHandler = errors.New("handler")

// Follow subscribes to rooms with a durable JetStream consumer and hands
// handle every verified event, once, in stream order; messages that fail
// verification go to OnSetAside and SetAsideList (and are acknowledged, so
// they never block the room, and are never delivered again). Before live
// delivery it rebuilds the verification state (chain heads, the rooms'
// record indexes) by replaying the stream up to the consumer's
// acknowledgement floor, so a restarted subscriber checks new messages
// against everything before them; with Reexamine it serves there the
// listed messages that pass now. Messages are prepared in parallel as they
// arrive (as in Audit) and decided, handed out and acknowledged one at a
// time in stream order. One durable serves one run at a time: a delivery
// that goes elsewhere has the consumer deliver again from its
// acknowledgement floor, and deliveries that keep going elsewhere stop
// Follow with ErrDurableShared. It returns nil when ctx is done, after
// acknowledging what was handled; errors of the set-aside list are
// returned (the message is then not acknowledged).
func Follow(ctx context.Context, js jetstream.JetStream, o FollowOptions, handle Handler) error {
	if o.Validator == nil || o.Durable == "" {
		return fmt.Errorf("%w: follow needs a validator and a durable name", ErrReader)
	}
	if o.Reexamine && o.SetAsideList == nil {
		return fmt.Errorf("%w: re-examination needs the set-aside list", ErrReader)
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	name := o.Stream
	if name == "" {
		name = room.DefaultStream
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	if o.Witnessing != nil && (o.Trust.Len() == 0 || o.Trust.Origin() == "" || o.Witnessing.Policy == nil) {
		return fmt.Errorf("%w: a witness policy needs trusted publishers and the deployment origin", ErrReader)
	}
	if o.WitnessEvery <= 0 {
		o.WitnessEvery = time.Second
	}
	o.Rooms = uniqueRooms(o.Rooms)
	cctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	st, err := js.Stream(cctx, name)
	if err != nil {
		cancel()
		return fmt.Errorf("stream %s: %w", name, err)
	}
	if err := sameRooms(cctx, st, o.Durable, filters(o.Subjects, o.Rooms), o.Subjects.All()); err != nil {
		cancel()
		return err
	}
	cons, err := st.CreateOrUpdateConsumer(cctx, jetstream.ConsumerConfig{
		Durable:        o.Durable,
		Description:    "roompub subscriber",
		FilterSubjects: filters(o.Subjects, o.Rooms),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        o.AckWait,
		MaxAckPending:  followMaxAckPending,
		MaxDeliver:     -1,
	})
	if err != nil {
		cancel()
		return fmt.Errorf("consumer %s: %w", o.Durable, err)
	}
	cancel()
	pull := &durablePull{js: js, cons: cons, stream: name, durable: o.Durable, filters: filters(o.Subjects, o.Rooms), log: log, tell: o.OnResync, settleFor: o.settle}
	if pull.settleFor <= 0 {
		pull.settleFor = followSettle
	}
	floor, err := pull.start(ctx)
	if err != nil {
		return stopped(ctx, err)
	}
	list := o.SetAsideList
	if list != nil {
		if err := list.open(floor); err != nil {
			return fmt.Errorf("set-aside list: %w", err)
		}
		defer list.close()
	}
	// setAside lists a (fsynced when sync: before its ack) and hands it
	// to OnSetAside.
	setAside := func(a *SetAside, sync bool) error {
		if list != nil {
			if err := list.add(a, sync); err != nil {
				return fmt.Errorf("set-aside list: %w", err)
			}
		}
		if o.OnSetAside != nil {
			o.OnSetAside(*a)
		}
		return nil
	}
	r := NewReader(o.Validator, o.Subjects)
	r.evidence = nil // no caller can reach it: per-record memory for nothing
	if len(o.Rooms) > 0 {
		r.chainHome = chainHomes(ctx, js.Conn(), name, o.Subjects, room.DefaultTimeout)
	}
	defer r.closeLedgers()
	r.trustPublishers(o.Trust)
	if r.trust != nil {
		if err := followFloors(ctx, js.Conn(), name, r, o, setAside, log); err != nil {
			return err
		}
	}
	var watch *followWitness
	if o.Witnessing != nil {
		r.fullTrees = true
		watch = &followWitness{every: o.WitnessEvery, log: log, tell: o.OnWitnessQuorum}
		watch.view = newDeploymentView(o.Witnessing, o.Trust, o.Rooms, func(_ *Event, a *SetAside) {
			if a != nil && watch.err == nil {
				watch.err = setAside(a, true)
			}
		})
	}
	// The rebuild's verdicts are not handed out, except those of listed
	// messages re-examined (rebuilt). rebuilding holds, in stream order,
	// the messages fed whose verdicts are not out yet.
	var (
		cursor     listCursor
		rebuilding []rebuildMsg
		rerr       error // the first failure of rebuilt
	)
	if list != nil {
		cursor.ms = list.listed
	}
	rebuilt := func(m rebuildMsg, ev *Event, aside *SetAside) error {
		switch {
		case list == nil:
			return nil
		case m.listed == "":
			if aside != nil {
				// Served before, or set aside before the list knew it.
				list.facts.ServedNowAside++
				log.Warn("a message served before is set aside now", zap.Uint64("stream_seq", m.seq), zap.String("code", string(aside.Code)))
			}
			return nil
		case !o.Reexamine:
			if aside != nil && aside.passesNow {
				list.facts.PassNow++
			}
			return nil
		case ev != nil:
			ev.Reexamined = true
			if err := handle(ctx, ev); err != nil {
				return fmt.Errorf("%w: re-examined stream seq %d: %w", ErrHandler, m.seq, err)
			}
			list.facts.Served++
			return list.served(m.seq)
		case aside != nil:
			list.facts.Aside++
			aside.Reexamined = true
			// Already listed: the new line only says what holds now.
			return setAside(aside, false)
		default:
			// A checkpoint message that verifies now: nothing to serve.
			return list.served(m.seq)
		}
	}
	rebuildOut := func(ev *Event, aside *SetAside) {
		m := rebuilding[0]
		rebuilding = rebuilding[1:]
		if rerr == nil && r.leafFail != nil {
			rerr = r.leafFail
		}
		if rerr == nil {
			rerr = rebuilt(m, ev, aside)
		}
	}
	if floor > 0 {
		// Already handled or set aside before the restart: only the state.
		produce := func(ctx context.Context, emit func(*batch) bool) error {
			var facts readFacts
			err := replayWith(ctx, js, st, o.Read, directRead{}, o.Subjects, o.Rooms, 1, time.Time{}, floor, emit, &facts)
			if facts.why != "" {
				log.Info("rebuild read with direct gets", zap.String("why", facts.why))
			}
			return err
		}
		if err := runOrdered(ctx, r, produce, func(b *batch) error {
			for i := range b.xs {
				x := &b.xs[i]
				m := rebuildMsg{seq: x.m.Seq}
				if code, ok := cursor.at(m.seq); ok {
					x.listed, x.reexamine, m.listed = code, o.Reexamine, code
				}
				rebuilding = append(rebuilding, m)
				r.feed(x, false, rebuildOut)
				if rerr != nil {
					return rerr
				}
			}
			return nil
		}); err != nil {
			if errors.Is(err, ErrHandler) {
				return err
			}
			return fmt.Errorf("rebuild: %w", err)
		}
	}
	held := r.startLive(followMaxRun, rebuildOut)
	if rerr != nil {
		return rerr
	}
	if held != len(rebuilding) {
		return fmt.Errorf("rebuild: %d verdicts wait for %d messages", held, len(rebuilding))
	}
	switch {
	case o.Reexamine:
		// Served marks and the verdicts that replace listed ones out of
		// the file.
		if err := list.reopen(floor); err != nil {
			return fmt.Errorf("set-aside list: %w", err)
		}
	case list != nil:
		list.listed = nil // the rebuild's, done
	}
	if watch != nil {
		if err := watch.step(ctx, js, r, o.Subjects); err != nil {
			return err
		}
	}
	log.Info("subscriber rebuilt", zap.String("durable", o.Durable), zap.Uint64("ack_floor", floor))
	if o.Ready != nil {
		o.Ready(floor)
	}
	// Live: fetched messages are prepared in parallel as they arrive and
	// decided in stream order; a verdict is handed out and acknowledged as
	// soon as it is known (the messages of a batch once the batch is
	// whole and verified), one by one, in stream order.
	produce := func(pctx context.Context, emit func(*batch) bool) error {
		for {
			if pctx.Err() != nil {
				return nil
			}
			fb, err := pullNext(pctx, js.Conn(), name, o.Durable, followFetch, max(pullMaxBytes, 2*int(js.Conn().MaxPayload())), time.Second)
			if err != nil {
				if pctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("fetch: %w", err)
			}
			ch := fb.Messages()
			got := 0
			// take adds msg to b when it is the delivery expected next;
			// otherwise it drops the rest of the fetch and resyncs.
			resynced := false
			take := func(b *batch, msg *nats.Msg) error {
				meta, err := msg.Metadata()
				if err != nil {
					return fmt.Errorf("fetch: %w", err)
				}
				if !pull.inOrder(meta.Sequence.Consumer, meta.Sequence.Stream) {
					for range ch {
						// Delivered again after the resync.
					}
					resynced = true
					return pull.resync(pctx, meta.Sequence.Consumer)
				}
				b.add(StreamMsg{Subject: msg.Subject, Seq: meta.Sequence.Stream, Data: msg.Data, Time: meta.Timestamp, Attestation: checkpoint.AttestationOf(msg.Header), Owner: msg.Header.Get(room.HeaderOwner)}, msg)
				return nil
			}
			for msg := range ch {
				got++
				b := newBatch()
				b.epoch = pull.epoch // written by this goroutine only
				if err := take(b, msg); err != nil {
					return stopped(pctx, err)
				}
				// Take what has already arrived too, without waiting.
			more:
				for !resynced && len(b.xs) < followBatch {
					select {
					case msg, ok := <-ch:
						if !ok {
							break more
						}
						if err := take(b, msg); err != nil {
							return stopped(pctx, err)
						}
					default:
						break more
					}
				}
				if len(b.xs) > 0 && !emit(b) {
					return nil
				}
			}
			if resynced {
				continue
			}
			err = fb.Error()
			if err != nil {
				if pctx.Err() != nil {
					return nil
				}
				if errors.Is(err, errConsumerGone) {
					// Deleted by someone else, or not there to answer
					// now (a cluster electing its leader): a durable
					// that is gone ends Follow, naming it.
					if _, ierr := pull.info(pctx); errors.Is(ierr, jetstream.ErrConsumerNotFound) {
						return pull.deleted(err)
					}
				}
				log.Warn("fetch", zap.Error(err))
				if got == 0 && !jsapi.Sleep(pctx, followErrorPause) {
					// A pull that fails at once (the durable deleted, no
					// responder) is asked again a second later, not in a
					// loop that keeps a core and the log busy.
					return nil
				}
				continue
			}
			if got == 0 && !emit(newBatch()) {
				// No message for a whole fetch (idleFor): an empty batch
				// says so, in order.
				return nil
			}
		}
	}
	// waiting holds, in stream order, the messages fed whose verdicts are
	// not out yet: first the rebuild's (no message: their verdicts go to
	// rebuilt, as in the rebuild), then live ones.
	type fed struct {
		seq    uint64
		msg    *nats.Msg
		epoch  uint64      // msg's: batch.epoch
		listed events.Code // the rebuild's (msg nil): rebuildMsg.listed
	}
	waiting := make([]fed, len(rebuilding))
	for i, m := range rebuilding {
		waiting[i] = fed{seq: m.seq, listed: m.listed}
	}
	last := floor    // handed out (or set aside) and acknowledged
	lastFed := floor // fed to the reader (the rebuild read up to floor)
	var herr error   // the first failure; later verdicts are not handed out
	out := func(ev *Event, aside *SetAside) {
		w := waiting[0]
		waiting = waiting[1:]
		if herr == nil && r.leafFail != nil {
			herr = r.leafFail // no verdict for what could not be checked
		}
		if herr != nil {
			return
		}
		if w.msg == nil {
			herr = rebuilt(rebuildMsg{seq: w.seq, listed: w.listed}, ev, aside)
			return
		}
		if ctx.Err() != nil {
			// Stop now: the rest is unacknowledged and is delivered
			// again, from the ack floor, on the next start.
			herr = errStopped
			return
		}
		switch {
		case aside != nil:
			if err := setAside(aside, true); err != nil {
				herr = err
				return
			}
		case ev == nil:
			// A checkpoint message: verified (or not looked at), not an event.
		default:
			if err := handle(ctx, ev); err != nil {
				_ = w.msg.Nak() // delivered again after AckWait, or on the next start
				if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
					// A handler that gave up because Follow was
					// stopped: a stop, not a failure; the event is
					// delivered again on the next start.
					herr = errStopped
					return
				}
				herr = fmt.Errorf("%w: stream seq %d: %w", ErrHandler, w.seq, err)
				return
			}
		}
		// Synchronous: once handle returned, the ack is on the server
		// before the next message, so a crash repeats nothing handled
		// (except after a resync: the message is acknowledged when it
		// is delivered again).
		if _, err := pull.ack(ctx, w.msg, w.epoch); err != nil {
			herr = fmt.Errorf("ack stream seq %d: %w", w.seq, err)
			return
		}
		last = w.seq
	}
	err = runOrdered(ctx, r, produce, func(b *batch) error {
		if watch != nil && time.Since(watch.at) >= watch.every {
			if err := watch.step(ctx, js, r, o.Subjects); err != nil {
				return err
			}
		}
		if len(b.xs) == 0 {
			// The server had nothing more for a whole fetch: a batch
			// still open cannot be whole, unless the stream leader holds
			// more on these subjects (a consumer on a lagging replica).
			last, open := r.openBatch()
			if !open {
				return nil
			}
			more, err := leaderHasMore(ctx, js.Conn(), name, filters(o.Subjects, o.Rooms), last, math.MaxUint64)
			switch {
			case ctx.Err() != nil:
				return errStopped
			case err != nil:
				log.Warn("follow: is the open batch's rest on the stream?", zap.Error(err))
			case !more:
				r.idle(out)
			}
			return herr
		}
		for i := range b.xs {
			if ctx.Err() != nil {
				return errStopped
			}
			x, msg := &b.xs[i], b.msgs[i]
			seq := x.m.Seq
			switch {
			case seq <= last:
				// Delivered again (an ack that was lost, a resync):
				// already handled.
				if _, err := pull.ack(ctx, msg, b.epoch); err != nil {
					return fmt.Errorf("ack stream seq %d: %w", seq, err)
				}
				continue
			case seq <= lastFed:
				// Delivered again while its batch is not whole yet: the
				// newer delivery is the one to acknowledge.
				for k := range waiting {
					if waiting[k].seq == seq && waiting[k].msg != nil {
						waiting[k].msg, waiting[k].epoch = msg, b.epoch
					}
				}
				continue
			}
			lastFed = seq
			waiting = append(waiting, fed{seq: seq, msg: msg, epoch: b.epoch})
			r.feed(x, true, out)
			if herr != nil {
				return herr
			}
		}
		return nil
	})
	if errors.Is(err, errStopped) || (err == nil && ctx.Err() != nil) {
		return nil
	}
	return err
}

// asideWalk bounds how many messages newestCheckpoint passes over on a
// checkpoint subject, newest first, that are not checkpoints signed by a
// trusted publisher.
const asideWalk = 1000

// errAsideWalk: newestCheckpoint passed over asideWalk messages.
var errAsideWalk = errors.New("messages that are no checkpoint of the room signed by a trusted publisher")

// newestCheckpoint returns the newest message on subj that is a checkpoint
// of roomID signed under trust, and its stream seq; nil when there is
// none. The messages after it, which are not (docs/secure-mode.md,
// "Checkpoints and leases"), are logged and passed over, up to asideWalk
// of them (then errAsideWalk). It reads with the leader's message get
// (last_by_subj) and then batch direct gets of the last message up to the
// one before (ADR-31, multi_last with up_to_seq); neither takes a stored
// message's headers for the server's (nats.go's GetLastMsgForSubject
// fails on a stored message with a Status header).
func newestCheckpoint(ctx context.Context, nc *nats.Conn, stream, subj, roomID string, trust *checkpoint.Trust, log *zap.Logger) (*checkpoint.Checkpoint, uint64, error) {
	m, err := jsapi.LeaderGetRaw(ctx, nc, stream, room.DefaultTimeout, map[string]any{"last_by_subj": subj})
	if err != nil || m == nil {
		return nil, 0, err
	}
	seq, data := m.Sequence, m.Data
	for passed := 0; ; passed++ {
		c, err := checkpoint.Parse(data, roomID, trust)
		if err == nil {
			return c, seq, nil
		}
		log.Warn("a message on the room's checkpoint subject is not a checkpoint signed by a trusted publisher: passed over",
			zap.String("room", roomID), zap.Uint64("stream_seq", seq), zap.Error(err))
		if passed+1 >= asideWalk {
			return nil, 0, fmt.Errorf("%d %w after stream seq %d", asideWalk, errAsideWalk, seq)
		}
		if seq <= 1 {
			return nil, 0, nil
		}
		cctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
		msgs, err := jsapi.DirectBatch(cctx, nc, stream, jsapi.BatchRequest{MultiLast: []string{subj}, UpToSeq: seq - 1, Batch: 1}, room.DefaultTimeout)
		cancel()
		if err != nil {
			return nil, 0, err
		}
		if len(msgs) == 0 {
			return nil, 0, nil
		}
		seq, data = msgs[0].Seq, msgs[0].Data
	}
}

// followFloors loads the checkpoints o.State keeps for the followed rooms
// (every room of the state when o.Rooms is empty), refuses at once a room
// whose newest checkpoint on the stream is smaller than its stored one or,
// at the same size, another tree (rolled back or forked), and has every
// checkpoint verified beyond the stored one saved.
func followFloors(ctx context.Context, nc *nats.Conn, stream string, r *Reader, o FollowOptions, setAside func(*SetAside, bool) error, log *zap.Logger) error {
	if o.State == nil {
		return nil
	}
	ignored, err := loadFloors(r, o.State, o.Rooms, nil)
	if err != nil {
		return err
	}
	if len(ignored) > 0 {
		log.Warn("kept checkpoints of another trust ignored: signed by a key not trusted, or of another deployment origin; left in place, and no rollback of their rooms is found against them",
			zap.String("state_dir", o.State.Dir), zap.Int("ignored", len(ignored)), zap.Strings("rooms", ignored))
	}
	saved := map[string]uint64{}
	for _, id := range r.ledgerRooms() {
		l := r.ledgers[id]
		kept, _ := l.Kept()
		if kept == nil {
			continue
		}
		saved[id] = kept.Size
		newest, seq, err := newestCheckpoint(ctx, nc, stream, o.Subjects.Checkpoint(id), id, r.trust, log)
		switch {
		case errors.Is(err, errAsideWalk):
			// Set aside when read in stream order; nothing to judge by.
			log.Warn("newest checkpoint not found", zap.String("room", id), zap.Error(err))
			continue
		case err != nil:
			return fmt.Errorf("newest checkpoint of %s: %w", id, err)
		}
		if err := l.CheckNewest(newest, seq); err != nil {
			l.refused = err.Error()
		}
		if l.refused != "" {
			log.Error("room refused", zap.String("room", id), zap.String("reason", l.refused))
			if err := setAside(roomAside(o.Subjects, id, 0, l.refused), true); err != nil {
				return err
			}
		}
	}
	r.onVerified = func(c *checkpoint.Checkpoint) {
		if n, ok := saved[c.Room]; (ok && c.Size <= n) || r.keptIgnored[c.Room] {
			return
		}
		if err := o.State.Save(c); err != nil {
			log.Error("checkpoint state not saved", zap.String("room", c.Room), zap.Uint64("size", c.Size), zap.Error(err))
			return
		}
		saved[c.Room] = c.Size
	}
	return nil
}

// Follow's fetches: followFetch messages per pull (at most
// followMaxAckPending are ever unacknowledged; a pull that failed with
// nothing delivered is asked again after followErrorPause), prepared in batches of up
// to followBatch that have already arrived. A trusting Follow holds the
// messages of an atomic batch unacknowledged until the batch is whole, so
// it refuses batches of more than followMaxRun messages (nats-server's
// atomic batches hold at most 1,000 by default, the gate's too), which
// could never arrive whole.
const (
	followFetch         = 64
	followErrorPause    = time.Second
	followBatch         = 16
	followMaxAckPending = 4096
	followMaxRun        = followMaxAckPending - followFetch
)

// rebuildMsg is a message of Follow's rebuild whose verdict is not out
// yet: its stream seq and, when the set-aside list holds it, the code it
// is listed with.
type rebuildMsg struct {
	seq    uint64
	listed events.Code
}

// errStopped stops Follow's pipeline when its context is done.
var errStopped = errors.New("stopped")

// maxWitnessPending bounds the deployment log entries Follow keeps waiting
// for their rooms (a room not followed yet, or behind): past it the oldest
// are dropped, with a warning.
const maxWitnessPending = 1 << 16

// followWitness is Follow's view of the deployment log, read after the
// rebuild and then every interval, in Follow's decision goroutine (the
// rooms' ledgers are not shared).
type followWitness struct {
	view  *deploymentView
	every time.Duration
	at    time.Time
	log   *zap.Logger
	why   string // the quorum shortfall last logged
	tell  func(string)
	err   error // the first failure to set a message aside
}

// step reads what is new in the log and judges the entries it can; a read
// that fails is logged and tried again at the next step.
func (w *followWitness) step(ctx context.Context, js jetstream.JetStream, r *Reader, subjects room.Subjects) error {
	w.at = time.Now()
	if err := w.view.read(ctx, js); err != nil {
		if ctx.Err() == nil {
			w.log.Warn("follow: reading the deployment log", zap.Error(err))
		}
		return nil
	}
	w.view.judge(r, subjects, false)
	if n := len(w.view.pending); n > maxWitnessPending {
		w.log.Warn("follow: deployment log entries waiting for their rooms dropped", zap.Int("dropped", n-maxWitnessPending))
		w.view.pending = slices.Delete(w.view.pending, 0, n-maxWitnessPending)
	}
	if why := w.view.shortOfQuorum(); why != w.why {
		w.why = why
		if w.tell != nil {
			w.tell(why)
		}
		if why != "" {
			w.log.Warn("follow: witness_quorum", zap.String("reason", why))
		} else if c := w.view.facts.Witnessed; c != nil {
			w.log.Info("follow: the deployment log is witnessed", zap.Uint64("size", c.Size), zap.Strings("cosigners", c.Cosigners))
		}
	}
	return w.err
}

// sameRooms refuses to resume durable with filters that take in messages
// its earlier runs did not: its acknowledgement floor is a stream
// sequence, so the earlier messages of a room added to it would lie below
// the floor and never reach the handler (rebuilt as state only, without a
// word). Fewer rooms, or the same, resume; all (the whole stream, all)
// takes in every filter. A durable not made yet has nothing to skip.
func sameRooms(ctx context.Context, st jetstream.Stream, durable string, want []string, all string) error {
	c, err := st.Consumer(ctx, durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("consumer %s: %w", durable, err)
	}
	cfg := c.CachedInfo().Config
	had := cfg.FilterSubjects
	if cfg.FilterSubject != "" {
		had = append(had, cfg.FilterSubject)
	}
	if len(had) == 0 || slices.Contains(had, all) {
		return nil
	}
	var added []string
	for _, f := range want {
		if !slices.Contains(had, f) {
			added = append(added, f)
		}
	}
	if len(added) > 0 {
		return fmt.Errorf("%w: durable %s follows %s; this run would add %s, whose messages below the durable's acknowledgement floor would never be handed out: follow them with a new --durable (or delete the consumer to start it over)",
			ErrReader, durable, strings.Join(had, ", "), strings.Join(added, ", "))
	}
	return nil
}
