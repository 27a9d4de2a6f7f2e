package reader_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// Differential tests of parallel verification: Audit and Follow prepare
// messages on several workers and decide them in stream order. Whatever
// the batches, every message must get exactly what Reader.Verify, called
// on each message in turn, gives it: the same event or the same set-aside
// (code, stream seq, subject, chain, reason, every problem with its
// location and evidence), and the reader must end in the same state.

// outcome is one message's verdict, reduced to what is compared.
type outcome struct {
	Seq                                       uint64
	Kind                                      room.Kind
	RoomID, Subject                           string
	Chain                                     *events.ChainKey
	Position                                  *int64
	EntryHash, Ref, Digest, Instance, Outcome string
	HasEntry, HasRecord                       bool
	Aside                                     *reader.SetAside
}

func outcomeOf(ev *reader.Event, s *reader.SetAside) outcome {
	if s != nil {
		c := *s
		c.Time = c.Time.UTC() // the instant, not the clock readings
		return outcome{Seq: s.Seq, Aside: &c}
	}
	return outcome{Seq: ev.Seq, Kind: ev.Kind, RoomID: ev.RoomID, Subject: ev.Subject, Chain: ev.Chain, Position: ev.Position,
		EntryHash: ev.EntryHash, Ref: ev.Ref, Digest: ev.Digest, Instance: ev.Instance, Outcome: ev.Outcome,
		HasEntry: ev.Entry != nil, HasRecord: ev.Record != nil}
}

func (o outcome) String() string {
	b, _ := json.Marshal(o)
	return string(b)
}

// sequential verifies msgs one by one with a fresh reader.
func sequential(v *validate.Validator, msgs []reader.StreamMsg, anchor bool) ([]outcome, *reader.Reader) {
	r := reader.NewReader(v, room.Subjects{})
	r.Anchor = anchor
	out := make([]outcome, len(msgs))
	for i, m := range msgs {
		out[i] = outcomeOf(r.Verify(m))
	}
	return out, r
}

// diffOutcomes fails t at the first messages whose outcomes differ.
func diffOutcomes(t *testing.T, what string, got, want []outcome) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d outcomes, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range min(len(got), len(want)) {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("%s: message %d:\n got  %s\n want %s", what, i, got[i], want[i])
			if bad++; bad > 5 {
				return
			}
		}
	}
}

// sortedChains is r's chain summaries in a fixed order.
func sortedChains(cs []reader.ChainSummary) []reader.ChainSummary {
	cs = slices.Clone(cs)
	sort.Slice(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.RoomID != b.RoomID {
			return a.RoomID < b.RoomID
		}
		if a.Chain.RunID != b.Chain.RunID {
			return a.Chain.RunID < b.Chain.RunID
		}
		return a.Chain.CapsuleID < b.Chain.CapsuleID
	})
	for i, c := range cs {
		if c.Broken != nil {
			b := *c.Broken
			b.Time = b.Time.UTC()
			cs[i].Broken = &b
		}
	}
	return cs
}

// checkParallel verifies msgs sequentially and through the parallel
// pipeline under several batch cuttings, and compares everything.
func checkParallel(t *testing.T, v *validate.Validator, msgs []reader.StreamMsg, anchor bool, seed uint64) []outcome {
	t.Helper()
	want, wr := sequential(v, msgs, anchor)
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, cut := range []struct {
		name string
		fn   func() int
	}{
		{"one per batch", func() int { return 1 }},
		{"batches of 3", func() int { return 3 }},
		{"random batches", func() int { return 1 + rng.IntN(40) }},
		{"one batch", func() int { return len(msgs) }},
	} {
		r := reader.NewReader(v, room.Subjects{})
		r.Anchor = anchor
		evs, asides := reader.VerifyInBatches(r, msgs, cut.fn)
		got := make([]outcome, len(msgs))
		for i := range msgs {
			if (evs[i] == nil) == (asides[i] == nil) {
				t.Fatalf("%s: message %d: event %v, set-aside %v", cut.name, i, evs[i], asides[i])
			}
			got[i] = outcomeOf(evs[i], asides[i])
		}
		diffOutcomes(t, cut.name, got, want)
		if g, w := sortedChains(r.Chains()), sortedChains(wr.Chains()); !reflect.DeepEqual(g, w) {
			t.Errorf("%s: chains\n got  %+v\n want %+v", cut.name, g, w)
		}
		for _, inst := range wr.Evidence().Instances() {
			if g, w := r.Evidence().Instance(inst, ""), wr.Evidence().Instance(inst, ""); !reflect.DeepEqual(g, w) {
				t.Errorf("%s: evidence on %s\n got  %+v\n want %+v", cut.name, inst, g, w)
			}
		}
		if g, w := r.Evidence().Instances(), wr.Evidence().Instances(); !slices.Equal(g, w) {
			t.Errorf("%s: instances %v, want %v", cut.name, g, w)
		}
	}
	return want
}

// msgList numbers data on subjects as stream messages from seq 1.
type msgList struct {
	msgs []reader.StreamMsg
	t0   time.Time
}

func (l *msgList) add(subject string, data []byte) {
	seq := uint64(len(l.msgs) + 1)
	l.msgs = append(l.msgs, reader.StreamMsg{Subject: subject, Seq: seq, Data: data, Time: l.t0.Add(time.Duration(seq) * time.Millisecond)})
}

var msgEpoch = time.Date(2026, 9, 2, 0, 0, 0, 0, time.UTC)

// TestParallelConformance: every conformance case, each journal on its
// own chain and every record on its room's subject, all in one stream,
// and every hostile line, each in a stream of its own after a good entry.
func TestParallelConformance(t *testing.T) {
	key := roomtest.NewHostKey(t)
	v, err := validate.New(validate.WithTrustedHosts(key.NodeID(), roomtest.ReferenceHost))
	if err != nil {
		t.Fatal(err)
	}
	var subj room.Subjects
	all := msgList{t0: msgEpoch}
	for i, c := range conformanceCases(t, key) {
		if c.record != nil {
			all.add(subj.Records(c.roomID), c.record)
			continue
		}
		s := subj.Journal(fmt.Sprintf("room:conf-%d", i), events.ChainKey{RunID: fmt.Sprintf("conf-%d", i), CapsuleID: "cap"})
		for _, l := range c.lines {
			all.add(s, l)
		}
	}
	want := checkParallel(t, v, all.msgs, false, 1)
	asides := 0
	for _, o := range want {
		if o.Aside != nil {
			asides++
		}
	}
	if asides == 0 || asides == len(want) {
		t.Fatalf("%d of %d conformance messages set aside", asides, len(want))
	}
	checkParallel(t, v, all.msgs[len(all.msgs)/3:], true, 2)

	good, _ := roomtest.Journal(t, "run-h", "cap-h", 1)
	s := subj.Journal("room:hostile", events.ChainKey{RunID: "run-h", CapsuleID: "cap-h"})
	for _, h := range roomtest.HostileLines(t) {
		t.Run(h.Name, func(t *testing.T) {
			l := msgList{t0: msgEpoch}
			l.add(s, good[0].Canonical())
			l.add(s, h.Line)
			l.add(subj.Records("room:hostile"), h.Line)
			got := checkParallel(t, v, l.msgs, false, 3)
			if got[1].Aside == nil || got[2].Aside == nil {
				t.Errorf("hostile line served: %v", got)
			}
		})
	}
}

// chainGen builds valid entries of one chain, one at a time.
type chainGen struct {
	key    events.ChainKey
	roomID string
	es     []*events.Entry // built so far
}

func (g *chainGen) next(t testing.TB) *events.Entry {
	t.Helper()
	parent := events.ZeroHash
	if n := len(g.es); n > 0 {
		parent = g.es[n-1].EntryHash()
	}
	e, err := events.NewEntry(map[string]any{
		"schema": events.EntrySchema, "run_id": g.key.RunID, "capsule_id": g.key.CapsuleID, "seq": json.Number(fmt.Sprint(len(g.es))),
		"ts": "2026-09-02T00:00:00.000Z", "lineage": "attempt", "kind": "tool.call", "effect_class": "SE0",
		"harness_version": "test/1", "task_family": "slugify", "parent_hash": parent,
		"payload": map[string]any{"tool": "bash", "duration_ms": json.Number("12.5"), "status": "ok"},
	})
	if err != nil {
		t.Fatal(err)
	}
	g.es = append(g.es, e)
	return e
}

// randomStream is n messages over chains chains in rooms rooms: mostly the
// next good entry of a random chain, with every kind of bad journal
// message and good, bad and repeated execution records mixed in at rate
// bad.
func randomStream(t *testing.T, rng *rand.Rand, key, stranger *events.HostKey, n, chains, rooms int, bad float64) []reader.StreamMsg {
	t.Helper()
	var subj room.Subjects
	gens := make([]*chainGen, chains)
	for i := range gens {
		gens[i] = &chainGen{key: events.ChainKey{RunID: fmt.Sprintf("run-%d", i), CapsuleID: fmt.Sprintf("cap-%d", i%7)},
			roomID: fmt.Sprintf("room:r%d", i%rooms)}
	}
	l := msgList{t0: msgEpoch}
	var recs [][]byte
	recName := 0
	for len(l.msgs) < n {
		g := gens[rng.IntN(chains)]
		s := subj.Journal(g.roomID, g.key)
		if rng.Float64() >= bad {
			if rng.IntN(20) == 0 {
				recName++
				r := roomtest.RecordIn(t, key, g.roomID, fmt.Sprintf("n%d", recName), nil)
				recs = append(recs, r.Canonical())
				l.add(subj.Records(g.roomID), r.Canonical())
				continue
			}
			l.add(s, g.next(t).Canonical())
			continue
		}
		head := func() *events.Entry {
			if len(g.es) == 0 {
				return g.next(t)
			}
			return g.es[len(g.es)-1]
		}
		switch rng.IntN(17) {
		case 0: // tampered
			l.add(s, roomtest.Tampered(t, g.next(t)))
		case 1: // fork of the head
			l.add(s, roomtest.ForkOf(t, head()).Canonical())
		case 2: // gap
			g.next(t)
			l.add(s, g.next(t).Canonical())
		case 3: // the head again
			l.add(s, head().Canonical())
		case 4: // another chain's entry on this subject
			o := gens[rng.IntN(chains)]
			l.add(s, o.next(t).Canonical())
		case 5: // this chain in another room
			l.add(subj.Journal(fmt.Sprintf("room:elsewhere-%d", rng.IntN(2)), g.key), g.next(t).Canonical())
		case 6: // outside the layout
			l.add([]string{"rooms.x", "rooms.~zz.journal.a.b", "rooms.r.journal.a", "rooms.r.exec.x"}[rng.IntN(4)], g.next(t).Canonical())
		case 7: // not UTF-8, not JSON, not canonical
			e := g.next(t)
			l.add(s, [][]byte{append([]byte{0xff}, e.Canonical()...), e.Canonical()[:10], append([]byte(" "), e.Canonical()...)}[rng.IntN(3)])
		case 8: // schema
			e := g.next(t)
			l.add(s, roomtest.Rebuilt(t, e, map[string]any{"effect_class": "SE9"}).Canonical())
		case 9: // metadata
			e := g.next(t)
			l.add(s, roomtest.Rebuilt(t, e, map[string]any{"harness_version": "other/2"}).Canonical())
		case 10: // a record again
			if len(recs) > 0 {
				l.add(subj.Records(g.roomID), recs[rng.IntN(len(recs))])
			}
		case 11: // a record from a host not trusted
			recName++
			l.add(subj.Records(g.roomID), roomtest.RecordIn(t, stranger, g.roomID, fmt.Sprintf("n%d", recName), nil).Canonical())
		case 12: // a record on another room's subject
			recName++
			l.add(subj.Records("room:r0"), roomtest.RecordIn(t, key, "room:other", fmt.Sprintf("n%d", recName), nil).Canonical())
		case 13: // the room's record rules
			const decision = "corpus-experiment-chair-decision:sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
			recName++
			prior := fmt.Sprintf("n%d", 1+rng.IntN(recName))
			changes := []map[string]any{
				{"recorded-at": "2026-09-25T12:16:00Z"},                    // other bytes under a stored idempotency/key
				{"idempotency/key": fmt.Sprintf("key-n%d-again", recName)}, // a run/ref that concluded
				{"outcome": "unknown", "decision/ref": decision, "decision/digest": "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
				{"decision/ref": decision, "decision/digest": "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}, // after an unknown
			}[rng.IntN(4)]
			if _, ok := changes["outcome"]; ok || changes["decision/ref"] != nil {
				prior = fmt.Sprintf("n%d", recName)
			}
			l.add(subj.Records(g.roomID), roomtest.RecordIn(t, key, g.roomID, prior, changes).Canonical())
		case 14: // a record not in canonical form
			recName++
			r := roomtest.RecordIn(t, key, g.roomID, fmt.Sprintf("n%d", recName), nil)
			l.add(subj.Records(g.roomID), append(bytes.Clone(r.Canonical()), ' '))
		case 15: // not JSON on the record subject
			l.add(subj.Records(g.roomID), []byte(`{"room/id":`))
		case 16: // a record with a broken signature
			recName++
			r := roomtest.RecordIn(t, key, g.roomID, fmt.Sprintf("n%d", recName), nil)
			b := r.Canonical()
			i := bytes.Index(b, []byte(`"signature"`))
			l.add(subj.Records(g.roomID), append(bytes.Clone(b[:i]), bytes.Replace(b[i:], []byte(`"sig`), []byte(`"sgi`), 1)...))
		}
	}
	return l.msgs[:n]
}

// TestParallelRandom: random mixes of good and bad messages over many
// chains and rooms, from the start and from mid-stream (anchored).
func TestParallelRandom(t *testing.T) {
	key, stranger := roomtest.NewHostKey(t), roomtest.NewHostKey(t)
	v, err := validate.New(validate.WithTrustedHosts(key.NodeID(), roomtest.ReferenceHost))
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			msgs := randomStream(t, rng, key, stranger, 800, 30, 3, 0.02+0.02*float64(seed))
			want := checkParallel(t, v, msgs, false, seed)
			codes := map[events.Code]int{}
			served := 0
			for _, o := range want {
				if o.Aside != nil {
					codes[o.Aside.Code]++
				} else {
					served++
				}
			}
			t.Logf("%d served, set aside %v", served, codes)
			if served < len(msgs)/4 || len(codes) < 10 {
				t.Errorf("the mix is too one-sided: %d served, set aside %v", served, codes)
			}
			checkParallel(t, v, msgs[len(msgs)/2:], true, seed)
		})
	}
}

// TestParallelAuditAndFollow writes a random mix into a real stream and
// checks that Audit and Follow (with a restart half-way, so its rebuild
// runs) hand out exactly what the sequential reader does.
func TestParallelAuditAndFollow(t *testing.T) {
	e := roomtest.NewEnvWith(t, embedded.Options{SyncInterval: time.Minute})
	rng := rand.New(rand.NewPCG(42, 42))
	msgs := randomStream(t, rng, e.Key, roomtest.NewHostKey(t), 1500, 20, 4, 0.05)
	for _, m := range msgs {
		roomtest.PublishRaw(t, e.Js, m.Subject, m.Data)
	}
	// The stream as stored is what every reader reads.
	stored := e.Stored()
	if len(stored) != len(msgs) {
		t.Fatalf("%d stored of %d", len(stored), len(msgs))
	}
	for i, m := range stored {
		msgs[i] = reader.StreamMsg{Subject: m.Subject, Seq: m.Sequence, Data: m.Data, Time: m.Time}
	}
	want, wr := sequential(e.V, msgs, false)

	var got []outcome
	rep, err := reader.Audit(context.Background(), e.Js, reader.AuditOptions{Validator: e.V, MaxViolations: len(msgs),
		OnEvent: func(ev *reader.Event) { got = append(got, outcomeOf(ev, nil)) }})
	if err != nil {
		t.Fatal(err)
	}
	var wantEvents, wantAsides []outcome
	byCode := map[events.Code]int{}
	for _, o := range want {
		if o.Aside != nil {
			wantAsides = append(wantAsides, o)
			byCode[o.Aside.Code]++
		} else {
			wantEvents = append(wantEvents, o)
		}
	}
	diffOutcomes(t, "audit events", got, wantEvents)
	var gotAsides []outcome
	for _, s := range rep.Violations {
		gotAsides = append(gotAsides, outcomeOf(nil, &s))
	}
	diffOutcomes(t, "audit violations", gotAsides, wantAsides)
	if g, w := sortedChains(rep.Chains), sortedChains(wr.Chains()); !reflect.DeepEqual(g, w) {
		t.Errorf("audit chains\n got  %+v\n want %+v", g, w)
	}
	if rep.Totals.Messages != uint64(len(msgs)) || rep.Totals.SetAside != uint64(len(wantAsides)) || !reflect.DeepEqual(rep.Totals.ByCode, byCode) {
		t.Errorf("audit totals %+v, want %d messages, %d set aside %v", rep.Totals, len(msgs), len(wantAsides), byCode)
	}

	// Follow, stopped after a third and started again.
	o := reader.FollowOptions{Durable: "diff", Validator: e.V}
	f := roomtest.StartFollow(t, e.Js, o, nil)
	f.WaitSeen(t, len(msgs)/3)
	if err := f.Stop(t); err != nil {
		t.Fatal(err)
	}
	first := f
	f = roomtest.StartFollow(t, e.Js, o, nil)
	f.WaitSeen(t, len(msgs)-first.Seen())
	if err := f.Stop(t); err != nil {
		t.Fatal(err)
	}
	var fEvents, fAsides []outcome
	for _, ff := range []*roomtest.Follower{first, f} {
		for _, ev := range ff.Events {
			fEvents = append(fEvents, outcomeOf(ev, nil))
		}
		for _, s := range ff.Asides {
			fAsides = append(fAsides, outcomeOf(nil, &s))
		}
	}
	diffOutcomes(t, "follow events", fEvents, wantEvents)
	diffOutcomes(t, "follow set-asides", fAsides, wantAsides)
	if t.Failed() {
		var b strings.Builder
		for _, o := range want[:min(len(want), 20)] {
			fmt.Fprintln(&b, o)
		}
		t.Logf("first outcomes:\n%s", b.String())
	}
}

// FuzzParallelReader: any sequence of messages drawn from a pool of good
// and bad ones (every chain rule, records and their room rules, subjects
// outside the layout), verified one by one and through the parallel
// pipeline under fuzzed batch cuttings, gets the same outcome per message
// and leaves the same chains.
func FuzzParallelReader(f *testing.F) {
	key, stranger := roomtest.NewHostKey(f), roomtest.NewHostKey(f)
	v, err := validate.New(validate.WithTrustedHosts(key.NodeID(), roomtest.ReferenceHost))
	if err != nil {
		f.Fatal(err)
	}
	var subj room.Subjects
	type msg struct{ subject, data string }
	type chain struct {
		subject string
		es      []*events.Entry
	}
	var chains []chain
	for i, roomID := range []string{"room:r1", "room:r1", "room:r2"} {
		g := &chainGen{key: events.ChainKey{RunID: fmt.Sprintf("run-%d", i), CapsuleID: "cap"}, roomID: roomID}
		for range 8 {
			g.next(f)
		}
		chains = append(chains, chain{subj.Journal(roomID, g.key), g.es})
	}
	// bad is a fixed pool of other messages.
	a, c := chains[0], chains[2]
	rec1 := roomtest.RecordIn(f, key, "room:r1", "f1", nil)
	bad := []msg{
		{a.subject, string(roomtest.Tampered(f, a.es[3]))},
		{a.subject, string(roomtest.ForkOf(f, a.es[2]).Canonical())},
		{a.subject, string(c.es[0].Canonical())},                                                                  // another chain's entry
		{subj.Journal("room:r9", events.ChainKey{RunID: "run-0", CapsuleID: "cap"}), string(a.es[0].Canonical())}, // another room
		{a.subject, string(roomtest.Rebuilt(f, a.es[1], map[string]any{"effect_class": "SE9"}).Canonical())},
		{a.subject, string(roomtest.Rebuilt(f, a.es[1], map[string]any{"task_family": "other"}).Canonical())},
		{a.subject, " " + string(a.es[0].Canonical())},
		{a.subject, "\xff"},
		{a.subject, "{"},
		{"rooms.r1.junk", "{}"},
		{subj.Records("room:r1"), string(rec1.Canonical())},
		{subj.Records("room:r1"), string(roomtest.RecordIn(f, key, "room:r1", "f1", map[string]any{"recorded-at": "2026-09-25T12:16:00Z"}).Canonical())},
		{subj.Records("room:r1"), string(roomtest.RecordIn(f, key, "room:r1", "f2", map[string]any{"run/ref": "operator-task-run:f1"}).Canonical())},
		{subj.Records("room:r1"), string(roomtest.RecordIn(f, stranger, "room:r1", "f3", nil).Canonical())},
		{subj.Records("room:r2"), string(rec1.Canonical())}, // another room's record
		{subj.Records("room:r1"), "null"},
	}
	f.Add([]byte{0, 1, 2, 0, 1, 2, 0x40, 0x41, 0x80, 0x81}, uint64(1), false)
	f.Add([]byte{0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f, 0, 0, 0}, uint64(7), false)
	f.Add([]byte{0x83, 0x84, 0x85, 0, 1, 2, 0x30}, uint64(3), true)
	f.Fuzz(func(t *testing.T, script []byte, seed uint64, anchor bool) {
		if len(script) > 512 {
			return
		}
		l := msgList{t0: msgEpoch}
		next := make([]int, len(chains))
		for _, op := range script {
			switch {
			case op < 0x30: // the next good entry of a chain
				k := int(op) % len(chains)
				ch := chains[k]
				l.add(ch.subject, ch.es[min(next[k], len(ch.es)-1)].Canonical())
				next[k]++
			case op < 0x80: // one of the bad messages
				m := bad[int(op-0x30)%len(bad)]
				l.add(m.subject, []byte(m.data))
			default: // any entry of any chain: gaps, forks, repeats
				ch := chains[int(op)%len(chains)]
				l.add(ch.subject, ch.es[int(op>>2)%len(ch.es)].Canonical())
			}
		}
		want, wr := sequential(v, l.msgs, anchor)
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		r := reader.NewReader(v, room.Subjects{})
		r.Anchor = anchor
		evs, asides := reader.VerifyInBatches(r, l.msgs, func() int { return 1 + rng.IntN(8) })
		got := make([]outcome, len(l.msgs))
		for i := range l.msgs {
			got[i] = outcomeOf(evs[i], asides[i])
		}
		diffOutcomes(t, "fuzzed", got, want)
		if g, w := sortedChains(r.Chains()), sortedChains(wr.Chains()); !reflect.DeepEqual(g, w) {
			t.Errorf("chains\n got  %+v\n want %+v", g, w)
		}
	})
}
