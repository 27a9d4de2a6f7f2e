package reader_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// The read path's yardstick in Go benchmarks: an embedded server holding
// benchChains chains of benchPer valid entries (the sample run's entries,
// about 600 bytes each, relinked), read back by a raw ordered consumer
// and by reader.Audit, each benchmark on its own server and temporary
// store. ROOMPUB_BENCH_CHAINS and ROOMPUB_BENCH_PER_CHAIN change the
// shape (default 20 × 1,000).

var (
	benchChains = envInt("ROOMPUB_BENCH_CHAINS", 20)
	benchPer    = envInt("ROOMPUB_BENCH_PER_CHAIN", 1000)

	// The entries are built once per process; each benchmark has its own
	// server on its own temporary store, filled with them.
	benchOnce  sync.Once
	benchKeys  []events.ChainKey
	benchLines [][][]byte
)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

const benchRoom = "room:bench"

// sampleMembers returns the members of the sample run's entries, to be
// relinked into chains of any length.
func sampleMembers(tb testing.TB) []map[string]any {
	tb.Helper()
	f, err := os.Open(roomtest.Testdata("samples/capsules/slugify-run/journal.ndjson"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			tb.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// benchEntries builds chain c's n valid entries as canonical lines.
func benchEntries(tb testing.TB, samples []map[string]any, c, n int) (events.ChainKey, [][]byte) {
	tb.Helper()
	key := events.ChainKey{RunID: fmt.Sprintf("run-bench-%03d", c), CapsuleID: fmt.Sprintf("cap-bench-%03d", c)}
	parent := events.ZeroHash
	lines := make([][]byte, 0, n)
	for i := range n {
		m := map[string]any{}
		for k, v := range samples[i%len(samples)] {
			m[k] = v
		}
		delete(m, "entry_hash")
		m["run_id"], m["capsule_id"], m["seq"], m["parent_hash"] = key.RunID, key.CapsuleID, json.Number(strconv.Itoa(i)), parent
		e, err := events.NewEntry(m)
		if err != nil {
			tb.Fatal(err)
		}
		lines = append(lines, e.Canonical())
		parent = e.EntryHash()
	}
	return key, lines
}

// fillBench publishes chains × per entries, the chains interleaved in
// rounds of 100 entries (as parallel harnesses would), with async
// publishes on subjects the gate uses.
func fillBench(tb testing.TB, js jetstream.JetStream, chains, per int) int {
	tb.Helper()
	benchOnce.Do(func() {
		samples := sampleMembers(tb)
		benchKeys = make([]events.ChainKey, chains)
		benchLines = make([][][]byte, chains)
		var wg sync.WaitGroup
		for c := range chains {
			wg.Go(func() { benchKeys[c], benchLines[c] = benchEntries(tb, samples, c, per) })
		}
		wg.Wait()
	})
	keys, all := benchKeys, benchLines
	var subj room.Subjects
	n := 0
	for from := 0; from < per; from += 100 {
		for c := range chains {
			s := subj.Journal(benchRoom, keys[c])
			for i := from; i < min(from+100, per); i++ {
				for {
					_, err := js.PublishAsync(s, all[c][i], jetstream.WithMsgID(keys[c].RunID+"/"+strconv.Itoa(i)), jetstream.WithStallWait(10*time.Second))
					if err == nil {
						break
					}
					if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
						tb.Fatal(err)
					}
					<-js.PublishAsyncComplete() // a loaded machine: let the server catch up
				}
				n++
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		tb.Fatal("publish did not complete")
	}
	return n
}

// benchStream starts a server on a temporary store, removed when the
// benchmark ends, and fills it.
func benchStream(b *testing.B) (jetstream.JetStream, int) {
	b.Helper()
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
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	var subj room.Subjects
	if _, err := room.EnsureStream(context.Background(), js, room.StreamConfig("", subj, 1), subj); err != nil {
		b.Fatal(err)
	}
	return js, fillBench(b, js, benchChains, benchPer)
}

// BenchmarkRawOrderedRead reads every message of the stream with an
// ordered consumer and does nothing else but take its metadata.
func BenchmarkRawOrderedRead(b *testing.B) {
	js, total := benchStream(b)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		st, err := js.Stream(ctx, room.DefaultStream)
		if err != nil {
			b.Fatal(err)
		}
		cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			b.Fatal(err)
		}
		it, err := cons.Messages()
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for n < total {
			msg, err := it.Next()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := msg.Metadata(); err != nil {
				b.Fatal(err)
			}
			n++
		}
		it.Stop()
	}
	b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkAudit audits the same stream with reader.Audit, and reports the
// peak heap in use (sampled every 10,000 messages; it includes the
// embedded server's).
func BenchmarkAudit(b *testing.B) {
	js, total := benchStream(b)
	v, err := validate.New()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	var peak uint64 // heap in use, sampled every 10,000 messages
	for b.Loop() {
		rep, err := reader.Audit(ctx, js, reader.AuditOptions{Validator: v, Progress: func(_, _ uint64) {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}})
		if err != nil {
			b.Fatal(err)
		}
		if !rep.Clean() || rep.Totals.Entries != uint64(total) {
			b.Fatalf("audit: clean %v, %d entries of %d: %+v", rep.Clean(), rep.Totals.Entries, total, rep.Violations)
		}
	}
	b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}
