package ingest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// batchLog is an Observer that records every atomic batch a gate
// publishes: its size and result ("stored", the server's error code, or
// "no_answer").
type batchLog struct {
	mu      sync.Mutex
	sizes   []int
	results []string
}

func (b *batchLog) Item(room.Kind, room.Outcome, events.Code, time.Duration) {}

func (b *batchLog) Batch(n int, err error, _ time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizes = append(b.sizes, n)
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		b.results = append(b.results, "stored")
	case errors.As(err, &apiErr):
		b.results = append(b.results, strconv.Itoa(int(apiErr.ErrorCode)))
	default:
		b.results = append(b.results, "no_answer")
	}
}

// count returns how many batches ended with result.
func (b *batchLog) count(result string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, r := range b.results {
		if r == result {
			n++
		}
	}
	return n
}

func (b *batchLog) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("sizes %v results %v", b.sizes, b.results)
}

// gateWith returns a gate on nc with a batchLog and the options o.
func gateWith(e *roomtest.Env, nc *nats.Conn, o ingest.GateOptions) (*ingest.Gate, *batchLog) {
	e.T.Helper()
	log := &batchLog{}
	o.Validator, o.Observer = e.V, log
	g, err := ingest.NewGate(context.Background(), nc, o)
	if err != nil {
		e.T.Fatal(err)
	}
	return g, log
}

// appendJournal calls g.AppendJournal and fails the test on a
// request-level error.
func appendJournal(t *testing.T, g *ingest.Gate, roomID string, body []byte) room.JournalReply {
	t.Helper()
	r, err := g.AppendJournal(t.Context(), roomID, body, nil)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return r
}

// wantItem is an expected outcome: stored or duplicate at a stream seq,
// refused with a code, or skipped.
type wantItem struct {
	outcome room.Outcome
	entry   *events.Entry
	seq     uint64      // stream seq (stored, duplicate)
	code    events.Code // refused
}

func checkItems(t *testing.T, r room.JournalReply, subj string, want []wantItem) {
	t.Helper()
	if len(r.Items) != len(want) {
		t.Fatalf("%d items, want %d: %+v", len(r.Items), len(want), r)
	}
	counts := map[room.Outcome]int{}
	for i, w := range want {
		it := r.Items[i]
		counts[w.outcome]++
		ok := it.Index == i && it.Outcome == w.outcome
		switch w.outcome {
		case room.OutcomeStored, room.OutcomeDuplicate:
			seq, _ := w.entry.Seq()
			ok = ok && it.StreamSeq == w.seq && it.Subject == subj && it.Hash == w.entry.EntryHash() && roomtest.SeqOf(it) == seq &&
				it.Code == "" && it.At == nil
		case room.OutcomeRefused:
			ok = ok && it.Code == w.code && it.StreamSeq == 0
		case room.OutcomeSkipped:
			ok = ok && it.Hash == "" && it.StreamSeq == 0
		}
		if !ok {
			t.Fatalf("item %d: %+v, want %s %+v", i, it, w.outcome, w)
		}
	}
	if r.Stored != counts[room.OutcomeStored] || r.Dupes != counts[room.OutcomeDuplicate] || r.Refused != counts[room.OutcomeRefused] ||
		r.Skipped != counts[room.OutcomeSkipped] || r.Failures != 0 {
		t.Fatalf("counts: %+v, want %v", r, counts)
	}
}

// checkChainStored asserts that subj holds exactly es, in order, once.
func checkChainStored(e *roomtest.Env, subj string, es []*events.Entry) []*jetstream.RawStreamMsg {
	e.T.Helper()
	msgs := e.OnSubject(subj)
	if len(msgs) != len(es) {
		e.T.Fatalf("%d messages on %s, want %d", len(msgs), subj, len(es))
	}
	for i, m := range msgs {
		if !bytes.Equal(m.Data, es[i].Canonical()) || m.Header.Get(nats.MsgIdHdr) != es[i].EntryHash() {
			e.T.Fatalf("message %d on %s is not entry %d: %s", i, subj, i, m.Data)
		}
	}
	return msgs
}

// variant returns another entry for position k of es (its parent is
// es[k-1]): a fork of the chain at k.
func variant(t *testing.T, es []*events.Entry, k int) *events.Entry {
	t.Helper()
	m := map[string]any{}
	for key, v := range es[k].Object() {
		m[key] = v
	}
	delete(m, "entry_hash")
	m["payload"] = map[string]any{"tool": "bash", "status": "forked"}
	f, err := events.NewEntry(m)
	if err != nil {
		t.Fatal(err)
	}
	if f.EntryHash() == es[k].EntryHash() {
		t.Fatal("the variant is the entry")
	}
	return f
}

// TestBatchDuplicateInMiddle: lines already stored, and lines repeated
// within the request, in the middle of new ones. Each new line is stored
// once, in order; each repeated one is a duplicate at the stream seq where
// it is stored.
func TestBatchDuplicateInMiddle(t *testing.T) {
	e := roomtest.NewEnv(t)
	g, log := gateWith(e, e.Nc, ingest.GateOptions{})
	const subj = "rooms.mid.journal.run-m.cap-1"
	es, _ := roomtest.Journal(t, "run-m", "cap-1", 12)
	var want []wantItem
	for i := range 5 {
		want = append(want, wantItem{room.OutcomeStored, es[i], uint64(i + 1), ""})
	}
	checkItems(t, appendJournal(t, g, "room:mid", roomtest.Lines(es[:5])), subj, want)
	if log.String() != "sizes [5] results [stored]" {
		t.Fatalf("batches: %s", log)
	}

	// New, new, stored before, new: the two new lines land as one batch,
	// the old one is a duplicate, the last is stored after them.
	body := roomtest.Lines([]*events.Entry{es[5], es[6], es[2], es[7]})
	checkItems(t, appendJournal(t, g, "room:mid", body), subj, []wantItem{
		{room.OutcomeStored, es[5], 6, ""}, {room.OutcomeStored, es[6], 7, ""},
		{room.OutcomeDuplicate, es[2], 3, ""}, {room.OutcomeStored, es[7], 8, ""},
	})
	// A line repeated right after itself, then new lines.
	body = roomtest.Lines([]*events.Entry{es[8], es[8], es[9], es[10], es[9], es[11]})
	checkItems(t, appendJournal(t, g, "room:mid", body), subj, []wantItem{
		{room.OutcomeStored, es[8], 9, ""}, {room.OutcomeDuplicate, es[8], 9, ""},
		{room.OutcomeStored, es[9], 10, ""}, {room.OutcomeStored, es[10], 11, ""},
		{room.OutcomeDuplicate, es[9], 10, ""}, {room.OutcomeStored, es[11], 12, ""},
	})
	checkChainStored(e, subj, es)
	if log.String() != "sizes [5 2 2] results [stored stored stored]" {
		t.Fatalf("batches (a single line is one plain append): %s", log)
	}
}

// TestBatchResendStored: a whole stored request sent again, to the gate
// that stored it and to a fresh one: every line is a duplicate at its
// stream seq, no batch is sent and the stream is unchanged.
func TestBatchResendStored(t *testing.T) {
	e := roomtest.NewEnv(t)
	g, log := gateWith(e, e.Nc, ingest.GateOptions{})
	const subj = "rooms.again.journal.run-r.cap-1"
	es, body := roomtest.Journal(t, "run-r", "cap-1", room.MaxBatchLines)
	want := make([]wantItem, len(es))
	for i := range es {
		want[i] = wantItem{room.OutcomeStored, es[i], uint64(i + 1), ""}
	}
	checkItems(t, appendJournal(t, g, "room:again", body), subj, want)
	if log.String() != "sizes [1000] results [stored]" {
		t.Fatalf("batches: %s", log)
	}
	before := e.State()
	for i := range want {
		want[i].outcome = room.OutcomeDuplicate
	}
	fresh, flog := gateWith(e, e.Connect(), ingest.GateOptions{})
	for _, gg := range []*ingest.Gate{g, fresh} {
		checkItems(t, appendJournal(t, gg, "room:again", body), subj, want)
	}
	if log.String() != "sizes [1000] results [stored]" || flog.String() != "sizes [] results []" {
		t.Fatalf("batches: %s; fresh gate: %s", log, flog)
	}
	if after := e.State(); after != before {
		t.Fatalf("resending changed the stream: %+v, was %+v", after, before)
	}
	checkChainStored(e, subj, es)
}

// TestBatchStoredMsgID (error 10201): a gate whose view of the chain is
// stale sends a batch whose first entries another gate has stored. The
// server refuses the whole batch (a stored Nats-Msg-Id); the gate reads the
// head from the leader, answers those lines duplicate and stores the rest.
func TestBatchStoredMsgID(t *testing.T) {
	e := roomtest.NewEnv(t)
	a, alog := gateWith(e, e.Connect(), ingest.GateOptions{})
	b, blog := gateWith(e, e.Connect(), ingest.GateOptions{})
	const subj = "rooms.ids.journal.run-i.cap-1"
	key := events.ChainKey{RunID: "run-i", CapsuleID: "cap-1"}
	es, _ := roomtest.Journal(t, "run-i", "cap-1", 15)
	// b's view: an empty chain. (Head keeps no state of a chain the gate
	// does not know: an append refused for its position does.)
	if r := appendJournal(t, b, "room:ids", roomtest.Lines(es[1:2])); r.Refused != 1 || r.Head.Next != 0 {
		t.Fatalf("seq 1 on an empty chain: %+v", r)
	}
	appendJournal(t, a, "room:ids", roomtest.Lines(es[:10]))
	r := appendJournal(t, b, "room:ids", roomtest.Lines(es))
	var want []wantItem
	for i := range 10 {
		want = append(want, wantItem{room.OutcomeDuplicate, es[i], uint64(i + 1), ""})
	}
	for i := 10; i < 15; i++ {
		want = append(want, wantItem{room.OutcomeStored, es[i], uint64(i + 1), ""})
	}
	checkItems(t, r, subj, want)
	want15 := room.ChainHead{RoomID: "room:ids", Chain: key, Next: 15, Head: es[14].EntryHash(), StreamSeq: 15, Owner: "(anonymous)"}
	if r.Head != want15 {
		t.Fatalf("head %+v, want %+v", r.Head, want15)
	}
	if alog.String() != "sizes [10] results [stored]" || blog.String() != "sizes [15 5] results [10201 stored]" {
		t.Fatalf("batches: a %s; b %s (want b's first refused with 10201)", alog, blog)
	}
	checkChainStored(e, subj, es)
}

// TestBatchForkInMiddle: a request whose third line is another entry for a
// stored position: the lines before it are stored, it is refused (fork),
// the rest are skipped; likewise a line that contradicts a pending one.
func TestBatchForkInMiddle(t *testing.T) {
	e := roomtest.NewEnv(t)
	g, _ := gateWith(e, e.Nc, ingest.GateOptions{})
	const subj = "rooms.fork.journal.run-f.cap-1"
	es, _ := roomtest.Journal(t, "run-f", "cap-1", 12)
	appendJournal(t, g, "room:fork", roomtest.Lines(es[:5]))
	fork := variant(t, es, 3)
	r := appendJournal(t, g, "room:fork", roomtest.Lines([]*events.Entry{es[5], es[6], fork, es[7]}))
	checkItems(t, r, subj, []wantItem{
		{room.OutcomeStored, es[5], 6, ""}, {room.OutcomeStored, es[6], 7, ""},
		{room.OutcomeRefused, nil, 0, events.Fork}, {room.OutcomeSkipped, nil, 0, ""},
	})
	it := r.Items[2]
	if roomtest.SeqOf(it) != 3 || it.Hash != fork.EntryHash() || it.At == nil || it.At.Line != 3 || it.At.Pointer != "/seq" ||
		len(it.Problems) != 1 || it.Problems[0].Expected != es[3].EntryHash() || it.Problems[0].Actual != fork.EntryHash() {
		t.Fatalf("fork item: %+v", it)
	}
	// A fork of a line pending in the same request.
	fork8 := variant(t, es, 8)
	r = appendJournal(t, g, "room:fork", roomtest.Lines([]*events.Entry{es[7], es[8], es[9], fork8, es[10]}))
	checkItems(t, r, subj, []wantItem{
		{room.OutcomeStored, es[7], 8, ""}, {room.OutcomeStored, es[8], 9, ""}, {room.OutcomeStored, es[9], 10, ""},
		{room.OutcomeRefused, nil, 0, events.Fork}, {room.OutcomeSkipped, nil, 0, ""},
	})
	checkChainStored(e, subj, es[:10])
	// A line that breaks the chain after pending ones: refused with the
	// verifier's codes, after the pending ones are stored.
	r = appendJournal(t, g, "room:fork", roomtest.Lines(es[10:12]))
	checkItems(t, r, subj, []wantItem{{room.OutcomeStored, es[10], 11, ""}, {room.OutcomeStored, es[11], 12, ""}})
	more, _ := roomtest.Journal(t, "run-f", "cap-1", 15)
	r = appendJournal(t, g, "room:fork", roomtest.Lines([]*events.Entry{more[12], more[14], more[13]}))
	checkItems(t, r, subj, []wantItem{
		{room.OutcomeStored, more[12], 13, ""}, {room.OutcomeRefused, nil, 0, events.Reordered}, {room.OutcomeSkipped, nil, 0, ""},
	})
	checkChainStored(e, subj, more[:13])
}

// TestBatchRace: two gates ship the same 300-entry chain at once in
// requests of different sizes, many times: every entry is stored exactly
// once, in order, never forked, and each position is reported stored by
// exactly one of them.
func TestBatchRace(t *testing.T) {
	e := roomtest.NewEnv(t)
	gates := racers(e)
	const rounds, n = 6, 300
	size := [2]int{100, 70}
	for round := range rounds {
		run := fmt.Sprintf("brace-%d", round)
		es, _ := roomtest.Journal(t, run, "cap-1", n)
		var replies [2][]room.JournalReply
		together(func(i int) {
			for from := 0; from < n; from += size[i] {
				r, err := gates[i].AppendJournal(t.Context(), "room:brace", roomtest.Lines(es[from:min(from+size[i], n)]), nil)
				if err != nil {
					t.Errorf("gate %d: %v", i, err)
					return
				}
				replies[i] = append(replies[i], r)
			}
		})
		if t.Failed() {
			t.FailNow()
		}
		storedBy := make([]int, n)
		streamSeqs := map[uint64]int{}
		for i := range 2 {
			for _, r := range replies[i] {
				for _, it := range r.Items {
					if it.Outcome != room.OutcomeStored && it.Outcome != room.OutcomeDuplicate || it.Hash != es[roomtest.SeqOf(it)].EntryHash() {
						t.Fatalf("round %d gate %d: item %+v", round, i, it)
					}
					if it.Outcome == room.OutcomeStored {
						storedBy[roomtest.SeqOf(it)]++
						streamSeqs[it.StreamSeq]++
					}
				}
			}
		}
		for p, c := range storedBy {
			if c != 1 {
				t.Fatalf("round %d: position %d reported stored %d times", round, p, c)
			}
		}
		for _, m := range checkChainStored(e, "rooms.brace.journal."+run+".cap-1", es) {
			if streamSeqs[m.Sequence] != 1 {
				t.Fatalf("round %d: stream seq %d reported stored %d times", round, m.Sequence, streamSeqs[m.Sequence])
			}
		}
	}
}

// TestBatchRaceFork: two gates send different continuations of one chain
// at once, as batches: one lands whole, the other is refused at its first
// line (fork); the chain is never forked.
func TestBatchRaceFork(t *testing.T) {
	e := roomtest.NewEnv(t)
	gates := racers(e)
	for round := range 5 {
		run := fmt.Sprintf("bfork-%d", round)
		es, _ := roomtest.Journal(t, run, "cap-1", 40)
		appendJournal(t, gates[0], "room:bfork", roomtest.Lines(es[:10]))
		other := make([]*events.Entry, 0, 30)
		other = append(other, variant(t, es, 10))
		parent := other[0].EntryHash()
		for k := 11; k < 40; k++ {
			m := map[string]any{}
			for key, v := range es[k].Object() {
				m[key] = v
			}
			delete(m, "entry_hash")
			m["parent_hash"] = parent
			f, err := events.NewEntry(m)
			if err != nil {
				t.Fatal(err)
			}
			other = append(other, f)
			parent = f.EntryHash()
		}
		bodies := [2][]byte{roomtest.Lines(es[10:]), roomtest.Lines(other)}
		var replies [2]room.JournalReply
		together(func(i int) { replies[i] = appendJournal(t, gates[i], "room:bfork", bodies[i]) })
		win := 0
		if replies[1].Stored > 0 {
			win = 1
		}
		w, l := replies[win], replies[1-win]
		if w.Stored != 30 || l.Stored != 0 || l.Refused != 1 || l.Skipped != 29 || l.Items[0].Code != events.Fork {
			t.Fatalf("round %d: winner %d stored %d; loser %+v", round, win, w.Stored, l.Items[0])
		}
		stored := append(append([]*events.Entry{}, es[:10]...), []([]*events.Entry){es[10:], other}[win]...)
		checkChainStored(e, "rooms.bfork.journal."+run+".cap-1", stored)
	}
}

// TestBatchInflightCapServer: the stream allows one open batch, and a raw
// client holds it open; the gate's batch is refused "too many in flight"
// (10210), waits and is stored once the open batch is abandoned.
func TestBatchInflightCapServer(t *testing.T) {
	e := roomtest.NewEnvWith(t, embedded.Options{Configure: func(o *server.Options) {
		o.JetStreamLimits.MaxBatchInflightPerStream = 1
		o.JetStreamLimits.MaxBatchTimeout = time.Second
	}})
	raw, err := jetstreamext.NewBatchPublisher(e.Js)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Add("rooms.cap.journal.raw.raw", []byte("{}")); err != nil {
		t.Fatal(err) // the server acknowledged the batch's first message: it is open
	}
	g, log := gateWith(e, e.Nc, ingest.GateOptions{})
	es, body := roomtest.Journal(t, "run-c", "cap-1", 20)
	want := make([]wantItem, len(es))
	for i := range es {
		want[i] = wantItem{room.OutcomeStored, es[i], uint64(i + 1), ""}
	}
	checkItems(t, appendJournal(t, g, "room:cap", body), "rooms.cap.journal.run-c.cap-1", want)
	if log.count("10210") == 0 || log.count("stored") != 1 {
		t.Fatalf("batches: %s; want some refused with 10210, then one stored", log)
	}
	checkChainStored(e, "rooms.cap.journal.run-c.cap-1", es)
}

// TestBatchInflightCapGate: many chains at once through gates whose own cap
// (one batch; eight) is reached, on a stream that allows two: nothing
// deadlocks, every entry is stored once.
func TestBatchInflightCapGate(t *testing.T) {
	e := roomtest.NewEnvWith(t, embedded.Options{Configure: func(o *server.Options) {
		o.JetStreamLimits.MaxBatchInflightPerStream = 2
	}})
	one, _ := gateWith(e, e.Connect(), ingest.GateOptions{MaxInflightBatches: 1})
	eight, log := gateWith(e, e.Connect(), ingest.GateOptions{MaxInflightBatches: 8})
	const chains, n = 24, 60
	es := make([][]*events.Entry, chains)
	for c := range es {
		es[c], _ = roomtest.Journal(t, "run-g", "cap-"+strconv.Itoa(c), n)
	}
	var wg sync.WaitGroup
	for c := range chains {
		g := []*ingest.Gate{one, eight}[c%2]
		wg.Go(func() {
			for from := 0; from < n; from += 20 {
				r, err := g.AppendJournal(t.Context(), "room:gcap", roomtest.Lines(es[c][from:from+20]), nil)
				if err != nil || r.Stored != 20 {
					t.Errorf("chain %d: %v %+v", c, err, r)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("the gate capped at 8: %d batches refused 10210", log.count("10210"))
	for c := range chains {
		checkChainStored(e, "rooms.gcap.journal.run-g.cap-"+strconv.Itoa(c), es[c])
	}
}

// cutProxy forwards NATS connections to a server. Armed, it cuts the
// connection that sends the next commit of an atomic batch
// (Nats-Batch-Commit): with pass set, after the commit has reached the
// server and its answer was swallowed; otherwise before the commit reaches
// the server.
type cutProxy struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
	pass   bool
	cuts   atomic.Int32
}

func newCutProxy(t *testing.T, target string, pass bool) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, pass: pass}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *cutProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *cutProxy) serve(client net.Conn) {
	srv, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	var mute atomic.Bool // drop what the server sends
	cut := func() { _ = client.Close(); _ = srv.Close() }
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := srv.Read(buf)
			if n > 0 && !mute.Load() {
				if _, werr := client.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		cut()
	}()
	buf := make([]byte, 64<<10)
	var tail []byte
	for {
		n, err := client.Read(buf)
		if n > 0 {
			seen := append(tail, buf[:n]...)
			if bytes.Contains(seen, []byte(jetstreamext.BatchCommitHeader+": 1")) && p.armed.CompareAndSwap(true, false) {
				p.cuts.Add(1)
				if p.pass {
					mute.Store(true)
					_, _ = srv.Write(buf[:n])
					time.Sleep(300 * time.Millisecond) // the server commits; its answer is dropped
				}
				cut()
				return
			}
			if _, werr := srv.Write(buf[:n]); werr != nil {
				break
			}
			tail = append(tail[:0], seen[max(0, len(seen)-32):]...)
		}
		if err != nil {
			break
		}
	}
	cut()
}

// TestBatchAmbiguousCommit: the connection is lost while a batch commits,
// once after the server stored it (its answer lost), once before the
// commit reached the server. The gate reads back before deciding: every
// entry is stored exactly once, and each line is reported stored once.
func TestBatchAmbiguousCommit(t *testing.T) {
	for _, pass := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit reached the server %v", pass), func(t *testing.T) {
			e := roomtest.NewEnv(t)
			p := newCutProxy(t, e.Srv.NATSServer().Addr().String(), pass)
			nc, err := nats.Connect(p.url(), nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			// The timeout waits out the answer the cut loses; the first
			// batch's must come within it (1 s was missed once, loaded).
			g, log := gateWith(e, nc, ingest.GateOptions{PublishTimeout: 3 * time.Second})
			run := "run-a-" + strconv.FormatBool(pass)
			subj := "rooms.amb.journal." + run + ".cap-1"
			es, _ := roomtest.Journal(t, run, "cap-1", 150)
			appendJournal(t, g, "room:amb", roomtest.Lines(es[:50]))
			p.armed.Store(true)
			r := appendJournal(t, g, "room:amb", roomtest.Lines(es[50:]))
			if p.cuts.Load() != 1 {
				t.Fatalf("the proxy cut %d connections, want 1", p.cuts.Load())
			}
			want := make([]wantItem, 100)
			for i := range want {
				want[i] = wantItem{room.OutcomeStored, es[50+i], uint64(51 + i), ""}
			}
			checkItems(t, r, subj, want)
			checkChainStored(e, subj, es)
			wantLog := "sizes [50 100 100] results [stored no_answer stored]" // cut before the commit: sent again
			if pass {
				wantLog = "sizes [50 100] results [stored no_answer]" // read back: stored by this batch
			}
			if log.String() != wantLog {
				t.Fatalf("batches: %s, want %s", log, wantLog)
			}
		})
	}
}

// TestBatchStoreFull: a store that fills up while batches commit. The
// lines reported stored are exactly the ones in the stream, once; the
// first line that did not fit fails naming the full store.
func TestBatchStoreFull(t *testing.T) {
	e := roomtest.NewEnvWith(t, embedded.Options{MaxFileStore: 1 << 20})
	g, log := gateWith(e, e.Nc, ingest.GateOptions{PublishTimeout: time.Second})
	const subj = "rooms.full.journal.run-s.cap-1"
	es, _ := roomtest.Journal(t, "run-s", "cap-1", 3000)
	acked, failedAt := 0, -1
	for from := 0; from < len(es) && failedAt < 0; from += room.MaxBatchLines {
		r := appendJournal(t, g, "room:full", roomtest.Lines(es[from:from+room.MaxBatchLines]))
		for _, it := range r.Items {
			switch it.Outcome {
			case room.OutcomeStored:
				acked++
			case room.OutcomeFailed:
				failedAt = from + it.Index
				if want := "the JetStream store is full (nothing more can be stored until there is space)"; !bytes.Contains([]byte(it.Reason), []byte(want)) {
					t.Fatalf("failed item: %+v", it)
				}
			case room.OutcomeSkipped:
			default:
				t.Fatalf("item: %+v", it)
			}
		}
	}
	t.Logf("store full after %d entries; batches %s", acked, log)
	if failedAt != acked || acked == 0 {
		t.Fatalf("%d stored, line %d failed", acked, failedAt)
	}
	checkChainStored(e, subj, es[:acked])
}

// TestServiceManyChains: 100 clients ship 100 chains at once through the
// ingest service, whose gate may have two batches open: every request is
// answered, every entry stored once, in order.
func TestServiceManyChains(t *testing.T) {
	e := roomtest.NewEnv(t)
	if err := e.Svc.Stop(); err != nil {
		t.Fatal(err)
	}
	g, log := gateWith(e, e.Connect(), ingest.GateOptions{MaxInflightBatches: 2})
	var err error
	// The 100 chains' requests come from one identity, all at once: its
	// share is all of them (TestServiceFairPerIdentity tests the share).
	// A request counts until its goroutine ends, just after its reply,
	// so a chain's next request may come while its last one still
	// counts: twice the chains.
	if e.Svc, err = ingest.StartService(e.Connect(), g, ingest.ServiceOptions{Concurrency: 32, IdentityConcurrency: 200}); err != nil {
		t.Fatal(err)
	}
	const chains, n, per = 100, 100, 50
	es := make([][]*events.Entry, chains)
	for c := range es {
		es[c], _ = roomtest.Journal(t, "run-many", "cap-"+strconv.Itoa(c), n)
	}
	// Each request waits for the batches of up to 100 others, two at a
	// time: under the race detector on a loaded machine that passed the
	// client's default 30 s. The bound is for a hung test alone.
	conns := make([]*client.Client, 10)
	for i := range conns {
		conns[i] = client.New(e.Connect(), client.Options{Timeout: 2 * time.Minute})
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for c := range chains {
		cl := conns[c%len(conns)]
		wg.Go(func() {
			<-start
			for from := 0; from < n; from += per {
				r, err := cl.AppendJournal(t.Context(), "room:many", nil, roomtest.Lines(es[c][from:from+per]))
				if err != nil || r.Stored != per {
					t.Errorf("chain %d from %d: %v %+v", c, from, err, r)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if got := log.count("stored"); got != chains*n/per {
		t.Errorf("%d batches stored, want %d: %s", got, chains*n/per, log)
	}
	for c := range chains {
		checkChainStored(e, "rooms.many.journal.run-many.cap-"+strconv.Itoa(c), es[c])
	}
}

// TestGateWithoutDirectGet: where no server answers direct gets (the
// replicas of a stream just created, here a stream without allow_direct),
// the gate asks the stream leader: Head and appends work as usual.
func TestGateWithoutDirectGet(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	var subj room.Subjects
	cfg := room.StreamConfig("", subj, 1)
	cfg.AllowDirect = false
	if _, err := js.CreateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	e := &roomtest.Env{T: t, V: roomtest.NewEnv(t).V}
	g, _ := gateWith(e, nc, ingest.GateOptions{})
	key := events.ChainKey{RunID: "run-nd", CapsuleID: "cap-1"}
	if h, err := g.Head(t.Context(), key); err != nil || h.Next != 0 {
		t.Fatalf("head: %+v %v", h, err)
	}
	es, _ := roomtest.Journal(t, "run-nd", "cap-1", 6)
	appendJournal(t, g, "room:nd", roomtest.Lines(es[:3]))
	fresh, _ := gateWith(e, nc, ingest.GateOptions{})
	r := appendJournal(t, fresh, "room:nd", roomtest.Lines(es))
	if r.Dupes != 3 || r.Stored != 3 || r.Head.Next != 6 {
		t.Fatalf("%+v", r)
	}
	if h, err := fresh.Head(t.Context(), key); err != nil || h.Next != 6 || h.Head != es[5].EntryHash() || h.RoomID != "room:nd" {
		t.Fatalf("head: %+v %v", h, err)
	}
}

// TestJournalManyLinesRefusedBeforeSplit: a body of 1 MiB of newlines is
// refused bad_request for its line count (1,048,576, at most
// room.MaxBatchLines) before a line is made of it: it allocated 172 MB
// (a 32-byte line each, and the slice's doublings) before the count was
// checked, 164 times what the quota charges for the request.
func TestJournalManyLinesRefusedBeforeSplit(t *testing.T) {
	e := roomtest.NewEnv(t)
	body := bytes.Repeat([]byte("\n"), 1<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := e.Gate.AppendJournal(t.Context(), "room:alpha", body, nil)
	runtime.ReadMemStats(&after)
	var ref *events.Refusal
	if !errors.As(err, &ref) || ref.Code != events.BadRequest || !strings.Contains(ref.Reason, "the request holds 1048576 lines; at most") {
		t.Fatalf("1 MiB of newlines: %v", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 8<<20 {
		t.Errorf("refusing it allocated %d bytes", n)
	}
}
