package checkpointer_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/validate"
)

// BenchmarkCheckpointerStart is a checkpointer's start on a room stream of
// ROOMPUB_BENCH_ENTRIES journal entries (default 20,000; make
// bench-checkpointer-start runs more) in 10 rooms, chains of 1,000, each
// room checkpointed at its end by a checkpointer that stopped, and 1,000
// entries appended to one room since: "full" reads every room from its
// first message, "resume" from the rooms' checkpoints. start-s/op is the
// time from Start until its catch-up read is over; msgs-read/op the
// messages that read read (ns/op adds a Stop that writes nothing). Nothing is written: the stream is the same for every
// run.
func BenchmarkCheckpointerStart(b *testing.B) {
	entries := 20000
	if v := os.Getenv("ROOMPUB_BENCH_ENTRIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("ROOMPUB_BENCH_ENTRIES=%q: a number of at least 1000", v)
		}
		entries = n
	}
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: b.TempDir()})
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
	key, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	v, err := validate.New(validate.WithTrustedHosts(key.NodeID()))
	if err != nil {
		b.Fatal(err)
	}
	gate, err := ingest.NewGate(context.Background(), nc, ingest.GateOptions{Validator: v, PublisherKey: key})
	if err != nil {
		b.Fatal(err)
	}
	fill := func(from, to int) {
		for c := from; c < to; c++ {
			es, _ := roomtest.Journal(b, "run-start", "cap-"+strconv.Itoa(c), 1000)
			if r, err := gate.AppendJournal(context.Background(), fmt.Sprintf("room:start-%d", c%10), roomtest.Lines(es), nil); err != nil || r.Stored != 1000 {
				b.Fatalf("chain %d: %+v %v", c, r, err)
			}
		}
	}
	chains := entries / 1000
	fill(0, chains)
	o := checkpointer.Options{Key: key, Every: 1 << 30, Interval: time.Hour}
	start := func(o checkpointer.Options) (*checkpointer.Checkpointer, time.Duration, uint64) {
		t0 := time.Now()
		c, err := checkpointer.Start(context.Background(), nc, o)
		if err != nil {
			b.Fatal(err)
		}
		for !c.CaughtUp() {
			time.Sleep(time.Millisecond)
		}
		took := time.Since(t0)
		n, _ := c.CatchUpRead()
		return c, took, n
	}
	// The rooms' checkpoints, then entries no checkpoint covers.
	first, _, _ := start(o)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	fill(chains, chains+1)
	for _, mode := range []string{"full", "resume"} {
		mo := o
		mo.FullRead = mode == "full"
		b.Run(fmt.Sprintf("entries=%d/%s", entries, mode), func(b *testing.B) {
			var read uint64
			var total time.Duration
			for range b.N {
				c, took, n := start(mo)
				done, cancel := context.WithCancel(context.Background())
				cancel() // nothing written: the next run starts on the same stream
				_ = c.Stop(done)
				total += took
				read = n
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "start-s/op")
			b.ReportMetric(float64(read), "msgs-read/op")
		})
	}
}
