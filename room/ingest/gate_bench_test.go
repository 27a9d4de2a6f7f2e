package ingest_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/validate"
)

// gateBenchEnv is one embedded server (sync_interval: always, as publisher
// serve runs it) with the room stream, a gate and the ingest service. The
// gate attests with a publisher key and a checkpointer reads the stream, as
// `publisher serve --publisher-key` runs them (attested), unless
// ROOMPUB_BENCH_NO_ATTEST is set; the raw yardsticks run neither.
type gateBenchEnv struct {
	srv    *embedded.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	gate   *ingest.Gate
	svc    *ingest.Service
	client *client.Client
	key    *events.HostKey
}

func newGateBenchEnv(b *testing.B) *gateBenchEnv {
	b.Helper()
	return newGateBenchEnvWith(b, os.Getenv("ROOMPUB_BENCH_NO_ATTEST") == "")
}

// newRawBenchEnv is the environment of a raw yardstick: no checkpointer
// reads what it writes.
func newRawBenchEnv(b *testing.B) *gateBenchEnv {
	b.Helper()
	return newGateBenchEnvWith(b, false)
}

func newGateBenchEnvWith(b *testing.B, attest bool) *gateBenchEnv {
	b.Helper()
	key, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	v, err := validate.New(validate.WithTrustedHosts(key.NodeID()))
	if err != nil {
		b.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	be := &gateBenchEnv{srv: srv, key: key}
	b.Cleanup(func() {
		if be.svc != nil {
			_ = be.svc.Stop()
		}
		if be.nc != nil {
			be.nc.Close()
		}
		srv.Shutdown()
	})
	if be.nc, err = nats.Connect(srv.ClientURL()); err != nil {
		b.Fatal(err)
	}
	be.js, _ = jetstream.New(be.nc)
	var subj room.Subjects
	if _, err := room.EnsureStream(context.Background(), be.js, room.StreamConfig("", subj, 1), subj); err != nil {
		b.Fatal(err)
	}
	gopts := ingest.GateOptions{Validator: v}
	if attest {
		pub, err := events.GenerateHostKey(rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		gopts.PublisherKey = pub
		// ROOMPUB_BENCH_NO_CHECKPOINTER: attestations only, what signing
		// costs alone.
		if os.Getenv("ROOMPUB_BENCH_NO_CHECKPOINTER") == "" {
			ckNC, err := nats.Connect(srv.ClientURL())
			if err != nil {
				b.Fatal(err)
			}
			// Serve's defaults: every 10,000 leaves or 10s.
			ckp, err := checkpointer.Start(context.Background(), ckNC, checkpointer.Options{Key: pub})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = ckp.Stop(ctx)
				ckNC.Close()
			})
			gopts.Attested = ckp
		}
	}
	if be.gate, err = ingest.NewGate(context.Background(), be.nc, gopts); err != nil {
		b.Fatal(err)
	}
	if be.svc, err = ingest.StartService(be.nc, be.gate, ingest.ServiceOptions{Concurrency: benchConcurrency()}); err != nil {
		b.Fatal(err)
	}
	be.client = client.New(be.nc, client.Options{})
	return be
}

// gateBenchChains builds n chains of size entries each (capsules cap-<from+i>).
func gateBenchChains(b *testing.B, from, n, size int) [][]*events.Entry {
	b.Helper()
	out := make([][]*events.Entry, n)
	for i := range out {
		out[i], _ = roomtest.Journal(b, "run-b", "cap-"+strconv.Itoa(from+i), size)
	}
	return out
}

// BenchmarkAppendJournal1000 is the gate's path for one request of 1,000
// new entries of one chain (check, chain, store), without the service.
func BenchmarkAppendJournal1000(b *testing.B) {
	be := newGateBenchEnv(b)
	ctx := context.Background()
	var cpu cpuMeter
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		body := roomtest.Lines(gateBenchChains(b, i, 1, 1000)[0])
		b.StartTimer()
		cpu.start()
		r, err := be.gate.AppendJournal(ctx, "room:bench", body, nil)
		cpu.stop()
		if err != nil || r.Stored != 1000 {
			b.Fatalf("%v %+v", err, r.Items[r.Stored])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/entry")
	cpu.report(b, b.N*1000, "entry")
}

// BenchmarkClientJournal1000 is roompub's full path for 1,000 new entries
// of one chain: cl, ingest service, gate, store.
func BenchmarkClientJournal1000(b *testing.B) {
	be := newGateBenchEnv(b)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		body := roomtest.Lines(gateBenchChains(b, i, 1, 1000)[0])
		b.StartTimer()
		r, err := be.client.AppendJournal(ctx, "room:bench", nil, body)
		if err != nil || r.Stored != 1000 {
			b.Fatalf("%v %+v", err, r)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/entry")
}

// rawJournalBatch is the fastest raw way JetStream stores one chain's entries
// with the gate's guarantees: one atomic batch, the expected last subject
// sequence on the first message and Nats-Msg-Id on each.
func rawJournalBatch(ctx context.Context, js jetstream.JetStream, subj string, es []*events.Entry, last uint64) (*jetstreamext.BatchAck, error) {
	msgs := make([]*nats.Msg, len(es))
	for i, e := range es {
		msgs[i] = &nats.Msg{Subject: subj, Data: e.Canonical(), Header: nats.Header{}}
		msgs[i].Header.Set(jetstream.MsgIDHeader, e.EntryHash())
	}
	msgs[0].Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
	msgs[0].Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, subj)
	return jetstreamext.PublishMsgBatch(ctx, js, msgs)
}

// BenchmarkRawAtomicBatch1000 is the raw yardstick for
// BenchmarkAppendJournal1000 on the same server and bytes.
func BenchmarkRawAtomicBatch1000(b *testing.B) {
	be := newRawBenchEnv(b)
	ctx := context.Background()
	var cpu cpuMeter
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		es := gateBenchChains(b, i, 1, 1000)[0]
		b.StartTimer()
		cpu.start()
		_, err := rawJournalBatch(ctx, be.js, "rooms.bench.journal.run-b.cap-"+strconv.Itoa(i), es, 0)
		cpu.stop()
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/entry")
	cpu.report(b, b.N*1000, "entry")
}

// BenchmarkClientJournal100Chains ships 100 chains of 100 entries at once,
// one goroutine per chain, through the client (the 100-chains case of
// make bench, smaller).
func BenchmarkClientJournal100Chains(b *testing.B) {
	be := newGateBenchEnv(b)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		chains := gateBenchChains(b, i*100, 100, 100)
		b.StartTimer()
		var wg sync.WaitGroup
		errs := make(chan error, len(chains))
		for _, es := range chains {
			wg.Go(func() {
				r, err := be.client.AppendJournal(ctx, "room:bench", nil, roomtest.Lines(es))
				if err == nil && r.Stored != len(es) {
					err = fmt.Errorf("stored %d of %d: %+v", r.Stored, len(es), r)
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100*100), "ns/entry")
}

// BenchmarkRawAtomicBatch100Chains is the raw yardstick for
// BenchmarkClientJournal100Chains: 100 atomic batches at once, at most 40
// in flight (the server allows 50 per stream).
func BenchmarkRawAtomicBatch100Chains(b *testing.B) {
	be := newRawBenchEnv(b)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		chains := gateBenchChains(b, i*100, 100, 100)
		b.StartTimer()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 40)
		errs := make(chan error, len(chains))
		for j, es := range chains {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				_, err := rawJournalBatch(ctx, be.js, "rooms.bench.journal.run-b.cap-"+strconv.Itoa(i*100+j), es, 0)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100*100), "ns/entry")
}

// gateBenchRecords signs n records of one room, each its own key and run.
func (be *gateBenchEnv) gateBenchRecords(b *testing.B, from, n int) []*events.Record {
	b.Helper()
	base := roomtest.ReferenceRecord(b, "verified.json")
	out := make([]*events.Record, n)
	for i := range out {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		id := strconv.Itoa(from + i)
		m["room/id"] = "room:bench"
		m["idempotency/key"] = "bench-key-" + id
		m["run/ref"] = "operator-task-run:bench-" + id
		delete(m, "execution/ref")
		delete(m, "signature")
		rec, err := events.SignRecord(m, be.key)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = rec
	}
	return out
}

// BenchmarkClientRecord is roompub's full path for one pre-signed record.
func BenchmarkClientRecord(b *testing.B) {
	be := newGateBenchEnv(b)
	ctx := context.Background()
	recs := be.gateBenchRecords(b, 0, 5000)
	b.ReportAllocs()
	var cpu cpuMeter
	i, made := 0, len(recs)
	cpu.start()
	for b.Loop() {
		if i == len(recs) {
			b.StopTimer()
			cpu.stop()
			recs = be.gateBenchRecords(b, made, 5000)
			i, made = 0, made+len(recs)
			cpu.start()
			b.StartTimer()
		}
		r, err := be.client.AppendRecord(ctx, recs[i].Canonical())
		if err != nil || r.Item.Outcome != room.OutcomeStored {
			b.Fatalf("%v %+v", err, r)
		}
		i++
	}
	cpu.stop()
	cpu.report(b, b.N, "record")
}

// BenchmarkClientRecords is BenchmarkClientRecord through
// Client.AppendRecords: the same records, 1,000 per call (four requests),
// per record.
func BenchmarkClientRecords(b *testing.B) {
	be := newGateBenchEnv(b)
	ctx := context.Background()
	const perCall = 1000
	b.ReportAllocs()
	var cpu cpuMeter
	done := 0
	for done < b.N {
		n := min(perCall, b.N-done)
		b.StopTimer()
		recs := be.gateBenchRecords(b, done, n)
		raws := make([][]byte, n)
		for i, rec := range recs {
			raws[i] = rec.Canonical()
		}
		cpu.start()
		b.StartTimer()
		replies, err := be.client.AppendRecords(ctx, raws)
		b.StopTimer()
		cpu.stop()
		if err != nil || len(replies) != n {
			b.Fatalf("%v: %d replies", err, len(replies))
		}
		for _, r := range replies {
			if r.Item.Outcome != room.OutcomeStored {
				b.Fatalf("%+v", r)
			}
		}
		done += n
	}
	cpu.report(b, b.N, "record")
}

// BenchmarkRawRecord is the raw yardstick for BenchmarkClientRecord: one
// synchronous publish with the headers the gate sets.
func BenchmarkRawRecord(b *testing.B) {
	be := newRawBenchEnv(b)
	ctx := context.Background()
	recs := be.gateBenchRecords(b, 0, 5000)
	b.ReportAllocs()
	var last uint64
	var cpu cpuMeter
	i, made := 0, len(recs)
	cpu.start()
	for b.Loop() {
		if i == len(recs) {
			b.StopTimer()
			cpu.stop()
			recs = be.gateBenchRecords(b, made, 5000)
			i, made = 0, made+len(recs)
			cpu.start()
			b.StartTimer()
		}
		msg := &nats.Msg{Subject: "rooms.bench.exec", Data: recs[i].Canonical(), Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, recs[i].ContentDigest())
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
		ack, err := be.js.PublishMsg(ctx, msg)
		if err != nil {
			b.Fatal(err)
		}
		last = ack.Sequence
		i++
	}
	cpu.stop()
	cpu.report(b, b.N, "record")
}

// cpuMeter sums the process's CPU time (user and system, every goroutine:
// the gate, the embedded server, the checkpointer) over the timed parts of
// a benchmark. On a shared machine wall time says little about what a
// change costs; CPU time does.
type cpuMeter struct{ sum, at time.Duration }

func (m *cpuMeter) start() { m.at = cpuNow() }
func (m *cpuMeter) stop()  { m.sum += cpuNow() - m.at }

// report adds the metric cpu-ns/<unit>: CPU time per n units.
func (m *cpuMeter) report(b *testing.B, n int, unit string) {
	b.ReportMetric(float64(m.sum.Nanoseconds())/float64(n), "cpu-ns/"+unit)
}

// benchConcurrency is ROOMPUB_BENCH_CONCURRENCY, or 0 (the default).
func benchConcurrency() int {
	n, _ := strconv.Atoi(os.Getenv("ROOMPUB_BENCH_CONCURRENCY"))
	return n
}

// BenchmarkGateRecord is the gate's record path alone (no service), and
// BenchmarkGateRecordCatchingUp the path before the gate kept its own room
// index (the index brought up to the stream head, one leader read, before
// every record).
func BenchmarkGateRecord(b *testing.B) { benchGateRecord(b, (*ingest.Gate).AppendRecord) }

func BenchmarkGateRecordCatchingUp(b *testing.B) {
	benchGateRecord(b, (*ingest.Gate).AppendRecordCatchingUp)
}

func benchGateRecord(b *testing.B, appendRecord func(*ingest.Gate, context.Context, []byte) room.RecordReply) {
	be := newGateBenchEnv(b)
	ctx := context.Background()
	recs := be.gateBenchRecords(b, 0, 5000)
	b.ReportAllocs()
	i, made := 0, len(recs)
	for b.Loop() {
		if i == len(recs) {
			b.StopTimer()
			recs = be.gateBenchRecords(b, made, 5000)
			i, made = 0, made+len(recs)
			b.StartTimer()
		}
		if r := appendRecord(be.gate, ctx, recs[i].Canonical()); r.Item.Outcome != room.OutcomeStored {
			b.Fatalf("%+v", r)
		}
		i++
	}
}

// BenchmarkAppendJournal1000OneByOne is BenchmarkAppendJournal1000 through
// the gate's journal path before atomic batches (one append per entry).
func BenchmarkAppendJournal1000OneByOne(b *testing.B) {
	be := newGateBenchEnv(b)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		body := roomtest.Lines(gateBenchChains(b, i, 1, 1000)[0])
		b.StartTimer()
		r, err := be.gate.AppendJournalOneByOne(ctx, "room:bench", body, nil)
		if err != nil || r.Stored != 1000 {
			b.Fatalf("%v %+v", err, r)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/entry")
}
