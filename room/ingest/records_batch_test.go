package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// TestRecordsEquivalence holds Gate.AppendRecords (records checked ahead
// of their store on a second goroutine, attestations signed ahead at a
// foreseen position) against the oracle of TestRecordEquivalence
// (AppendRecordCatchingUp, one record at a time). Two attesting gates get
// random groups of 1 to 12 records from one pool (repeats, idempotency and
// run conflicts, unknown outcomes, two rooms, a record that is not JSON, a
// record changed after it was signed); the oracle's two gates get the same records, one at a
// time, in the same order: the same replies, the same streams, and a
// trusting audit of the attested stream finds every record's attestation
// sound, those signed ahead and those signed again because another gate's
// appends moved the room's count.
func TestRecordsEquivalence(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 8))
			fast, oracle := roomtest.NewEnvMarked(t, embedded.Options{}), roomtest.NewEnvUnmarked(t, embedded.Options{})
			pub := roomtest.NewPublisherKey(t)
			var presigned [2]atomic.Uint64
			fg := [2]*ingest.Gate{roomtest.AttestingGate(fast, fast.Connect(), pub, nil, ingest.WithPresignedCount(ingest.GateOptions{}, &presigned[0])),
				roomtest.AttestingGate(fast, fast.Connect(), pub, nil, ingest.WithPresignedCount(ingest.GateOptions{}, &presigned[1]))}
			og := oracleGates(t, fast, oracle)
			pool := recordPool(t, rng, fast)
			forged := bytes.Replace(pool[0], []byte(`"2026-09-25T12:00:00Z"`), []byte(`"2026-09-25T13:00:00Z"`), 1)
			pool = append(pool, []byte(`{"room/id": "room:rd",`), forged)
			outcomes := map[room.Outcome]int{}
			codes := map[events.Code]int{}
			of, oo := recordOrdinals{}, recordOrdinals{}
			for sent := 0; sent < 150; {
				group := make([][]byte, 1+rng.IntN(12))
				for j := range group {
					group[j] = pool[rng.IntN(len(pool))]
				}
				i := rng.IntN(2)
				got := fg[i].AppendRecords(t.Context(), group)
				if len(got) != len(group) {
					t.Fatalf("%d replies for %d records", len(got), len(group))
				}
				for j, raw := range group {
					ro := og[i].AppendRecordCatchingUp(t.Context(), raw)
					if got[j].Item.Index != j {
						t.Fatalf("reply %d has index %d", j, got[j].Item.Index)
					}
					got[j].Item.Index = 0
					jf, jo := of.json(got[j]), oo.json(ro)
					if !bytes.Equal(jf, jo) {
						t.Fatalf("record %d of %d (%s) through gate %d:\nbatch:  %s\noracle: %s", j, len(group), raw, i, jf, jo)
					}
					outcomes[got[j].Item.Outcome]++
					codes[got[j].Item.Code]++
				}
				sent += len(group)
			}
			t.Logf("outcomes %v, codes %v", outcomes, codes)
			if outcomes[room.OutcomeStored] < 5 || outcomes[room.OutcomeDuplicate] < 5 || codes[events.IdempotencyConflict] == 0 ||
				codes[events.RunConflict] == 0 || codes[events.UnknownNotConsent] == 0 || codes[events.MalformedJSON] == 0 ||
				codes[events.RefMismatch] == 0 {
				t.Fatalf("the mix is too one-sided: %v %v", outcomes, codes)
			}
			sameRecords(t, fast, oracle, outcomes[room.OutcomeStored])
			mf := fast.StoredUnmarked()
			used := presigned[0].Load() + presigned[1].Load()
			t.Logf("%d of %d stored with the attestation signed ahead", used, len(mf))
			if used == 0 || used >= uint64(len(mf)) {
				t.Errorf("%d of %d records stored with the attestation signed ahead: want some, not all (another gate's appends move the count)", used, len(mf))
			}
			rep, err := reader.Audit(t.Context(), fast.Js, reader.AuditOptions{Validator: fast.V, Trust: roomtest.Trusting(t, pub)})
			if err != nil {
				t.Fatal(err)
			}
			var admitted, verified uint64
			for _, f := range rep.Checkpoints {
				admitted += f.Admitted
				verified += f.AttestationsVerified
			}
			if !rep.Clean() || rep.Totals.Records != uint64(len(mf)) || admitted != uint64(len(mf)) || verified != uint64(len(mf)) {
				t.Fatalf("audit: clean %v, totals %+v, admitted %d, attestations verified %d, violations %v",
					rep.Clean(), rep.Totals, admitted, verified, rep.Violations)
			}
		})
	}
}

// TestRecordsStoredInOrderAcrossRequests: Client.AppendRecords sends 303
// records as three records requests (256, then the 45 up to the record
// that is not JSON, then the one after it) and one execution request for
// the record that is not JSON; every reply has its record's
// index; the stored ones are on the stream in the order sent; a
// pretty-printed record (compacted onto one line) is stored in its
// canonical form, and a repeat is a duplicate of the first copy.
func TestRecordsStoredInOrderAcrossRequests(t *testing.T) {
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	cl := client.New(e.Nc, client.Options{})
	const roomID = "room:batch"
	pretty := roomtest.ReferenceBytes(t, "verified.json")
	raws := [][]byte{pretty}
	for i := range 300 {
		raws = append(raws, roomtest.RecordNamed(e, roomID, fmt.Sprint("b", i)))
	}
	raws = append(raws, []byte("{\n  \"room/id\": \"room:batch\",\n"), raws[1])
	replies, err := cl.AppendRecords(t.Context(), raws)
	if err != nil || len(replies) != len(raws) {
		t.Fatalf("%d replies for %d records: %v", len(replies), len(raws), err)
	}
	for i, r := range replies {
		if r.Item.Index != i {
			t.Fatalf("reply %d has index %d", i, r.Item.Index)
		}
	}
	prettyRec, err := events.ParseRecord(pretty)
	if err != nil {
		t.Fatal(err)
	}
	checkRecordStored(t, replies[0], prettyRec, room.OutcomeStored, 1)
	for i := 1; i <= 300; i++ {
		rec, err := events.ParseRecord(raws[i])
		if err != nil {
			t.Fatal(err)
		}
		checkRecordStored(t, replies[i], rec, room.OutcomeStored, uint64(i+1))
	}
	if it := replies[301].Item; it.Outcome != room.OutcomeRefused || it.Code != events.MalformedJSON {
		t.Errorf("the record that is not JSON: %+v", it)
	}
	if it := replies[302].Item; it.Outcome != room.OutcomeDuplicate || it.StreamSeq != 2 {
		t.Errorf("the repeat: %+v", it)
	}
	msgs := e.Stored()
	if len(msgs) != 301 || !bytes.Equal(msgs[0].Data, prettyRec.Canonical()) {
		t.Fatalf("%d messages stored", len(msgs))
	}
	for i := 1; i < len(msgs); i++ {
		if !bytes.Equal(msgs[i].Data, raws[i]) {
			t.Fatalf("stream seq %d holds %s, want record %d", msgs[i].Sequence, msgs[i].Data, i)
		}
	}
	requests := endpointRequests(e.Svc)
	if requests["records"] != 3 || requests["execution"] != 1 {
		t.Errorf("requests per endpoint %v, want 3 records requests and 1 execution request", requests)
	}
}

// TestRecordsRequestReply: the records endpoint on the wire (what a
// harness in another language sends): one record per line, a trailing
// newline or not; the reply counts each outcome; an empty body and more
// than MaxBatchRecords lines are bad requests, and nothing is stored.
func TestRecordsRequestReply(t *testing.T) {
	e := roomtest.NewEnv(t)
	a, b := roomtest.RecordNamed(e, "room:wire", "a"), roomtest.RecordNamed(e, "room:wire", "b")
	var r room.RecordsReply
	body := bytes.Join([][]byte{a, []byte("not json"), b, a}, []byte("\n"))
	if code := e.Request("roompub.v1.records", nil, body, &r); code != "" {
		t.Fatalf("status %s", code)
	}
	if len(r.Records) != 4 || r.Stored != 2 || r.Dupes != 1 || r.Refused != 1 || r.Skipped != 0 || r.Failures != 0 {
		t.Fatalf("reply %+v", r)
	}
	if it := r.Records[1].Item; it.Index != 1 || it.Code != events.MalformedJSON || it.At != nil { // the whole record: no place
		t.Errorf("line 1: %+v", it)
	}
	if it := r.Records[3].Item; it.Index != 3 || it.Outcome != room.OutcomeDuplicate || it.StreamSeq != r.Records[0].Item.StreamSeq {
		t.Errorf("line 3: %+v", it)
	}
	before := e.State()
	for name, body := range map[string][]byte{
		"empty":    nil,
		"newline":  []byte("\n"),
		"too many": []byte(strings.Repeat("{}\n", room.MaxBatchRecords+1)),
	} {
		code, er := e.RequestError("roompub.v1.records", nil, body)
		if code != "400" || er.Code != events.BadRequest {
			t.Errorf("%s body: status %q, %+v", name, code, er)
		}
	}
	if after := e.State(); after != before {
		t.Errorf("bad requests changed the stream: %+v, was %+v", after, before)
	}
}

// TestRecordsStopAtFailure: when the store cannot be reached, the first
// record fails and every record behind it is skipped, so none lands out of
// order; a caller's ctx that is done leaves everything failed or skipped.
func TestRecordsStopAtFailure(t *testing.T) {
	e := roomtest.NewEnv(t)
	raws := [][]byte{roomtest.RecordNamed(e, "room:stop", "a"), roomtest.RecordNamed(e, "room:stop", "b"), roomtest.RecordNamed(e, "room:stop", "c")}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	checkStopped := func(got []room.RecordReply) {
		t.Helper()
		if len(got) != len(raws) {
			t.Fatalf("%d replies", len(got))
		}
		for i, r := range got {
			it := r.Item
			ok := it.Outcome == room.OutcomeSkipped && strings.HasPrefix(it.Reason, "not looked at: ") ||
				i == 0 && it.Outcome == room.OutcomeFailed
			if !ok || it.Index != i {
				t.Errorf("record %d: %+v", i, it)
			}
		}
	}
	checkStopped(e.Gate.AppendRecords(ctx, raws))
	// The server goes away: the first record fails after the gate's
	// retries, the rest are skipped.
	nc := e.Connect()
	gone := roomtest.AttestingGate(e, nc, roomtest.NewPublisherKey(t), nil, ingest.GateOptions{})
	nc.Close()
	short, stop := context.WithTimeout(t.Context(), 2*time.Second)
	defer stop()
	got := gone.AppendRecords(short, raws)
	checkStopped(got)
	if got[0].Item.Outcome != room.OutcomeFailed || got[1].Item.Reason != "not looked at: an earlier record of the request failed" {
		t.Errorf("after a closed connection: %+v", got)
	}
	if n := len(e.Stored()); n != 0 {
		t.Errorf("%d messages stored", n)
	}
}

// TestRecordsReplyTrimmed: on a server with a 64 KiB max payload, a
// records request whose whole reply would not fit is still answered, in
// the first trimmed form that fits, and keeps every stored record's
// outcome and stream sequence: refusals with a hundred problems each lose
// their lists (RecordsTrimmedProblems); 280 refusals whose reasons and
// pointers are long once JSON-escaped (a key of 200 "<", six bytes each
// in the reply) keep only their outcomes (RecordsTrimmedItems). More records than such
// a reply could hold is a bad request, decided before anything is stored.
func TestRecordsReplyTrimmed(t *testing.T) {
	e := roomtest.NewEnvWith(t, embedded.Options{MaxPayload: 64 << 10})
	junk := func(n int, line func(i int) string) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = []byte(line(i))
		}
		return out
	}
	manyProblems := junk(20, func(i int) string {
		var b strings.Builder
		b.WriteString(`{"room/id":"room:trim"`)
		for k := range 120 {
			fmt.Fprintf(&b, `,"unknown-%d-%d":%d`, i, k, k)
		}
		return b.String() + "}"
	})
	longKeys := junk(280, func(i int) string { return fmt.Sprintf(`{"%s%03d":1}`, strings.Repeat("<", 200), i) })
	for _, c := range []struct {
		name, trimmed string
		junk          [][]byte
	}{{"many-problems", room.RecordsTrimmedProblems, manyProblems}, {"long-keys", room.RecordsTrimmedItems, longKeys}} {
		t.Run(c.name, func(t *testing.T) {
			first, last := roomtest.RecordNamed(e, "room:trim", c.name+"-first"), roomtest.RecordNamed(e, "room:trim", c.name+"-last")
			lines := append(append([][]byte{first}, c.junk...), last)
			var r room.RecordsReply
			if code := e.Request("roompub.v1.records", nil, bytes.Join(lines, []byte("\n")), &r); code != "" {
				t.Fatalf("status %s", code)
			}
			n := len(lines)
			if r.Trimmed != c.trimmed || len(r.Records) != n || r.Stored != 2 || r.Refused != n-2 {
				t.Fatalf("trimmed %q (want %q), %d items, %d stored, %d refused", r.Trimmed, c.trimmed, len(r.Records), r.Stored, r.Refused)
			}
			for _, i := range []int{0, n - 1} {
				if it := r.Records[i].Item; it.Outcome != room.OutcomeStored || it.StreamSeq == 0 || it.Index != i {
					t.Errorf("record %d: %+v", i, it)
				}
			}
			for i := 1; i < n-1; i++ {
				if it := r.Records[i].Item; it.Outcome != room.OutcomeRefused || it.Code != events.SchemaInvalid || it.Problems != nil || it.Index != i {
					t.Fatalf("record %d: %+v", i, it)
				}
			}
			// Its first problem is about the whole record: no place, in every form.
			if at := r.Records[1].Item.At; at != nil {
				t.Errorf("record 1 at %v, want none", *at)
			}
			keeps := r.Records[1].Item.Reason != "" && r.Records[1].RoomID == "room:trim"
			if want := c.trimmed == room.RecordsTrimmedProblems; keeps != want {
				t.Errorf("refusal keeps its first problem and room: %v, want %v: %+v", keeps, want, r.Records[1])
			}
		})
	}
	before := e.State()
	code, er := e.RequestError("roompub.v1.records", nil, []byte(strings.Repeat("{}\n", 511)))
	if code != "400" || er.Code != events.BadRequest || !strings.Contains(er.Reason, "answers at most 510 per request") {
		t.Errorf("511 records at 64 KiB: status %q, %+v", code, er)
	}
	if after := e.State(); after != before {
		t.Errorf("the bad request changed the stream: %+v, was %+v", after, before)
	}
}

// TestRecordsClientTooLarge: a record over the server's max payload cannot
// be sent; AppendRecords answers it refused too_large without a request
// and ships the records around it.
func TestRecordsClientTooLarge(t *testing.T) {
	e := roomtest.NewEnvUnmarked(t, embedded.Options{MaxPayload: 64 << 10})
	cl := client.New(e.Nc, client.Options{})
	huge := []byte(`{"room/id":"room:big","x":"` + strings.Repeat("a", 70<<10) + `"}`)
	raws := [][]byte{roomtest.RecordNamed(e, "room:big", "a"), huge, roomtest.RecordNamed(e, "room:big", "b")}
	got, err := cl.AppendRecords(t.Context(), raws)
	if err != nil || len(got) != 3 {
		t.Fatalf("%d replies: %v", len(got), err)
	}
	if got[0].Item.Outcome != room.OutcomeStored || got[2].Item.Outcome != room.OutcomeStored || got[2].Item.StreamSeq != 2 {
		t.Errorf("the records around it: %+v, %+v", got[0].Item, got[2].Item)
	}
	if it := got[1].Item; it.Outcome != room.OutcomeRefused || it.Code != events.TooLarge || it.Index != 1 ||
		!strings.Contains(it.Reason, "over the server's max payload of 65536 bytes") {
		t.Errorf("the huge record: %+v", it)
	}
	requests := endpointRequests(e.Svc)
	if requests["records"] != 2 || requests["execution"] != 0 {
		t.Errorf("requests per endpoint %v: the huge record must not be sent", requests)
	}
}

// TestRecordsSignedAheadAfterDuplicate: the position a record is signed
// for ahead of its store follows what the records before it did: after a
// duplicate (the rerun of a shipment that was cut off) and a refusal, the
// new records of a loaded room land where they were signed for, but for
// the few checked while a duplicate was being decided; in a room the gate
// has not read yet, the records checked before the first store are signed
// at their store.
func TestRecordsSignedAheadAfterDuplicate(t *testing.T) {
	e := roomtest.NewEnv(t)
	var presigned atomic.Uint64
	g := roomtest.AttestingGate(e, e.Connect(), roomtest.NewPublisherKey(t), nil, ingest.WithPresignedCount(ingest.GateOptions{}, &presigned))
	named := func(prefix string, n int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = roomtest.RecordNamed(e, "room:ahead", fmt.Sprint(prefix, i))
		}
		return out
	}
	first := named("a", 20)
	for _, r := range g.AppendRecords(t.Context(), first) {
		if r.Item.Outcome != room.OutcomeStored {
			t.Fatalf("%+v", r.Item)
		}
	}
	// Only the records checked after the room was read can be signed
	// ahead: the checker runs at most a few records ahead of the store.
	if used := presigned.Load(); used < 15 {
		t.Errorf("a room not read yet: %d of 20 records stored with the signature made ahead", used)
	}
	before := presigned.Load()
	again := append([][]byte{first[3], first[3]}, named("b", 30)...)
	again = append(again, []byte("{}"))
	again = append(again, named("c", 10)...)
	got := g.AppendRecords(t.Context(), again)
	for i, r := range got {
		want := room.OutcomeStored
		switch {
		case i < 2:
			want = room.OutcomeDuplicate
		case i == 32:
			want = room.OutcomeRefused
		}
		if r.Item.Outcome != want {
			t.Fatalf("record %d: %+v, want %s", i, r.Item, want)
		}
	}
	// A record checked while a duplicate ahead of it is being decided is
	// signed as if that one were stored: at most the few checked ahead of
	// each duplicate are signed again (they were all, before the storer
	// told the checker where the room stands).
	if used := presigned.Load() - before; used < 34 {
		t.Errorf("after two duplicates and a refusal: %d of 40 stored records used the signature made ahead, want at least 34", used)
	}
	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V})
	if err != nil || !rep.Clean() || rep.Totals.Records != 60 {
		t.Fatalf("audit: %v, %+v", err, rep.Totals)
	}
}

// TestRecordsCheckerDoneOnReturn: AppendRecords does not read the records
// after it returns (its checker goroutine is done with them), however it
// ends; under -race, changing them at once is no race.
func TestRecordsCheckerDoneOnReturn(t *testing.T) {
	e := roomtest.NewEnv(t)
	raws := make([][]byte, 30)
	for i := range raws {
		raws[i] = roomtest.RecordNamed(e, "room:done", fmt.Sprint("d", i))
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	got := e.Gate.AppendRecords(ctx, raws)
	for _, raw := range raws {
		clear(raw)
	}
	for i, r := range got {
		if r.Item.Outcome != room.OutcomeSkipped && r.Item.Outcome != room.OutcomeFailed {
			t.Fatalf("record %d: %+v", i, r.Item)
		}
	}
}

// TestRecordsClientStopsAtNotDecided: once the gate cannot decide a record
// (outcome failed), Client.AppendRecords sends nothing more, so no record
// after it can be stored before it: the replies of that request come back
// with an error wrapping ErrUnavailable, and the next request is never
// sent. (The gate's side, failed then skipped, is TestRecordsStopAtFailure;
// here a stand-in on the server answers the records requests.)
func TestRecordsClientStopsAtNotDecided(t *testing.T) {
	e := roomtest.NewEnv(t)
	var requests atomic.Int32
	sub, err := e.Nc.Subscribe("stand-in.v1.records", func(m *nats.Msg) {
		requests.Add(1)
		n := bytes.Count(m.Data, []byte("\n"))
		reply := room.RecordsReply{Records: make([]room.RecordReply, n)}
		for i := range reply.Records {
			it := &reply.Records[i].Item
			it.Index, it.Outcome, it.StreamSeq = i, room.OutcomeStored, uint64(i+1)
			switch {
			case i == 5:
				it.Outcome, it.StreamSeq, it.Reason = room.OutcomeFailed, 0, "store unavailable"
			case i > 5:
				it.Outcome, it.StreamSeq, it.Reason = room.OutcomeSkipped, 0, "not looked at: an earlier record of the request failed"
			}
		}
		b, _ := json.Marshal(reply)
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	cl := client.New(e.Nc, client.Options{Prefix: "stand-in.v1"})
	raws := make([][]byte, 300)
	for i := range raws {
		raws[i] = roomtest.RecordNamed(e, "room:stand-in", fmt.Sprint("s", i))
	}
	got, err := cl.AppendRecords(t.Context(), raws)
	if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "record 5 was not decided: store unavailable") ||
		len(got) != room.DefaultRecordsPerRequest || requests.Load() != 1 {
		t.Fatalf("%d replies, %d requests, error %v", len(got), requests.Load(), err)
	}
	if got[4].Item.Outcome != room.OutcomeStored || got[5].Item.Outcome != room.OutcomeFailed || got[255].Item.Index != 255 {
		t.Errorf("replies %+v %+v %+v", got[4].Item, got[5].Item, got[255].Item)
	}
}

// TestGateJunkRecordsOneWarning: a raw writer that floods a room's record
// subject with junk gets one warning per catch-up from the gate, naming
// how many it ignored and where, not one per message; the genuine record
// after the junk is stored at its place, its position counting the junk.
func TestGateJunkRecordsOneWarning(t *testing.T) {
	e := roomtest.NewEnv(t)
	var subj room.Subjects
	first := roomtest.PublishRaw(t, e.Js, subj.Records("room:junk"), []byte("{}"))
	var last uint64
	for i := range 49 {
		last = roomtest.PublishRaw(t, e.Js, subj.Records("room:junk"), fmt.Appendf(nil, `{"junk":%d}`, i))
	}
	core, logs := observer.New(zap.WarnLevel)
	g, err := ingest.NewGate(t.Context(), e.Connect(), ingest.GateOptions{Validator: e.V, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	if r := g.AppendRecord(t.Context(), roomtest.RecordNamed(e, "room:junk", "real")); r.Item.Outcome != room.OutcomeStored || r.Item.StreamSeq != last+1 {
		t.Fatalf("%+v", r.Item)
	}
	warns := logs.FilterMessage("unverifiable records in stream: ignored by the gate").All()
	if len(warns) != 1 || logs.Len() != 1 {
		t.Fatalf("%d warnings of %d log entries", len(warns), logs.Len())
	}
	f := warns[0].ContextMap()
	if f["count"] != int64(50) || f["first_stream_seq"] != first || f["last_stream_seq"] != last || f["room"] != "room:junk" || f["first_error"] == nil {
		t.Errorf("fields %v", f)
	}
}

// endpointRequests is how many requests each endpoint of the ingest
// service s has handled (micro stats).
func endpointRequests(s *ingest.Service) map[string]int {
	requests := map[string]int{}
	for _, ep := range s.Stats().Endpoints {
		requests[ep.Name] = ep.NumRequests
	}
	return requests
}
