package reader_test

import (
	"context"
	"crypto/rand"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// The read path with attestations: the benchmark stream of readbench_test.go
// (benchChains × benchPer entries), every entry attested by one publisher
// key in atomic batches of benchAttestBatch entries of one chain (one
// signature per batch, as the gate signs its batches of up to 1,000),
// stored batch after batch, chains interleaved by batch, and a checkpoint
// of the room after every benchCheckpointEvery entries (publisher serve's
// default) and at the end, read raw and by a trusting reader.Audit
// (optimistic verification).

const (
	benchCheckpointEvery = 1000
	benchAttestBatch     = 1000
)

var (
	attBenchOnce  sync.Once
	attBenchKey   *events.HostKey
	attBenchLines [][][]byte
	attBenchKeys  []events.ChainKey
	attBenchAtt   [][]string // attestation headers, per chain and entry
)

// fillAttestedBench publishes the attested stream and returns how many
// entries and checkpoints it holds.
func fillAttestedBench(tb testing.TB, js jetstream.JetStream, chains, per int) (entries, checkpoints int) {
	tb.Helper()
	var subj room.Subjects
	attBenchOnce.Do(func() {
		var err error
		if attBenchKey, err = events.GenerateHostKey(rand.Reader); err != nil {
			tb.Fatal(err)
		}
		samples := sampleMembers(tb)
		attBenchKeys = make([]events.ChainKey, chains)
		attBenchLines = make([][][]byte, chains)
		attBenchAtt = make([][]string, chains)
		var wg sync.WaitGroup
		for c := range chains {
			wg.Go(func() {
				attBenchKeys[c], attBenchLines[c] = benchEntries(tb, samples, c, per)
				s := subj.Journal(benchRoom, attBenchKeys[c])
				attBenchAtt[c] = make([]string, 0, per)
				for from := 0; from < per; from += benchAttestBatch {
					var stmts []checkpoint.Statement
					for i := from; i < min(from+benchAttestBatch, per); i++ {
						stmts = append(stmts, checkpoint.Statement{Room: benchRoom, Subject: s, Position: checkpoint.JournalPosition(int64(i)),
							Content: checkpoint.ContentHash(attBenchLines[c][i])})
					}
					attBenchAtt[c] = append(attBenchAtt[c], checkpoint.AttestBatch(attBenchKey, stmts)...)
				}
			})
		}
		wg.Wait()
	})
	signer, err := checkpoint.NewNoteSigner(attBenchKey)
	if err != nil {
		tb.Fatal(err)
	}
	tree := checkpoint.NewTree()
	publish := func(m *nats.Msg, id string) {
		for {
			_, err := js.PublishMsgAsync(m, jetstream.WithMsgID(id), jetstream.WithStallWait(10*time.Second))
			if err == nil {
				return
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				tb.Fatal(err)
			}
			<-js.PublishAsyncComplete()
		}
	}
	ckpt := func() {
		n, err := checkpoint.Sign(signer, benchRoom, tree.Size(), tree.Root())
		if err != nil {
			tb.Fatal(err)
		}
		m := nats.NewMsg(subj.Checkpoint(benchRoom))
		m.Data = n
		publish(m, "ckpt:"+strconv.FormatUint(tree.Size(), 10))
		checkpoints++
	}
	// Published in order from one connection: each batch is stored at
	// consecutive sequences, as an atomic batch is.
	for from := 0; from < per; from += benchAttestBatch {
		for c := range chains {
			s := subj.Journal(benchRoom, attBenchKeys[c])
			for i := from; i < min(from+benchAttestBatch, per); i++ {
				m := nats.NewMsg(s)
				m.Data = attBenchLines[c][i]
				m.Header.Set(checkpoint.AttestationHeader, attBenchAtt[c][i])
				publish(m, attBenchKeys[c].RunID+"/"+strconv.Itoa(i))
				tree.Append(checkpoint.LeafHash(benchRoom, s, checkpoint.ContentHash(m.Data)))
				entries++
				if tree.Size()%benchCheckpointEvery == 0 {
					ckpt()
				}
			}
		}
	}
	if tree.Size()%benchCheckpointEvery != 0 {
		ckpt()
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		tb.Fatal("publish did not complete")
	}
	return entries, checkpoints
}

// attestedBenchStream starts a server on a temporary store and fills it
// with the attested stream.
func attestedBenchStream(b *testing.B) (js jetstream.JetStream, entries, checkpoints int) {
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
	js, _ = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	var subj room.Subjects
	if _, err := room.EnsureStream(context.Background(), js, room.StreamConfig("", subj, 1), subj); err != nil {
		b.Fatal(err)
	}
	entries, checkpoints = fillAttestedBench(b, js, benchChains, benchPer)
	return js, entries, checkpoints
}

// BenchmarkRawOrderedReadAttested is BenchmarkRawOrderedRead on the
// attested stream (headers and checkpoint messages included).
func BenchmarkRawOrderedReadAttested(b *testing.B) {
	js, entries, checkpoints := attestedBenchStream(b)
	total := entries + checkpoints
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
		for range total {
			msg, err := it.Next()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := msg.Metadata(); err != nil {
				b.Fatal(err)
			}
		}
		it.Stop()
	}
	b.ReportMetric(float64(entries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkAuditAttested audits the attested stream trusting the
// publisher's key: every attestation and checkpoint is checked, and the
// last checkpoint covers every entry, so no attestation signature is
// verified one by one (asserted). It reports the peak heap in use like
// BenchmarkAudit (the embedded server's included).
func BenchmarkAuditAttested(b *testing.B) {
	js, entries, checkpoints := attestedBenchStream(b)
	v, err := validate.New()
	if err != nil {
		b.Fatal(err)
	}
	trust, err := checkpoint.NewTrust(attBenchKey.NodeID())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	var peak uint64 // heap in use, sampled every 10,000 messages
	for b.Loop() {
		rep, err := reader.Audit(ctx, js, reader.AuditOptions{Validator: v, Trust: trust, Progress: func(_, _ uint64) {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}})
		if err != nil {
			b.Fatal(err)
		}
		if !rep.Clean() || rep.Totals.Entries != uint64(entries) || rep.Totals.Checkpoints != uint64(checkpoints) ||
			len(rep.Checkpoints) != 1 || rep.Checkpoints[0].AttestationsVerified != 0 || rep.Checkpoints[0].Covered != uint64(entries) {
			b.Fatalf("audit: clean %v, %d entries of %d, %+v: %+v", rep.Clean(), rep.Totals.Entries, entries, rep.Checkpoints, rep.Violations)
		}
	}
	b.ReportMetric(float64(entries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}
