package ingest_test

import (
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
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
// decision subjects), one in ROOMPUB_BENCH_INSTANCE_EVERY of them (default
// 10; `make bench-records INSTANCE_EVERY=100`) on one instance, on an
// embedded server that fsyncs once a minute (or, with
// ROOMPUB_BENCH_SERVER=URL, on that server, whose heap, reads and store are
// then not this process's: the three metrics of them are left out), and
// then reports:
//   - restart-ms: a new gate's first record in that room (what a
//     restarted serve pays);
//   - gate-KiB: the live heap the gate adds after 1,000 more records (the
//     embedded server's share of those records included);
//   - server-B/record: the live heap the fill added, per record (the
//     server's per-subject index holds the markers' subjects);
//   - evidence-ms: InstanceRecords of the instance's records;
//   - evidence-read-MB: what the process read from files meanwhile
//     (/proc/self/io's rchar: the server's block loads; 0 off Linux), and
//     store-MB the store's size at the end;
//   - evidence-again-ms: the same read again, after the floor's (below):
//     the server's state of the room's blocks is then fresh;
//   - evidence-cpu-µs/record: the CPU time (user and system, the embedded
//     server's included) that read used, per record read;
//   - floor-reads-ms and floor-sigs-ms: what any reader of those records
//     must do, without judging anything (evidenceFloor): the same reads,
//     and one Ed25519 verification per record; floor-list-ms: of the
//     reads, the time spent waiting for the pages of instance markers.
func BenchmarkMarkedRoom(b *testing.B) {
	n := benchCount(b, "ROOMPUB_BENCH_RECORDS", 20000, 100)
	every := benchCount(b, "ROOMPUB_BENCH_INSTANCE_EVERY", 10, 1)
	hotRecords := (n + every - 1) / every // records i with i%every == 0
	// fsync once a minute, not per acknowledgement: the fill is millions
	// of messages; what is measured is reads and memory.
	storeDir, url := "", os.Getenv("ROOMPUB_BENCH_SERVER")
	if url == "" {
		storeDir = b.TempDir()
		srv, err := embedded.Start(embedded.Options{StoreDir: storeDir, Listen: "127.0.0.1:-1", SyncInterval: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Shutdown()
		url = srv.ClientURL()
	}
	connect := func() *nats.Conn {
		nc, err := nats.Connect(url)
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
	markedRoomFill(b, js, host, roomID, hot, n, every, os.Getenv("ROOMPUB_BENCH_BARE_MARKERS") != "1")
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
	var evidenceRead uint64 // bytes the process read from files, the store's blocks
	var restart, evidence, again, evidenceCPU, floorList, floorReads, floorSigs time.Duration
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
		t0, c0, r0 := time.Now(), cpuNow(), readBytes()
		rep, err := reader.InstanceRecords(ctx, nc, reader.InstanceOptions{Room: roomID, Instance: hot, Validator: v})
		if err != nil {
			b.Fatal(err)
		}
		evidence += time.Since(t0)
		evidenceCPU += cpuNow() - c0
		evidenceRead += readBytes() - r0
		stopProfile()
		if len(rep.Records) != hotRecords || len(rep.SetAside) != 0 {
			b.Fatalf("evidence: %d records, %d set aside; want %d", len(rep.Records), len(rep.SetAside), hotRecords)
		}
		list, reads, sigs := evidenceFloor(b, nc, roomID, hot, hotRecords)
		t0 = time.Now()
		if _, err := reader.InstanceRecords(ctx, nc, reader.InstanceOptions{Room: roomID, Instance: hot, Validator: v}); err != nil {
			b.Fatal(err)
		}
		again += time.Since(t0)
		floorList += list
		floorReads += reads
		floorSigs += sigs
	}
	b.StopTimer()
	b.ReportMetric(float64(restart.Microseconds())/1000/float64(b.N), "restart-ms")
	b.ReportMetric(float64(gateHeap)/1024/float64(b.N), "gate-KiB")
	if storeDir != "" { // the server in this process: its heap, its reads, its store
		b.ReportMetric(float64(int64(filled)-int64(empty))/float64(n), "server-B/record")
		b.ReportMetric(float64(evidenceRead)/1e6/float64(b.N), "evidence-read-MB")
		b.ReportMetric(float64(dirBytes(b, storeDir))/1e6, "store-MB")
	}
	b.ReportMetric(float64(evidence.Microseconds())/1000/float64(b.N), "evidence-ms")
	b.ReportMetric(float64(evidenceCPU.Microseconds())/float64(b.N*hotRecords), "evidence-cpu-µs/record")
	b.ReportMetric(float64(again.Microseconds())/1000/float64(b.N), "evidence-again-ms")
	b.ReportMetric(float64(floorList.Microseconds())/1000/float64(b.N), "floor-list-ms")
	b.ReportMetric(float64(floorReads.Microseconds())/1000/float64(b.N), "floor-reads-ms")
	b.ReportMetric(float64(floorSigs.Microseconds())/1000/float64(b.N), "floor-sigs-ms")
}

// evidenceFloor times the least work a reader of instance's want records
// in roomID does, judging nothing, to set evidence-ms against:
//   - reads: list the instance's markers in pages of 1,000 (list: the
//     time spent waiting for those pages), and for each page, before the
//     next is listed, read each record with the messages up to its marker
//     (at most 8), one direct get batch each with 64 in flight on one
//     reply subscription: the requests InstanceRecords sends;
//   - sigs: one Ed25519 verification per record (crypto/ed25519, over the
//     first record's canonical bytes) on every core.
//
// A reader cannot skip either: the records are scattered over the room,
// and each carries its host's signature.
func evidenceFloor(b *testing.B, nc *nats.Conn, roomID, instance string, want int) (list, reads, sigs time.Duration) {
	b.Helper()
	ctx := context.Background()
	var s room.Subjects
	g, err := jsapi.NewGetter(nc, room.DefaultStream, room.DefaultTimeout)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	var records [][]byte
	type job struct {
		m   jsapi.Msg
		out *[]byte
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				mk, err := room.ParseMarker(j.m.Data)
				if err != nil {
					panic(err)
				}
				batch, err := g.Batch(ctx, jsapi.BatchRequest{Seq: mk.RecordSeq(j.m.Seq), Batch: int(min(mk.Offset, 8))})
				if err != nil || len(batch) == 0 {
					panic(fmt.Sprintf("record of the marker at %d: %d messages, %v", j.m.Seq, len(batch), err))
				}
				*j.out = batch[0].Data
			}
		}()
	}
	t0 := time.Now()
	var pages [][][]byte
	for seq := uint64(1); ; {
		t1 := time.Now()
		ms, err := jsapi.DirectBatch(ctx, nc, room.DefaultStream, jsapi.BatchRequest{Seq: seq, NextBySubj: s.InstanceMarkers(roomID, instance), Batch: 1000}, room.DefaultTimeout)
		list += time.Since(t1)
		if err != nil {
			b.Fatal(err)
		}
		page := make([][]byte, len(ms))
		pages = append(pages, page)
		for i := range ms {
			jobs <- job{ms[i], &page[i]}
		}
		if len(ms) == 0 || ms[len(ms)-1].Pending == 0 {
			break
		}
		seq = ms[len(ms)-1].Seq + 1
	}
	close(jobs)
	wg.Wait()
	for _, p := range pages {
		records = append(records, p...)
	}
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
	return list, reads, sigs
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
// expect), with asynchronous publishes in order on one connection; record
// i is observed on hot when i is a multiple of every.
func markedRoomFill(b *testing.B, js jetstream.JetStream, key *events.HostKey, roomID, hot string, n, every int, expect bool) {
	b.Helper()
	base := roomtest.ReferenceRecord(b, "verified.json")
	// Records are signed on every core a chunk at a time, then published
	// in order: a signed record holds its parsed form, and a million of
	// them at once do not fit in memory.
	const chunk = 4096
	recs := make([]*events.Record, chunk)
	sign := func(from int) []*events.Record {
		to := min(from+chunk, n)
		var wg sync.WaitGroup
		workers := runtime.GOMAXPROCS(0)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := from + w; i < to; i += workers {
					env := "environment:cold"
					if i%every == 0 {
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
					recs[i-from] = rec
				}
			}()
		}
		wg.Wait()
		return recs[:to-from]
	}
	var s room.Subjects
	var stored, last uint64 // messages so far; the room's last record's stream sequence
	for from := 0; from < n; from += chunk {
		for j, rec := range sign(from) {
			i := from + j
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
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Minute):
		b.Fatal("the fill was not acknowledged in 10 minutes")
	}
}

// readBytes is what the process has read through read system calls so
// far (/proc/self/io's rchar), in bytes; 0 where that file is not.
func readBytes() uint64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, ln := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(ln, "rchar: "); ok {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return 0
}

// dirBytes is the size of the files under dir, in bytes.
func dirBytes(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// decision returns a decision/ref and its decision/digest of its own for
// name.
func decision(name string) (ref, digest string) {
	sum := sha256.Sum256([]byte(name))
	digest = events.DigestPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
	return "corpus-experiment-chair-decision:" + digest, digest
}
