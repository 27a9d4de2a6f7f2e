package reader_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// Re-examining what Follow set aside (FollowOptions.SetAsideList and
// Reexamine): a message set aside is acknowledged and never delivered
// again; a later run re-examines it from the list, in stream order, and
// serves what passes now, once.

// reexamineRun is one Follow run of these tests: started, waited for until
// a sentinel record shipped after its start is handed out (so every
// verdict before it is out), and stopped.
type reexamineRun struct {
	events []*reader.Event // the sentinel left out
	asides []reader.SetAside
	facts  reader.ListFacts
	err    error
}

// followOnce runs Follow with o and list until the message sentinel
// appends once Follow is live is handed out (left out of the run's events
// and set-asides); handle as roomtest.StartFollow's.
func followOnce(t *testing.T, e *roomtest.Env, o reader.FollowOptions, list string, sentinel func() uint64, handle func(*reader.Event) error) reexamineRun {
	t.Helper()
	l := &reader.SetAsideList{Path: list}
	o.SetAsideList = l
	o.Logger = zaptest.NewLogger(t) // shown when the test fails
	ready := make(chan reader.ListFacts, 1)
	o.Ready = func(uint64) { ready <- l.Facts() }
	f := roomtest.StartFollow(t, e.Js, o, handle)
	var run reexamineRun
	select {
	case run.facts = <-ready:
	case <-f.Done:
		run.err = f.Err
		run.asides = f.Asides
		for _, ev := range f.Events {
			run.events = append(run.events, ev)
		}
		return run
	}
	seq := sentinel()
	deadline := time.Now().Add(15 * time.Second)
	for !slices.Contains(f.EventSeqs(), seq) && !slices.ContainsFunc(setAsideOf(f), func(a reader.SetAside) bool { return a.Seq == seq }) {
		select {
		case <-f.Done:
			t.Fatalf("Follow returned %v before the sentinel", f.Err)
		default:
		}
		if time.Now().After(deadline) {
			if c, err := e.Js.Consumer(t.Context(), room.DefaultStream, o.Durable); err == nil {
				if ci, err := c.Info(t.Context()); err == nil {
					t.Logf("consumer: delivered %+v, ack floor %+v, %d ack pending, %d pull requests waiting", ci.Delivered, ci.AckFloor, ci.NumAckPending, ci.NumWaiting)
				}
			}
			t.Fatalf("no sentinel (stream seq %d) within 15s: events %v, set aside %v", seq, f.EventSeqs(), asideSeqs(setAsideOf(f)))
		}
		time.Sleep(5 * time.Millisecond)
	}
	run.err = f.Stop(t)
	for _, ev := range f.Events {
		if ev.Seq != seq {
			run.events = append(run.events, ev)
		}
	}
	for _, a := range f.Asides {
		if a.Seq != seq {
			run.asides = append(run.asides, a)
		}
	}
	return run
}

// gateSentinel is a sentinel for followOnce: a record named name shipped
// through e's gate.
func gateSentinel(t *testing.T, e *roomtest.Env, name string) func() uint64 {
	return func() uint64 {
		return e.ShipRecord(roomtest.RecordIn(t, e.Key, "room:sentinel", name, nil).Canonical()).Item.StreamSeq
	}
}

// seqsOf returns the events' stream seqs, with "r" after the re-examined.
func seqsOf(evs []*reader.Event) []string {
	var out []string
	for _, ev := range evs {
		s := fmt.Sprint(ev.Seq)
		if ev.Reexamined {
			s += "r"
		}
		out = append(out, s)
	}
	return out
}

// asideSeqs returns the set-asides' stream seqs and codes.
func asideSeqs(as []reader.SetAside) []string {
	var out []string
	for _, a := range as {
		s := fmt.Sprintf("%d %s", a.Seq, a.Code)
		if a.Reexamined {
			s += " r"
		}
		out = append(out, s)
	}
	return out
}

// listed returns the stream seqs the list file holds lines about, and
// whether a line says served.
func listed(t *testing.T, path string) (seqs []uint64, served bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct {
			Seq    uint64 `json:"stream_seq"`
			Served bool   `json:"served"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %q: %v", path, sc.Text(), err)
		}
		seqs = append(seqs, l.Seq)
		served = served || l.Served
	}
	return seqs, served
}

// TestFollowReexamineRecord: a record from a host this reader does not
// trust is set aside (untrusted_host), listed and acknowledged. Once the
// host is trusted, a run without Reexamine still serves nothing (and says
// the record passes now); a run whose handler fails on it serves it again
// next time; a run with Reexamine serves it once, marked re-examined,
// before the live events, and names a record served before that it now
// contradicts; the next run serves nothing again.
func TestFollowReexamineRecord(t *testing.T) {
	t.Parallel()
	e := roomtest.NewEnv(t)
	stranger := roomtest.NewHostKey(t)
	list := filepath.Join(t.TempDir(), "d.set-aside.ndjson")
	_, body := roomtest.Journal(t, "run-1", "cap-1", 2)
	e.ShipJournal("room:r", body)                                                                                         // 1, 2
	r := roomtest.PublishRaw(t, e.Js, "rooms.r.exec", roomtest.RecordIn(t, stranger, "room:r", "rec-1", nil).Canonical()) // 3
	twin := e.ShipRecord(roomtest.RecordIn(t, e.Key, "room:r", "rec-1", nil).Canonical()).Item.StreamSeq                  // 4: the same key, from a trusted host
	if r != 3 || twin != 4 {
		t.Fatalf("stream seqs %d %d", r, twin)
	}
	onlyOwn, err := validate.New(validate.WithTrustedHosts(e.Key.NodeID()))
	if err != nil {
		t.Fatal(err)
	}
	both, err := validate.New(validate.WithTrustedHosts(e.Key.NodeID(), stranger.NodeID()))
	if err != nil {
		t.Fatal(err)
	}

	run := followOnce(t, e, reader.FollowOptions{Durable: "d", Validator: onlyOwn}, list, gateSentinel(t, e, "s-1"), nil)
	if run.err != nil || !slices.Equal(seqsOf(run.events), []string{"1", "2", "4"}) || !slices.Equal(asideSeqs(run.asides), []string{"3 untrusted_host"}) {
		t.Fatalf("first run: %v, events %v, set aside %v", run.err, seqsOf(run.events), asideSeqs(run.asides))
	}
	if seqs, _ := listed(t, list); !slices.Equal(seqs, []uint64{3}) {
		t.Fatalf("listed %v", seqs)
	}

	// Re-examined with the same trust: set aside again, still listed once.
	run = followOnce(t, e, reader.FollowOptions{Durable: "d", Validator: onlyOwn, Reexamine: true}, list, gateSentinel(t, e, "s-0"), nil)
	if run.err != nil || len(run.events) != 0 || !slices.Equal(asideSeqs(run.asides), []string{"3 untrusted_host r"}) ||
		run.facts != (reader.ListFacts{Listed: 1, Aside: 1}) {
		t.Fatalf("re-examination with the same trust: %v, events %v, set aside %v, facts %+v", run.err, seqsOf(run.events), asideSeqs(run.asides), run.facts)
	}
	if seqs, _ := listed(t, list); !slices.Equal(seqs, []uint64{3}) {
		t.Fatalf("listed %v", seqs)
	}

	// Trusted now, not re-examined: kept aside, said to pass now.
	run = followOnce(t, e, reader.FollowOptions{Durable: "d", Validator: both}, list, gateSentinel(t, e, "s-2"), nil)
	if run.err != nil || len(run.events)+len(run.asides) != 0 || run.facts != (reader.ListFacts{Listed: 1, PassNow: 1}) {
		t.Fatalf("run without re-examination: %v, events %v, set aside %v, facts %+v", run.err, seqsOf(run.events), asideSeqs(run.asides), run.facts)
	}

	// The handler fails on the re-examined record: Follow stops, nothing
	// is marked served.
	errFail := errors.New("fail")
	run = followOnce(t, e, reader.FollowOptions{Durable: "d", Validator: both, Reexamine: true}, list, gateSentinel(t, e, "s-3"), func(ev *reader.Event) error {
		if ev.Reexamined {
			return errFail
		}
		return nil
	})
	if !errors.Is(run.err, reader.ErrHandler) || !errors.Is(run.err, errFail) || len(run.events) != 0 {
		t.Fatalf("failing handler: %v, events %v", run.err, seqsOf(run.events))
	}
	if seqs, served := listed(t, list); !slices.Equal(seqs, []uint64{3}) || served {
		t.Fatalf("after the failing handler: listed %v, served %v", seqs, served)
	}

	run = followOnce(t, e, reader.FollowOptions{Durable: "d", Validator: both, Reexamine: true}, list, gateSentinel(t, e, "s-4"), nil)
	if run.err != nil || !slices.Equal(seqsOf(run.events), []string{"3r"}) || len(run.asides) != 0 ||
		run.facts != (reader.ListFacts{Listed: 1, Served: 1, ServedNowAside: 1}) {
		t.Fatalf("re-examination: %v, events %v, set aside %v, facts %+v", run.err, seqsOf(run.events), asideSeqs(run.asides), run.facts)
	}
	if ev := run.events[0]; ev.Kind != room.KindExecution || ev.RoomID != "room:r" || ev.Record == nil || ev.Ref == "" || ev.Subject != "rooms.r.exec" {
		t.Errorf("re-examined event: %+v", ev)
	}
	if seqs, _ := listed(t, list); len(seqs) != 0 {
		t.Errorf("after the re-examination: listed %v", seqs)
	}

	run = followOnce(t, e, reader.FollowOptions{Durable: "d", Validator: both, Reexamine: true}, list, gateSentinel(t, e, "s-5"), nil)
	if run.err != nil || len(run.events)+len(run.asides) != 0 || run.facts != (reader.ListFacts{ServedNowAside: 1}) {
		t.Errorf("second re-examination: %v, events %v, set aside %v, facts %+v", run.err, seqsOf(run.events), asideSeqs(run.asides), run.facts)
	}

	if err := reader.Follow(t.Context(), e.Js, reader.FollowOptions{Durable: "d", Validator: both, Reexamine: true}, nil); err == nil {
		t.Error("Reexamine without a set-aside list did not fail")
	}
}

// TestFollowReexamineChain: a journal entry set aside breaks its chain, and
// the chain's later entries are set aside as chain_broken. Once the entry
// passes (a schema that allows its payload key), a run without Reexamine
// keeps the chain broken, so a new entry of it is not served ahead of the
// ones set aside; a run with Reexamine serves them all, in chain order,
// then the next live entry; a run after it serves nothing again.
func TestFollowReexamineChain(t *testing.T) {
	t.Parallel()
	e := roomtest.NewEnv(t)
	list := filepath.Join(t.TempDir(), "d.set-aside.ndjson")
	widened, err := validate.New(validate.WithTrustedHosts(e.Key.NodeID()), validate.WithSchemaFS(os.DirFS(roomtest.Testdata("samples/widened/schemas"))))
	if err != nil {
		t.Fatal(err)
	}
	g := &chainGen{key: events.ChainKey{RunID: "run-w", CapsuleID: "cap-w"}, roomID: "room:w"}
	var subj room.Subjects
	next := func(payload map[string]any) uint64 {
		e1 := g.next(t)
		if payload != nil {
			// Rebuilt at the same position, its parent the chain's head.
			e1 = roomtest.Rebuilt(t, e1, map[string]any{"payload": payload})
			g.es[len(g.es)-1] = e1
		}
		return roomtest.PublishRaw(t, e.Js, subj.Journal(g.roomID, g.key), e1.Canonical())
	}
	next(nil)                                                            // 1: position 0
	next(nil)                                                            // 2: 1
	next(map[string]any{"tool": "bash", "status": "ok", "session": "s"}) // 3: 2, a key only the widened schema allows
	next(nil)                                                            // 4: 3
	next(nil)                                                            // 5: 4

	run := followOnce(t, e, reader.FollowOptions{Durable: "d", Validator: e.V}, list, gateSentinel(t, e, "s-1"), nil)
	if run.err != nil || !slices.Equal(seqsOf(run.events), []string{"1", "2"}) ||
		!slices.Equal(asideSeqs(run.asides), []string{"3 invalid_entry", "4 chain_broken", "5 chain_broken"}) {
		t.Fatalf("first run: %v, events %v, set aside %v", run.err, seqsOf(run.events), asideSeqs(run.asides))
	}

	// The schema allows the entry now; not re-examined, the chain stays
	// broken: position 5 is not served ahead of 2 to 4.
	sixth := next(nil) // 7 (6 is the sentinel)
	run = followOnce(t, e, reader.FollowOptions{Durable: "d", Validator: widened}, list, gateSentinel(t, e, "s-2"), nil)
	if run.err != nil || len(run.events) != 0 || !slices.Equal(asideSeqs(run.asides), []string{fmt.Sprint(sixth) + " chain_broken"}) ||
		run.facts != (reader.ListFacts{Listed: 3, PassNow: 1}) {
		t.Fatalf("run without re-examination: %v, events %v, set aside %v, facts %+v", run.err, seqsOf(run.events), asideSeqs(run.asides), run.facts)
	}

	run = followOnce(t, e, reader.FollowOptions{Durable: "d", Validator: widened, Reexamine: true}, list, gateSentinel(t, e, "s-3"), nil)
	want := []string{"3r", "4r", "5r", fmt.Sprint(sixth) + "r"}
	if run.err != nil || !slices.Equal(seqsOf(run.events), want) || len(run.asides) != 0 || run.facts != (reader.ListFacts{Listed: 4, Served: 4}) {
		t.Fatalf("re-examination: %v, events %v (want %v), set aside %v, facts %+v", run.err, seqsOf(run.events), want, asideSeqs(run.asides), run.facts)
	}
	for i, ev := range run.events {
		if *ev.Position != int64(2+i) || ev.EntryHash != g.es[2+i].EntryHash() {
			t.Errorf("re-examined event %d: position %d, entry %s", i, *ev.Position, ev.EntryHash)
		}
	}

	// Nothing again; the chain goes on live.
	seventh := next(nil)
	run = followOnce(t, e, reader.FollowOptions{Durable: "d", Validator: widened, Reexamine: true}, list, gateSentinel(t, e, "s-4"), nil)
	if run.err != nil || !slices.Equal(seqsOf(run.events), []string{fmt.Sprint(seventh)}) || len(run.asides) != 0 || run.facts != (reader.ListFacts{}) {
		t.Errorf("after the re-examination: %v, events %v, set aside %v, facts %+v", run.err, seqsOf(run.events), asideSeqs(run.asides), run.facts)
	}
	if seqs, _ := listed(t, list); len(seqs) != 0 {
		t.Errorf("listed %v", seqs)
	}
}

// setAside returns a copy of what the follower has set aside so far.
func setAsideOf(f *roomtest.Follower) []reader.SetAside {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return slices.Clone(f.Asides)
}

// TestFollowReexamineAttested: a reader trusting publisher K1 sets aside
// the entries K2 attested (checkpoint_mismatch, which leaves the chain as
// it was) and the next entry of K1's, now a gap. Trusting both and
// re-examining, it serves the three, in chain order: the rebuild of a
// trusting reader hands out its verdicts once the batches' signatures are
// verified.
func TestFollowReexamineAttested(t *testing.T) {
	t.Parallel()
	e := roomtest.NewEnv(t)
	k1, k2 := roomtest.NewHostKey(t), roomtest.NewHostKey(t)
	list := filepath.Join(t.TempDir(), "d.set-aside.ndjson")
	a1, a2 := roomtest.NewAttestor(t, e.Js, k1, roomtest.AttRoom), roomtest.NewAttestor(t, e.Js, k2, roomtest.AttRoom)
	es, _ := roomtest.Journal(t, "run-1", "cap-1", 5)
	a1.Entries(es[0], es[1]) // 1, 2
	a2.Entries(es[2], es[3]) // 3, 4
	a1.Entry(es[4])          // 5
	sentinels := roomtest.NewAttestor(t, e.Js, k1, "room:sentinel")
	n := 0
	sentinel := func() uint64 {
		n++
		return sentinels.Record(roomtest.RecordIn(t, e.Key, "room:sentinel", fmt.Sprint("s-", n), nil))
	}

	run := followOnce(t, e, reader.FollowOptions{Durable: "d", Validator: e.V, Trust: roomtest.Trusting(t, k1)}, list, sentinel, nil)
	if run.err != nil || !slices.Equal(seqsOf(run.events), []string{"1", "2"}) ||
		!slices.Equal(asideSeqs(run.asides), []string{"3 checkpoint_mismatch", "4 checkpoint_mismatch", "5 gap"}) {
		t.Fatalf("trusting K1: %v, events %v, set aside %v", run.err, seqsOf(run.events), asideSeqs(run.asides))
	}
	run = followOnce(t, e, reader.FollowOptions{Durable: "d", Validator: e.V, Trust: roomtest.Trusting(t, k1, k2), Reexamine: true}, list, sentinel, nil)
	if run.err != nil || !slices.Equal(seqsOf(run.events), []string{"3r", "4r", "5r"}) || len(run.asides) != 0 ||
		run.facts != (reader.ListFacts{Listed: 3, Served: 3}) {
		t.Fatalf("trusting both, re-examined: %v, events %v, set aside %v, facts %+v", run.err, seqsOf(run.events), asideSeqs(run.asides), run.facts)
	}
	run = followOnce(t, e, reader.FollowOptions{Durable: "d", Validator: e.V, Trust: roomtest.Trusting(t, k1, k2), Reexamine: true}, list, sentinel, nil)
	if run.err != nil || len(run.events)+len(run.asides) != 0 || run.facts != (reader.ListFacts{}) {
		t.Errorf("again: %v, events %v, set aside %v, facts %+v", run.err, seqsOf(run.events), asideSeqs(run.asides), run.facts)
	}
}
