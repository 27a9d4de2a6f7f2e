package ingest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/roompub/roompub/room/embedded"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/validate"
)

// equivChain is one chain and the lines a random request may be made of.
type equivChain struct {
	es    []*events.Entry
	forks []*events.Entry // forks[k]: another entry for position k (k ≥ 1)
	meta  events.CapsuleMeta
}

func newEquivChain(t *testing.T, run string, n int) equivChain {
	es, _ := roomtest.Journal(t, run, "cap-1", n)
	c := equivChain{es: es, forks: make([]*events.Entry, n), meta: es[0].Metadata()}
	for k := 1; k < n; k++ {
		c.forks[k] = variant(t, es, k)
	}
	return c
}

// request builds a random journal request of chain c: mostly a run of
// consecutive entries from near the head, sometimes with one line changed
// (a fork, a repeat, a swap, a corrupt, non-canonical or partial line, a
// line of another chain).
func (c equivChain) request(rng *rand.Rand, head int, other equivChain) []byte {
	n := len(c.es)
	from := max(0, min(n-1, head-3+rng.IntN(6)))
	to := min(n, from+1+rng.IntN(14))
	ls := make([][]byte, 0, to-from+1)
	for k := from; k < to; k++ {
		ls = append(ls, append(append([]byte{}, c.es[k].Canonical()...), '\n'))
	}
	i := rng.IntN(len(ls))
	switch rng.IntN(14) {
	case 0:
		if k := from + i; k > 0 {
			ls[i] = append(append([]byte{}, c.forks[k].Canonical()...), '\n')
		}
	case 1:
		ls = append(ls[:i+1], append([][]byte{ls[i]}, ls[i+1:]...)...) // a line twice
	case 2:
		if i+1 < len(ls) {
			ls[i], ls[i+1] = ls[i+1], ls[i]
		}
	case 3:
		ls[i] = []byte("{\"seq\": oops\n")
	case 4:
		ls[i] = append(bytes.Replace(ls[i], []byte(`{"`), []byte(`{ "`), 1), []byte{}...)
	case 5:
		ls[len(ls)-1] = ls[len(ls)-1][:len(ls[len(ls)-1])-1] // no final newline
	case 6:
		ls[i] = append(append([]byte{}, other.es[min(from+i, len(other.es)-1)].Canonical()...), '\n')
	}
	return bytes.Join(ls, nil)
}

// TestBatchEquivalence holds the batching gate against the gate before
// atomic batches (AppendJournalOneByOne, its code kept as the oracle: decide
// a line, append it alone, decide the next) and against the batching gate
// with MaxBatch 1: the same random requests, each gate on its own server,
// get the same replies, item by item, and leave the same streams.
func TestBatchEquivalence(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { batchEquivalence(t, seed, 120, true) })
	}
}

// FuzzBatchEquivalence is TestBatchEquivalence with the fuzzer's seeds
// (shorter runs: each starts three servers).
func FuzzBatchEquivalence(f *testing.F) {
	f.Add(uint64(11))
	f.Fuzz(func(t *testing.T, seed uint64) { batchEquivalence(t, seed, 30, false) })
}

// batchEquivalence sends that many random requests (seeded) to the three
// gates; mixed asks for a mix of every outcome.
func batchEquivalence(t *testing.T, seed uint64, requests int, mixed bool) {
	rng := rand.New(rand.NewPCG(seed, 7))
	batched, single, oracle := roomtest.NewEnv(t), roomtest.NewEnv(t), roomtest.NewEnv(t)
	gb, logb := gateWith(batched, batched.Nc, ingest.GateOptions{})
	gs, logs := gateWith(single, single.Nc, ingest.GateOptions{MaxBatch: 1})
	gateOf := map[*roomtest.Env]func(ctx context.Context, roomID string, body []byte, capsule *events.CapsuleMeta) (room.JournalReply, error){
		batched: gb.AppendJournal, single: gs.AppendJournal, oracle: oracle.Gate.AppendJournalOneByOne,
	}
	chains := []equivChain{newEquivChain(t, "eq-a", 120), newEquivChain(t, "eq-b", 120)}
	heads := make([]int, len(chains))
	outcomes := map[room.Outcome]int{}
	codes := map[events.Code]int{}
	for range requests {
		ci := rng.IntN(len(chains))
		c := chains[ci]
		body := c.request(rng, heads[ci], chains[1-ci])
		roomID := "room:eq"
		if rng.IntN(15) == 0 {
			roomID = "room:elsewhere"
		}
		var capsule *events.CapsuleMeta
		switch rng.IntN(6) {
		case 0:
			m := c.meta
			capsule = &m
		case 1:
			m := c.meta
			m.TaskFamily = "another"
			capsule = &m
		}
		rb, eb := gateOf[batched](t.Context(), roomID, body, capsule)
		jb, _ := json.Marshal(rb)
		for _, other := range []*roomtest.Env{single, oracle} {
			ro, eo := gateOf[other](t.Context(), roomID, body, capsule)
			jo, _ := json.Marshal(ro)
			if fmt.Sprint(eb) != fmt.Sprint(eo) || !bytes.Equal(jb, jo) {
				t.Fatalf("request %q to %s:\nbatched: %v %s\nother:   %v %s", body, roomID, eb, jb, eo, jo)
			}
		}
		heads[ci] = int(rb.Head.Next)
		for _, it := range rb.Items {
			outcomes[it.Outcome]++
			codes[it.Code]++
		}
	}
	t.Logf("outcomes %v, codes %v; batches: %d stored, %s", outcomes, codes, logb.count("stored"), logs)
	if len(logs.results) != 0 {
		t.Fatalf("the one-at-a-time gate published batches: %s", logs)
	}
	if mixed && (outcomes[room.OutcomeStored] < 50 || outcomes[room.OutcomeDuplicate] == 0 || outcomes[room.OutcomeRefused] < 10 || codes[events.Fork] == 0) {
		t.Fatalf("the mix is too one-sided: %v %v", outcomes, codes)
	}
	mb := batched.Stored()
	for _, other := range []*roomtest.Env{single, oracle} {
		ms := other.Stored()
		if len(mb) != len(ms) {
			t.Fatalf("streams hold %d and %d messages", len(mb), len(ms))
		}
		for i := range mb {
			if mb[i].Subject != ms[i].Subject || !bytes.Equal(mb[i].Data, ms[i].Data) {
				t.Fatalf("stream seq %d: %s %s vs %s %s", mb[i].Sequence, mb[i].Subject, mb[i].Data, ms[i].Subject, ms[i].Data)
			}
		}
	}
}

// TestRecordEquivalence holds the record path, which decides on the gate's
// room index kept current by its own appends, against the path before it
// (AppendRecordCatchingUp, the old code kept as the oracle: the index brought
// up to the stream head before every decision). Two gates on one server
// and two oracle gates on another get the same random records (repeats,
// idempotency and run conflicts, unknown outcomes, two rooms) in the same
// order: the same replies, the same streams.
func TestRecordEquivalence(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 3))
			fast, oracle := roomtest.NewEnvMarked(t, embedded.Options{}), roomtest.NewEnvUnmarked(t, embedded.Options{})
			fg := racers(fast)
			og := oracleGates(t, fast, oracle)
			pool := recordPool(t, rng, fast)
			outcomes := map[room.Outcome]int{}
			codes := map[events.Code]int{}
			of, oo := recordOrdinals{}, recordOrdinals{}
			for range 150 {
				raw := pool[rng.IntN(len(pool))]
				i := rng.IntN(2)
				rf := fg[i].AppendRecord(t.Context(), raw)
				ro := og[i].AppendRecordCatchingUp(t.Context(), raw)
				jf, jo := of.json(rf), oo.json(ro)
				if !bytes.Equal(jf, jo) {
					t.Fatalf("record %s through gate %d:\nnew:    %s\noracle: %s", raw, i, jf, jo)
				}
				outcomes[rf.Item.Outcome]++
				codes[rf.Item.Code]++
			}
			t.Logf("outcomes %v, codes %v", outcomes, codes)
			if outcomes[room.OutcomeStored] < 5 || outcomes[room.OutcomeDuplicate] < 5 || codes[events.IdempotencyConflict] == 0 ||
				codes[events.RunConflict] == 0 || codes[events.UnknownNotConsent] == 0 {
				t.Fatalf("the mix is too one-sided: %v %v", outcomes, codes)
			}
			sameRecords(t, fast, oracle, outcomes[room.OutcomeStored])
		})
	}
}

// recordOrdinals names a stream's records by their place on the room's
// records subjects (first stored 1, …) instead of their stream sequence,
// which a marked stream's markers move on: the replies of a marked and an
// unmarked stream then compare byte for byte.
type recordOrdinals map[uint64]int

var streamSeqs = regexp.MustCompile(`("stream_seq":|stream seq )([0-9]+)`)

// json is reply's JSON with every stream sequence replaced by its ordinal
// (a stored reply names a new one).
func (o recordOrdinals) json(reply room.RecordReply) []byte {
	if reply.Item.Outcome == room.OutcomeStored {
		o[reply.Item.StreamSeq] = len(o) + 1
	}
	b, _ := json.Marshal(reply)
	return streamSeqs.ReplaceAllFunc(b, func(m []byte) []byte {
		sub := streamSeqs.FindSubmatch(m)
		seq, _ := strconv.ParseUint(string(sub[2]), 10, 64)
		return []byte(string(sub[1]) + "#" + strconv.Itoa(o[seq]))
	})
}

// sameRecords fails t unless marked's stream holds, besides its markers,
// the messages unmarked's holds, stored of them, in the same order; and
// every marker names a stored record (the one at its offset, by content
// digest).
func sameRecords(t *testing.T, marked, unmarked *roomtest.Env, stored int) {
	t.Helper()
	mf, mo := marked.StoredUnmarked(), unmarked.Stored()
	if len(mf) != len(mo) || len(mf) != stored {
		t.Fatalf("streams hold %d and %d messages, %d stored", len(mf), len(mo), stored)
	}
	for i := range mf {
		if mf[i].Subject != mo[i].Subject || !bytes.Equal(mf[i].Data, mo[i].Data) {
			t.Fatalf("record %d differs: stream seq %d and %d", i, mf[i].Sequence, mo[i].Sequence)
		}
	}
	all := marked.Stored()
	bySeq := map[uint64]*jetstream.RawStreamMsg{}
	for _, m := range all {
		bySeq[m.Sequence] = m
	}
	markers := 0
	for _, m := range all {
		p, err := (room.Subjects{}).Parse(m.Subject)
		if err != nil || p.Kind != room.KindMarker {
			continue
		}
		markers++
		mk, err := room.ParseMarker(m.Data)
		if err != nil {
			t.Fatalf("marker at stream seq %d: %v", m.Sequence, err)
		}
		rm := bySeq[mk.RecordSeq(m.Sequence)]
		if rm == nil {
			t.Fatalf("marker %s at stream seq %d names no message", m.Subject, m.Sequence)
		}
		sum := sha256.Sum256(rm.Data)
		if rm.Subject != (room.Subjects{}).Records(p.RoomID) || mk.Record != events.DigestPrefix+base64.RawURLEncoding.EncodeToString(sum[:]) {
			t.Fatalf("marker %s at stream seq %d names %s, not the record at its offset", m.Subject, m.Sequence, mk.Record)
		}
	}
	if markers < 3*stored {
		t.Fatalf("%d markers for %d records: want at least key, run and decision for each", markers, stored)
	}
}

// oracleGates are two gates on oracle's server (AppendRecordCatchingUp's
// side) that trust the host signing fast's records.
func oracleGates(t *testing.T, fast, oracle *roomtest.Env) [2]*ingest.Gate {
	t.Helper()
	ov, err := validate.New(validate.WithTrustedHosts(fast.Key.NodeID()))
	if err != nil {
		t.Fatal(err)
	}
	var og [2]*ingest.Gate
	for i := range og {
		if og[i], err = ingest.NewGate(t.Context(), oracle.Connect(), ingest.GateOptions{Validator: ov}); err != nil {
			t.Fatal(err)
		}
	}
	return og
}

// recordPool is 60 records signed by fast's host, drawn from rng: two
// rooms, 14 idempotency keys and run refs, some unknown outcomes, five
// decisions, so that repeats and every stream-side conflict occur.
func recordPool(t *testing.T, rng *rand.Rand, fast *roomtest.Env) [][]byte {
	t.Helper()
	base := roomtest.ReferenceRecord(t, "verified.json")
	d1 := "oA28VKhsifc4ODhCXQhTYA5qikyleR46w0_GrRwpce1"
	var pool [][]byte
	for i := range 60 {
		changes := map[string]any{
			"room/id":         []string{"room:rd", "room:rd", "room:rd2"}[rng.IntN(3)],
			"idempotency/key": fmt.Sprint("key-", rng.IntN(14)),
			"run/ref":         fmt.Sprint("operator-task-run:r", rng.IntN(14)),
			"recorded-at":     fmt.Sprintf("2026-09-25T12:%02d:00Z", i),
		}
		if rng.IntN(4) == 0 {
			changes["outcome"] = "unknown"
		}
		if k := rng.IntN(6); k > 0 {
			d := d1[:len(d1)-1] + fmt.Sprint(k)
			changes["decision/ref"] = "corpus-experiment-chair-decision:sha256:" + d
			changes["decision/digest"] = "sha256:" + d
		}
		pool = append(pool, fast.Sign(base, changes).Canonical())
	}
	return pool
}
