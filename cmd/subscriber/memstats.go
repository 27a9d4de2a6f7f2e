package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"sync"
	"sync/atomic"
)

// Memory facts for measurements (the bench's read row, docs/performance.md):
// with memStatsEnv set, the subscriber prints one line on stderr as it
// exits, memStatsPrefix and a JSON memStats; with heapProfileEnv set to a
// file name, it writes a heap profile (runtime/pprof) there each time the
// live heap passes its peak by a tenth, so the file holds the profile of
// about the peak. Neither changes what a command does or prints on stdout.
const (
	memStatsEnv    = "ROOMPUB_SUBSCRIBER_MEMSTATS"
	heapProfileEnv = "ROOMPUB_SUBSCRIBER_HEAPPROFILE"
	memStatsPrefix = "subscriber memstats: "
)

// memStats is what memStatsEnv prints: the largest live heap a garbage
// collection found (runtime/metrics /gc/heap/live:bytes, read after every
// cycle), the collections, and the collector settings the process ran with.
type memStats struct {
	PeakLiveHeap uint64 `json:"peak_live_heap_bytes"`
	GCCycles     uint64 `json:"gc_cycles"`
	GOGC         int    `json:"gogc"`               // -1: off
	MemoryLimit  int64  `json:"memory_limit_bytes"` // math.MaxInt64: none
}

// memWatch follows the live heap after each garbage collection: a
// finalizer on a sentinel runs once per cycle that found it unreachable,
// and arms the next one.
type memWatch struct {
	mu      sync.Mutex
	samples []metrics.Sample
	peak    uint64
	cycles  uint64
	profile string // heapProfileEnv
	written uint64 // the live heap at the last profile written
	stopped atomic.Bool
}

// sentinel is the watch's per-cycle object (a pointer field keeps it out of
// the tiny allocator, whose blocks are freed late).
type sentinel struct{ w *memWatch }

// startMemWatch starts watching when memStatsEnv or heapProfileEnv is set,
// else returns nil.
func startMemWatch() *memWatch {
	profile := os.Getenv(heapProfileEnv)
	if os.Getenv(memStatsEnv) == "" && profile == "" {
		return nil
	}
	w := &memWatch{profile: profile, samples: []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}}
	w.arm()
	return w
}

func (w *memWatch) arm() {
	runtime.SetFinalizer(&sentinel{w: w}, func(s *sentinel) {
		s.w.sample()
		if !s.w.stopped.Load() {
			s.w.arm()
		}
	})
}

// sample reads the live heap the last collection found.
func (w *memWatch) sample() {
	w.mu.Lock()
	defer w.mu.Unlock()
	metrics.Read(w.samples)
	live := w.samples[0].Value.Uint64()
	w.cycles = w.samples[1].Value.Uint64()
	if live <= w.peak {
		return
	}
	w.peak = live
	if w.profile != "" && live > w.written+w.written/10 {
		w.written = live
		if f, err := os.Create(w.profile); err == nil {
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			_ = f.Close()
		}
	}
}

// report stops the watch and prints its facts on errOut when memStatsEnv
// is set.
func (w *memWatch) report(errOut io.Writer) {
	if w == nil {
		return
	}
	w.stopped.Store(true)
	w.sample()
	if os.Getenv(memStatsEnv) == "" {
		return
	}
	w.mu.Lock()
	s := memStats{PeakLiveHeap: w.peak, GCCycles: w.cycles, GOGC: debug.SetGCPercent(-1), MemoryLimit: debug.SetMemoryLimit(-1)}
	w.mu.Unlock()
	debug.SetGCPercent(s.GOGC)
	b, _ := json.Marshal(s)
	fmt.Fprintf(errOut, "%s%s\n", memStatsPrefix, b)
}
