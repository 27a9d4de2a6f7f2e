package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestShipRoomConflictNamesTheRoom: a capsule shipped into a second room
// is refused room_conflict, and the refusal the shipper hands back names
// the room the chain lives in: in its reason, as Expected, and the room
// asked for as Actual (the first problem's values were dropped, and the
// reason said only "another room").
func TestShipRoomConflictNamesTheRoom(t *testing.T) {
	e := roomtest.NewEnv(t)
	_, body := roomtest.Journal(t, "run-conflict", "cap-conflict", 5)
	dir := roomtest.CapsuleDir(t, "run-conflict", "cap-conflict", body)
	cl := client.New(e.Connect(), client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if res, err := client.ShipCapsule(ctx, cl, dir, "room:alpha", client.ShipOptions{}); err != nil || res.Stored != 5 {
		t.Fatalf("ship into room:alpha: %+v %v", res, err)
	}
	res, err := client.ShipCapsule(ctx, cl, dir, "room:beta", client.ShipOptions{})
	if err != nil || res.Refused == nil || res.Stored != 0 {
		t.Fatalf("ship into room:beta: %+v %v", res, err)
	}
	p := res.Refused.Problem
	if p.Code != events.RoomConflict || p.Expected != "room:alpha" || p.Actual != "room:beta" || !strings.Contains(p.Reason, `"room:alpha"`) {
		t.Errorf("refusal %+v: want room_conflict naming room:alpha in its reason, expected room:alpha, actual room:beta", p)
	}
	if len(res.Refused.Problems) != 1 || res.Refused.Problems[0].Reason != p.Reason || res.Refused.Problems[0].Expected != "room:alpha" {
		t.Errorf("problems %+v", res.Refused.Problems)
	}
	if want := `(expected "room:alpha", got "room:beta")`; !strings.HasSuffix(p.String(), want) {
		t.Errorf("printed %q, want it to end in %s", p.String(), want)
	}
}

// TestFollowCapsuleBeforeServer: a follower whose connection is not up
// yet (it keeps trying: nats.RetryOnFailedConnect) ships the capsule
// once the server comes. The request size was taken from the
// connection's max payload when the follower started, 0 before a server
// is met: every line was refused too_large.
func TestFollowCapsuleBeforeServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	// Tries every second: the service is up by the time it connects, so
	// the head request the follower sent meanwhile is answered.
	nc, err := nats.Connect("nats://"+addr, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.IsConnected() {
		t.Fatal("connected before the server started")
	}
	es, body := roomtest.Journal(t, "run-early", "cap-early", 30)
	dir := roomtest.CapsuleDir(t, "run-early", "cap-early", body)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		res client.ShipResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := client.FollowCapsule(ctx, client.New(nc, client.Options{Timeout: 5 * time.Second}), dir, "room:early",
			client.ShipOptions{Poll: 50 * time.Millisecond, Retry: 100 * time.Millisecond}, func(client.ShipResult) {})
		done <- result{res, err}
	}()
	time.Sleep(300 * time.Millisecond)
	e := roomtest.NewEnvWith(t, embedded.Options{Listen: addr})
	subj := room.Subjects{}.Journal("room:early", events.ChainKey{RunID: "run-early", CapsuleID: "cap-early"})
	for deadline := time.Now().Add(20 * time.Second); e.CountOn(subj) < uint64(len(es)); {
		select {
		case r := <-done:
			t.Fatalf("the follower stopped: %+v %v", r.res, r.err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d entries after 20s, want %d", subj, e.CountOn(subj), len(es))
		}
	}
	cancel()
	r := <-done
	if r.err != nil || r.res.Refused != nil || r.res.Stored != len(es) {
		t.Fatalf("follow: %+v %v", r.res, r.err)
	}
	roomtest.ChainInStream(t, e, "room:early", es)
}

// TestShipCapsuleStopped: ctx ends the shipment while requests are in
// flight. ShipCapsule stops sending, lets the requests in flight answer,
// asks the chain's head on a fresh context, and says it was stopped
// (ErrStopped, with ctx's cause): what it reports stored is what the
// stream holds of the chain. It returned the canceled requests' error
// (ingest service unavailable: context canceled) and counted only the
// replies that came, while the gate stored the requests in flight too.
func TestShipCapsuleStopped(t *testing.T) {
	e := roomtest.NewEnv(t)
	const total = 6000
	_, body := roomtest.Journal(t, "run-stop", "cap-stop", total)
	dir := roomtest.CapsuleDir(t, "run-stop", "cap-stop", body)
	cl := client.New(e.Connect(), client.Options{})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	interrupt := errors.New("interrupted by the test")
	res, err := client.ShipCapsule(ctx, cl, dir, "room:stop", client.ShipOptions{BatchLines: 500, Progress: func(r client.ShipResult) {
		if r.Stored >= 1000 {
			cancel(interrupt) // two replies in: the next requests are in flight
		}
	}})
	if !errors.Is(err, client.ErrStopped) || !errors.Is(err, interrupt) {
		t.Errorf("error %v, want ErrStopped and the cause", err)
	}
	subj := room.Subjects{}.Journal("room:stop", events.ChainKey{RunID: "run-stop", CapsuleID: "cap-stop"})
	time.Sleep(300 * time.Millisecond) // anything still being stored lands
	held := e.CountOn(subj)
	t.Logf("stopped: %d stored, %d already stored, head next %d; the stream holds %d; %v", res.Stored, res.Skipped, res.Head.Next, held, err)
	if held >= total || res.Skipped != 0 || uint64(res.Stored) != held || res.Head.Next != int64(held) || res.Head.RoomID != "room:stop" {
		t.Errorf("reported %d stored, head next %d in %q; the stream holds %d of %d", res.Stored, res.Head.Next, res.Head.RoomID, held, total)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("the stream holds %d lines of the chain", held)) {
		t.Errorf("error %q does not say what the stream holds", err)
	}
	// Running again resumes where the stream stands.
	res, err = client.ShipCapsule(context.Background(), cl, dir, "room:stop", client.ShipOptions{})
	if err != nil || res.Skipped != int(held) || res.Stored != total-int(held) {
		t.Fatalf("resume: %+v %v", res, err)
	}
}

// TestFollowCapsuleStopped: ctx ends a follower mid-pass; its last
// report counts what the stream holds of the chain, the lines of the
// requests in flight with it.
func TestFollowCapsuleStopped(t *testing.T) {
	e := roomtest.NewEnv(t)
	const total = 6000
	_, body := roomtest.Journal(t, "run-fstop", "cap-fstop", total)
	dir := roomtest.CapsuleDir(t, "run-fstop", "cap-fstop", body)
	cl := client.New(e.Connect(), client.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var last client.ShipResult
	res, err := client.FollowCapsule(ctx, cl, dir, "room:fstop", client.ShipOptions{BatchLines: 500, Progress: func(r client.ShipResult) {
		if r.Stored >= 1000 {
			cancel()
		}
	}}, func(r client.ShipResult) { last = r })
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	subj := room.Subjects{}.Journal("room:fstop", events.ChainKey{RunID: "run-fstop", CapsuleID: "cap-fstop"})
	time.Sleep(300 * time.Millisecond) // anything still being stored lands
	held := e.CountOn(subj)
	if held >= total || uint64(last.Stored) != held || uint64(res.Stored) != held || last.Head.Next != int64(held) {
		t.Errorf("last report: %d stored, head next %d (returned %d stored); the stream holds %d of %d", last.Stored, last.Head.Next, res.Stored, held, total)
	}
}

// TestShipRefusalWithoutPlace: a refused line whose reply item has no
// "at" (no place in the request: a whole-record or whole-chain
// refusal) is still reported in the journal's file, as when the reply
// carried "at":{}.
func TestShipRefusalWithoutPlace(t *testing.T) {
	key := events.ChainKey{RunID: "run-noplace", CapsuleID: "cap-noplace"}
	nc := fakeService(t, map[string]string{
		room.EndpointHead: `{"chain":{"run_id":"run-noplace","capsule_id":"cap-noplace"},"next":1,"head":"` + events.ZeroHash + `","stream_seq":0}`,
		room.EndpointJournal: `{"room":"room:r","chain":{"run_id":"run-noplace","capsule_id":"cap-noplace"},"items":[` +
			`{"index":0,"outcome":"refused","code":"store_lost","reason":"the chain is closed","problems":[{"code":"store_lost","reason":"the chain is closed"}]},` +
			`{"index":1,"outcome":"skipped"}],"head":{"chain":{"run_id":"run-noplace","capsule_id":"cap-noplace"},"next":1,"head":"` + events.ZeroHash + `","stream_seq":0},"refused":1,"skipped":1}`,
	})
	_, body := roomtest.Journal(t, key.RunID, key.CapsuleID, 2)
	dir := roomtest.CapsuleDir(t, key.RunID, key.CapsuleID, body)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := client.ShipCapsule(ctx, client.New(nc, client.Options{}), dir, "room:r", client.ShipOptions{})
	if err != nil || res.Refused == nil {
		t.Fatalf("ship: %+v %v", res, err)
	}
	file := dir + "/journal.ndjson"
	if got, want := res.Refused.String(), "store_lost at "+file+": the chain is closed"; got != want {
		t.Errorf("refusal %q, want %q", got, want)
	}
	if len(res.Refused.Problems) != 1 || res.Refused.Problems[0].At != (events.Location{File: file}) {
		t.Errorf("problems %+v, want one in %s", res.Refused.Problems, file)
	}
}

// TestShipRepeatedLineRefused: a journal that repeats an entry out of its
// place (line 5 a copy of line 4) is refused by the shipper as publisher
// verify refuses it: reordered at line 5, /seq, expected 4, got 3. In
// the middle of a request the gate took the copy for a resend
// (duplicate), so the shipper exited 0 and the harness's bug went
// unseen; at a request's start the gate refuses it. Either way the chain
// in the stream stays whole. A capsule shipped twice is still
// "already stored", and a resend decides nothing anew.
func TestShipRepeatedLineRefused(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct{ batch, stored, dupes int }{
		// One request: the gate takes the copy for a resend and stores
		// the lines after it, which continue the chain; the shipper
		// refuses the copy.
		{0, 10, 1},
		// The copy opens the second request: the gate, told the seq of
		// the request ahead, refuses it itself.
		{4, 4, 0},
	} {
		batch := c.batch
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			run := fmt.Sprintf("run-dup-%d", batch)
			_, body := roomtest.Journal(t, run, "cap-dup", 10)
			lines := strings.SplitAfter(string(body), "\n")
			dupped := strings.Join(lines[:4], "") + lines[3] + strings.Join(lines[4:], "")
			dir := roomtest.CapsuleDir(t, run, "cap-dup", []byte(dupped))
			rep, err := e.V.VerifyPath(dir)
			if err != nil || rep.OK || rep.Code != events.Reordered {
				t.Fatalf("verify: %+v %v", rep, err)
			}
			cl := client.New(e.Connect(), client.Options{})
			res, err := client.ShipCapsule(ctx, cl, dir, "room:dup", client.ShipOptions{BatchLines: batch})
			if err != nil || res.Refused == nil {
				t.Fatalf("ship: %+v %v", res, err)
			}
			p := res.Refused.Problem
			if p.Code != events.Reordered || p.At.Line != 5 || p.At.Pointer != "/seq" || p.Expected != "4" || p.Actual != "3" || !strings.HasSuffix(p.At.File, "journal.ndjson") {
				t.Errorf("refusal %+v, want reordered at journal.ndjson:5 /seq, expected 4, got 3 (verify: %s at %s)", p, rep.Code, rep.At)
			}
			if res.Stored != c.stored || res.Duplicates != c.dupes {
				t.Errorf("stored %d, duplicates %d, want %d and %d: %+v", res.Stored, res.Duplicates, c.stored, c.dupes, res)
			}
			// Taken for a resend, the copy let the chain go on: the result
			// says so, and its head is the chain's whole. Refused by the
			// gate, nothing after it landed.
			if resent := c.dupes > 0; res.Refused.Resent != resent || res.Head.Next != int64(c.stored) {
				t.Errorf("resent %v, head next %d; want %v and %d", res.Refused.Resent, res.Head.Next, resent, c.stored)
			}
		})
	}
	_, body := roomtest.Journal(t, "run-twice", "cap-twice", 6)
	dir := roomtest.CapsuleDir(t, "run-twice", "cap-twice", body)
	cl := client.New(e.Connect(), client.Options{})
	for i := range 2 {
		res, err := client.ShipCapsule(ctx, cl, dir, "room:dup", client.ShipOptions{})
		if err != nil || res.Refused != nil || res.Stored+res.Skipped != 6 {
			t.Fatalf("ship %d of a whole journal: %+v %v", i+1, res, err)
		}
	}
}

// TestShipReplyNotAnswering: a journal reply whose items do not answer
// the request's lines one by one, in order (an item missing, two with
// one index, one too many), moves the shipper's cursor nowhere: the ship
// fails ErrUnavailable naming the mismatch, and reports nothing stored.
func TestShipReplyNotAnswering(t *testing.T) {
	key := events.ChainKey{RunID: "run-liar", CapsuleID: "cap-liar"}
	chain := `"chain":{"run_id":"run-liar","capsule_id":"cap-liar"}`
	head := `{` + chain + `,"next":0,"head":"` + events.ZeroHash + `","stream_seq":0}`
	for _, c := range []struct{ name, items, want string }{
		{"missing", `{"index":0,"outcome":"stored"},{"index":1,"outcome":"stored"}`, "2 items for 3 lines"},
		{"repeated", `{"index":0,"outcome":"stored"},{"index":0,"outcome":"stored"},{"index":2,"outcome":"stored"}`, "item 1 has index 0"},
		{"extra", `{"index":0,"outcome":"stored"},{"index":1,"outcome":"stored"},{"index":2,"outcome":"stored"},{"index":3,"outcome":"stored"}`, "4 items for 3 lines"},
	} {
		t.Run(c.name, func(t *testing.T) {
			nc := fakeService(t, map[string]string{
				room.EndpointHead:    head,
				room.EndpointJournal: `{"room":"room:r",` + chain + `,"items":[` + c.items + `],"head":` + head + `,"stored":3}`,
			})
			_, body := roomtest.Journal(t, key.RunID, key.CapsuleID, 3)
			dir := roomtest.CapsuleDir(t, key.RunID, key.CapsuleID, body)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := client.ShipCapsule(ctx, client.New(nc, client.Options{}), dir, "room:r", client.ShipOptions{})
			if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ship: %+v, %v; want ErrUnavailable naming %q", res, err, c.want)
			}
			if res.Stored != 0 {
				t.Errorf("%d reported stored, want 0", res.Stored)
			}
		})
	}
}

// fakeService stops the test server's ingest service and answers each
// endpoint of the anonymous identity with its body in replies, whatever
// it is sent; it returns a connection to that server.
func fakeService(t *testing.T, replies map[string]string) *nats.Conn {
	t.Helper()
	e := roomtest.NewEnv(t)
	if err := e.Svc.Stop(); err != nil {
		t.Fatal(err)
	}
	nc := e.Connect()
	for endpoint, body := range replies {
		if _, err := nc.Subscribe(room.ServiceSubject("", room.Anonymous, endpoint), func(m *nats.Msg) { _ = m.Respond([]byte(body)) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return nc
}

// TestShipResentCountsWhatLanded: after a line the gate took for a
// resend, the requests already in flight behind it continue the chain
// and are stored; the ship takes their replies instead of abandoning
// them, so its head and its count are what the room holds once it
// returns (abandoned, they landed after it had asked the head: it said
// seq 7 where the room went to 49).
func TestShipResentCountsWhatLanded(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	es, body := roomtest.Journal(t, "run-dup-pipe", "cap-dup", 400)
	lines := strings.SplitAfter(string(body), "\n")
	dupped := strings.Join(lines[:4], "") + lines[3] + strings.Join(lines[4:], "")
	dir := roomtest.CapsuleDir(t, "run-dup-pipe", "cap-dup", []byte(dupped))
	cl := client.New(e.Connect(), client.Options{})
	res, err := client.ShipCapsule(ctx, cl, dir, "room:dup", client.ShipOptions{BatchLines: 3, Pipeline: 16})
	if err != nil || res.Refused == nil || !res.Refused.Resent {
		t.Fatalf("ship: %+v %v", res, err)
	}
	time.Sleep(300 * time.Millisecond) // anything still on its way lands
	head, err := cl.Head(ctx, events.ChainKey{RunID: es[0].RunID(), CapsuleID: es[0].CapsuleID()})
	if err != nil {
		t.Fatal(err)
	}
	if head.Next != res.Head.Next || int64(res.Stored) != head.Next || res.Duplicates != 1 {
		t.Errorf("the result: head next %d, %d stored, %d duplicates; the room: head next %d (want the same, all stored, 1 duplicate)",
			res.Head.Next, res.Stored, res.Duplicates, head.Next)
	}
}

// TestShipResentTallyChecksReplies: after a line taken for a resend, the
// replies of the requests in flight are counted only when they answer
// their request's lines one by one (replyMismatch), as on the pass's own
// path: a fake service's 2-item reply to a 1-line request counts nothing.
func TestShipResentTallyChecksReplies(t *testing.T) {
	key := events.ChainKey{RunID: "run-tally", CapsuleID: "cap-tally"}
	chain := `"chain":{"run_id":"run-tally","capsule_id":"cap-tally"}`
	head := `{` + chain + `,"next":1,"head":"` + events.ZeroHash + `","stream_seq":1}`
	nc := fakeService(t, map[string]string{
		room.EndpointHead:    head,
		room.EndpointJournal: `{"room":"room:r",` + chain + `,"items":[{"index":0,"outcome":"stored"},{"index":1,"outcome":"duplicate"}],"head":` + head + `,"stored":1,"duplicates":1}`,
	})
	_, body := roomtest.Journal(t, key.RunID, key.CapsuleID, 4)
	lines := strings.SplitAfter(string(body), "\n")
	dupped := lines[0] + lines[0] + strings.Join(lines[1:], "") // 5 lines: requests of 2, 2, 1
	dir := roomtest.CapsuleDir(t, key.RunID, key.CapsuleID, []byte(dupped))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := client.ShipCapsule(ctx, client.New(nc, client.Options{}), dir, "room:r", client.ShipOptions{BatchLines: 2, Pipeline: 4})
	if err != nil || res.Refused == nil || !res.Refused.Resent {
		t.Fatalf("ship: %+v %v", res, err)
	}
	if res.Stored != 2 || res.Duplicates != 2 {
		t.Errorf("%d stored, %d duplicates: the 1-line request's 2-item reply was counted (want 2 and 2, from the two replies that answer their requests)", res.Stored, res.Duplicates)
	}
}

// TestShipResentCutOffCountsFromHead: after a line taken for a resend, an
// interrupt whose wait for the requests in flight runs out cuts their
// replies off. Their lines that the head asked after covers are counted
// as stored, and a shipment says it was stopped: it counted 1 of the 4
// lines the room held and reported a plain refusal. A follower, which
// ctx ends without an error, counts them alike.
func TestShipResentCutOffCountsFromHead(t *testing.T) {
	t.Run("ship", func(t *testing.T) {
		res, err := shipResentCutOff(t, func(ctx context.Context, c *client.Client, dir string) (client.ShipResult, error) {
			return client.ShipCapsule(ctx, c, dir, "room:r", client.WithStopWait(client.ShipOptions{BatchLines: 2, Pipeline: 4}, 300*time.Millisecond))
		})
		if !errors.Is(err, client.ErrStopped) || !strings.Contains(err.Error(), "the stream holds 4 lines") {
			t.Errorf("error %v; want ErrStopped saying the stream holds 4 lines", err)
		}
		checkResentCutOff(t, res)
	})
	t.Run("follow", func(t *testing.T) {
		var reports []client.ShipResult
		res, err := shipResentCutOff(t, func(ctx context.Context, c *client.Client, dir string) (client.ShipResult, error) {
			return client.FollowCapsule(ctx, c, dir, "room:r", client.WithStopWait(client.ShipOptions{BatchLines: 2, Pipeline: 4}, 300*time.Millisecond),
				func(r client.ShipResult) { reports = append(reports, r) })
		})
		if err != nil || len(reports) != 1 {
			t.Errorf("error %v, %d reports; want none and 1", err, len(reports))
		} else {
			checkResentCutOff(t, reports[0])
		}
		checkResentCutOff(t, res)
	})
}

func checkResentCutOff(t *testing.T, res client.ShipResult) {
	t.Helper()
	if res.Refused == nil || !res.Refused.Resent {
		t.Fatalf("refusal %+v; want the resent line's", res.Refused)
	}
	if res.Stored != 4 || res.Duplicates != 1 || res.Head.Next != 4 {
		t.Errorf("%d stored, %d duplicates, head next %d; want 4 (line 0 answered, seqs 1-3 cut off and under the head), 1 and 4",
			res.Stored, res.Duplicates, res.Head.Next)
	}
}

// fakeHeadService stops the test server's ingest service and answers the
// anonymous identity's head requests for chain (its JSON member): the
// chain holds nothing at the first (where a shipment starts), later()
// after; it returns a connection to that server.
func fakeHeadService(t *testing.T, chain string, later func() string) *nats.Conn {
	t.Helper()
	e := roomtest.NewEnv(t)
	if err := e.Svc.Stop(); err != nil {
		t.Fatal(err)
	}
	nc := e.Connect()
	var heads atomic.Int32
	if _, err := nc.Subscribe(room.ServiceSubject("", room.Anonymous, room.EndpointHead), func(m *nats.Msg) {
		if heads.Add(1) == 1 {
			_ = m.Respond([]byte(`{` + chain + `,"next":0,"head":"` + events.ZeroHash + `","stream_seq":0}`))
			return
		}
		_ = m.Respond([]byte(later()))
	}); err != nil {
		t.Fatal(err)
	}
	return nc
}

// shipResentCutOff runs ship on a fake service that takes a journal's
// second line for a resend of its first, then answers nothing more and
// interrupts ship's ctx once both requests behind it arrived; the head
// asked after says the chain holds 4 lines.
func shipResentCutOff(t *testing.T, ship func(context.Context, *client.Client, string) (client.ShipResult, error)) (client.ShipResult, error) {
	t.Helper()
	key := events.ChainKey{RunID: "run-cut", CapsuleID: "cap-cut"}
	chain := `"chain":{"run_id":"run-cut","capsule_id":"cap-cut"}`
	nc := fakeHeadService(t, chain, func() string {
		return `{"room":"room:r",` + chain + `,"next":4,"head":"` + events.ZeroHash + `","stream_seq":9}`
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	_, body := roomtest.Journal(t, key.RunID, key.CapsuleID, 4)
	lines := strings.SplitAfter(string(body), "\n")
	dupped := lines[0] + lines[0] + strings.Join(lines[1:], "") // requests of 2, 2, 1
	dir := roomtest.CapsuleDir(t, key.RunID, key.CapsuleID, []byte(dupped))
	var behind atomic.Int32
	if _, err := nc.Subscribe(room.ServiceSubject("", room.Anonymous, room.EndpointJournal), func(m *nats.Msg) {
		if string(m.Data) == lines[0]+lines[0] { // line 0 stored, its copy taken for a resend
			_ = m.Respond([]byte(`{"room":"room:r",` + chain + `,"items":[{"index":0,"outcome":"stored"},{"index":1,"outcome":"duplicate"}],"head":{"room":"room:r",` + chain + `,"next":1,"head":"` + events.ZeroHash + `","stream_seq":1},"stored":1,"duplicates":1}`))
			return
		}
		if behind.Add(1) == 2 { // both requests behind it arrived: interrupt; neither is answered
			cancel(errors.New("interrupted"))
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ship(ctx, client.New(nc, client.Options{}), dir)
}

const cutChain = `"chain":{"run_id":"run-cut2","capsule_id":"cap-cut2"}`

// cutHead is a head of room:r's chain run-cut2/cap-cut2 at next.
func cutHead(next int) string {
	return fmt.Sprintf(`{"room":"room:r",%s,"next":%d,"head":"%s","stream_seq":%d}`, cutChain, next, events.ZeroHash, next)
}

// cutReply is a journal reply of outcomes, one item per line, the head at
// next after it.
func cutReply(outcomes []string, next int) string {
	var items []string
	st, du := 0, 0
	for i, o := range outcomes {
		items = append(items, fmt.Sprintf(`{"index":%d,"outcome":"%s"}`, i, o))
		if o == "stored" {
			st++
		} else {
			du++
		}
	}
	return fmt.Sprintf(`{"room":"room:r",%s,"items":[%s],"head":%s,"stored":%d,"duplicates":%d}`,
		cutChain, strings.Join(items, ","), cutHead(next), st, du)
}

// TestShipResentCutOffRepeatCountsOnce: requests L0 L0 | L1 L2 | L3 L1.
// The first holds the resent line; the second is answered (seqs 1 and 2
// stored); the third is cut off, and its second line repeats seq 1, which
// the answered reply counted: the room holds seqs 0-3, 4 stored, where
// seq 1 was counted twice (5).
func TestShipResentCutOffRepeatCountsOnce(t *testing.T) {
	nc := fakeHeadService(t, cutChain, func() string { return cutHead(4) })
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	_, body := roomtest.Journal(t, "run-cut2", "cap-cut2", 4)
	l := strings.SplitAfter(string(body), "\n")
	dir := roomtest.CapsuleDir(t, "run-cut2", "cap-cut2", []byte(l[0]+l[0]+l[1]+l[2]+l[3]+l[1]))
	if _, err := nc.Subscribe(room.ServiceSubject("", room.Anonymous, room.EndpointJournal), func(m *nats.Msg) {
		switch string(m.Data) {
		case l[0] + l[0]:
			_ = m.Respond([]byte(cutReply([]string{"stored", "duplicate"}, 1)))
		case l[1] + l[2]:
			_ = m.Respond([]byte(cutReply([]string{"stored", "stored"}, 3)))
		default: // l[3]+l[1]: cut off
			cancel(errors.New("interrupted"))
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	res, err := client.ShipCapsule(ctx, client.New(nc, client.Options{}), dir, "room:r", client.WithStopWait(client.ShipOptions{BatchLines: 2, Pipeline: 4}, 300*time.Millisecond))
	if !errors.Is(err, client.ErrStopped) {
		t.Errorf("error %v; want ErrStopped", err)
	}
	if res.Stored != 4 || res.Head.Next != 4 {
		t.Errorf("%d stored, head next %d; want 4 and 4", res.Stored, res.Head.Next)
	}
}

// TestShipResentAfterHalt: ctx ends while the pass is still sending, and
// the resent line's reply comes while the requests in flight are taken:
// the lines of those behind it, cut off, are counted from the head asked
// after, as when the pass had sent everything (they were left uncounted,
// and a follower reported the last reply's head).
func TestShipResentAfterHalt(t *testing.T) {
	for _, follow := range []bool{false, true} {
		t.Run(fmt.Sprint("follow=", follow), func(t *testing.T) {
			var arrived atomic.Int32
			nc := fakeHeadService(t, cutChain, func() string {
				return cutHead(3 + 2*int(arrived.Load()-2)) // every request behind the resent one landed
			})
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			_, body := roomtest.Journal(t, "run-cut2", "cap-cut2", 11)
			l := strings.SplitAfter(string(body), "\n")
			file := l[0] + l[1] + l[2] + l[0] + strings.Join(l[3:], "")
			dir := roomtest.CapsuleDir(t, "run-cut2", "cap-cut2", []byte(file))
			var mu sync.Mutex
			held := map[string]*nats.Msg{}
			if _, err := nc.Subscribe(room.ServiceSubject("", room.Anonymous, room.EndpointJournal), func(m *nats.Msg) {
				mu.Lock()
				defer mu.Unlock()
				held[string(m.Data)] = m
				if arrived.Add(1) == 3 {
					cancel(errors.New("interrupted"))
					_ = held[l[0]+l[1]].Respond([]byte(cutReply([]string{"stored", "stored"}, 2)))
					_ = held[l[2]+l[0]].Respond([]byte(cutReply([]string{"stored", "duplicate"}, 3)))
				}
			}); err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			o := client.WithStopWait(client.ShipOptions{BatchLines: 2, Pipeline: 3}, 300*time.Millisecond)
			var res client.ShipResult
			var err error
			if follow {
				res, err = client.FollowCapsule(ctx, client.New(nc, client.Options{}), dir, "room:r", o, func(client.ShipResult) {})
			} else {
				res, err = client.ShipCapsule(ctx, client.New(nc, client.Options{}), dir, "room:r", o)
			}
			if wantErr := !follow; (err != nil) != wantErr || (wantErr && !errors.Is(err, client.ErrStopped)) {
				t.Errorf("error %v; want ErrStopped from a shipment, none from a follower", err)
			}
			if res.Refused == nil || !res.Refused.Resent {
				t.Fatalf("refusal %+v", res.Refused)
			}
			want := 3 + 2*int64(arrived.Load()-2)
			if res.Head.Next != want || int64(res.Stored) != want || res.Duplicates != 1 {
				t.Errorf("%d stored, %d duplicates, head next %d; want %d, 1, %d", res.Stored, res.Duplicates, res.Head.Next, want, want)
			}
		})
	}
}

// TestShipResentInterruptedIsStopped: an interrupt during a shipment
// whose line the gate took for a resend, with every reply answered, made
// it REFUSED (exit 1), the signal unsaid (found by a new user); it is
// STOPPED, with the refusal and what the stream holds.
func TestShipResentInterruptedIsStopped(t *testing.T) {
	nc := fakeHeadService(t, cutChain, func() string { return cutHead(4) })
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	_, body := roomtest.Journal(t, "run-cut2", "cap-cut2", 4)
	l := strings.SplitAfter(string(body), "\n")
	dir := roomtest.CapsuleDir(t, "run-cut2", "cap-cut2", []byte(l[0]+l[0]+l[1]+l[2]+l[3]))
	if _, err := nc.Subscribe(room.ServiceSubject("", room.Anonymous, room.EndpointJournal), func(m *nats.Msg) {
		switch string(m.Data) {
		case l[0] + l[0]:
			cancel(errors.New("interrupted"))
			_ = m.Respond([]byte(cutReply([]string{"stored", "duplicate"}, 1)))
		case l[1] + l[2]:
			_ = m.Respond([]byte(cutReply([]string{"stored", "stored"}, 3)))
		default:
			_ = m.Respond([]byte(cutReply([]string{"stored"}, 4)))
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	res, err := client.ShipCapsule(ctx, client.New(nc, client.Options{}), dir, "room:r", client.WithStopWait(client.ShipOptions{BatchLines: 2, Pipeline: 4}, 300*time.Millisecond))
	if !errors.Is(err, client.ErrStopped) || !strings.Contains(err.Error(), "the stream holds 4 lines") {
		t.Errorf("error %v; want ErrStopped saying the stream holds 4 lines", err)
	}
	if res.Refused == nil || !res.Refused.Resent || res.Head.Next != 4 {
		t.Errorf("refusal %+v, head next %d; want the resent line's, 4", res.Refused, res.Head.Next)
	}
}
