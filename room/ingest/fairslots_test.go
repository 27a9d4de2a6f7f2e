package ingest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/roompub/roompub/room/ingest"
)

// TestFairSlots: with one slot held, identity a queues five requests and
// then b two; the slots go to a and b in turn (a first: it waited
// first), then to a's rest, in arrival order. A request of b that waits
// holding a room's lock (AcquireFirst), queued last, goes before b's
// others but still waits for a's turn: no identity skips the turns. A
// request whose wait is cancelled takes no slot and leaves no turn
// behind; a cancelled AcquireFirst takes none either.
func TestFairSlots(t *testing.T) {
	f := ingest.NewFairSlots(1)
	ctx := context.Background()
	if err := f.Acquire(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	// waitQueued waits until n requests wait for a slot.
	waitQueued := func(n int) {
		for f.Waiting() != n {
			time.Sleep(time.Millisecond)
		}
	}
	queued := 0
	enqueue := func(token, name string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.Acquire(ctx, token); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			f.Release()
		}()
		// Queued before the next one is sent: the slot is held.
		queued++
		waitQueued(queued)
	}
	for _, n := range []string{"a1", "a2", "a3", "a4", "a5"} {
		enqueue("a", n)
	}
	enqueue("b", "b1")
	enqueue("b", "b2")
	// b's request holding a room's lock, queued last, goes first of b's.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := f.AcquireFirst(ctx, "b"); err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		order = append(order, "room")
		mu.Unlock()
		f.Release()
	}()
	queued++
	waitQueued(queued)
	fctx, fcancel := context.WithCancel(ctx)
	ferr := make(chan error, 1)
	go func() { ferr <- f.AcquireFirst(fctx, "c") }()
	waitQueued(queued + 1)
	fcancel()
	if err := <-ferr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled AcquireFirst: %v", err)
	}
	// A cancelled wait of c's takes no turn.
	cctx, cancel := context.WithCancel(ctx)
	cerr := make(chan error, 1)
	go func() { cerr <- f.Acquire(cctx, "c") }()
	waitQueued(queued + 1)
	cancel()
	if err := <-cerr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire: %v", err)
	}
	waitQueued(queued)
	f.Release()
	wg.Wait()
	want := []string{"a1", "room", "a2", "b1", "a3", "b2", "a4", "a5"}
	if len(order) != len(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
	// Every slot is free again: one acquire succeeds at once, a second
	// waits until cancelled.
	if err := f.Acquire(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer tcancel()
	if err := f.Acquire(tctx, "d"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second slot of one: %v", err)
	}
}
