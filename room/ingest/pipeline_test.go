package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// A client's journal requests of one chain, sent one after the other on one
// connection without waiting for replies, are decided in the order sent: a
// short request sent after a long one is not decided first (it would find
// its first line ahead of the chain and be refused as reordered).
func TestGatePipelinedRequestsDecidedInOrder(t *testing.T) {
	e := roomtest.NewEnv(t)
	for c := 0; c < 5; c++ {
		capsule := fmt.Sprintf("cap-order-%d", c)
		es, _ := roomtest.Journal(t, "run-order", capsule, 1001)
		long, short := roomtest.Lines(es[:1000]), roomtest.Lines(es[1000:])
		replies := make([]chan *nats.Msg, 2)
		for i, body := range [][]byte{long, short} {
			replies[i] = make(chan *nats.Msg, 1)
			inbox := nats.NewInbox()
			sub, err := e.Nc.ChanSubscribe(inbox, replies[i])
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			msg := &nats.Msg{Subject: "roompub.v1.journal", Reply: inbox, Data: body, Header: nats.Header{room.HeaderRoom: []string{"room:order"}}}
			if err := e.Nc.PublishMsg(msg); err != nil {
				t.Fatal(err)
			}
		}
		for i, want := range []int{1000, 1} {
			var r room.JournalReply
			select {
			case m := <-replies[i]:
				if err := json.Unmarshal(m.Data, &r); err != nil {
					t.Fatalf("reply %q: %v", m.Data, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("chain %d request %d: no reply", c, i)
			}
			if r.Stored != want || r.Refused != 0 || r.Failures != 0 {
				t.Fatalf("chain %d request %d: stored %d refused %d failed %d, want %d stored: %+v", c, i, r.Stored, r.Refused, r.Failures, want, r.Items[0])
			}
		}
		head, err := e.Gate.Head(context.Background(), events.ChainKey{RunID: "run-order", CapsuleID: capsule})
		if err != nil || head.Next != 1001 || head.Head != es[1000].EntryHash() {
			t.Fatalf("chain %d head %+v %v, want next 1001 at %s", c, head, err, es[1000].EntryHash())
		}
	}
}

// linesWithNonCanonical is lines(es) with line bad (from 0) written with a
// space RFC 8785 does not allow: refused non_canonical.
func linesWithNonCanonical(es []*events.Entry, bad int) []byte {
	var body bytes.Buffer
	for i, en := range es {
		ln := en.Canonical()
		if i == bad {
			ln = bytes.Replace(ln, []byte(`{"`), []byte(`{ "`), 1)
		}
		body.Write(ln)
		body.WriteByte('\n')
	}
	return body.Bytes()
}

// ShipCapsule with several requests in flight stores every line once, in
// chain order, and a second run finds them all stored.
func TestShipCapsulePipelined(t *testing.T) {
	e := roomtest.NewEnv(t)
	es, body := roomtest.Journal(t, "run-pipe", "cap-pipe", 3000)
	dir := roomtest.CapsuleDir(t, "run-pipe", "cap-pipe", body)
	cl := client.New(e.Nc, client.Options{})
	ctx := context.Background()
	progress := 0
	res, err := client.ShipCapsule(ctx, cl, dir, "room:pipe", client.ShipOptions{BatchLines: 100, Pipeline: 4, Progress: func(client.ShipResult) { progress++ }})
	if err != nil || res.Refused != nil || res.Stored != 3000 || res.Duplicates != 0 || res.Lines != 3000 || res.Head.Next != 3000 {
		t.Fatalf("ship: %+v %v", res, err)
	}
	if progress != 30 {
		t.Fatalf("progress called %d times, want once per request (30)", progress)
	}
	roomtest.ChainInStream(t, e, "room:pipe", es)
	again, err := client.ShipCapsule(ctx, cl, dir, "room:pipe", client.ShipOptions{BatchLines: 100, Pipeline: 4})
	if err != nil || again.Skipped != 3000 || again.Stored != 0 || again.Refused != nil {
		t.Fatalf("second ship: %+v %v", again, err)
	}
}

// A refused line stops a pipelined ship where it stops one request at a
// time: the lines before it are stored, it and every later line are not,
// and the refusal names its file line.
func TestShipCapsulePipelinedRefusal(t *testing.T) {
	e := roomtest.NewEnv(t)
	es, _ := roomtest.Journal(t, "run-pipe", "cap-refused", 3000)
	dir := roomtest.CapsuleDir(t, "run-pipe", "cap-refused", linesWithNonCanonical(es, 1500))
	cl := client.New(e.Nc, client.Options{})
	res, err := client.ShipCapsule(context.Background(), cl, dir, "room:pipe", client.ShipOptions{BatchLines: 100, Pipeline: 4})
	if err != nil || res.Refused == nil {
		t.Fatalf("ship: %+v %v", res, err)
	}
	if res.Refused.Code != events.NonCanonical || res.Refused.At.Line != 1501 || res.Refused.At.File != filepath.Join(dir, "journal.ndjson") {
		t.Fatalf("refusal %+v, want non_canonical at journal.ndjson:1501", res.Refused)
	}
	if res.Stored != 1500 {
		t.Fatalf("stored %d, want 1500", res.Stored)
	}
	roomtest.ChainInStream(t, e, "room:pipe", es[:1500])
}

// Two gate processes serve one stream (one micro queue group): pipelined
// requests of one chain reach both, and nothing orders them across
// processes: a request whose first line is ahead of the chain waits for
// the chain to reach it, so the chain lands whole, once, in order, and
// nothing is refused or sent twice.
func TestShipCapsulePipelinedAcrossGates(t *testing.T) {
	e := roomtest.NewEnv(t)
	svc2 := e.SecondService()
	es, body := roomtest.Journal(t, "run-pipe", "cap-two-gates", 2000)
	dir := roomtest.CapsuleDir(t, "run-pipe", "cap-two-gates", body)
	cl := client.New(e.Connect(), client.Options{})
	res, err := client.ShipCapsule(context.Background(), cl, dir, "room:pipe", client.ShipOptions{BatchLines: 25, Pipeline: 4})
	if err != nil || res.Refused != nil || res.Stored != 2000 || res.Head.Next != 2000 {
		t.Fatalf("ship: %+v %v", res, err)
	}
	roomtest.ChainInStream(t, e, "room:pipe", es)
	// Both gates took requests (else this test tests nothing).
	var counts [2]int
	for i, s := range []*ingest.Service{e.Svc, svc2} {
		counts[i] = endpointRequests(s)["journal"]
	}
	if counts[0] == 0 || counts[1] == 0 {
		t.Fatalf("journal requests per gate %v: both should have served some", counts)
	}
	// A request that reached its gate before the one ahead of it landed
	// waited for it (awaitChain) rather than being answered ahead and sent
	// again.
	// Requests answered over_quota (the identity's share of a gate was in
	// use) were sent again after a back-off: they count, nothing else.
	over := int(e.Svc.OverQuota() + svc2.OverQuota())
	if counts[0]+counts[1] != 80+over {
		t.Fatalf("journal requests per gate %v: %d in all, want the 80 sent, %d sent again after over_quota, and no other resend", counts, counts[0]+counts[1], over)
	}
}

// sendJournal publishes a journal request without waiting for its reply;
// the reply comes on the returned channel. after >= 0 sends it pipelined:
// the request ahead of it ends at seq after.
func sendJournal(t *testing.T, nc *nats.Conn, roomID string, body []byte, after int64) <-chan room.JournalReply {
	t.Helper()
	msgs := make(chan *nats.Msg, 1)
	inbox := nats.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, msgs)
	if err != nil {
		t.Fatal(err)
	}
	hdr := nats.Header{room.HeaderRoom: []string{roomID}}
	if after >= 0 {
		hdr.Set(room.HeaderPipelined, fmt.Sprint(after))
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: "roompub.v1.journal", Reply: inbox, Data: body, Header: hdr}); err != nil {
		t.Fatal(err)
	}
	out := make(chan room.JournalReply, 1)
	go func() {
		defer sub.Unsubscribe()
		select {
		case m := <-msgs:
			var r room.JournalReply
			if err := json.Unmarshal(m.Data, &r); err != nil {
				t.Errorf("reply %q: %v", m.Data, err)
			}
			out <- r
		case <-time.After(2 * time.Minute):
			t.Errorf("no reply")
			close(out)
		}
	}()
	return out
}

// A pipelined request whose first line stays ahead of the chain is not
// refused: after waiting for the chain (SetAheadWait) it is answered
// ahead, nothing stored, and the reason names the chain's next seq.
func TestGatePipelinedAheadAnswered(t *testing.T) {
	e := roomtest.NewEnv(t)
	e.EachGate(func(g *ingest.Gate) { g.SetAheadWait(200 * time.Millisecond) })
	es, _ := roomtest.Journal(t, "run-ahead", "cap-ahead", 20)
	r := <-sendJournal(t, e.Nc, "room:ahead", roomtest.Lines(es[10:]), 9)
	if r.Ahead != 1 || r.Refused != 0 || r.Stored != 0 || r.Skipped != 9 || r.Items[0].Outcome != room.OutcomeAhead {
		t.Fatalf("reply %+v, want the first line ahead and the rest skipped", r)
	}
	if want := "seq 10 is ahead of the chain, whose next seq is 0"; !bytes.Contains([]byte(r.Items[0].Reason), []byte(want)) {
		t.Fatalf("reason %q, want it to say %q", r.Items[0].Reason, want)
	}
	if n := e.CountOn(">"); n != 0 {
		t.Fatalf("stream holds %d messages, want none", n)
	}
	// The same request without the header is refused, as before pipelining.
	r = roomtest.ShipJournal(t, e.Nc, "room:ahead", roomtest.Lines(es[10:]))
	if r.Refused != 1 || r.Items[0].Code != events.Reordered {
		t.Fatalf("unpipelined reply %+v, want reordered", r.Items[0])
	}
}

// When the request of this gate ahead of a pipelined one stores only part
// of its lines (a line refused), the pipelined one does not wait for the
// chain: it will not get there by itself. It is answered ahead at once,
// and is no refusal.
func TestGatePipelinedAfterRefusalAnsweredAtOnce(t *testing.T) {
	e := roomtest.NewEnv(t)
	e.EachGate(func(g *ingest.Gate) { g.SetAheadWait(time.Hour) })
	es, _ := roomtest.Journal(t, "run-ahead", "cap-stalled", 20)
	first := sendJournal(t, e.Nc, "room:ahead", linesWithNonCanonical(es[:10], 5), -1)
	second := sendJournal(t, e.Nc, "room:ahead", roomtest.Lines(es[10:]), 9)
	r1 := <-first
	if r1.Refused != 1 {
		t.Fatalf("first reply %+v, want one refusal", r1)
	}
	done := make(chan room.JournalReply, 1)
	go func() { done <- <-second }()
	select {
	case r2 := <-done:
		if r2.Ahead != 1 || r2.Refused != 0 || r2.Stored != 0 {
			t.Fatalf("second reply %+v, want the first line ahead", r2)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the pipelined request waited for a chain that cannot get there")
	}
}

// A request waiting for the one ahead of it gives its place in the
// service's concurrency limit back: with a limit of one or two places and
// four requests of a chain in flight, plus another chain's, every request
// is decided (none waits for a place a waiting request holds).
func TestShipCapsulePipelinedSmallConcurrency(t *testing.T) {
	for _, places := range []int{1, 2} {
		t.Run(fmt.Sprint(places), func(t *testing.T) {
			e := roomtest.NewEnv(t)
			if err := e.Svc.Stop(); err != nil {
				t.Fatal(err)
			}
			svc, err := ingest.StartService(e.Nc, e.Gate, ingest.ServiceOptions{Concurrency: places})
			if err != nil {
				t.Fatal(err)
			}
			e.Svc = svc
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cl := client.New(e.Connect(), client.Options{})
			errs := make(chan error, 2)
			for _, capsule := range []string{"cap-small-a", "cap-small-b"} {
				es, body := roomtest.Journal(t, "run-small", capsule, 400)
				dir := roomtest.CapsuleDir(t, "run-small", capsule, body)
				go func() {
					res, err := client.ShipCapsule(ctx, cl, dir, "room:small", client.ShipOptions{BatchLines: 20, Pipeline: 4})
					if err == nil && (res.Stored != len(es) || res.Refused != nil) {
						err = fmt.Errorf("%s: %+v", capsule, res)
					}
					errs <- err
				}()
			}
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A journal whose seq jumps at a request boundary (a line missing) is
// refused there at once: the request ahead was stored, the chain got past
// it, so the pipelined request's first line is decided, not waited for.
func TestShipCapsulePipelinedGapAtRequestBoundary(t *testing.T) {
	e := roomtest.NewEnv(t)
	e.EachGate(func(g *ingest.Gate) { g.SetAheadWait(time.Hour) })
	es, _ := roomtest.Journal(t, "run-pipe", "cap-gap", 2000)
	body := append(roomtest.Lines(es[:1000]), roomtest.Lines(es[1001:])...)
	dir := roomtest.CapsuleDir(t, "run-pipe", "cap-gap", body)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := client.New(e.Nc, client.Options{})
	res, err := client.ShipCapsule(ctx, cl, dir, "room:pipe", client.ShipOptions{BatchLines: 100, Pipeline: 2})
	if err != nil || res.Refused == nil {
		t.Fatalf("ship: %+v %v", res, err)
	}
	if res.Refused.Code != events.Reordered || res.Refused.At.Line != 1001 || res.Stored != 1000 {
		t.Fatalf("refusal %+v after %d stored, want reordered at line 1001 after 1000", res.Refused, res.Stored)
	}
	roomtest.ChainInStream(t, e, "room:pipe", es[:1000])
}

// A Roompub-Pipelined header that is not a seq is a bad request.
func TestGatePipelinedHeaderMustBeASeq(t *testing.T) {
	e := roomtest.NewEnv(t)
	es, _ := roomtest.Journal(t, "run-ahead", "cap-header", 2)
	for _, v := range []string{"1x", "-3", "", "9223372036854775807"} {
		code, reply := e.RequestError("roompub.v1.journal", nats.Header{room.HeaderRoom: []string{"room:ahead"}, room.HeaderPipelined: []string{v}}, roomtest.Lines(es))
		if code != "400" || reply.Code != events.BadRequest {
			t.Fatalf("header %q: %s %+v, want 400 bad_request", v, code, reply)
		}
	}
}

// TestShipLineLongerThanAnyLine: a line longer than events.MaxLineBytes is
// refused corrupt_entry, as verify refuses it (corrupt_entry comes before
// too_large in the table), with its file line; the lines before it are
// stored; a line that is only too long for a request stays too_large.
func TestShipLineLongerThanAnyLine(t *testing.T) {
	e := roomtest.NewEnv(t)
	cl := client.New(e.Nc, client.Options{})
	es, _ := roomtest.Journal(t, "run-long", "cap-long", 2)
	for _, c := range []struct {
		size   int
		code   events.Code
		reason string
	}{
		{events.MaxLineBytes + 1, events.CorruptEntry, fmt.Sprintf("line longer than %d bytes", events.MaxLineBytes)},
		{2 << 20, events.TooLarge, "a request carries at most"},
	} {
		body := append(roomtest.Lines(es), append(bytes.Repeat([]byte("x"), c.size), '\n')...)
		dir := roomtest.CapsuleDir(t, "run-long", "cap-long", body)
		res, err := client.ShipCapsule(context.Background(), cl, dir, "room:long", client.ShipOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Stored+res.Skipped != 2 || res.Refused == nil || res.Refused.Problem.Code != c.code ||
			res.Refused.Problem.At.Line != 3 || !strings.Contains(res.Refused.Problem.Reason, c.reason) {
			t.Fatalf("a %d-byte line: %+v (refused %+v), want 2 stored and %s at line 3", c.size, res, res.Refused, c.code)
		}
	}
}

// TestShipEditedStoredLine: a line edited after it was stored is not
// counted as stored because the file's last stored line still claims the
// head's entry_hash: the shipper sends the file from the top, and the
// gate refuses the edited line as verify does (invalid_entry at its line,
// /entry_hash), storing nothing. The unedited file resumes past all of it.
func TestShipEditedStoredLine(t *testing.T) {
	e := roomtest.NewEnv(t)
	cl := client.New(e.Nc, client.Options{})
	es, body := roomtest.Journal(t, "run-edit", "cap-edit", 3)
	dir := roomtest.CapsuleDir(t, "run-edit", "cap-edit", body)
	if res, err := client.ShipCapsule(context.Background(), cl, dir, "room:edit", client.ShipOptions{}); err != nil || res.Stored != 3 {
		t.Fatalf("first ship: %+v, %v", res, err)
	}
	res, err := client.ShipCapsule(context.Background(), cl, dir, "room:edit", client.ShipOptions{})
	if err != nil || res.Skipped != 3 || res.Stored != 0 || res.Refused != nil {
		t.Fatalf("unedited: %+v, %v; want 3 already stored", res, err)
	}
	for _, edited := range []int{1, 2} { // a middle line, then the last stored one
		ls := bytes.SplitAfter(body, []byte("\n"))
		ls[edited] = bytes.Replace(ls[edited], []byte(`"kind":"`), []byte(`"kind":"x`), 1)
		if bytes.Equal(ls[edited], es[edited].Canonical()) {
			t.Fatal("the line was not edited")
		}
		dir := roomtest.CapsuleDir(t, "run-edit", "cap-edit", bytes.Join(ls, nil))
		before := e.State()
		res, err := client.ShipCapsule(context.Background(), cl, dir, "room:edit", client.ShipOptions{})
		if err != nil || res.Skipped != 0 || res.Stored != 0 || res.Refused == nil || res.Refused.Problem.Code != events.InvalidEntry ||
			res.Refused.Problem.At.Line != edited+1 || res.Refused.Problem.At.Pointer != "/entry_hash" {
			t.Fatalf("line %d edited: %+v (refused %+v), %v; want invalid_entry at line %d /entry_hash", edited+1, res, res.Refused, err, edited+1)
		}
		if after := e.State(); after != before {
			t.Fatalf("the stream changed: %+v, was %+v", after, before)
		}
	}
}

// capsule.json is checked as the upstream checks it before any line is
// sent: a capsule of another schema, or with a created_at toISOString
// never writes, is refused invalid_capsule naming the member, and the
// room stays empty; a capsule with an empty journal ships nothing.
func TestShipCapsuleJSONCheckedBeforeAnyLine(t *testing.T) {
	e := roomtest.NewEnv(t)
	es, body := roomtest.Journal(t, "run-meta", "cap-meta", 3)
	cl := client.New(e.Nc, client.Options{})
	subj := room.Subjects{}.Journal("room:meta", events.ChainKey{RunID: "run-meta", CapsuleID: "cap-meta"})
	for _, tt := range []struct{ old, new, pointer string }{
		{"capsule-envelope/v1", "capsule-envelope/v2", "/schema"},
		{".000Z", "Z", "/created_at"},
		{`"task_family":"slugify"`, `"task_family":"\t"`, "/task_family"},
	} {
		dir := roomtest.CapsuleDir(t, "run-meta", "cap-meta", body)
		cpath := filepath.Join(dir, "capsule.json")
		raw, err := os.ReadFile(cpath)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cpath, bytes.Replace(raw, []byte(tt.old), []byte(tt.new), 1), 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := client.ShipCapsule(context.Background(), cl, dir, "room:meta", client.ShipOptions{})
		if err != nil || res.Refused == nil || res.Refused.Code != events.InvalidCapsule ||
			res.Refused.At.Pointer != tt.pointer || res.Refused.At.File != cpath || res.Stored != 0 {
			t.Fatalf("%s: ship %+v (refused %+v) %v, want invalid_capsule at %s and nothing stored", tt.pointer, res, res.Refused, err, tt.pointer)
		}
		if n := len(e.OnSubject(subj)); n != 0 {
			t.Fatalf("%s: the room holds %d messages after a refused capsule.json", tt.pointer, n)
		}
	}
	empty := roomtest.CapsuleDir(t, "run-meta", "cap-meta", nil)
	res, err := client.ShipCapsule(context.Background(), cl, empty, "room:meta", client.ShipOptions{})
	if err != nil || res.Refused != nil || res.Stored != 0 || res.Lines != 0 {
		t.Fatalf("empty capsule: %+v %v, want nothing shipped and no refusal", res, err)
	}
	if _, err := client.ShipCapsule(context.Background(), cl, roomtest.CapsuleDir(t, "run-meta", "cap-meta", body), "room:meta", client.ShipOptions{}); err != nil {
		t.Fatal(err)
	}
	roomtest.ChainInStream(t, e, "room:meta", es)
}

// A pipelined request whose first line does not claim the seq after the
// one its request ahead ends with is out of its sender's own order (lines
// swapped in the file): it is refused reordered at once, without waiting
// for the chain, so neither swapped line lands, in whatever order the two
// requests are decided.
func TestGatePipelinedOutOfOrderRefused(t *testing.T) {
	e := roomtest.NewEnv(t)
	e.EachGate(func(g *ingest.Gate) { g.SetAheadWait(time.Hour) })
	es, _ := roomtest.Journal(t, "run-swap", "cap-swap", 4)
	if r := roomtest.ShipJournal(t, e.Nc, "room:swap", roomtest.Lines(es[:2])); r.Stored != 2 {
		t.Fatalf("first two lines: %+v", r)
	}
	// The file holds es[3] then es[2]: its third line follows line 2 (seq 1).
	third := sendJournal(t, e.Nc, "room:swap", roomtest.Lines(es[3:4]), 1)
	fourth := sendJournal(t, e.Nc, "room:swap", roomtest.Lines(es[2:3]), 3)
	for name, ch := range map[string]<-chan room.JournalReply{"third": third, "fourth": fourth} {
		select {
		case r := <-ch:
			it := r.Items[0]
			if r.Refused != 1 || it.Code != events.Reordered || it.At == nil || it.At.Pointer != "/seq" {
				t.Fatalf("%s line: %+v, want refused reordered at /seq", name, it)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s line: no answer: it waits for the chain", name)
		}
	}
	if n := e.CountOn(">"); n != 2 {
		t.Fatalf("stream holds %d messages, want the 2 in order", n)
	}
}

// TestGatePipelinedAheadPollsBackOff: a pipelined request whose hint lies
// (no request ahead will bring the chain to its first line) waits the
// whole ahead wait, reading the chain's head every 5 ms for its first
// 100 ms and then with waits that double to 100 ms: about 75 reads of the
// stream leader in 5 s, where a fixed 5 ms poll made one 442-byte request
// cost about 900.
func TestGatePipelinedAheadPollsBackOff(t *testing.T) {
	e := roomtest.NewEnv(t)
	var gets atomic.Uint64
	g := newGate(t, e, ingest.WithLeaderGets(ingest.GateOptions{Validator: e.V}, &gets))
	svc, err := ingest.StartService(e.Nc, g, ingest.ServiceOptions{Prefix: "rv"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	es, _ := roomtest.Journal(t, "run-lie", "cap-lie", 8)
	var r room.JournalReply
	start := time.Now()
	e.Request("rv.journal", nats.Header{room.HeaderRoom: {"room:lie"}, room.HeaderPipelined: {"6"}}, roomtest.Lines(es[7:]), &r)
	if r.Ahead != 1 || time.Since(start) < 4*time.Second {
		t.Fatalf("reply %+v after %s, want ahead after the 5 s wait", r, time.Since(start))
	}
	n := gets.Load()
	if n > 150 {
		t.Errorf("one request read the stream leader %d times in the ahead wait", n)
	}
	t.Logf("one request read the stream leader %d times in the %s ahead wait", n, time.Since(start).Round(time.Millisecond))
}

// TestPipelinedAheadOnAnotherOwnersChain: a pipelined request whose first
// line is ahead of a chain another identity started is refused
// not_chain_owner at once, not after the ahead wait: it waited (reading
// the owner's chain from the stream leader under its lock all the while),
// so one identity's flood of them slowed the owner's appends a
// hundredfold.
func TestPipelinedAheadOnAnotherOwnersChain(t *testing.T) {
	e := roomtest.NewEnv(t)
	e.Gate.SetAheadWait(time.Minute)
	tokA, tokB := room.IdentityToken("harness-a"), room.IdentityToken("harness-b")
	connect := func(tok string) *nats.Conn {
		nc, err := nats.Connect(e.Srv.ClientURL(), nats.CustomInboxPrefix(room.InboxPrefix(tok)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	es, _ := roomtest.Journal(t, "run-b", "cap-b", 60)
	cB := client.New(connect(tokB), client.Options{Identity: tokB})
	if r, err := cB.AppendJournal(t.Context(), "room:own", nil, roomtest.Lines(es[:1])); err != nil || r.Stored != 1 {
		t.Fatalf("B's first entry: %+v %v", r, err)
	}
	msg := &nats.Msg{Subject: room.ServiceSubject("", tokA, room.EndpointJournal), Data: roomtest.Lines(es[50:51]),
		Header: nats.Header{room.HeaderRoom: {"room:own"}, room.HeaderPipelined: {"49"}}}
	began := time.Now()
	resp, err := connect(tokA).RequestMsg(msg, 20*time.Second)
	if err != nil {
		t.Fatalf("A's request: %v", err)
	}
	var r room.JournalReply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Items) != 1 || r.Items[0].Outcome != room.OutcomeRefused || r.Items[0].Code != events.NotChainOwner {
		t.Fatalf("A's request on B's chain: %s", resp.Data)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("refused after %v: it waited for B's chain to reach it", took)
	}
}

// TestGateAheadReadsInSlots: a pipelined request waiting for the request
// ahead of it to land (here a lie: none will) reads the stream leader
// only in a place of the service's concurrency limit taken for each read:
// while other requests hold every place, it reads nothing, where it read
// every 5 to 100 ms holding none, so a flood of such requests got the
// service to read for it beyond its identity's turns. Once the places
// free, it reads again and is answered ahead.
func TestGateAheadReadsInSlots(t *testing.T) {
	e := roomtest.NewEnv(t)
	var gets atomic.Uint64
	g := newGate(t, e, ingest.WithLeaderGets(ingest.GateOptions{Validator: e.V}, &gets))
	g.SetAheadWait(3 * time.Second)
	var hold atomic.Bool
	held, release := make(chan struct{}, 2), make(chan struct{})
	restartServiceOver(e, g, ingest.WithAfterHandle(ingest.ServiceOptions{Concurrency: 2}, func() {
		if hold.Load() { // a head request of C: keep its place until released
			held <- struct{}{}
			<-release
		}
	}))
	tokA, tokC := room.IdentityToken("harness-a"), room.IdentityToken("harness-c")
	es, _ := roomtest.Journal(t, "run-lie", "cap-lie", 2)
	collect := flood(t, e.Nc, tokA, room.EndpointJournal, nats.Header{room.HeaderRoom: {"room:lie"}, room.HeaderPipelined: {"0"}}, [][]byte{roomtest.Lines(es[1:])})
	for deadline := time.Now().Add(10 * time.Second); gets.Load() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pipelined request read the leader %d times in 10s; want it polling", gets.Load())
		}
	}
	hold.Store(true)
	head := []byte(`{"run_id":"run-c","capsule_id":"cap-c"}`)
	collectC := flood(t, e.Nc, tokC, room.EndpointHead, nil, [][]byte{head, head})
	<-held
	<-held // C's two requests hold both places
	before := gets.Load()
	time.Sleep(500 * time.Millisecond)
	during := gets.Load() - before
	hold.Store(false)
	close(release)
	if status, _ := collectC(); status[0] != "" || status[1] != "" {
		t.Fatalf("C's head requests: %q", status)
	}
	status, replies := collect()
	var r room.JournalReply
	if status[0] != "" || json.Unmarshal(replies[0], &r) != nil || r.Ahead != 1 {
		t.Fatalf("the pipelined request: %s %s, want ahead", status[0], replies[0])
	}
	if during != 0 {
		t.Errorf("the waiting request read the leader %d times in 500ms while every place was held, want 0", during)
	}
}

// TestGateAheadLiarsLeaveOthersTurns: pipelined requests whose hints lie
// (50 of them, more than the service's places) do not hold up another
// identity's pipelined request whose request ahead landed through another
// gate: its one read gets a place in its identity's turn, and it is
// stored at once, not after the liars' 3 s wait (with places held for a
// whole wait, it waited 2.7 s).
func TestGateAheadLiarsLeaveOthersTurns(t *testing.T) {
	e := roomtest.NewEnv(t)
	g := newGate(t, e, ingest.GateOptions{Validator: e.V})
	g.SetAheadWait(3 * time.Second)
	restartServiceOver(e, g, ingest.ServiceOptions{})
	tokA, tokB := room.IdentityToken("harness-a"), room.IdentityToken("harness-b")
	esB := landedElsewhere(t, e, tokB)
	bodies := make([][]byte, 50)
	for i := range bodies {
		es, _ := roomtest.Journal(t, fmt.Sprint("run-lie-", i), "cap-lie", 2)
		bodies[i] = roomtest.Lines(es[1:])
	}
	collect := flood(t, e.Nc, tokA, room.EndpointJournal, nats.Header{room.HeaderRoom: {"room:lie"}, room.HeaderPipelined: {"0"}}, bodies)
	time.Sleep(300 * time.Millisecond) // the liars wait, reading
	start := time.Now()
	status, replies := flood(t, e.Nc, tokB, room.EndpointJournal, nats.Header{room.HeaderRoom: {"room:b"}, room.HeaderPipelined: {"0"}}, [][]byte{roomtest.Lines(esB[1:])})()
	took := time.Since(start)
	var r room.JournalReply
	if status[0] != "" || json.Unmarshal(replies[0], &r) != nil || r.Stored != 1 {
		t.Fatalf("B's pipelined request: %s %s", status[0], replies[0])
	}
	collect()
	if took > time.Second {
		t.Errorf("B's pipelined request, whose request ahead had landed, took %v beside 50 liars", took.Round(time.Millisecond))
	}
}

// TestGateAheadReadKeepsItsPlace: a pipelined request whose request ahead
// landed through another serve needs one read of the leader. With one
// slot and another identity's requests queued (100 ms each), it costs
// its arrival's turn and its read's, whose slot it keeps to be decided:
// 4 of the other's requests end meanwhile, where giving the read's slot
// back and queueing again let 6 end.
func TestGateAheadReadKeepsItsPlace(t *testing.T) {
	e := roomtest.NewEnv(t)
	g := newGate(t, e, ingest.GateOptions{Validator: e.V})
	var done atomic.Int64
	restartServiceOver(e, g, ingest.WithAfterHandle(ingest.ServiceOptions{Concurrency: 1}, func() {
		time.Sleep(100 * time.Millisecond)
		done.Add(1)
	}))
	tokB, tokC := room.IdentityToken("harness-b"), room.IdentityToken("harness-c")
	esB := landedElsewhere(t, e, tokB)
	head := []byte(`{"run_id":"run-c","capsule_id":"cap-c"}`)
	bodies := make([][]byte, 30)
	for i := range bodies {
		bodies[i] = head
	}
	collectC := flood(t, e.Nc, tokC, room.EndpointHead, nil, bodies)
	time.Sleep(150 * time.Millisecond)
	before := done.Load()
	status, replies := flood(t, e.Nc, tokB, room.EndpointJournal, nats.Header{room.HeaderRoom: {"room:b"}, room.HeaderPipelined: {"0"}}, [][]byte{roomtest.Lines(esB[1:])})()
	turns := done.Load() - before
	var r room.JournalReply
	if status[0] != "" || json.Unmarshal(replies[0], &r) != nil || r.Stored != 1 {
		t.Fatalf("B's pipelined request: %s %s", status[0], replies[0])
	}
	collectC()
	t.Logf("C's requests that ended while B's one pipelined request was decided: %d", turns)
	if turns > 5 { // 4 here; one more for a slow machine's timing
		t.Errorf("%d of C's requests ended before B's pipelined request (one read, one decision) was answered; want at most 5 (2 turns)", turns)
	}
}

// TestServicesPipelinedAcrossGatesLeakNothing: two services, each over a
// gate of its own on one stream (two serves of one queue group), 2 slots
// each, take 12 chains of 6 one-line requests sent pipelined (so a
// chain's requests land on both and wait for each other through the
// stream) and 4 requests whose hints lie. Every request is answered
// (stored, or ahead for the liars and for a request decided before the one
// ahead of it landed), and once they are, each service has both slots free,
// none waiting, and holds no identity's share: the reads that took and
// kept a slot while waiting gave every one back.
func TestServicesPipelinedAcrossGatesLeakNothing(t *testing.T) {
	e := roomtest.NewEnv(t)
	if err := e.Svc.Stop(); err != nil {
		t.Fatal(err)
	}
	var svcs []*ingest.Service
	for range 2 {
		nc := e.Connect()
		g := e.NewGate(nc)
		g.SetAheadWait(300 * time.Millisecond)
		svc, err := ingest.StartService(nc, g, ingest.ServiceOptions{Concurrency: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer svc.Stop()
		svcs = append(svcs, svc)
	}
	tok := room.IdentityToken("harness-a")
	const chains, n = 12, 6
	var collects []func() ([]string, [][]byte)
	var want []string // what each request may be answered, by collect
	entries := make([][]*events.Entry, chains)
	for c := range chains {
		entries[c], _ = roomtest.Journal(t, fmt.Sprint("run-x-", c), "cap-x", n)
	}
	for k := range n {
		for c := range chains {
			hdr := nats.Header{room.HeaderRoom: {"room:x"}}
			if k > 0 {
				hdr.Set(room.HeaderPipelined, fmt.Sprint(k-1))
			}
			collects = append(collects, flood(t, e.Nc, tok, room.EndpointJournal, hdr, [][]byte{roomtest.Lines(entries[c][k : k+1])}))
			want = append(want, "stored or ahead")
		}
	}
	for i := range 4 {
		es, _ := roomtest.Journal(t, fmt.Sprint("run-lie-", i), "cap-lie", 2)
		collects = append(collects, flood(t, e.Nc, tok, room.EndpointJournal, nats.Header{room.HeaderRoom: {"room:x"}, room.HeaderPipelined: {"0"}}, [][]byte{roomtest.Lines(es[1:])}))
		want = append(want, "ahead")
	}
	for i, collect := range collects {
		status, replies := collect()
		var r room.JournalReply
		if status[0] != "" || json.Unmarshal(replies[0], &r) != nil || len(r.Items) != 1 ||
			(r.Items[0].Outcome != room.OutcomeAhead && (want[i] == "ahead" || r.Items[0].Outcome != room.OutcomeStored)) {
			t.Fatalf("request %d: %s %s, want %s", i, status[0], replies[0], want[i])
		}
	}
	for i, svc := range svcs {
		var free, waiting, held int
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			free, waiting = svc.Places()
			held = svc.HeldIdentities()
			if (free == 2 && waiting == 0 && held == 0) || time.Now().After(deadline) {
				break
			}
		}
		if free != 2 || waiting != 0 || held != 0 {
			t.Errorf("service %d after every answer: %d of 2 slots free, %d waiting, %d identities held", i, free, waiting, held)
		}
	}
}

// landedElsewhere stores the first entry of identity tok's 2-entry chain
// run-b/cap-b in room:b through a gate of its own (another serve's), and
// returns the chain's entries: the second, sent pipelined, finds its
// request ahead landed where this gate did not see it.
func landedElsewhere(t *testing.T, e *roomtest.Env, tok string) []*events.Entry {
	t.Helper()
	es, _ := roomtest.Journal(t, "run-b", "cap-b", 2)
	g := newGate(t, e, ingest.GateOptions{Validator: e.V})
	if r, err := g.AppendJournalAs(t.Context(), "room:b", tok, roomtest.Lines(es[:1]), nil); err != nil || r.Stored != 1 {
		t.Fatalf("the first request through the other gate: %+v %v", r, err)
	}
	return es
}
