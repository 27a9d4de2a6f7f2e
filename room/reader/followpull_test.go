package reader_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// Follow's durable consumer serves one run at a time: a delivery that goes
// to a pull request not the run's own (one a stopped run left on the
// server, another subscriber's) must not let the next message pass for the
// next in stream order.

// shipChains ships chains of n entries each, one journal request per
// chain, and returns the stream seqs stored, in order.
func shipChains(t *testing.T, e *roomtest.Env, name string, chains, n int) []uint64 {
	t.Helper()
	var seqs []uint64
	for i := range chains {
		_, body := roomtest.Journal(t, "run-"+name, fmt.Sprint("cap-", name, "-", i), n)
		r := e.ShipJournal("room:p", body)
		if r.Stored != n {
			t.Fatalf("ship: %+v", r)
		}
		for _, it := range r.Items {
			seqs = append(seqs, it.StreamSeq)
		}
	}
	return seqs
}

// stalePull leaves a pull request for up to 64 messages on durable's
// consumer for wait, as a run stopped mid-fetch does: whatever it takes
// stays unacknowledged. took counts what it took.
func stalePull(t *testing.T, e *roomtest.Env, durable string, wait time.Duration) (took func() int) {
	t.Helper()
	cons, err := e.Js.Consumer(t.Context(), room.DefaultStream, durable)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := cons.Fetch(64, jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	go func() {
		for range fb.Messages() {
			n.Add(1)
		}
	}()
	return func() int { return int(n.Load()) }
}

// waitPulls waits until durable's consumer has n pull requests waiting.
func waitPulls(t *testing.T, e *roomtest.Env, durable string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		waiting := -1
		if cons, err := e.Js.Consumer(t.Context(), room.DefaultStream, durable); err == nil {
			if ci, err := cons.Info(t.Context()); err == nil {
				waiting = ci.NumWaiting
			}
		}
		if waiting == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pull requests waiting, want %d", waiting, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFollowStartAfterStalePull: a stopped run's pull request, still
// waiting on the server, takes the messages appended after the stop. The
// next run waits for it to lapse before it has them delivered again, so it
// hands out every message once, in stream order: had it reset the
// consumer at once, the stale request would take the deliveries again.
func TestFollowStartAfterStalePull(t *testing.T) {
	t.Parallel()
	e := roomtest.NewEnv(t)
	want := shipChains(t, e, "a", 1, 3)
	f1 := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "d", Validator: e.V}, nil)
	f1.WaitSeen(t, len(want))
	if err := f1.Stop(t); err != nil {
		t.Fatal(err)
	}
	waitPulls(t, e, "d", 0)
	took := stalePull(t, e, "d", 2*time.Second)
	want = append(want, shipChains(t, e, "b", 1, 4)...)
	for took() < 4 {
		time.Sleep(5 * time.Millisecond)
	}

	var resyncs atomic.Int64
	// A short AckWait: what is lost shows at once, not after 30s.
	f2 := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "d", Validator: e.V, AckWait: time.Second,
		OnResync: func(string) { resyncs.Add(1) }}, nil)
	f2.WaitSeen(t, 4)
	want = append(want, shipChains(t, e, "c", 1, 2)...)
	f2.WaitSeen(t, 6)
	time.Sleep(2 * time.Second) // anything delivered again is handed out again
	if err := f2.Stop(t); err != nil {
		t.Fatal(err)
	}
	if got := append(f1.EventSeqs(), f2.EventSeqs()...); !slices.Equal(got, want) {
		t.Errorf("handed out %v, want %v", got, want)
	}
	if n := resyncs.Load(); n != 0 {
		t.Errorf("%d resyncs after the start's wait", n)
	}
}

// TestFollowDeliveryTakenLive: a pull request not Follow's own appears
// while Follow runs and takes some of the deliveries (the server hands
// them round the waiting requests). Follow sees the consumer sequence
// jump, says so, waits for the request to lapse, has the consumer deliver
// again from its acknowledgement floor, and hands out every message once,
// in stream order.
func TestFollowDeliveryTakenLive(t *testing.T) {
	t.Parallel()
	e := roomtest.NewEnv(t)
	want := shipChains(t, e, "a", 1, 2)
	core, logs := observer.New(zapcore.InfoLevel)
	var told []string
	var mu sync.Mutex
	f := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "d", Validator: e.V, Logger: zap.New(core), AckWait: time.Second,
		OnResync: func(why string) { mu.Lock(); told = append(told, why); mu.Unlock() }}, nil)
	f.WaitSeen(t, len(want))
	took := stalePull(t, e, "d", 2*time.Second)
	for took() == 0 {
		want = append(want, shipChains(t, e, fmt.Sprint("b", len(want)), 1, 4)...)
		if len(want) > 200 {
			t.Fatal("the second pull request took nothing")
		}
	}
	f.WaitSeen(t, len(want))
	time.Sleep(2 * time.Second) // anything delivered again is handed out again
	if err := f.Stop(t); err != nil {
		t.Fatal(err)
	}
	if got := f.EventSeqs(); !slices.Equal(got, want) {
		t.Errorf("handed out %v, want %v", got, want)
	}
	warned := logs.FilterMessage("follow: resync").FilterLevelExact(zapcore.InfoLevel).Len()
	mu.Lock()
	defer mu.Unlock()
	if len(told) < 1 || warned != len(told) || !strings.Contains(told[0], "durable d: delivery ") || !strings.Contains(told[0], "delivering again from the ack floor") {
		t.Errorf("resyncs told %q, %d logged", told, warned)
	}
}

// shareDurable starts Follow on durable "d" over chains shipped chains of
// 10 entries, and another subscriber on the same durable that fetches one
// message at a time and hands it to take, for as long as the test runs;
// then ships chains of 3 entries until Follow returns (at most 150). It
// returns Follow and the stream seqs of every entry shipped.
func shareDurable(t *testing.T, chains int, take func(context.Context, jetstream.Msg)) (*roomtest.Follower, []uint64) {
	t.Helper()
	e := roomtest.NewEnv(t)
	all := shipChains(t, e, "a", chains, 10)
	f := roomtest.StartFollow(t, e.Js, reader.WithFollowSettle(reader.FollowOptions{Durable: "d", Validator: e.V}, 20*time.Millisecond), nil)
	waitPulls(t, e, "d", 1)
	cons, err := e.Js.Consumer(t.Context(), room.DefaultStream, "d")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			fb, err := cons.Fetch(1, jetstream.FetchMaxWait(500*time.Millisecond))
			if err != nil {
				continue
			}
			for m := range fb.Messages() {
				take(ctx, m)
			}
		}
	}()
	for range 150 {
		all = append(all, shipChains(t, e, fmt.Sprint("b", len(all)), 1, 3)...)
		select {
		case <-f.Done:
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	return f, all
}

// TestFollowDurableShared: another subscriber pulling from the same durable
// without end, one message at a time, takes deliveries after every resync
// while messages come; Follow stops with
// ErrDurableShared rather than go on out of order, and what it handed out
// before is in stream order, each once.
func TestFollowDurableShared(t *testing.T) {
	t.Parallel()
	f, all := shareDurable(t, 4, func(context.Context, jetstream.Msg) {})
	err := f.Wait(t)
	if !errors.Is(err, reader.ErrDurableShared) || !errors.Is(err, reader.ErrReader) {
		t.Fatalf("Follow returned %v, want ErrDurableShared", err)
	}
	if got := f.EventSeqs(); !slices.Equal(got, all[:len(got)]) {
		t.Errorf("handed out %v, not a prefix of %v", got, all)
	}
}

// TestFollowDurableSharedAcking: another subscriber on the same durable
// takes deliveries and acknowledges them, so the ack floor passes messages
// Follow never received. Follow stops with ErrDurableShared at its next
// resync rather than go on with a hole: it sets nothing aside (a hole would
// break the chains after it) and what it handed out is in stream order,
// each once, with nothing missing.
func TestFollowDurableSharedAcking(t *testing.T) {
	t.Parallel()
	var acked atomic.Int64
	f, all := shareDurable(t, 2, func(ctx context.Context, m jetstream.Msg) {
		if m.DoubleAck(ctx) == nil {
			acked.Add(1)
		}
	})
	err := f.Wait(t)
	if !errors.Is(err, reader.ErrDurableShared) {
		t.Fatalf("Follow returned %v, want ErrDurableShared (the other acknowledged %d)", err, acked.Load())
	}
	if got := f.EventSeqs(); !slices.Equal(got, all[:len(got)]) {
		t.Errorf("handed out %v, not a prefix of %v", got, all)
	}
	if len(f.Asides) != 0 {
		t.Errorf("set aside %v", f.Asides)
	}
}
