package room_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
)

func TestLayoutPartitions(t *testing.T) {
	l := room.Layout{Partitions: 3}
	got := fmt.Sprintln(l.Partition(0).Stream, l.Partition(0).Subjects.Root(), l.Partition(2).Stream, l.Partition(2).Subjects.Root())
	if got != "ROOMS rooms ROOMS-2 rooms-2\n" || l.Count() != 3 || len(l.All()) != 3 {
		t.Fatalf("layout: %s", got)
	}
	named := room.Layout{Stream: "EVIDENCE", Subjects: room.Subjects{Prefix: "ev"}, Partitions: 2}
	if p := named.Partition(1); p.Stream != "EVIDENCE-1" || p.Subjects.Root() != "ev-1" {
		t.Fatalf("named layout: %+v", p)
	}
	if (room.Layout{}).Count() != 1 || (room.Layout{Partitions: 65}).Check() == nil || (room.Layout{Partitions: -1}).Check() == nil {
		t.Fatal("counts")
	}
}

// The placement bucket: absent for readers of a deployment of one
// partition, created with more, extended and never renamed; placements
// and chain claims agree under racing callers.
func TestPlacementBucket(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	one, err := room.OpenPlacement(ctx, e.Js, room.Layout{}, 1, false)
	if err != nil || one.Recorded() || len(one.Partitions()) != 1 {
		t.Fatalf("no bucket: %v %v", one, err)
	}
	if q, err := one.Locate(ctx, "room:any"); err != nil || q.Stream != "ROOMS" {
		t.Fatalf("locate without a bucket: %+v %v", q, err)
	}
	two, err := room.OpenPlacement(ctx, e.Js, room.Layout{Partitions: 2}, 1, true)
	if err != nil || !two.Recorded() || len(two.Partitions()) != 2 {
		t.Fatalf("two: %v", err)
	}
	// Asked for one, a serve serves the two recorded; asked for three, it
	// extends the list.
	if p, err := room.OpenPlacement(ctx, e.Js, room.Layout{}, 1, true); err != nil || len(p.Partitions()) != 2 {
		t.Fatalf("reopened with one: %v", err)
	}
	three, err := room.OpenPlacement(ctx, e.Js, room.Layout{Partitions: 3}, 1, true)
	if err != nil || len(three.Partitions()) != 3 || three.Partitions()[2].Stream != "ROOMS-2" {
		t.Fatalf("three: %v", err)
	}
	if _, err := room.OpenPlacement(ctx, e.Js, room.Layout{Stream: "OTHER", Partitions: 3}, 1, true); !errors.Is(err, room.ErrPlacement) {
		t.Fatalf("renamed partitions: %v", err)
	}
	// Ten callers record one room on three different partitions at once:
	// one wins, and every caller is told the same.
	var wg sync.WaitGroup
	got := make([]string, 10)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, err := three.Record(ctx, "room:raced", three.Partitions()[i%3])
			if err != nil {
				t.Error(err)
			}
			got[i] = q.Stream
		}()
	}
	wg.Wait()
	for _, s := range got {
		if s != got[0] {
			t.Fatalf("callers disagree on the placement: %v", got)
		}
	}
	if q, ok, err := three.Room(ctx, "room:raced"); err != nil || !ok || q.Stream != got[0] {
		t.Fatalf("room: %+v %v %v", q, ok, err)
	}
	// Another process's view (no cache) reads the same.
	fresh, err := room.OpenPlacement(ctx, e.Js, room.Layout{}, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if q, err := fresh.Locate(ctx, "room:raced"); err != nil || q.Stream != got[0] {
		t.Fatalf("fresh locate: %+v %v", q, err)
	}
	// A proposal records nothing for a room no partition holds.
	none := func(context.Context, room.Partition, string) (bool, error) { return false, nil }
	if _, placed, err := fresh.Propose(ctx, "room:proposed", none); err != nil || placed {
		t.Fatalf("propose: %v %v", placed, err)
	}
	if _, ok, _ := fresh.Room(ctx, "room:proposed"); ok {
		t.Fatal("a proposal was recorded")
	}
	// Chain claims: ten callers claim one chain for ten rooms.
	key := events.ChainKey{RunID: "run-x", CapsuleID: "cap-x"}
	owners := make([]string, 10)
	for i := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner, err := three.ClaimChain(ctx, key, fmt.Sprintf("room:claim-%d", i))
			if err != nil {
				t.Error(err)
			}
			owners[i] = owner
		}()
	}
	wg.Wait()
	for _, o := range owners {
		if o != owners[0] {
			t.Fatalf("claims disagree: %v", owners)
		}
	}
	if o, err := fresh.ClaimChain(ctx, key, "room:late"); err != nil || o != owners[0] {
		t.Fatalf("a late claim: %q %v", o, err)
	}
}

// A partition's stream without the bucket is a lost bucket: neither a
// reader nor a serve goes on as if the deployment had one partition.
func TestPlacementBucketLost(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	l := room.Layout{Partitions: 2}
	q := l.Partition(1)
	if _, err := e.Js.CreateStream(ctx, room.StreamConfig(q.Stream, q.Subjects, 1)); err != nil {
		t.Fatal(err)
	}
	for _, create := range []bool{false, true} {
		_, err := room.OpenPlacement(ctx, e.Js, l, 1, create)
		if !errors.Is(err, room.ErrPlacement) || !strings.Contains(err.Error(), "the placement bucket ROOMPUB_PLACEMENT is gone while room stream ROOMS-1 exists") {
			t.Fatalf("create %v: %v", create, err)
		}
	}
}
