package reader

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// ReadMode chooses how a replay (Audit, Follow's rebuild) reads the
// stream.
type ReadMode string

const (
	// ReadAuto, the default (also ""), reads with an ordered consumer and,
	// when the server refuses to create one because the stream's consumer
	// limit is reached (error code 10026), with direct gets.
	ReadAuto ReadMode = "auto"
	// ReadConsumer reads with an ordered consumer only.
	ReadConsumer ReadMode = "consumer"
	// ReadDirect reads with batch direct gets (ADR-31): no consumer is
	// created, so a reader needs no right to create one and a stream at
	// its consumer limit can still be replayed.
	ReadDirect ReadMode = "direct"
)

// ParseReadMode parses "auto", "consumer" or "direct" ("" is auto).
func ParseReadMode(s string) (ReadMode, error) {
	switch m := ReadMode(s); m {
	case "", ReadAuto:
		return ReadAuto, nil
	case ReadConsumer, ReadDirect:
		return m, nil
	}
	return "", fmt.Errorf("%w: read mode %q: want auto, consumer or direct", ErrReader, s)
}

// How a report says a replay read the stream (AuditReport.ReadBy).
const (
	ReadByConsumer = "consumer"
	ReadByDirect   = "direct_get"
)

// readFacts is what a replay says about its read path.
type readFacts struct {
	by, why string
}

// replayWith is replay or replayDirect as mode asks; for ReadAuto, the
// direct read when the server refuses the ordered consumer because the
// stream has as many consumers as it may (before any message is read).
func replayWith(ctx context.Context, js jetstream.JetStream, st jetstream.Stream, mode ReadMode, tune directRead, subjects room.Subjects, rooms []string, fromSeq uint64, since time.Time, last uint64, emit func(*batch) bool, facts *readFacts) error {
	tune = tune.withDefaults()
	nc := js.Conn()
	maxPayload := int(nc.MaxPayload())
	stream := st.CachedInfo().Config.Name
	if mode == ReadDirect {
		*facts = readFacts{ReadByDirect, "asked for (ReadDirect: subscriber --read direct, or --read auto as a user named by --user, --nkey or --creds)"}
		return replayDirect(ctx, js, stream, maxPayload, tune, subjects, rooms, fromSeq, since, last, emit)
	}
	*facts = readFacts{ReadByConsumer, ""}
	var emitted atomic.Bool
	err := replay(ctx, nc, st, tune.idle, maxPayload, subjects, rooms, fromSeq, since, last, func(b *batch) bool {
		emitted.Store(true)
		return emit(b)
	})
	// A consumer stuck on one message: the batches before it were
	// emitted, so the direct read goes on from it.
	var stall *stallError
	if mode != ReadConsumer && errors.As(err, &stall) {
		*facts = readFacts{ReadByDirect, "from stream seq " + strconv.FormatUint(stall.At, 10) + ": " + stall.Error()}
		return replayDirect(ctx, js, stream, maxPayload, tune, subjects, rooms, stall.At, time.Time{}, last, emit)
	}
	// An ordered consumer that could not be created delivered nothing.
	if mode == ReadConsumer || err == nil || emitted.Load() || !errors.Is(err, jetstream.ErrMaximumConsumersLimit) {
		return err
	}
	*facts = readFacts{ReadByDirect, "the server refused an ordered consumer: " + jetstream.ErrMaximumConsumersLimit.Error() + " (10026)"}
	return replayDirect(ctx, js, stream, maxPayload, tune, subjects, rooms, fromSeq, since, last, emit)
}

// directRead tunes a direct replay; its zero value is the defaults
// (tests set it through AuditOptions and FollowOptions' unexported
// field).
type directRead struct {
	// batch is how many messages a direct replay asks for per batch
	// direct get, and inFlight how many requests it keeps in flight: the
	// next one starts where the one before is expected to end, so the
	// server reads the next batch while the client takes in the current
	// one. Defaults 1,000 and 2.
	batch, inFlight int
	// mergeMax is the most rooms a direct replay reads each with its own
	// filter, merging them in stream order; more rooms are read with the
	// filter of every room. Default 8; -1 for none.
	mergeMax int
	// idle is the consumer replay's replayIdle, shorter in tests.
	idle time.Duration
}

// withDefaults fills in d's zero fields.
func (d directRead) withDefaults() directRead {
	if d.batch <= 0 {
		d.batch = 1000
	}
	if d.inFlight <= 0 {
		d.inFlight = 2
	}
	if d.idle <= 0 {
		d.idle = replayIdle
	}
	switch {
	case d.mergeMax == 0:
		d.mergeMax = 8
	case d.mergeMax < 0:
		d.mergeMax = 0
	}
	return d
}

// directStall bounds how long a direct replay waits for a lagging replica
// that answers short while the stream leader holds more.
const directStall = 30 * time.Second

// directReq is one batch direct get in flight: n messages from start.
type directReq struct {
	start  uint64
	n      int
	span   uint64 // how far (in sequences) it is expected to reach
	cancel context.CancelFunc
	res    chan directRes
}

type directRes struct {
	msgs []*jetstream.RawStreamMsg
	err  error
}

// replayDirect is replay without a consumer: it emits, in batches, the
// messages on the rooms' subjects in stream order, from fromSeq (or since)
// up to last inclusive, read with batch direct gets (ADR-31), which any
// replica answers from its copy. A batch get takes one subject: one room
// is read with its own filter; up to tune.mergeMax rooms each with its
// own, concurrently, merged in stream order (replayMerged); more, and
// every room, by reading the whole stream by sequence (jsapi.WholeStream),
// keeping the messages on the rooms' subjects (which reads the other
// rooms' messages too). A room's own filter makes the server walk the
// room's subjects for each batch: a room of many records (three marker
// subjects each) read this way costs that walk per batch, which the
// default read by consumer does not. Messages the stream no longer has are not there,
// as with a consumer. A replica may answer short (it lags): the replay
// ends only once an answer holds nothing more and the stream leader
// agrees (leaderHasMore), as replay does. It returns ctx's error once
// emit refuses a batch.
func replayDirect(ctx context.Context, js jetstream.JetStream, stream string, maxPayload int, tune directRead, subjects room.Subjects, rooms []string, fromSeq uint64, since time.Time, last uint64, emit func(*batch) bool) error {
	if len(rooms) > 1 && len(rooms) <= tune.mergeMax {
		return replayMerged(ctx, js, stream, maxPayload, tune, subjects, rooms, fromSeq, since, last, emit)
	}
	fs := filters(subjects, rooms)
	filter, keep := fs[0], []string(nil)
	if len(fs) > 1 || filter == subjects.All() {
		// More rooms than one, or every room: the whole stream by
		// sequence, keeping the rooms' subjects, since the server walks
		// its whole subject index for every batch asked under a
		// wildcard (jsapi.WholeStream).
		filter, keep = jsapi.WholeStream, fs
	}
	from, err := replayStart(ctx, js.Conn(), stream, subjects, fromSeq, since)
	if err != nil || from > last {
		return err
	}
	maxBytes := max(pullMaxBytes, 2*maxPayload)
	get := func(start uint64, n int, span uint64) *directReq {
		rctx, cancel := context.WithTimeout(ctx, leaderGetTimeout)
		r := &directReq{start: start, n: n, span: span, cancel: cancel, res: make(chan directRes, 1)}
		go func() {
			var res directRes
			// jsapi takes each message's sequence and subject from the
			// server, never from headers it was stored with.
			msgs, err := jsapi.DirectBatch(rctx, js.Conn(), stream, jsapi.BatchRequest{Seq: start, NextBySubj: filter, Batch: n, MaxBytes: maxBytes}, leaderGetTimeout)
			for _, m := range msgs {
				res.msgs = append(res.msgs, m.Raw())
			}
			res.err = err
			r.res <- res
		}()
		return r
	}
	var q []*directReq
	defer func() {
		for _, r := range q {
			r.cancel()
		}
	}()
	// covered: every message on the filter up to it has been emitted (or
	// the stream does not have it). density: sequences per message on the
	// filter, and size: bytes per message, as the last full answer had
	// them, to size and place the next requests.
	covered, density, size := from-1, 1.0, 0
	var stalled time.Time
	wait := 50 * time.Millisecond
	request := func(start uint64, limit uint64) *directReq {
		n := uint64(tune.batch)
		if size > 0 {
			n = min(n, uint64(max(maxBytes/size, 1)))
		}
		n = min(n, limit-start+1, last-start+1)
		return get(start, int(n), max(uint64(float64(n)*density), n))
	}
	for covered < last {
		for len(q) < tune.inFlight {
			start := covered + 1
			if k := len(q); k > 0 {
				start = max(start, q[k-1].start+q[k-1].span)
			}
			if start > last {
				break
			}
			q = append(q, request(start, last))
		}
		if r := q[0]; r.start > covered+1 {
			// The answer before ended short of where r starts (cut at
			// max bytes, or a sparser stretch): read the gap first.
			q = append([]*directReq{request(covered+1, r.start-1)}, q...)
		}
		r := q[0]
		q = q[1:]
		var res directRes
		select {
		case res = <-r.res:
		case <-ctx.Done():
			r.cancel()
			return ctx.Err()
		}
		r.cancel()
		if res.err != nil {
			return fmt.Errorf("replay: direct get from stream seq %d: %w", r.start, res.err)
		}
		if len(res.msgs) == 0 {
			// Nothing from r.start on, as this replica has it: the end,
			// unless the leader holds more (a lagging replica).
			for _, r := range q {
				r.cancel()
			}
			q = q[:0]
			more, err := leaderHasMore(ctx, js.Conn(), stream, fs, covered, last)
			if err != nil {
				return fmt.Errorf("replay: %w", err)
			}
			if !more {
				return nil
			}
			if stalled.IsZero() {
				stalled = time.Now()
			} else if time.Since(stalled) > directStall {
				return fmt.Errorf("replay: direct get from stream seq %d: the replica answers nothing while the stream leader holds more", covered+1)
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return ctx.Err()
			}
			wait = min(2*wait, time.Second)
			continue
		}
		stalled, wait = time.Time{}, 50*time.Millisecond
		reach := res.msgs[len(res.msgs)-1].Sequence
		if len(res.msgs) == r.n {
			density = float64(reach-r.start+1) / float64(r.n)
			bytes := 0
			for _, m := range res.msgs {
				bytes += len(m.Subject) + len(m.Data) + headerSize(m.Header)
			}
			size = bytes/len(res.msgs) + 1
		}
		b := newBatch()
		for _, m := range res.msgs {
			if m.Sequence <= covered {
				continue // read already (answers overlap)
			}
			if m.Sequence > last {
				break
			}
			if keep != nil && !matchesAny(keep, m.Subject) {
				continue
			}
			b.add(StreamMsg{Subject: m.Subject, Seq: m.Sequence, Data: m.Data, Time: m.Time, Attestation: checkpoint.AttestationOf(m.Header), Owner: m.Header.Get(room.HeaderOwner)}, nil)
			if len(b.xs) >= batchMsgs || b.size >= batchBytes {
				if !emit(b) {
					return ctx.Err()
				}
				b = newBatch()
			}
		}
		if len(b.xs) > 0 {
			if !emit(b) {
				return ctx.Err()
			}
		} else {
			b.release()
		}
		covered = min(max(covered, reach), last)
	}
	return nil
}

// replayMerged is replayDirect of several rooms: one direct replay per
// room, concurrently, their messages merged in stream order (a stream
// sequence is on one subject only). It stops at the first error.
func replayMerged(ctx context.Context, js jetstream.JetStream, stream string, maxPayload int, tune directRead, subjects room.Subjects, rooms []string, fromSeq uint64, since time.Time, last uint64, emit func(*batch) bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type source struct {
		ch  chan *batch
		err error // set before ch is closed
		cur *batch
		i   int
	}
	srcs := make([]*source, len(rooms))
	for k, id := range rooms {
		s := &source{ch: make(chan *batch, 2)}
		srcs[k] = s
		go func() {
			defer close(s.ch)
			s.err = replayDirect(ctx, js, stream, maxPayload, tune, subjects, []string{id}, fromSeq, since, last, func(b *batch) bool {
				select {
				case s.ch <- b:
					return true
				case <-ctx.Done():
					b.release()
					return false
				}
			})
		}()
	}
	defer func() {
		cancel()
		for _, s := range srcs {
			if s.cur != nil {
				s.cur.release()
			}
			if s.ch == nil {
				continue // drained
			}
			for b := range s.ch {
				b.release()
			}
		}
	}()
	out := newBatch()
	for {
		var best *source
		for _, s := range srcs {
			if s.ch == nil {
				continue
			}
			if s.cur == nil {
				b, ok := <-s.ch
				if !ok {
					if s.err != nil {
						out.release()
						return s.err
					}
					s.ch = nil
					continue
				}
				s.cur, s.i = b, 0
			}
			if best == nil || s.cur.xs[s.i].m.Seq < best.cur.xs[best.i].m.Seq {
				best = s
			}
		}
		if best == nil {
			break
		}
		out.add(best.cur.xs[best.i].m, nil)
		if best.i++; best.i == len(best.cur.xs) {
			best.cur.release()
			best.cur = nil
		}
		if len(out.xs) >= batchMsgs || out.size >= batchBytes {
			if !emit(out) {
				return ctx.Err()
			}
			out = newBatch()
		}
	}
	if len(out.xs) == 0 {
		out.release()
		return nil
	}
	if !emit(out) {
		return ctx.Err()
	}
	return nil
}

// replayStart is the stream sequence a replay from fromSeq or since
// starts at: fromSeq (at least 1), or the first message stored at or
// after since, as the stream leader maps the time (as a consumer's start
// time does); math.MaxUint64 when there is none. The replay's end check
// asks the leader for messages after start-1, so start must not be below
// where the replay starts.
func replayStart(ctx context.Context, nc *nats.Conn, stream string, subjects room.Subjects, fromSeq uint64, since time.Time) (uint64, error) {
	if fromSeq > 1 || since.IsZero() {
		return max(fromSeq, 1), nil
	}
	m, err := jsapi.LeaderGetRaw(ctx, nc, stream, leaderGetTimeout, map[string]any{"start_time": since, "next_by_subj": subjects.All()})
	if err != nil {
		return 0, fmt.Errorf("replay: %w", err)
	}
	if m == nil {
		return math.MaxUint64, nil
	}
	return m.Sequence, nil
}

// headerSize is about the bytes of h on the wire.
func headerSize(h map[string][]string) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// matchesAny reports whether the literal subject matches one of filters.
func matchesAny(filters []string, subject string) bool {
	for _, f := range filters {
		if jsapi.SubjectMatches(f, subject) {
			return true
		}
	}
	return false
}
