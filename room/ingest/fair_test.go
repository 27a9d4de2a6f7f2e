package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// restartService replaces e's ingest service with one started with o.
func restartService(e *roomtest.Env, o ingest.ServiceOptions) *ingest.Service {
	e.T.Helper()
	return restartServiceOver(e, e.Gate, o)
}

// restartServiceOver replaces e's ingest service with one over g started
// with o; e stops it when the test ends.
func restartServiceOver(e *roomtest.Env, g *ingest.Gate, o ingest.ServiceOptions) *ingest.Service {
	e.T.Helper()
	if err := e.Svc.Stop(); err != nil {
		e.T.Fatal(err)
	}
	svc, err := ingest.StartService(e.Nc, g, o)
	if err != nil {
		e.T.Fatal(err)
	}
	e.Svc = svc
	return svc
}

// counterSum sums the series of counter name gathered from reg.
func counterSum(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// floods numbers the calls of flood: each has its own reply subjects.
var floods atomic.Int64

// flood publishes bodies as requests of identity token on endpoint, all
// at once, with reply subjects under the identity's inbox, and returns a
// func that waits for every reply and returns each one's status header
// (Nats-Service-Error-Code, "" for none) and body, by request index.
func flood(t *testing.T, nc *nats.Conn, token, endpoint string, hdr nats.Header, bodies [][]byte) (collect func() (status []string, replies [][]byte)) {
	t.Helper()
	prefix := room.InboxPrefix(token) + ".flood" + fmt.Sprint(floods.Add(1))
	ch := make(chan *nats.Msg, len(bodies))
	sub, err := nc.ChanSubscribe(prefix+".*", ch)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	for i, b := range bodies {
		msg := &nats.Msg{Subject: room.ServiceSubject("", token, endpoint), Reply: fmt.Sprintf("%s.%d", prefix, i), Header: hdr, Data: b}
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() (status []string, replies [][]byte) {
		defer sub.Unsubscribe()
		status, replies = make([]string, len(bodies)), make([][]byte, len(bodies))
		for range bodies {
			select {
			case m := <-ch:
				var i int
				if _, err := fmt.Sscanf(m.Subject[len(prefix)+1:], "%d", &i); err != nil {
					t.Fatal(err)
				}
				status[i], replies[i] = m.Header.Get("Nats-Service-Error-Code"), m.Data
			case <-time.After(2 * time.Minute): // a hung test, not a bound
				t.Fatal("replies missing")
			}
		}
		return status, replies
	}
}

// overQuotaReply checks that a reply with status 429 is a JSON
// over_quota ErrorReply that says it may be sent again.
func overQuotaReply(t *testing.T, body []byte) {
	t.Helper()
	var er room.ErrorReply
	if err := json.Unmarshal(body, &er); err != nil || er.Code != events.OverQuota || er.Reason == "" {
		t.Fatalf("over quota reply %q", body)
	}
}

// TestServiceFairPerIdentity: one identity floods the journal endpoint
// with 2,000 one-line requests sent without waiting; another sends 20,
// one after another, on the same endpoint meanwhile. All 20 are stored;
// the flood's requests beyond its share are answered over_quota (status
// 429) at once, counted by the metric, and nothing of them is stored.
func TestServiceFairPerIdentity(t *testing.T) {
	e := roomtest.NewEnv(t)
	reg := prometheus.NewRegistry()
	m, err := ingest.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	svc := restartService(e, ingest.ServiceOptions{Concurrency: 4, IdentityConcurrency: 2, Observer: m, Logger: zap.New(core)})
	tokA, tokB := room.IdentityToken("harness-a"), room.IdentityToken("harness-b")
	const roomID, sent, fair = "room:fair", 2000, 20
	bodies := make([][]byte, sent)
	for i := range bodies {
		_, bodies[i] = roomtest.Journal(t, fmt.Sprint("run-a-", i), "cap-a", 1)
	}
	ncB, err := nats.Connect(e.Srv.ClientURL(), nats.CustomInboxPrefix(room.InboxPrefix(tokB)))
	if err != nil {
		t.Fatal(err)
	}
	defer ncB.Close()
	cB := client.New(ncB, client.Options{Identity: tokB})

	// A's requests are all on their way before B's first.
	collect := flood(t, e.Connect(), tokA, room.EndpointJournal, nats.Header{room.HeaderRoom: []string{roomID}}, bodies)
	storedB := 0
	for i := range fair {
		_, body := roomtest.Journal(t, fmt.Sprint("run-b-", i), "cap-b", 1)
		r, err := cB.AppendJournal(t.Context(), roomID, nil, body)
		if err != nil {
			t.Fatalf("B's request %d: %v", i, err)
		}
		storedB += r.Stored
	}
	status, replies := collect()
	storedA, over := 0, 0
	for i, st := range status {
		switch st {
		case "":
			var r room.JournalReply
			if err := json.Unmarshal(replies[i], &r); err != nil || r.Stored != 1 {
				t.Fatalf("A's request %d: %q", i, replies[i])
			}
			storedA++
		case "429":
			overQuotaReply(t, replies[i])
			over++
		default:
			t.Fatalf("A's request %d: status %s: %q", i, st, replies[i])
		}
	}
	if storedB != fair {
		t.Errorf("B stored %d of %d", storedB, fair)
	}
	if over == 0 || over != sent-storedA {
		t.Errorf("%d over_quota, %d stored of %d sent", over, storedA, sent)
	}
	if got := e.State().Msgs; got != uint64(storedA+storedB) {
		t.Errorf("stream holds %d messages, %d stored", got, storedA+storedB)
	}
	if got := counterSum(t, reg, "roompub_over_quota_total"); got != float64(over) {
		t.Errorf("roompub_over_quota_total %v, want %d", got, over)
	}
	if got := svc.OverQuota(); got != uint64(over) {
		t.Errorf("OverQuota() %d, want %d", got, over)
	}
	// The log names who floods, at a bounded rate: the first 50 at once,
	// then 10 a second, each saying how many it left out before it.
	logged, left := logs.FilterMessage("over quota").All(), uint64(0)
	for _, en := range logged {
		f := en.ContextMap()
		if en.Level != zap.InfoLevel || f["identity"] != "harness-a" || f["code"] != string(events.OverQuota) || f["endpoint"] != room.EndpointJournal {
			t.Fatalf("over quota log %+v", en)
		}
		left += f["not_logged_before"].(uint64)
	}
	if len(logged) < min(over, 50) || len(logged) > 50+over/10 || uint64(len(logged))+left > uint64(over) {
		t.Errorf("%d over quota logs (%d left out) for %d over_quota answers", len(logged), left, over)
	}
	t.Logf("A: %d stored, %d over_quota (%d logged); B: %d stored", storedA, over, len(logged), storedB)
}

// TestGateHeadKeepsNoState: 2,000 head requests naming chains the gate
// does not know, sent at once, are all answered (nothing stored: next 0)
// and leave the gate's chain states as they were: the one chain shipped.
func TestGateHeadKeepsNoState(t *testing.T) {
	e := roomtest.NewEnv(t)
	const n = 2000
	restartService(e, ingest.ServiceOptions{IdentityConcurrency: n})
	_, body := roomtest.Journal(t, "run-head", "cap-known", 2)
	if r := e.ShipJournal("room:head", body); r.Stored != 2 {
		t.Fatalf("ship: %+v", r)
	}
	before := e.Gate.ChainStates()
	if before != 1 {
		t.Fatalf("%d chain states after one chain shipped", before)
	}
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i], _ = json.Marshal(room.HeadRequest{RunID: "run-head", CapsuleID: fmt.Sprint("cap-", i)})
	}
	status, replies := flood(t, e.Connect(), room.IdentityToken("asker"), room.EndpointHead, nil, bodies)()
	for i, st := range status {
		var h room.ChainHead
		if err := json.Unmarshal(replies[i], &h); st != "" || err != nil || h.Next != 0 || h.Chain.CapsuleID != fmt.Sprint("cap-", i) {
			t.Fatalf("head %d: status %q: %q", i, st, replies[i])
		}
	}
	var h room.ChainHead
	if e.Request("roompub.v1.head", nil, []byte(`{"run_id":"run-head","capsule_id":"cap-known"}`), &h); h.Next != 2 {
		t.Fatalf("head of the known chain: %+v", h)
	}
	if got := e.Gate.ChainStates(); got != before {
		t.Fatalf("%d chain states after %d head requests, was %d", got, n, before)
	}
}

// TestGateEvictsIdleChains: chains not used for ChainIdle are dropped
// (none before it has passed), and an evicted chain is read again from
// the stream: its next line is stored at its position, an old one is a
// duplicate.
func TestGateEvictsIdleChains(t *testing.T) {
	e := roomtest.NewEnv(t)
	var elapsed atomic.Int64
	base := time.Now()
	now := func() time.Time { return base.Add(time.Duration(elapsed.Load())) }
	const idle, chains = time.Minute, 50
	g, err := ingest.NewGate(t.Context(), e.Nc, ingest.WithGateClock(ingest.GateOptions{Validator: e.V, ChainIdle: idle}, now))
	if err != nil {
		t.Fatal(err)
	}
	es := make([][]*events.Entry, chains)
	for i := range es {
		es[i], _ = roomtest.Journal(t, "run-idle", fmt.Sprint("cap-", i), 3)
		if r, err := g.AppendJournal(t.Context(), "room:idle", roomtest.Lines(es[i][:2]), nil); err != nil || r.Stored != 2 {
			t.Fatalf("chain %d: %+v %v", i, r, err)
		}
	}
	if got := g.ChainStates(); got != chains {
		t.Fatalf("%d chain states, want %d", got, chains)
	}
	elapsed.Store(int64(idle - 1))
	g.SweepChains()
	if got := g.ChainStates(); got != chains {
		t.Fatalf("%d chain states before the idle period passed, want %d", got, chains)
	}
	elapsed.Store(int64(idle))
	g.SweepChains()
	if got := g.ChainStates(); got != 0 {
		t.Fatalf("%d chain states after the idle period, want 0", got)
	}
	r, err := g.AppendJournal(t.Context(), "room:idle", roomtest.Lines(es[0][2:]), nil)
	if err != nil || r.Stored != 1 || r.Head.Next != 3 {
		t.Fatalf("next line of an evicted chain: %+v %v", r, err)
	}
	r, err = g.AppendJournal(t.Context(), "room:idle", roomtest.Lines(es[1][:1]), nil)
	if err != nil || r.Dupes != 1 {
		t.Fatalf("old line of an evicted chain: %+v %v", r, err)
	}
	roomtest.ChainInStream(t, e, "room:idle", es[0])
	roomtest.ChainInStream(t, e, "room:idle", es[1][:2])
	if got := g.ChainStates(); got != 2 {
		t.Fatalf("%d chain states after two chains were used again, want 2", got)
	}
}

// TestGateBoundsIdleChains: past IdleChains chains held by no call, the
// ones used least recently are dropped at once, whatever ChainIdle says,
// and a dropped chain is read again from the stream: its next line is
// stored at its position, an old one is a duplicate at its stream seq.
func TestGateBoundsIdleChains(t *testing.T) {
	e := roomtest.NewEnv(t)
	const most, chains = 10, 50
	g, err := ingest.NewGate(t.Context(), e.Nc, ingest.GateOptions{Validator: e.V, IdleChains: most})
	if err != nil {
		t.Fatal(err)
	}
	es := make([][]*events.Entry, chains)
	firstSeq := make([]uint64, chains)
	for i := range es {
		es[i], _ = roomtest.Journal(t, "run-bound", fmt.Sprint("cap-", i), 3)
		r, err := g.AppendJournal(t.Context(), "room:bound", roomtest.Lines(es[i][:2]), nil)
		if err != nil || r.Stored != 2 {
			t.Fatalf("chain %d: %+v %v", i, r, err)
		}
		firstSeq[i] = r.Items[0].StreamSeq
		if got, want := g.ChainStates(), min(i+1, most); got != want {
			t.Fatalf("%d chain states after %d chains, want %d", got, i+1, want)
		}
	}
	r, err := g.AppendJournal(t.Context(), "room:bound", roomtest.Lines(es[0][2:]), nil)
	if err != nil || r.Stored != 1 || r.Head.Next != 3 {
		t.Fatalf("next line of a dropped chain: %+v %v", r, err)
	}
	r, err = g.AppendJournal(t.Context(), "room:bound", roomtest.Lines(es[1][:1]), nil)
	if err != nil || r.Dupes != 1 || r.Items[0].StreamSeq != firstSeq[1] {
		t.Fatalf("old line of a dropped chain: %+v %v, want a duplicate at %d", r, err, firstSeq[1])
	}
	if got := g.ChainStates(); got != most {
		t.Fatalf("%d chain states, want %d", got, most)
	}
	roomtest.ChainInStream(t, e, "room:bound", es[0])
}

// TestServiceWaitingBodiesCount: pipelined requests of one chain waiting
// for the request ahead of them hold their bodies, which count against
// their identity's IdentityPendingBytes: with room for 4 of them, the 5
// sent after those are answered over_quota at once instead of being held.
// Once the chain's first line is stored, the 4 held are stored, in order.
func TestServiceWaitingBodiesCount(t *testing.T) {
	e := roomtest.NewEnv(t)
	e.EachGate(func(g *ingest.Gate) { g.SetAheadWait(time.Minute) })
	const roomID, held, over = "room:wait", 4, 5
	es, _ := roomtest.Journal(t, "run-wait", "cap-wait", 1+held+over)
	bodies := make([][]byte, held+over)
	for i := range bodies {
		bodies[i] = roomtest.Lines(es[1+i : 2+i])
		if len(bodies[i]) != len(bodies[0]) {
			t.Fatalf("request %d is %d bytes, the first %d", i, len(bodies[i]), len(bodies[0]))
		}
	}
	share := held * (len(bodies[0]) + ingest.RequestOverheadBytes)
	svc := restartService(e, ingest.ServiceOptions{IdentityConcurrency: 100, IdentityPendingBytes: share})
	tok := room.IdentityToken("pipeliner")
	// Each request names the seq of the line ahead of it (HeaderPipelined),
	// so it waits for the chain to get there: seq 0 is not sent yet.
	nc := e.Connect()
	collects := make([]func() ([]string, [][]byte), len(bodies))
	for i, b := range bodies {
		hdr := nats.Header{room.HeaderRoom: []string{roomID}, room.HeaderPipelined: []string{fmt.Sprint(i)}}
		collects[i] = flood(t, nc, tok, room.EndpointJournal, hdr, [][]byte{b})
	}
	// The over_quota answers come at once, while the first 4 wait.
	for i := held; i < len(bodies); i++ {
		st, rs := collects[i]()
		if st[0] != "429" {
			t.Fatalf("request %d: status %q: %q", i, st[0], rs[0])
		}
		overQuotaReply(t, rs[0])
	}
	if got := svc.OverQuota(); got != over {
		t.Fatalf("%d over_quota, want %d", got, over)
	}
	// The chain's first line, by the same identity (the chain's owner),
	// straight through the gate: through the service it would be over
	// the share the 4 hold.
	if r, err := e.Gate.AppendJournalAs(t.Context(), roomID, tok, roomtest.Lines(es[:1]), nil); err != nil || r.Stored != 1 {
		t.Fatalf("first line: %+v %v", r, err)
	}
	for i := range held {
		st, rs := collects[i]()
		var r room.JournalReply
		if err := json.Unmarshal(rs[0], &r); st[0] != "" || err != nil || r.Stored != 1 {
			t.Fatalf("held request %d: status %q: %q", i, st[0], rs[0])
		}
	}
	roomtest.ChainInStream(t, e, roomID, es[:1+held])
	if got := e.State().Msgs; got != 1+held {
		t.Fatalf("stream holds %d messages, want %d", got, 1+held)
	}
}

// TestServiceRecordsWaitWithoutPlaces: records requests waiting for their
// room (another request holds its records lock) give their places in the
// service's concurrency limit back, so another identity's request in
// another room is decided meanwhile. They held them: one identity's
// records requests queued on one room took every place, and another
// identity's one-line journal request timed out. Once the room is free,
// every waiting record is stored.
func TestServiceRecordsWaitWithoutPlaces(t *testing.T) {
	e := roomtest.NewEnv(t)
	restartService(e, ingest.ServiceOptions{Concurrency: 2})
	tokA, tokB := room.IdentityToken("harness-a"), room.IdentityToken("harness-b")
	const busy = "room:busy"
	release := e.Gate.HoldRoom(busy)
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	// Two on each endpoint, more than the places: each waits for the room.
	var bodies, singles [][]byte
	for i := range 2 {
		bodies = append(bodies, bytes.Join([][]byte{roomtest.RecordNamed(e, busy, fmt.Sprint("a-", i, "-0")), roomtest.RecordNamed(e, busy, fmt.Sprint("a-", i, "-1"))}, []byte("\n")))
		singles = append(singles, roomtest.RecordNamed(e, busy, fmt.Sprint("s-", i)))
	}
	collect := flood(t, e.Connect(), tokA, room.EndpointRecords, nil, bodies)
	collectSingles := flood(t, e.Connect(), tokA, room.EndpointExecution, nil, singles)
	ncB, err := nats.Connect(e.Srv.ClientURL(), nats.CustomInboxPrefix(room.InboxPrefix(tokB)))
	if err != nil {
		t.Fatal(err)
	}
	defer ncB.Close()
	cB := client.New(ncB, client.Options{Identity: tokB})
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	_, body := roomtest.Journal(t, "run-b", "cap-b", 1)
	if r, err := cB.AppendJournal(ctx, "room:b", nil, body); err != nil || r.Stored != 1 {
		t.Fatalf("B's request while A's records wait for their room: %+v %v", r, err)
	}
	if got := e.State().Msgs; got != 1 {
		t.Fatalf("the stream holds %d messages while the room is held, want B's entry alone", got)
	}
	release()
	released = true
	status, replies := collect()
	for i := range replies {
		var r room.RecordsReply
		if err := json.Unmarshal(replies[i], &r); status[i] != "" || err != nil || r.Stored != 2 {
			t.Fatalf("A's records request %d: %s %q", i, status[i], replies[i])
		}
	}
	status, replies = collectSingles()
	for i := range replies {
		var r room.RecordReply
		if err := json.Unmarshal(replies[i], &r); status[i] != "" || err != nil || r.Item.Outcome != room.OutcomeStored {
			t.Fatalf("A's record %d: %s %q", i, status[i], replies[i])
		}
	}
	var subj room.Subjects
	if got := len(e.OnSubject(subj.Records(busy))); got != 6 {
		t.Errorf("the room holds %d records, want A's 6", got)
	}
}

// TestServiceShareFreeOnAnswer: a request gives its identity's share
// back as its answer goes out. At IdentityConcurrency 1, a client that
// sends its next request on reading an answer is served, even while the
// answered request's goroutine has not ended yet (held here by the
// afterHandle seam until the second answer is in).
func TestServiceShareFreeOnAnswer(t *testing.T) {
	e := roomtest.NewEnv(t)
	release := make(chan struct{})
	held := make(chan struct{}, 2)
	svc := restartService(e, ingest.WithAfterHandle(ingest.ServiceOptions{Concurrency: 4, IdentityConcurrency: 1}, func() {
		held <- struct{}{}
		select {
		case <-release:
		case <-time.After(time.Minute): // a hung test, not a bound
		}
	}))
	defer close(release)
	tok := room.IdentityToken("harness-a")
	body := []byte(`{"run_id":"run-1","capsule_id":"cap-1"}`)
	for i := range 2 {
		status, replies := flood(t, e.Nc, tok, "head", nil, [][]byte{body})()
		if status[0] != "" {
			t.Fatalf("request %d answered %s: %s", i+1, status[0], replies[0])
		}
		var head room.ChainHead
		if err := json.Unmarshal(replies[0], &head); err != nil {
			t.Fatalf("request %d: %q: %v", i+1, replies[0], err)
		}
		<-held // its goroutine has not ended: the share must be free all the same
	}
	if n := svc.OverQuota(); n != 0 {
		t.Fatalf("%d requests answered over_quota, want 0", n)
	}
}
