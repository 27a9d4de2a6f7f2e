package ingest_test

import (
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
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
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// BenchmarkMarkedRoom measures what a room's records cost serve once the
// rules are the server's (docs/performance.md, "Records in a room"). It
// fills one marked room with ROOMPUB_BENCH_RECORDS records (default
// 20,000; `make bench-records`) straight onto the stream, each followed by
// its markers as the gate stores them (with ROOMPUB_BENCH_BARE_MARKERS=1
// without the expected last subject sequences, as markers written around
// the gate may be, so each record's evidence reads its key, run and
// decision subjects), a tenth of them on one instance, on an embedded
// server that fsyncs once a minute, and then reports:
//   - restart-ms: a new gate's first record in that room (what a
//     restarted serve pays);
//   - gate-KiB: the live heap the gate adds after 1,000 more records (the
//     embedded server's share of those records included);
//   - server-B/record: the live heap the fill added, per record (the
//     server's per-subject index holds the markers' subjects);
//   - evidence-ms: InstanceRecords of the instance's records;
//   - evidence-cpu-µs/record: the CPU time (user and system, the embedded
//     server's included) that read used, per record read;
//   - floor-reads-ms and floor-sigs-ms: what any reader of those records
//     must do, without judging anything (evidenceFloor): the same reads,
//     and one Ed25519 verification per record.
func BenchmarkMarkedRoom(b *testing.B) {
	n := benchCount(b, "ROOMPUB_BENCH_RECORDS", 20000, 100)
	// fsync once a minute, not per acknowledgement: the fill is millions
	// of messages; what is measured is reads and memory.
	srv, err := embedded.Start(embedded.Options{StoreDir: b.TempDir(), Listen: "127.0.0.1:-1", SyncInterval: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	connect := func() *nats.Conn {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	nc := connect()
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	ctx := context.Background()
	var subj room.Subjects
	cfg := room.StreamConfig("", subj, 1)
	cfg.Metadata[room.MetadataRecordMarkers] = room.MarkersV1
	if _, err := room.EnsureStream(ctx, js, cfg, subj); err != nil {
		b.Fatal(err)
	}
	host, err := events.GenerateHostKey(crand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	v, err := validate.New(validate.WithTrustedHosts(host.NodeID()))
	if err != nil {
		b.Fatal(err)
	}
	const roomID, hot = "room:big", "environment:hot"
	empty := liveHeap()
	start := time.Now()
	markedRoomFill(b, js, host, roomID, hot, n, os.Getenv("ROOMPUB_BENCH_BARE_MARKERS") != "1")
	fill := time.Since(start)
	filled := liveHeap()
	b.Logf("%d records and their markers appended in %s", n, fill.Round(time.Millisecond))
	base := roomtest.ReferenceRecord(b, "verified.json")
	next := 0
	record := func() []byte {
		next++
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		m["room/id"], m["idempotency/key"], m["run/ref"] = roomID, "key-more-"+strconv.Itoa(next), "operator-task-run:more-"+strconv.Itoa(next)
		m["decision/ref"], m["decision/digest"] = decision("more-" + strconv.Itoa(next))
		rec, err := events.SignRecord(m, host)
		if err != nil {
			b.Fatal(err)
		}
		return rec.Canonical()
	}
	var restart, evidence, evidenceCPU, floorReads, floorSigs time.Duration
	var gateHeap int64
	b.ResetTimer()
	for range b.N {
		raw := record()
		before := liveHeap()
		t0 := time.Now()
		g, err := ingest.NewGate(ctx, connect(), ingest.GateOptions{Validator: v})
		if err != nil {
			b.Fatal(err)
		}
		if r := g.AppendRecord(ctx, raw); r.Item.Outcome != room.OutcomeStored {
			b.Fatalf("the restarted gate's first record: %+v", r.Item)
		}
		restart += time.Since(t0)
		more := make([][]byte, 1000)
		for i := range more {
			more[i] = record()
		}
		for i, r := range g.AppendRecords(ctx, more) {
			if r.Item.Outcome != room.OutcomeStored {
				b.Fatalf("record %d: %+v", i, r.Item)
			}
		}
		gateHeap += int64(liveHeap()) - int64(before)
		runtime.KeepAlive(g)
		stopProfile := evidenceProfile(b)
		t0, c0 := time.Now(), cpuNow()
		rep, err := reader.InstanceRecords(ctx, nc, reader.InstanceOptions{Room: roomID, Instance: hot, Validator: v})
		if err != nil {
			b.Fatal(err)
		}
		evidence += time.Since(t0)
		evidenceCPU += cpuNow() - c0
		stopProfile()
		if len(rep.Records) != (n+9)/10 || len(rep.SetAside) != 0 {
			b.Fatalf("evidence: %d records, %d set aside; want %d", len(rep.Records), len(rep.SetAside), (n+9)/10)
		}
		reads, sigs := evidenceFloor(b, nc, roomID, hot, (n+9)/10)
		floorReads += reads
		floorSigs += sigs
	}
	b.StopTimer()
	b.ReportMetric(float64(restart.Microseconds())/1000/float64(b.N), "restart-ms")
	b.ReportMetric(float64(gateHeap)/1024/float64(b.N), "gate-KiB")
	b.ReportMetric(float64(int64(filled)-int64(empty))/float64(n), "server-B/record")
	b.ReportMetric(float64(evidence.Microseconds())/1000/float64(b.N), "evidence-ms")
	b.ReportMetric(float64(evidenceCPU.Microseconds())/float64(b.N*((n+9)/10)), "evidence-cpu-µs/record")
	b.ReportMetric(float64(floorReads.Microseconds())/1000/float64(b.N), "floor-reads-ms")
	b.ReportMetric(float64(floorSigs.Microseconds())/1000/float64(b.N), "floor-sigs-ms")
}

// evidenceFloor times the least work a reader of instance's want records
// in roomID does, judging nothing, to set evidence-ms against:
//   - reads: list the instance's markers in pages of 1,000, then read each
//     record with the messages up to its marker (at most 8), one direct
//     get batch each with 64 in flight on one reply subscription: the
//     requests InstanceRecords sends;
//   - sigs: one Ed25519 verification per record (crypto/ed25519, over the
//     first record's canonical bytes) on every core.
//
// A reader cannot skip either: the records are scattered over the room,
// and each carries its host's signature.
func evidenceFloor(b *testing.B, nc *nats.Conn, roomID, instance string, want int) (reads, sigs time.Duration) {
	b.Helper()
	ctx := context.Background()
	var s room.Subjects
	t0 := time.Now()
	var markers []jsapi.Msg
	for seq := uint64(1); ; {
		ms, err := jsapi.DirectBatch(ctx, nc, room.DefaultStream, jsapi.BatchRequest{Seq: seq, NextBySubj: s.InstanceMarkers(roomID, instance), Batch: 1000}, room.DefaultTimeout)
		if err != nil {
			b.Fatal(err)
		}
		markers = append(markers, ms...)
		if len(ms) == 0 || ms[len(ms)-1].Pending == 0 {
			break
		}
		seq = ms[len(ms)-1].Seq + 1
	}
	g, err := jsapi.NewGetter(nc, room.DefaultStream, room.DefaultTimeout)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	records := make([][]byte, len(markers))
	next := make(chan int)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				mk, err := room.ParseMarker(markers[i].Data)
				if err != nil {
					panic(err)
				}
				batch, err := g.Batch(ctx, jsapi.BatchRequest{Seq: mk.RecordSeq(markers[i].Seq), Batch: int(min(mk.Offset, 8))})
				if err != nil || len(batch) == 0 {
					panic(fmt.Sprintf("record of the marker at %d: %d messages, %v", markers[i].Seq, len(batch), err))
				}
				records[i] = batch[0].Data
			}
		}()
	}
	for i := range markers {
		next <- i
	}
	close(next)
	wg.Wait()
	reads = time.Since(t0)
	if len(records) != want {
		b.Fatalf("floor: %d records read; want %d", len(records), want)
	}

	pub, priv, err := ed25519.GenerateKey(crand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	msg := records[0]
	sig := ed25519.Sign(priv, msg)
	t0 = time.Now()
	var failed atomic.Int64
	workers := runtime.GOMAXPROCS(0)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < want; i += workers {
				if !ed25519.Verify(pub, msg, sig) {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	sigs = time.Since(t0)
	if failed.Load() != 0 {
		b.Fatalf("floor: %d signatures did not verify", failed.Load())
	}
	return reads, sigs
}

// evidenceProfile starts a CPU profile of the evidence read into the file
// ROOMPUB_BENCH_EVIDENCE_CPUPROFILE names, if set, and returns what stops
// it: the fill would drown the read in a profile of the whole run.
func evidenceProfile(b *testing.B) (stop func()) {
	name := os.Getenv("ROOMPUB_BENCH_EVIDENCE_CPUPROFILE")
	if name == "" {
		return func() {}
	}
	f, err := os.Create(name)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// markedRoomFill appends n signed records of roomID with their markers,
// as the gate would (with its expected last subject sequences when
// expect), with asynchronous publishes in order on one connection; every
// tenth is observed on hot.
func markedRoomFill(b *testing.B, js jetstream.JetStream, key *events.HostKey, roomID, hot string, n int, expect bool) {
	b.Helper()
	base := roomtest.ReferenceRecord(b, "verified.json")
	recs := make([]*events.Record, n)
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				env := "environment:cold"
				if i%10 == 0 {
					env = hot
				}
				m := map[string]any{}
				for k, v := range base {
					m[k] = v
				}
				m["room/id"], m["idempotency/key"], m["run/ref"] = roomID, "key-"+strconv.Itoa(i), "operator-task-run:"+strconv.Itoa(i)
				m["environment/ref"], m["evidence"] = env, roomtest.EvidenceOn(env, 1)
				m["decision/ref"], m["decision/digest"] = decision("d" + strconv.Itoa(i))
				rec, err := events.SignRecord(m, key)
				if err != nil {
					panic(err)
				}
				recs[i] = rec
			}
		}()
	}
	wg.Wait()
	var s room.Subjects
	var stored, last uint64 // messages so far; the room's last record's stream sequence
	for i, rec := range recs {
		// The gate's batch (ingest.MarkerBatch) with the expected last
		// subject sequences it sets, published one by one: the record
		// after the room's last, each key, run and decision marker first on
		// its subject (each record has its own), the instance marker
		// unconstrained. An atomic batch costs the server a store of its
		// own and a sync (over 10 ms each here): 100,000 would take half
		// an hour to fill.
		msgs := append([]*nats.Msg{{Subject: s.Records(roomID), Data: rec.Canonical(), Header: nats.Header{}}}, ingest.MarkerBatch(s, rec, i == 0, uint64(i))...)
		for _, m := range msgs[1:] {
			if p, err := s.Parse(m.Subject); err == nil && p.Marker != room.MarkInstance && expect {
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
			}
		}
		if expect {
			msgs[0].Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
		}
		last = stored + 1
		stored += uint64(len(msgs))
		for _, m := range msgs {
			if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
				b.Fatal(err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Minute):
		b.Fatal("the fill was not acknowledged in 10 minutes")
	}
}

// decision returns a decision/ref and its decision/digest of its own for
// name.
func decision(name string) (ref, digest string) {
	sum := sha256.Sum256([]byte(name))
	digest = events.DigestPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
	return "corpus-experiment-chair-decision:" + digest, digest
}
