package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/trace"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
)

// rawBatches appends lines (one chain, from its first entry) to the chain's
// subject in roomID the fastest raw way with the guarantees roompub's
// appends have: atomic batch publish (ADR-50) of up to batch messages (see
// publishBatch). sem, when not nil, bounds the batches in flight. It
// returns the messages the server acknowledged as stored.
func rawBatches(ctx context.Context, js jetstream.JetStream, subjects room.Subjects, roomID string, key events.ChainKey,
	lines [][]byte, hashes []string, batch int, sem chan struct{}) (int, error) {
	subj, anyRoom := subjects.Journal(roomID, key), subjects.ChainAnyRoom(key)
	var last uint64 // stream sequence of the chain's last entry; 0: none yet
	stored := 0
	for off := 0; off < len(lines); off += batch {
		end := min(off+batch, len(lines))
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return stored, ctx.Err()
			}
		}
		err := retryInProcess(func() (err error) {
			last, err = publishBatch(ctx, js, subj, anyRoom, lines[off:end], hashes[off:end], last)
			return err
		})
		if sem != nil {
			<-sem
		}
		if err != nil {
			return stored, fmt.Errorf("entry %d: %w", off, err)
		}
		stored += end - off
	}
	return stored, nil
}

// publishBatch appends lines to subj in one atomic batch, each message
// with Nats-Msg-Id = its entry_hash and the first with the expected last
// sequence (last) over anyRoom, the chain's subject in every room: the
// headers the gate sets. It returns the stream sequence of the last
// message.
func publishBatch(ctx context.Context, js jetstream.JetStream, subj, anyRoom string, lines [][]byte, hashes []string, last uint64) (uint64, error) {
	msgs := make([]*nats.Msg, len(lines))
	for i, line := range lines {
		m := &nats.Msg{Subject: subj, Data: line, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, hashes[i])
		if i == 0 {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
			m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, anyRoom)
		}
		msgs[i] = m
	}
	ack, err := jetstreamext.PublishMsgBatch(ctx, js, msgs)
	if err != nil {
		return last, fmt.Errorf("atomic batch of %d on %s: %w", len(msgs), subj, err)
	}
	if ack.BatchSize != uint64(len(msgs)) {
		return last, fmt.Errorf("atomic batch on %s: %d of %d stored", subj, ack.BatchSize, len(msgs))
	}
	return ack.Sequence, nil
}

// inProcessTries bounds retryInProcess's publishes of one message or batch.
const inProcessTries = 100

// retryInProcess calls publish again while the server refuses it with
// 10164 (JSStreamWrongLastSequenceConstantErr), at most inProcessTries
// times. On a replicated stream the leader acks a message before it
// forgets the message's subject was in process (nats-server 2.15.2,
// applyStreamMsgOp), so a publisher that sends its next expected-last-
// subject-sequence check on the ack can be refused though its expectation
// holds; a stale expectation is refused with 10071 and the sequence. The
// gate retries such refusals after reading the chain's head, so the raw
// side must retry too, or the R3 rows fail at random.
func retryInProcess(publish func() error) error {
	var err error
	for range inProcessTries {
		err = publish()
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant {
			return err
		}
	}
	return err
}

// ship ships one capsule directory through roompub (client.ShipCapsule, what
// `publisher journal` does) and returns the entries stored. Lines answered
// duplicate count as stored: a request resent after its reply was lost (a
// timeout on a loaded machine) finds its lines stored by the first send,
// each at its position, and countStored checks the stream's count after.
func (b *bench) ship(dir, roomID string, want int) (int, error) {
	res, err := client.ShipCapsule(b.ctx, b.client, dir, roomID, client.ShipOptions{Pipeline: b.c.Pipeline})
	if err != nil {
		return res.Stored, fmt.Errorf("ship %s: %w", dir, err)
	}
	if res.Refused != nil {
		return res.Stored, fmt.Errorf("ship %s: refused: %v", dir, res.Refused.Problem)
	}
	if n := res.Stored + res.Duplicates; n != want {
		return n, fmt.Errorf("ship %s: %d of %d entries stored (%d already there, %d duplicates)", dir, res.Stored, want, res.Skipped, res.Duplicates)
	}
	return want, nil
}

// sides names a scenario's raw and roompub chains of one round: ids of
// equal length, so that both sides' entries, generated from one seed, have
// equal lengths. Each side has one room per scenario.
func sides(scenario string, round, i int) (raw, pub events.CapsuleMeta, rawRoom, pubRoom string) {
	id := func(side string) (events.CapsuleMeta, string) {
		return chainMeta(fmt.Sprintf("run-bench-%s-%s-r%d-%04d", side, scenario, round, i), fmt.Sprintf("cap-bench-%s-%s-r%d-%04d", side, scenario, round, i)),
			fmt.Sprintf("room:bench-%s-%s", side, scenario)
	}
	raw, rawRoom = id("raw")
	pub, pubRoom = id("pub")
	return raw, pub, rawRoom, pubRoom
}

// inRounds runs the scenario --rounds times, raw first in even rounds and
// roompub first in odd ones, so that a machine getting faster or slower
// during the run favours neither side, and adds up each side's work.
// raw and pub prepare their round's data untimed and return the timed
// work only.
func (b *bench) inRounds(r *result, raw, pub func(round int) (side, error)) error {
	r.rounds = b.rounds
	for round := range b.rounds {
		order := []struct {
			name string
			fn   func(int) (side, error)
			dst  *side
		}{{"raw", raw, &r.raw}, {"roompub", pub, &r.pub}}
		if round%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, o := range order {
			sideTraces.name = fmt.Sprintf("%s-r%d-%s", r.key, round+1, o.name)
			if b.mode != b.primary {
				// The other modes' passes trace into files of their own.
				sideTraces.name = fmt.Sprintf("%s-%s-r%d-%s", r.key, b.mode, round+1, o.name)
			}
			s, err := o.fn(round)
			sideTraces.name = ""
			if err == nil {
				b.logf("%s: round %d of %d: %-7s %s", r.key, round+1, b.rounds, o.name, s)
			}
			o.dst.n += s.n
			o.dst.bytes += s.bytes
			o.dst.dur += s.dur
			o.dst.cpu += s.cpu
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, o.name, err)
			}
		}
	}
	return nil
}

// longChain: one chain of chainEntries entries, raw atomic batches versus
// roompub's full path; a new chain each round.
func (b *bench) longChain() (*result, error) {
	if err := b.startRoompub(); err != nil {
		return nil, err
	}
	n := b.sz.chainEntries
	r := &result{key: "long_chain", name: fmt.Sprintf("long chain (1 × %d)", n), unit: "entries", items: n * b.rounds, floor: 0.65,
		rawHow: fmt.Sprintf("jetstreamext.PublishMsgBatch, %d per atomic batch, one after another", b.c.Batch),
		pubHow: "client.ShipCapsule of the capsule directory: client, ingest service, gate, chain check, " + b.storePath()}
	_, _, rawRoom, pubRoom := sides("long", 0, 0)
	err := b.inRounds(r, func(round int) (side, error) {
		meta, _, roomID, _ := sides("long", round, 0)
		c := genChain(meta, uint64(1+round), n)
		t := startTimer()
		stored, err := rawBatches(b.ctx, b.js, b.rawSubjects, roomID, meta.Key(), c.lines, c.hashes, b.c.Batch, nil)
		s := side{n: stored, bytes: c.bytes}
		t.stop(&s)
		return s, err
	}, func(round int) (side, error) {
		_, meta, _, roomID := sides("long", round, 0)
		c := genChain(meta, uint64(1+round), n)
		dir := filepath.Join(b.tmp, "long", meta.CapsuleID)
		if err := writeChain(dir, c); err != nil {
			return side{}, err
		}
		t := startTimer()
		stored, err := b.ship(dir, roomID, n)
		s := side{n: stored, bytes: c.bytes}
		t.stop(&s)
		return s, err
	})
	if err != nil {
		return nil, err
	}
	if err := b.countStored(r, []string{rawRoom}, []string{pubRoom}); err != nil {
		return nil, err
	}
	if b.mode != b.primary {
		return r, nil // the reference below is the main pass's
	}
	// For reference, not a ratio: one synchronous publish per entry with
	// the same headers each, the way the gate appended before it batched
	// (atomic batches are roughly ten times faster with fsync).
	m := min(n, 2000)
	meta := chainMeta(fmt.Sprintf("run-bench-syn-long-r0-%04d", 0), fmt.Sprintf("cap-bench-syn-long-r0-%04d", 0))
	c := genChain(meta, 1, m)
	b.logf("long_chain: reference: %d synchronous publishes", m)
	t := startTimer()
	stored, err := syncPublishes(b.ctx, b.js, b.rawSubjects, "room:bench-syn-long", meta.Key(), c.lines, c.hashes)
	sync := side{n: stored, bytes: c.bytes}
	t.stop(&sync)
	if err != nil {
		return nil, err
	}
	r.syncEntries = stored
	r.extra = map[string]any{"raw_sync_count": stored, "raw_sync_per_s": round(sync.rate(), 1), "batch_over_sync": round(r.raw.rate()/sync.rate(), 2)}
	r.notes = append(r.notes, fmt.Sprintf("reference: one synchronous publish per entry (same headers on each): %s; atomic batches are %.1f× that", sync, r.raw.rate()/sync.rate()))
	return r, nil
}

// syncPublishes appends lines to the chain's subject with one synchronous
// publish each, with Nats-Msg-Id and the expected last sequence over the
// chain's subject in every room on every message.
func syncPublishes(ctx context.Context, js jetstream.JetStream, subjects room.Subjects, roomID string, key events.ChainKey, lines [][]byte, hashes []string) (int, error) {
	subj, anyRoom := subjects.Journal(roomID, key), subjects.ChainAnyRoom(key)
	var last uint64
	for i, line := range lines {
		m := &nats.Msg{Subject: subj, Data: line, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, hashes[i])
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
		m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, anyRoom)
		var ack *jetstream.PubAck
		err := retryInProcess(func() (err error) {
			ack, err = js.PublishMsg(ctx, m)
			return err
		})
		if err != nil {
			return i, fmt.Errorf("entry %d on %s: %w", i, subj, err)
		}
		last = ack.Sequence
	}
	return len(lines), nil
}

// countStored checks that each side's stream holds r.items messages in
// the side's rooms (roompub's checkpoints aside), so neither side's count
// rests on its own word alone.
func (b *bench) countStored(r *result, rawRooms, pubRooms []string) error {
	for _, s := range []struct {
		name, stream string
		rooms        []string
		subjects     room.Subjects
	}{{"raw", rawStream, rawRooms, b.rawSubjects}, {"roompub", writeStream, pubRooms, b.subjects}} {
		total := 0
		for _, roomID := range s.rooms {
			n, _, err := b.storedOn(s.stream, s.subjects, s.subjects.Room(roomID))
			if err != nil {
				return err
			}
			total += n
		}
		if total != r.items {
			return fmt.Errorf("the stream %s holds %d messages in %s's %d room(s) (%s, …), want %d", s.stream, total, s.name, len(s.rooms), s.rooms[0], r.items)
		}
	}
	return nil
}

// maxShippers bounds the parallel row's chains shipping at once, as a
// harness keeps one identity's requests under its share of the ingest
// service (ingest.DefaultIdentityConcurrency, 1,024, counting each
// shipper's pipelined requests); past it the service answers over_quota,
// and 10,000 shippers retrying at once gave up. The raw side's batches in
// flight are bounded by --inflight.
const maxShippers = 256

// parallel: chains × chainLength entries shipped at once, the batches in
// flight capped alike on both sides; chain i in room i mod rooms.
func (b *bench) parallel() (*result, error) {
	if err := b.startRoompub(); err != nil {
		return nil, err
	}
	k, n, rooms := b.sz.chains, b.sz.chainLength, max(1, b.sz.rooms)
	name := fmt.Sprintf("parallel (%d × %d)", k, n)
	if rooms > 1 {
		name = fmt.Sprintf("parallel (%d × %d, %d rooms)", k, n, rooms)
	}
	r := &result{key: "parallel", name: name, unit: "entries", items: k * n * b.rounds, floor: 0.7,
		rawHow: fmt.Sprintf("%d goroutines, atomic batches of up to %d, at most %d in flight", k, b.c.Batch, b.c.Inflight),
		pubHow: fmt.Sprintf("%d client.ShipCapsule goroutines, %s", k, b.pubInflight)}
	if k > maxShippers {
		r.pubHow = fmt.Sprintf("%d client.ShipCapsule goroutines, at most %d shipping at once, %s", k, maxShippers, b.pubInflight)
	}
	roomOf := func(side string, i int) string { return parallelRoom(side, i, rooms) }
	err := b.inRounds(r, func(round int) (side, error) {
		chains := make([]*chain, k)
		var s side
		for i := range k {
			meta, _, _, _ := sides("par", round, i)
			chains[i] = genChain(meta, uint64(100+1000*round+i), n)
			s.bytes += chains[i].bytes
		}
		sem := make(chan struct{}, b.c.Inflight)
		var err error
		s.n, err = runAll(k, func(i int) (int, error) {
			return rawBatches(b.ctx, b.js, b.rawSubjects, roomOf("raw", i), chains[i].meta.Key(), chains[i].lines, chains[i].hashes, b.c.Batch, sem)
		}, &s)
		return s, err
	}, func(round int) (side, error) {
		dirs := make([]string, k)
		var s side
		for i := range k {
			_, meta, _, _ := sides("par", round, i)
			c := genChain(meta, uint64(100+1000*round+i), n)
			dirs[i] = filepath.Join(b.tmp, "parallel", meta.CapsuleID)
			if err := writeChain(dirs[i], c); err != nil {
				return s, err
			}
			s.bytes += c.bytes
		}
		var err error
		shippers := make(chan struct{}, maxShippers)
		s.n, err = runAll(k, func(i int) (int, error) {
			shippers <- struct{}{}
			defer func() { <-shippers }()
			return b.ship(dirs[i], roomOf("pub", i), n)
		}, &s)
		return s, err
	})
	if err != nil {
		return nil, err
	}
	if rooms > 1 {
		r.extra = map[string]any{"rooms": rooms}
	}
	var rawRooms, pubRooms []string
	for j := range min(rooms, k) {
		rawRooms, pubRooms = append(rawRooms, roomOf("raw", j)), append(pubRooms, roomOf("pub", j))
	}
	return r, b.countStored(r, rawRooms, pubRooms)
}

// parallelRoom is the room of the parallel row's chain i on side (raw or
// pub) when its chains are spread over rooms: the scenario's one room
// when rooms is 1.
func parallelRoom(side string, i, rooms int) string {
	if rooms <= 1 {
		return fmt.Sprintf("room:bench-%s-par", side)
	}
	return fmt.Sprintf("room:bench-%s-par-%05d", side, i%rooms)
}

// timer is a started measurement: wall time and the CPU time of this
// process and its finished children (cpuTime).
type timer struct {
	wall time.Time
	cpu  time.Duration
}

// startTimer collects the garbage of the untimed setup (generating
// chains and records, writing capsule directories) and starts a timer:
// each side's timed work then pays only for its own garbage, as a Go
// benchmark does after runtime.GC. With --trace, inside a round of a
// write row, it also starts that side's execution trace (sideTraces).
func startTimer() timer {
	runtime.GC()
	sideTraces.start()
	return timer{wall: time.Now(), cpu: cpuTime()}
}

// stop sets s's duration and CPU time to those since t started, then
// stops the side's execution trace, if any.
func (t timer) stop(s *side) {
	s.dur = time.Since(t.wall)
	s.cpu = cpuTime() - t.cpu
	sideTraces.stop()
}

// sideTraces writes, with --trace DIR, a runtime/trace execution trace
// of each side's timed work in each round of the write rows to
// DIR/<row>-r<round>-<side>.trace (go tool trace FILE: the goroutine
// analysis shows, say, how long the stream's goroutine ran, sat in
// system calls, waited for a core or for messages). Tracing slows the
// run: ratios of a traced run are not the bench's.
var sideTraces tracer

type tracer struct {
	dir  string   // "" without --trace
	name string   // the side inRounds is running, "" outside a round
	f    *os.File // the trace being written
	err  error    // the first error, reported once the run ends
}

func (tr *tracer) start() {
	if tr.dir == "" || tr.name == "" || tr.f != nil || tr.err != nil {
		return
	}
	f, err := os.Create(filepath.Join(tr.dir, tr.name+".trace"))
	if err == nil {
		if err = trace.Start(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		tr.err = fmt.Errorf("--trace: %w", err)
		return
	}
	tr.f = f
}

func (tr *tracer) stop() {
	if tr.f == nil {
		return
	}
	trace.Stop()
	if err := tr.f.Close(); err != nil && tr.err == nil {
		tr.err = fmt.Errorf("--trace: %w", err)
	}
	tr.f = nil
}

// cpuTime is the user and system CPU time of this process (every
// goroutine: the embedded server, the client, the gate) plus that of its
// children that have been waited for (audit, verify, sha256sum, the raw
// reader), from getrusage(2).
func cpuTime() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			continue // not measured: 0 CPU, reported as such
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}

// runAll runs fn(0) … fn(k-1) on k goroutines released at once, sets
// s's duration and CPU time to those until the last one returned, and
// returns the sum of their counts and the first error.
func runAll(k int, fn func(i int) (int, error), s *side) (int, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	var first error
	gate := make(chan struct{})
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			n, err := fn(i)
			mu.Lock()
			total += n
			if err != nil && first == nil {
				first = err
			}
			mu.Unlock()
		}()
	}
	t := startTimer()
	close(gate)
	wg.Wait()
	t.stop(s)
	return total, first
}
