package ingest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// BenchmarkJournalUnderFlood times one identity's one-line journal
// request while another identity keeps the service busy with 200
// one-line journal requests of other chains in flight at once (flood=on),
// and without it (flood=off): the ratio of the two is what one identity's
// flood costs another (docs/secure-mode.md, "Fair ingest"). ns/op is the
// well-behaved identity's request; flood-req/op how many of the flood's
// requests were answered meanwhile.
func BenchmarkJournalUnderFlood(b *testing.B) {
	for _, flood := range []bool{false, true} {
		b.Run(fmt.Sprintf("flood=%v", flood), func(b *testing.B) {
			be := newGateBenchEnv(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var answered atomic.Int64
			var wg sync.WaitGroup
			if flood {
				fnc, err := nats.Connect(be.srv.ClientURL(), nats.CustomInboxPrefix(room.InboxPrefix("flooder")))
				if err != nil {
					b.Fatal(err)
				}
				defer fnc.Close()
				fc := client.New(fnc, client.Options{Identity: "flooder"})
				for w := range 200 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; ctx.Err() == nil; i++ {
							es, _ := roomtest.Journal(b, fmt.Sprintf("flood-%d-%d", w, i), "cap", 1)
							if _, err := fc.AppendJournal(ctx, "room:flood", nil, roomtest.Lines(es)); err == nil {
								answered.Add(1)
							}
						}
					}()
				}
			}
			nc, err := nats.Connect(be.srv.ClientURL(), nats.CustomInboxPrefix(room.InboxPrefix("steady")))
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			c := client.New(nc, client.Options{Identity: "steady"})
			es, _ := roomtest.Journal(b, "steady", "cap", b.N+1)
			start := answered.Load()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r, err := c.AppendJournal(ctx, "room:steady", nil, roomtest.Lines([]*events.Entry{es[i]}))
				if err != nil || r.Stored != 1 {
					b.Fatalf("%+v %v", r, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(answered.Load()-start)/float64(b.N), "flood-req/op")
			cancel()
			wg.Wait()
		})
	}
}
