package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room"
)

// TestReplicasFlags holds --replicas to its rules: 1 or 3; a cluster runs
// the long chain and parallel rows alone, without floors, on temporary
// stores.
func TestReplicasFlags(t *testing.T) {
	checkUsage(t, []usageCase{
		{[]string{"--replicas", "2"}, "--replicas must be 1 or 3, not 2"},
		{[]string{"--replicas", "0"}, "--replicas must be 1 or 3, not 0"},
		{[]string{"--replicas", "3", "--check"}, "--replicas 3 excludes --check"},
		{[]string{"--replicas", "3", "--store-dir", t.TempDir()}, "excludes --check (the floors are one server's) and --store-dir"},
		{[]string{"--replicas", "3", "--only", "long", "--only", "read"}, "--replicas 3 runs the long chain and parallel rows only"},
	})
	one, three := cli{Replicas: 1}, cli{Replicas: 3}
	for _, row := range []string{"long", "parallel", "records", "read", "verify"} {
		if !one.selected(row) {
			t.Errorf("one server: %s not selected", row)
		}
		if three.selected(row) != slices.Contains([]string{"long", "parallel"}, row) {
			t.Errorf("a cluster: %s selected %v", row, three.selected(row))
		}
	}
}

// TestClusterR3 starts the bench's cluster: three servers, routed, one
// JetStream meta leader; a stream made with roompub's configuration at 3
// replicas has its three replicas, and placeLeader moves its leader to
// each server named, all replicas current, holding what was published.
func TestClusterR3(t *testing.T) {
	c, err := startCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.shutdown()
	var names []string
	for _, s := range c.servers {
		names = append(names, s.NATSServer().Name())
		if s.NATSServer().NumRoutes() < 2 {
			t.Errorf("%s has %d routes, want 2", s.NATSServer().Name(), s.NATSServer().NumRoutes())
		}
	}
	if !slices.Equal(names, []string{"n1", "n2", "n3"}) {
		t.Fatalf("servers %v", names)
	}
	nc, err := nats.Connect(c.servers[0].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	subjects := room.Subjects{Prefix: rawPrefix}
	if _, err := room.EnsureStream(ctx, js, room.StreamConfig(rawStream, subjects, 3), subjects); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := js.Publish(ctx, fmt.Sprintf("%s.x.%d", rawPrefix, i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	b := &bench{ctx: ctx, js: js}
	for _, want := range []string{"n2", "n3", "n1"} {
		if err := placeLeader(ctx, nc, js, rawStream, want); err != nil {
			t.Fatal(err)
		}
		f, err := b.facts(ctx, rawStream)
		if err != nil {
			t.Fatal(err)
		}
		if f != (streamFacts{replicas: 3, current: 3, leader: want}) {
			t.Errorf("led by %s: %+v", want, f)
		}
		st, err := js.Stream(ctx, rawStream)
		if err != nil {
			t.Fatal(err)
		}
		if n := st.CachedInfo().State.Msgs; n != 5 {
			t.Errorf("led by %s: %d messages, want 5", want, n)
		}
	}
}
