package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
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
		var err error
		last, err = publishBatch(ctx, js, subj, anyRoom, lines[off:end], hashes[off:end], last)
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

// ship ships one capsule directory through roompub (room.ShipCapsule, what
// `publisher journal` does) and returns the entries stored.
func (b *bench) ship(dir, roomID string, want int) (int, error) {
	res, err := room.ShipCapsule(b.ctx, b.client, dir, roomID, room.ShipOptions{})
	if err != nil {
		return res.Stored, fmt.Errorf("ship %s: %w", dir, err)
	}
	if res.Refused != nil {
		return res.Stored, fmt.Errorf("ship %s: refused: %v", dir, res.Refused.Problem)
	}
	if res.Stored != want {
		return res.Stored, fmt.Errorf("ship %s: %d of %d entries stored (%d already there, %d duplicates)", dir, res.Stored, want, res.Skipped, res.Duplicates)
	}
	return res.Stored, nil
}

// sides names a scenario's raw and roompub chains: ids of equal length, so
// that both sides' entries, generated from one seed, have equal lengths.
func sides(scenario string, i int) (raw, pub events.CapsuleMeta, rawRoom, pubRoom string) {
	id := func(side string) (events.CapsuleMeta, string) {
		return chainMeta(fmt.Sprintf("run-bench-%s-%s-%04d", side, scenario, i), fmt.Sprintf("cap-bench-%s-%s-%04d", side, scenario, i)),
			fmt.Sprintf("room:bench-%s-%s", side, scenario)
	}
	raw, rawRoom = id("raw")
	pub, pubRoom = id("pub")
	return raw, pub, rawRoom, pubRoom
}

// longChain: one chain of chainEntries entries, raw atomic batches versus
// roompub's full path.
func (b *bench) longChain() (*result, error) {
	if err := b.startRoompub(); err != nil {
		return nil, err
	}
	n := b.sz.chainEntries
	rawMeta, pubMeta, rawRoom, pubRoom := sides("long", 0)
	b.logf("long chain: generating 2 × %d entries", n)
	rawC, pubC := genChain(rawMeta, 1, n), genChain(pubMeta, 1, n)
	dir := filepath.Join(b.tmp, "long", pubMeta.CapsuleID)
	if err := writeChain(dir, pubC); err != nil {
		return nil, err
	}
	r := &result{key: "long_chain", name: fmt.Sprintf("long chain (1 × %d)", n), unit: "entries", items: n, floor: 0.5,
		rawHow: fmt.Sprintf("jetstreamext.PublishMsgBatch, %d per atomic batch, one after another", b.c.Batch),
		pubHow: "room.ShipCapsule of the capsule directory: client, ingest service, gate, chain check, store"}

	b.logf("long chain: raw")
	start := time.Now()
	stored, err := rawBatches(b.ctx, b.js, b.subjects, rawRoom, rawMeta.Key(), rawC.lines, rawC.hashes, b.c.Batch, nil)
	r.raw = side{n: stored, bytes: rawC.bytes, dur: time.Since(start)}
	if err != nil {
		return nil, err
	}

	b.logf("long chain: roompub")
	start = time.Now()
	stored, err = b.ship(dir, pubRoom, n)
	r.pub = side{n: stored, bytes: pubC.bytes, dur: time.Since(start)}
	if err != nil {
		return nil, err
	}
	return r, b.countStored(r, rawRoom, pubRoom)
}

// countStored checks that the write stream holds items messages in each
// side's room, so neither side's count rests on its own word alone.
func (b *bench) countStored(r *result, rawRoom, pubRoom string) error {
	for _, s := range []struct {
		name, room string
	}{{"raw", rawRoom}, {"roompub", pubRoom}} {
		n, err := b.storedOn(writeStream, b.subjects.Room(s.room))
		if err != nil {
			return err
		}
		if n != r.items {
			return fmt.Errorf("the stream holds %d messages in %s's room %s, want %d", n, s.name, s.room, r.items)
		}
	}
	return nil
}

// parallel: chains × chainLength entries shipped at once, the batches in
// flight capped alike on both sides.
func (b *bench) parallel() (*result, error) {
	if err := b.startRoompub(); err != nil {
		return nil, err
	}
	k, n := b.sz.chains, b.sz.chainLength
	b.logf("parallel: generating 2 × %d chains of %d entries", k, n)
	rawC, pubC, dirs := make([]*chain, k), make([]*chain, k), make([]string, k)
	var rawRoom, pubRoom string
	var rawBytes, pubBytes int64
	for i := range k {
		var rawMeta, pubMeta events.CapsuleMeta
		rawMeta, pubMeta, rawRoom, pubRoom = sides("par", i)
		rawC[i], pubC[i] = genChain(rawMeta, uint64(100+i), n), genChain(pubMeta, uint64(100+i), n)
		dirs[i] = filepath.Join(b.tmp, "parallel", pubMeta.CapsuleID)
		if err := writeChain(dirs[i], pubC[i]); err != nil {
			return nil, err
		}
		rawBytes += rawC[i].bytes
		pubBytes += pubC[i].bytes
	}
	r := &result{key: "parallel", name: fmt.Sprintf("parallel (%d × %d)", k, n), unit: "entries", items: k * n, floor: 0.6,
		rawHow: fmt.Sprintf("%d goroutines, atomic batches of up to %d, at most %d in flight", k, b.c.Batch, b.c.Inflight),
		pubHow: fmt.Sprintf("%d room.ShipCapsule goroutines, at most %d shipping at once", k, b.shippers)}

	b.logf("parallel: raw")
	sem := make(chan struct{}, b.c.Inflight)
	total, err := runAll(k, func(i int) (int, error) {
		return rawBatches(b.ctx, b.js, b.subjects, rawRoom, rawC[i].meta.Key(), rawC[i].lines, rawC[i].hashes, b.c.Batch, sem)
	}, &r.raw.dur)
	r.raw.n, r.raw.bytes = total, rawBytes
	if err != nil {
		return nil, err
	}

	b.logf("parallel: roompub")
	ships := make(chan struct{}, b.shippers)
	total, err = runAll(k, func(i int) (int, error) {
		ships <- struct{}{}
		defer func() { <-ships }()
		return b.ship(dirs[i], pubRoom, n)
	}, &r.pub.dur)
	r.pub.n, r.pub.bytes = total, pubBytes
	if err != nil {
		return nil, err
	}
	return r, b.countStored(r, rawRoom, pubRoom)
}

// runAll runs fn(0) … fn(k-1) on k goroutines released at once, sets
// *took to the time until the last one returned, and returns the sum of
// their counts and the first error.
func runAll(k int, fn func(i int) (int, error), took *time.Duration) (int, error) {
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
	start := time.Now()
	close(gate)
	wg.Wait()
	*took = time.Since(start)
	return total, first
}
