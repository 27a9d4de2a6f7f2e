package ingest

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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
)

// What the store lost, on the gate's side (docs/reliability.md, "When the
// store loses what it acknowledged"). The gate keeps no record of what it
// acknowledged outside the store, so it judges a chain from what the
// stream still shows: the messages on the chain's subject against its
// head's position. A chain whose head is at seq n holds n+1 entries; fewer
// messages on its subject mean positions below the head are gone, and an
// append would build on the hole. Such a chain is closed: every item sent
// to it is refused events.StoreLost, and a restart does not reopen it, as
// the hole is still in the store.
//
// A chain is judged when the gate first reads its head, and again after
// Recheck (Serve calls it when its stream guard sees the stream lose
// messages): the gate's own appends keep a judged chain whole.

// errShortChain is wrapped by the reads of a chain's entries that find
// fewer than its head's position + 1, read from the stream leader: the
// server's state counts a message it can no longer read (a damaged block
// whose state file was kept), or a batch was cut. decide then reads the
// chain's positions (lossFromRead).
var errShortChain = errors.New("the chain holds fewer entries than its head's position says")

// lossFromRead closes c when a read found it short (errShortChain) and
// its positions show a hole; it reports whether it did.
func (g *Gate) lossFromRead(ctx context.Context, key events.ChainKey, c *chainState, err error) bool {
	if !errors.Is(err, errShortChain) {
		return false
	}
	lost, lerr := g.readLoss(ctx, g.subjects.Journal(c.roomID, key), c.next, max(c.lastSeq, c.streamSeq))
	if lerr != nil || lost == nil {
		return false
	}
	c.lost = lost
	g.noteLoss(key, c.roomID, lost)
	return true
}

// LossObserver is told how many chains and rooms the gate knows to be
// damaged each time those numbers change, with the gate's stream (one
// observer may watch the gates of several streams). An Observer that
// implements it (Metrics does) is told; implementations must not block.
type LossObserver interface {
	// ChainsDamaged is called with how many chains the gate knows to be
	// damaged (Damaged), each time that number changes.
	ChainsDamaged(stream string, n int)
	// RoomsDamaged is called with how many rooms DamagedRooms lists
	// (the survey's, and those the checkpointer found contradicted),
	// each time it may have changed.
	RoomsDamaged(stream string, n int)
}

// DamagedChain is one chain the gate found damaged: where it lives and
// what the store lost of it.
type DamagedChain struct {
	RoomID string
	Chain  events.ChainKey
	Loss   room.ChainLoss
}

// Damaged returns the chains the gate has found damaged since it started,
// sorted by room then chain; empty when none. A chain judged whole again
// (the store was restored from a backup) leaves the list.
func (g *Gate) Damaged() []DamagedChain {
	g.lossMu.Lock()
	defer g.lossMu.Unlock()
	out := slices.Collect(maps.Values(g.damaged))
	slices.SortFunc(out, func(a, b DamagedChain) int {
		return cmp.Or(cmp.Compare(a.RoomID, b.RoomID), cmp.Compare(a.Chain.RunID, b.Chain.RunID), cmp.Compare(a.Chain.CapsuleID, b.Chain.CapsuleID))
	})
	return out
}

// Recheck makes the gate judge every chain again on its next use: Serve
// calls it when the stream shows messages lost since the chains were
// judged.
func (g *Gate) Recheck() { g.lossGen.Add(1) }

// judgeLoss sets c.lost for the chain c holds (loaded, with key's head):
// the stream leader's count of messages on its subject against c.next,
// and, when fewer, the chain read whole to name the missing positions.
//
// The positions judged are those below the larger of c.next and rawNext,
// the position after the last entry on the subject whoever attested it:
// with a publisher key, a batch cut by the loss is not admitted, so the
// admitted head can stand before later entries the store still holds.
// With read set (a trusted batch on the chain was found cut short, or the
// server counts a last message it does not return), the chain is read
// and not counted: a server that kept its state file counts a damaged
// message it can no longer read.
func (g *Gate) judgeLoss(ctx context.Context, key events.ChainKey, c *chainState, rawNext int64, read bool) error {
	gen := g.lossGen.Load()
	next := max(c.next, rawNext)
	if next == 0 {
		c.lost, c.lossGen = nil, gen
		return nil
	}
	subj := g.subjects.Journal(c.roomID, key)
	// In a room the checkpointer found contradicting its checkpoint, the
	// server may count messages it can no longer read: read the chain.
	// So it may after it dropped messages its per-subject counts still
	// hold (a block cut while its state file was kept): a chain whose
	// messages span deleted stream seqs is read. Otherwise only a count
	// short of next makes it read.
	read = read || g.contradicted(c.roomID)
	if !read {
		counts, err := jsapi.SubjectCounts(ctx, g.nc, g.streamName(), subj, g.timeout)
		if err != nil {
			return err
		}
		if read = int64(counts[subj]) < next; !read {
			if read, err = g.spansDeleted(ctx, subj, max(c.lastSeq, c.streamSeq)); err != nil {
				return err
			}
		}
	}
	var lost *room.ChainLoss
	switch to := max(c.lastSeq, c.streamSeq); {
	case read && c.read != nil && c.read.to >= to:
		lost = c.read.loss(subj, next) // read whole already, up to to and past it
	case read:
		var err error
		if lost, err = g.readLoss(ctx, subj, next, to); err != nil {
			return err
		}
	}
	c.lost, c.lossGen = lost, gen
	g.noteLoss(key, c.roomID, lost)
	return nil
}

// judgeUnadmitted judges a chain whose subject holds messages, none of
// them an admitted entry (with a publisher key): up to the position the
// last one claims, bounded by its stream seq (and at least counted, the
// messages the server counts when it returned none as the last),
// reading the chain when cut or counted (judgeLoss's read). When positions below it are gone, the chain is
// closed in the room of that subject (c.roomID, c.lost set); otherwise it
// stays a chain with no entry.
func (g *Gate) judgeUnadmitted(ctx context.Context, key events.ChainKey, c *chainState, last *jetstream.RawStreamMsg, cut bool, counted int64) error {
	p, err := g.subjects.Parse(last.Subject)
	if err != nil || p.Kind != room.KindJournal {
		return nil
	}
	le, err := events.ParseEntry(last.Data)
	if err != nil {
		return nil
	}
	s, ok := le.Seq()
	if !ok || s < 0 {
		return nil
	}
	c.roomID = p.RoomID
	tail := g.batchTail(last)
	if err := g.judgeLoss(ctx, key, c, max(counted, min(s+1+tail, int64(last.Sequence)+tail)), cut || counted > 0); err != nil {
		c.roomID, c.loaded = "", false
		return err
	}
	if c.lost == nil {
		c.roomID = ""
	}
	return nil
}

// deletedSpan is the lowest and highest stream seq the room stream shows
// deleted (both 0: none), read at loss generation gen.
type deletedSpan struct {
	gen    uint64
	lo, hi uint64
}

// deletedSeqs returns the span of stream seqs the stream shows deleted,
// read on nc once per loss generation (a new loss moves it on: Recheck),
// widened by those a Scrub found unreadable.
func (g *Gate) deletedSeqs(ctx context.Context, nc *nats.Conn) (lo, hi uint64, err error) {
	gen := g.lossGen.Load()
	g.lossMu.Lock()
	d, u := g.deleted, g.unreadable
	g.lossMu.Unlock()
	widen := func(lo, hi uint64) (uint64, uint64) {
		switch {
		case u.lo == 0:
			return lo, hi
		case lo == 0:
			return u.lo, u.hi
		}
		return min(lo, u.lo), max(hi, u.hi)
	}
	if d.gen == gen {
		lo, hi = widen(d.lo, d.hi)
		return lo, hi, nil
	}
	del, err := jsapi.StreamDeletions(ctx, nc, g.streamName(), g.timeout)
	if err != nil {
		return 0, 0, err
	}
	d = deletedSpan{gen: gen}
	d.lo, d.hi = del.Span()
	g.lossMu.Lock()
	g.deleted = d
	g.lossMu.Unlock()
	lo, hi = widen(d.lo, d.hi)
	return lo, hi, nil
}

// spansDeleted reports whether the chain on subj, whose last message is
// at stream seq last, has messages on both sides of, or among, the stream
// seqs the stream shows deleted: its first message (one get) is at or
// before the highest deleted, its last after the lowest.
func (g *Gate) spansDeleted(ctx context.Context, subj string, last uint64) (bool, error) {
	lo, hi, err := g.deletedSeqs(ctx, g.nc)
	if err != nil || lo == 0 || last < lo {
		return false, err
	}
	first, err := g.leaderMsg(ctx, map[string]any{"seq": 1, "next_by_subj": subj})
	if err != nil {
		return false, err
	}
	return first != nil && first.Sequence <= hi, nil
}

// countChain is the gate's second look when the server returns no last
// message on the chain's subjects: it counts them (one request; a new
// chain costs it once per process) and returns the sum and the counts by
// subject. A sum above 0 means the server counts a last message it can no
// longer read (a damaged block whose state file it kept).
func (g *Gate) countChain(ctx context.Context, key events.ChainKey) (counted int64, counts map[string]uint64, err error) {
	if counts, err = jsapi.SubjectCounts(ctx, g.nc, g.streamName(), g.subjects.ChainAnyRoom(key), g.timeout); err != nil {
		return 0, nil, err
	}
	var n uint64
	for _, k := range counts {
		n += k
	}
	return int64(min(n, math.MaxInt64)), counts, nil
}

// lastReadable reads the chain whose subjects hold counted messages, none
// returned as their last (countChain), from the stream leader for the
// last message it can read (nil when none). The read is whole, from the
// stream's first sequence, as readLoss and (with a publisher key)
// scanAdmitted read: it returns what it found (chainRead), so judging the
// chain reads it no second time.
func (g *Gate) lastReadable(ctx context.Context, key events.ChainKey, counted int64) (last *jetstream.RawStreamMsg, read *chainRead, err error) {
	read = &chainRead{at: map[string]map[int64]uint64{}}
	if g.trust != nil {
		read.scan = g.newAdmittedScan()
	}
	if err := g.readRangeLeader(ctx, g.subjects.ChainAnyRoom(key), 1, math.MaxUint64, func(m *jetstream.RawStreamMsg) {
		last = m
		read.add(m)
		if read.scan != nil {
			read.scan.add(m)
		}
	}); err != nil {
		return nil, nil, err
	}
	if read.scan != nil {
		read.scan.finish()
	}
	var at uint64
	if last != nil {
		at = last.Sequence
	}
	g.log.Warn("the server counts messages on a chain's subject but returns none as its last: reading the chain to judge what the store lost",
		zap.String("chain", key.RunID+"/"+key.CapsuleID), zap.Int64("counted", counted), zap.Uint64("last_readable_stream_seq", at))
	read.to = at
	return last, read, nil
}

// chainRead is what a whole read of a chain's subjects from the stream
// leader found (lastReadable): for each subject, the stream seq of the
// first message at each position, from the stream's first sequence up to
// to. It holds what readLoss would read of any of those subjects up to
// to, so judgeLoss takes it instead of reading again.
type chainRead struct {
	to uint64
	at map[string]map[int64]uint64
	// scan is the admitted head the read found, with a publisher key
	// (admittedHead takes it for a scan from the start up to to).
	scan *admittedScan
}

// add takes m, the next message of the read in stream order: the first
// at its position counts, as in readLoss.
func (r *chainRead) add(m *jetstream.RawStreamMsg) {
	e, err := events.ParseEntry(m.Data)
	if err != nil {
		return
	}
	seq, ok := e.Seq()
	if !ok || seq < 0 {
		return
	}
	at := r.at[m.Subject]
	if at == nil {
		at = map[int64]uint64{}
		r.at[m.Subject] = at
	}
	if _, dup := at[seq]; !dup {
		at[seq] = m.Sequence
	}
}

// loss is readLoss's verdict on subj below next from what r read.
func (r *chainRead) loss(subj string, next int64) *room.ChainLoss {
	at := map[int64]uint64{}
	for p, s := range r.at[subj] {
		if p < next {
			at[p] = s
		}
	}
	return lossOf(at, next)
}

// keepJudged keeps c's verdict on key, a damaged chain (c.lost set), so a
// state that never saw the chain starts from it instead of reading the
// chain again. Its entry goes when the chain is judged whole (noteLoss);
// the chains kept are those Damaged lists.
func (g *Gate) keepJudged(key events.ChainKey, c *chainState) {
	g.lossMu.Lock()
	defer g.lossMu.Unlock()
	if _, ok := g.damaged[key]; ok {
		g.judged[key] = c.chainVerdict
	}
}

// restoreJudged sets c, a state that never saw key's chain, to the
// verdict kept for it, if any, and reports whether there was one (reload
// then tells whether it still stands).
func (g *Gate) restoreJudged(key events.ChainKey, c *chainState) bool {
	g.lossMu.Lock()
	v, ok := g.judged[key]
	g.lossMu.Unlock()
	if ok {
		c.chainVerdict = v
	}
	return ok
}

// judgeUnreadable judges a chain none of whose counted messages the
// server returns: every position below counted is lost, in the room of
// the first journal subject of counts (lastReadable's).
func (g *Gate) judgeUnreadable(ctx context.Context, key events.ChainKey, c *chainState, counted int64, counts map[string]uint64) error {
	for _, subj := range slices.Sorted(maps.Keys(counts)) {
		if p, err := g.subjects.Parse(subj); err == nil && p.Kind == room.KindJournal {
			c.roomID = p.RoomID
			break
		}
	}
	if c.roomID == "" {
		return nil
	}
	if err := g.judgeLoss(ctx, key, c, counted, true); err != nil {
		c.roomID, c.loaded = "", false
		return err
	}
	if c.lost == nil {
		c.roomID = ""
	}
	return nil
}

// batchTail is how many messages after m the attestation of m, by a
// trusted publisher, places in m's atomic batch (0 without one). A
// journal batch is one chain's consecutive positions, stored whole
// (ADR-50) at consecutive stream seqs, so a batch whose end the store
// dropped (the rest of a damaged block, a stream cut back) still says the
// positions it held: those are judged too, where the messages on the
// subject alone would show no hole.
func (g *Gate) batchTail(m *jetstream.RawStreamMsg) int64 {
	a, err := checkpoint.ParseAttestation(checkpoint.AttestationOf(m.Header))
	if err != nil || !g.trust.Trusts(a.Signer) {
		return 0
	}
	return int64(a.Count - 1 - a.Index)
}

// readLoss reads subj's messages up to stream sequence to and returns the
// positions below next that no entry holds (nil when none): the first
// message at each position counts, whatever else is on the subject. It
// reads from the stream leader, one get at a time: the leader's copy is
// what appends build on, and a replica's whole copy must not hide the
// leader's hole (a damaged replica that leads). Only a chain already
// found short is read so.
func (g *Gate) readLoss(ctx context.Context, subj string, next int64, to uint64) (*room.ChainLoss, error) {
	r := &chainRead{to: to, at: map[string]map[int64]uint64{}}
	if err := g.readRangeLeader(ctx, subj, 1, to, r.add); err != nil {
		return nil, fmt.Errorf("read chain %s: %w", subj, err)
	}
	return r.loss(subj, next), nil
}

// lossOf is the loss of a chain whose stored entries are at (position to
// stream sequence) and whose next position is next: nil when every
// position below next is held.
func lossOf(at map[int64]uint64, next int64) *room.ChainLoss {
	if int64(len(at)) >= next {
		return nil
	}
	loss := &room.ChainLoss{Stored: int64(len(at)), Count: next - int64(len(at))}
	var after uint64
	for p := int64(0); p < next; p++ {
		if s, ok := at[p]; ok {
			after = s
			continue
		}
		run := room.LostRun{From: p, To: p, After: after}
		for run.To+1 < next {
			if _, ok := at[run.To+1]; ok {
				break
			}
			run.To++
		}
		run.Before = at[run.To+1] // 0 when the run reaches next (no head above it)
		loss.Missing = append(loss.Missing, run)
		p = run.To
	}
	return loss
}

// noteLoss records the verdict on one chain: a new or changed loss is
// logged at error level, naming room, chain, positions and stream
// sequences; the damaged count goes to a LossObserver.
func (g *Gate) noteLoss(key events.ChainKey, roomID string, lost *room.ChainLoss) {
	g.lossMu.Lock()
	old, had := g.damaged[key]
	switch {
	case lost == nil && !had:
		g.lossMu.Unlock()
		return
	case lost == nil:
		delete(g.damaged, key)
		delete(g.judged, key)
		g.damagedIn[old.RoomID]--
	case had && old.RoomID == roomID && old.Loss.String() == lost.String():
		g.lossMu.Unlock()
		return
	default:
		if had {
			g.damagedIn[old.RoomID]--
		}
		g.damaged[key] = DamagedChain{RoomID: roomID, Chain: key, Loss: *lost}
		g.damagedIn[roomID]++
	}
	n := len(g.damaged)
	g.anyDamage.Store(n > 0 || len(g.damagedRooms) > 0 || len(g.contradictions) > 0)
	g.lossMu.Unlock()
	if lost != nil {
		g.log.Error("the store lost acknowledged entries of a chain: the chain is closed (store_lost)",
			zap.String("room", roomID), zap.String("chain", key.RunID+"/"+key.CapsuleID),
			zap.Int64("lost", lost.Count), zap.Int64("stored", lost.Stored), zap.Bool("end_lost", lost.EndLost()), zap.String("missing", lost.String()))
	} else {
		g.log.Warn("a chain the store had lost entries of is whole again (the store was restored)",
			zap.String("room", roomID), zap.String("chain", key.RunID+"/"+key.CapsuleID))
	}
	if lo, ok := g.obs.(LossObserver); ok {
		lo.ChainsDamaged(g.streamName(), n)
	}
}

// storeLostItem refuses item i of a request on a chain whose store lost
// positions (c.lost set).
func storeLostItem(i int, c *chainState, e *events.Entry) room.ItemResult {
	seq, _ := e.Seq()
	rf := room.RefusedItem(i, []events.Problem{{Code: events.StoreLost, At: events.Location{Line: i + 1},
		Reason: fmt.Sprintf("the store lost %s, %s; the chain is closed, as an append would build on the hole",
			c.lost.Tally(), c.lost.String())}})
	rf.Seq, rf.Hash = &seq, e.EntryHash()
	return rf
}

// streamName is the room stream's name.
func (g *Gate) streamName() string { return g.stream.CachedInfo().Config.Name }

// Loss notices (docs/reliability.md, "Loss notices"). With a publisher
// key, a room the store lost acknowledged messages of takes no append at
// all, of any chain or record, until a loss notice covers what it lost:
// a new leaf would build on the room's hole. The notice is an operator's
// recorded act (`publisher serve --acknowledge-loss ROOM`), attested by a
// trusted publisher; once it covers the damage, the room's other and new
// chains and its records go on, and its damaged chains stay closed.
// Without a publisher key nothing can attest a notice: only the damaged
// chains are closed.

// roomNotices is what the gate read of one room's notice subject.
type roomNotices struct {
	readTo  uint64 // the last stream seq read on the subject
	notices []room.LossNotice
}

// roomDamage returns what the gate knows the store lost of roomID: its
// damaged chains and its checkpoint damage (nil: none).
func (g *Gate) roomDamage(roomID string) ([]DamagedChain, *DamagedRoom) {
	if !g.anyDamage.Load() {
		return nil, nil // the common case, without the lock: every line asks
	}
	g.lossMu.Lock()
	defer g.lossMu.Unlock()
	if g.damagedIn[roomID] == 0 && len(g.damagedRooms) == 0 {
		return nil, nil
	}
	var chains []DamagedChain
	for _, d := range g.damaged {
		if d.RoomID == roomID {
			chains = append(chains, d)
		}
	}
	slices.SortFunc(chains, func(a, b DamagedChain) int {
		return cmp.Or(cmp.Compare(a.Chain.RunID, b.Chain.RunID), cmp.Compare(a.Chain.CapsuleID, b.Chain.CapsuleID))
	})
	for _, r := range g.damagedRooms { // a contradiction alone blocks nothing (NoteContradiction)
		if r.RoomID == roomID {
			return chains, &r
		}
	}
	return chains, nil
}

// roomBlocked returns the reason appends to roomID are refused
// events.StoreLost ("" when they are not): with a publisher key, the
// store lost messages of the room that no loss notice covers. Reading the
// room's notices may fail (a read error).
func (g *Gate) roomBlocked(ctx context.Context, roomID string) (string, error) {
	if g.trust == nil {
		return "", nil
	}
	chains, ck := g.roomDamage(roomID)
	if len(chains) == 0 && ck == nil {
		return "", nil
	}
	g.lossMu.Lock()
	var notices []room.LossNotice
	if rn := g.noticesByRoom[roomID]; rn != nil {
		notices = slices.Clone(rn.notices)
	}
	g.lossMu.Unlock()
	if covered(notices, chains, ck) {
		return "", nil // notices are only ever added: no read needed
	}
	notices, err := g.notices(ctx, roomID)
	if err != nil {
		return "", err
	}
	var open []string
	for _, d := range chains {
		if !noticed(notices, d) {
			open = append(open, fmt.Sprintf("chain %s/%s lost %s entries, %s", d.Chain.RunID, d.Chain.CapsuleID, d.Loss.Lost(), d.Loss.String()))
		}
	}
	if ck != nil && !noticedRoom(notices, *ck) {
		open = append(open, ck.What())
	}
	if len(open) == 0 {
		return "", nil
	}
	return fmt.Sprintf("the store lost acknowledged messages of room %s (%s), and no loss notice covers it: no append to the room until an operator acknowledges the loss (publisher serve --acknowledge-loss %s) or restores the store",
		roomID, strings.Join(open, "; "), roomID), nil
}

// covered reports whether notices cover every damaged chain and the
// checkpoint damage (nil: none).
func covered(notices []room.LossNotice, chains []DamagedChain, ck *DamagedRoom) bool {
	for _, d := range chains {
		if !noticed(notices, d) {
			return false
		}
	}
	return ck == nil || noticedRoom(notices, *ck)
}

// noticed reports whether a notice covers d: it names the chain with at
// least d's lost positions.
func noticed(notices []room.LossNotice, d DamagedChain) bool {
	for _, n := range notices {
		for _, c := range n.Chains {
			if c.Chain == d.Chain && c.Loss.Count >= d.Loss.Count {
				return true
			}
		}
	}
	return false
}

// noticedRoom reports whether notices cover a room's damage d beyond its
// chains: its checkpoint damage with as many leaves lost or more, its
// record loss with as many records or more.
func noticedRoom(notices []room.LossNotice, d DamagedRoom) bool {
	ck, recs, contra := d.Size == 0, d.RecordsLost == 0, d.Contradiction == ""
	for _, n := range notices {
		if c := n.Checkpoint; c != nil && c.Held <= c.Size && c.Size >= d.Size && c.Size-c.Held >= d.Size-d.Held {
			ck = true
		}
		if c := n.Checkpoint; c != nil && c.Contradiction != "" {
			contra = true
		}
		if r := n.Records; r != nil && r.Lost >= d.RecordsLost {
			recs = true
		}
	}
	return ck && recs && contra
}

// What words d's damage for reasons and logs: "its latest checkpoint
// covers 250 leaves, the stream holds 200; 3 records lost before the
// record at stream seq 90".
func (d DamagedRoom) What() string {
	var parts []string
	if d.Size > 0 {
		parts = append(parts, fmt.Sprintf("its latest checkpoint covers %d leaves, the stream holds %d", d.Size, d.Held))
	}
	if d.RecordsLost > 0 {
		parts = append(parts, fmt.Sprintf("%d records lost before the record at stream seq %d", d.RecordsLost, d.RecordsBefore))
	}
	if d.Contradiction != "" {
		parts = append(parts, d.Contradiction)
	}
	return strings.Join(parts, "; ")
}

// notices returns roomID's loss notices attested by a trusted publisher,
// read from the stream leader up to now (each read once).
func (g *Gate) notices(ctx context.Context, roomID string) ([]room.LossNotice, error) {
	g.lossMu.Lock()
	rn := g.noticesByRoom[roomID]
	if rn == nil {
		rn = &roomNotices{}
		g.noticesByRoom[roomID] = rn
	}
	from := rn.readTo + 1
	g.lossMu.Unlock()
	subj := g.subjects.Notice(roomID)
	var found []room.LossNotice
	last := from - 1
	err := g.readRangeLeader(ctx, subj, from, math.MaxUint64, func(m *jetstream.RawStreamMsg) {
		last = m.Sequence
		n, err := room.ParseLossNotice(m.Data, roomID)
		if err != nil {
			return
		}
		if _, err := g.trust.VerifyAttestation(checkpoint.AttestationOf(m.Header), roomID, subj, checkpoint.NoticePosition, checkpoint.ContentHash(m.Data)); err != nil {
			return
		}
		found = append(found, *n)
	})
	g.lossMu.Lock()
	defer g.lossMu.Unlock()
	if last > rn.readTo {
		rn.readTo = last
		rn.notices = append(rn.notices, found...)
	}
	return slices.Clone(rn.notices), err
}

// ErrNothingLost is wrapped by AcknowledgeLoss for a room the gate knows
// no loss of.
var ErrNothingLost = errors.New("no loss known")

// AcknowledgeLoss writes a loss notice for roomID into the stream: the
// room's damaged chains and its checkpoint damage as the gate knows them
// now (after Survey), attested with the publisher key at
// checkpoint.NoticePosition on the room's Notice subject. It returns the
// notice and its stream seq. Errors: ErrGate without a publisher key,
// ErrNothingLost (wrapped) when the gate knows no loss of the room, or the
// append's.
func (g *Gate) AcknowledgeLoss(ctx context.Context, roomID string, now time.Time) (room.LossNotice, uint64, error) {
	if g.key == nil {
		return room.LossNotice{}, 0, fmt.Errorf("%w: a loss notice is attested with the publisher key, and this gate has none", ErrGate)
	}
	chains, ck := g.roomDamage(roomID)
	g.lossMu.Lock()
	if why := g.contradictions[roomID]; why != "" {
		if ck == nil {
			ck = &DamagedRoom{RoomID: roomID}
		}
		ck.Contradiction = why
	}
	g.lossMu.Unlock()
	if len(chains) == 0 && ck == nil {
		return room.LossNotice{}, 0, fmt.Errorf("%w in %s", ErrNothingLost, roomID)
	}
	n := room.LossNotice{Schema: room.LossNoticeSchema, RoomID: roomID, NotedAt: now.UTC().Format(time.RFC3339), Publisher: g.nodeID}
	for _, d := range chains {
		n.Chains = append(n.Chains, room.NoticedChain{Chain: d.Chain, Loss: d.Loss})
	}
	if ck != nil && (ck.Size > 0 || ck.Contradiction != "") {
		n.Checkpoint = &room.NoticedCheckpoint{Size: ck.Size, Held: ck.Held, Contradiction: ck.Contradiction}
	}
	if ck != nil && ck.RecordsLost > 0 {
		n.Records = &room.NoticedRecords{Lost: ck.RecordsLost, Before: ck.RecordsBefore}
	}
	raw, err := json.Marshal(n)
	if err != nil {
		return n, 0, err
	}
	data, err := events.Canonicalize(raw)
	if err != nil {
		return n, 0, err
	}
	subj := g.subjects.Notice(roomID)
	content := checkpoint.ContentHash(data)
	msg := nats.NewMsg(subj)
	msg.Data = data
	msg.Header.Set(checkpoint.AttestationHeader, checkpoint.Attest(g.key, roomID, subj, checkpoint.NoticePosition, content))
	msg.Header.Set(jetstream.MsgIDHeader, hex.EncodeToString(content[:]))
	ack, err := g.publish(ctx, msg)
	if err != nil {
		return n, 0, fmt.Errorf("write the loss notice of %s: %w", roomID, err)
	}
	g.lossMu.Lock()
	if g.noticesByRoom[roomID] == nil {
		g.noticesByRoom[roomID] = &roomNotices{}
	}
	g.noticesByRoom[roomID].notices = append(g.noticesByRoom[roomID].notices, n)
	g.lossMu.Unlock()
	g.log.Warn("loss notice written: an operator acknowledged what the store lost of the room; its damaged chains stay closed, the rest goes on",
		zap.String("room", roomID), zap.Uint64("stream_seq", ack.Sequence), zap.Int("chains", len(n.Chains)), zap.Bool("checkpoint", n.Checkpoint != nil))
	return n, ack.Sequence, nil
}

// Unacknowledged returns the damaged chains and rooms no loss notice the
// gate has read covers (without a publisher key, all of them: nothing
// can attest a notice), sorted by room. It reads nothing: Survey reads
// the notices of the rooms it finds damaged.
func (g *Gate) Unacknowledged() ([]DamagedChain, []DamagedRoom) {
	chains, rooms := g.Damaged(), g.DamagedRooms()
	if g.trust == nil {
		return chains, rooms
	}
	g.lossMu.Lock()
	defer g.lossMu.Unlock()
	var oc []DamagedChain
	for _, d := range chains {
		if rn := g.noticesByRoom[d.RoomID]; rn == nil || !noticed(rn.notices, d) {
			oc = append(oc, d)
		}
	}
	var or []DamagedRoom
	for _, d := range rooms {
		if rn := g.noticesByRoom[d.RoomID]; rn == nil || !noticedRoom(rn.notices, d) {
			or = append(or, d)
		}
	}
	return oc, or
}
