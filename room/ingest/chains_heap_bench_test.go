package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/validate"
)

// BenchmarkGateChainsHeap ships chains of two entries each
// (ROOMPUB_BENCH_CHAIN_ENTRIES sets it) through one gate (AppendJournal, 32 at once, on the embedded server; fsync once a
// minute, which the heap does not depend on) and reports, after a forced GC, the live heap per chain shipped: of the
// whole process (the embedded server's own index of subjects included) and
// of what the gate alone keeps (the live heap with the gate less the live
// heap once it is dropped), with the chain states it holds. Each size is
// one run: -benchtime=1x. ROOMPUB_BENCH_CHAINS sets the sizes
// (comma-separated; default 10000,100000). Chains of one entry are stored
// by one plain publish each, where two or more take an atomic batch, which
// a file-backed R1 stream stages in a file store of its own (several
// milliseconds of system calls each): one entry per chain makes a million
// chains a run of minutes rather than hours, and keeps the same chain state.
func BenchmarkGateChainsHeap(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if s := os.Getenv("ROOMPUB_BENCH_CHAINS"); s != "" {
		sizes = nil
		for f := range strings.SplitSeq(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			sizes = append(sizes, n)
		}
	}
	entries := benchCount(b, "ROOMPUB_BENCH_CHAIN_ENTRIES", 2, 1)
	for _, n := range sizes {
		b.Run(fmt.Sprint("chains=", n), func(b *testing.B) {
			nc, v := heapBenchServer(b)
			g, err := ingest.NewGate(context.Background(), nc, ingest.GateOptions{Validator: v})
			if err != nil {
				b.Fatal(err)
			}
			before := liveHeap()
			for i := 0; b.Loop(); i++ {
				shipChains(b, g, fmt.Sprint("run-", i), n, entries)
			}
			withGate, states := liveHeap(), g.ChainStates()
			runtime.KeepAlive(g)
			g = nil
			withoutGate := liveHeap()
			b.ReportMetric(float64(withGate-before)/float64(n), "heap-B/chain")
			b.ReportMetric(float64(withGate-withoutGate)/float64(n), "gate-B/chain")
			b.ReportMetric(float64(withGate-withoutGate)/(1<<20), "gate-MiB")
			b.ReportMetric(float64(states), "chain-states")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// shipChains stores n chains of entries entries of run in room:heap
// through g.
func shipChains(b *testing.B, g *ingest.Gate, run string, n, entries int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				body := journalOf(b, run, fmt.Sprint("capsule-", i), entries)
				r, err := g.AppendJournal(context.Background(), "room:heap", body, nil)
				// A duplicate is this request's own append, decided again
				// after a batch that got no answer in time (a loaded machine).
				if err != nil || r.Stored+r.Dupes != entries {
					b.Errorf("chain %d: %+v %v", i, r, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// journalOf is a journal of n entries of chain run/capsule.
func journalOf(b *testing.B, run, capsule string, n int) []byte {
	var out []byte
	for _, ln := range benchLines(b, run, capsule, n) {
		out = append(append(out, ln...), '\n')
	}
	return out
}

// benchCount is the count the environment variable name sets, def when
// it is unset; a value that is no count of at least least fails b.
func benchCount(b *testing.B, name string, def, least int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < least {
		b.Fatalf("%s=%q: want a count of at least %d", name, s, least)
	}
	return n
}

// liveHeap is the live heap in bytes after a forced GC.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// BenchmarkResentOldLine resends line 7 of a chain of 100,000 entries
// (ROOMPUB_BENCH_CHAIN_LENGTH) to a new gate, as after a restart or once
// the chain was dropped: what deciding it costs (time and allocations per
// op, the chain's head read included), and the live heap the gate keeps
// after it (retained-B, measured once, after a forced GC).
func BenchmarkResentOldLine(b *testing.B) {
	length := benchCount(b, "ROOMPUB_BENCH_CHAIN_LENGTH", 100_000, 8)
	be := newRawBenchEnv(b)
	v, err := validate.New(validate.WithTrustedHosts(be.key.NodeID()))
	if err != nil {
		b.Fatal(err)
	}
	newGate := func() *ingest.Gate {
		g, err := ingest.NewGate(context.Background(), be.nc, ingest.GateOptions{Validator: v})
		if err != nil {
			b.Fatal(err)
		}
		return g
	}
	lines := benchLines(b, "run-long", "capsule-long", length)
	g := newGate()
	for i := 0; i < len(lines); i += 1000 {
		var body []byte
		for _, ln := range lines[i:min(i+1000, len(lines))] {
			body = append(append(body, ln...), '\n')
		}
		if r, err := g.AppendJournal(context.Background(), "room:resent", body, nil); err != nil || r.Stored+r.Dupes != len(r.Items) {
			b.Fatalf("ship from line %d: %+v %v", i, r, err)
		}
	}
	old := append(append([]byte(nil), lines[7]...), '\n')
	resend := func(g *ingest.Gate) {
		r, err := g.AppendJournal(context.Background(), "room:resent", old, nil)
		if err != nil || r.Dupes != 1 {
			b.Fatalf("resend: %+v %v", r, err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		resend(newGate())
	}
	g = newGate()
	before := liveHeap()
	resend(g)
	after := liveHeap()
	runtime.KeepAlive(g)
	b.ReportMetric(float64(after)-float64(before), "retained-B")
}

// benchLines is n entries of chain run/capsule, about 700 bytes each, as
// lines without their newline.
func benchLines(b *testing.B, run, capsule string, n int) [][]byte {
	out := make([][]byte, n)
	parent := events.ZeroHash
	for seq := range n {
		e, err := events.NewEntry(map[string]any{
			"schema": events.EntrySchema, "run_id": run, "capsule_id": capsule, "seq": json.Number(strconv.Itoa(seq)),
			"ts": "2026-09-02T00:00:00.000Z", "lineage": "attempt", "kind": "tool.call", "effect_class": "SE0",
			"harness_version": "bench/1", "task_family": "slugify", "parent_hash": parent,
			"payload": map[string]any{"tool": "bash", "duration_ms": json.Number("12.5"), "status": "ok",
				"note": strings.Repeat("a note ", 50)},
		})
		if err != nil {
			b.Fatal(err)
		}
		out[seq] = e.Canonical()
		parent = e.EntryHash()
	}
	return out
}

// heapBenchServer starts an embedded server with the room stream, fsyncing
// once a minute, and returns a connection to it and a validator.
func heapBenchServer(b *testing.B) (*nats.Conn, *validate.Validator) {
	v, err := validate.New(validate.WithTrustedHosts())
	if err != nil {
		b.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: b.TempDir(), SyncInterval: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	var subj room.Subjects
	if _, err := room.EnsureStream(context.Background(), js, room.StreamConfig("", subj, 1), subj); err != nil {
		b.Fatal(err)
	}
	return nc, v
}
