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

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/validate"
)

// BenchmarkGateChainsHeap ships chains of two entries each through one
// gate (AppendJournal, 32 at once, on the embedded server as serve runs it)
// and reports, after a forced GC, the live heap per chain shipped: of the
// whole process (the embedded server's own index of subjects included) and
// of what the gate alone keeps (the live heap with the gate less the live
// heap once it is dropped), with the chain states it holds. Each size is
// one run: -benchtime=1x. ROOMPUB_BENCH_CHAINS sets the sizes
// (comma-separated; default 10000,100000).
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
	for _, n := range sizes {
		b.Run(fmt.Sprint("chains=", n), func(b *testing.B) {
			be := newRawBenchEnv(b)
			v, err := validate.New(validate.WithTrustedHosts(be.key.NodeID()))
			if err != nil {
				b.Fatal(err)
			}
			g, err := ingest.NewGate(context.Background(), be.nc, ingest.GateOptions{Validator: v})
			if err != nil {
				b.Fatal(err)
			}
			before := liveHeap()
			for i := 0; b.Loop(); i++ {
				shipChains(b, g, fmt.Sprint("run-", i), n)
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

// shipChains stores n chains of two entries of run in room:heap through g.
func shipChains(b *testing.B, g *ingest.Gate, run string, n int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				body := twoEntries(b, run, fmt.Sprint("capsule-", i))
				r, err := g.AppendJournal(context.Background(), "room:heap", body, nil)
				if err != nil || r.Stored != 2 {
					b.Errorf("chain %d: %+v %v", i, r, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// twoEntries is a journal of two entries of chain run/capsule.
func twoEntries(b *testing.B, run, capsule string) []byte {
	var out []byte
	parent := events.ZeroHash
	for seq := range 2 {
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
		out = append(append(out, e.Canonical()...), '\n')
		parent = e.EntryHash()
	}
	return out
}

// liveHeap is the live heap in bytes after a forced GC.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
