package ingest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// BenchmarkSurvey is the gate's survey of what the store lost
// (Gate.Survey) over stores of chains × entries per chain: its reads grow
// with the chains, never with the entries, so 100 chains of 1,000 entries
// cost what 100 chains of 10 do, and 1,000 chains of 10 about ten times
// that. The entries are written straight into the stream, one atomic
// batch per chain.
func BenchmarkSurvey(b *testing.B) {
	for _, size := range []struct{ chains, entries int }{{100, 10}, {100, 1000}, {1000, 10}} {
		b.Run(fmt.Sprintf("chains=%d/entries=%d", size.chains, size.entries), func(b *testing.B) {
			be := newRawBenchEnv(b)
			var subj room.Subjects
			for c := range size.chains {
				run, capsule := fmt.Sprintf("run-survey-%04d", c), fmt.Sprintf("cap-survey-%04d", c)
				es, _ := roomtest.Journal(b, run, capsule, size.entries)
				msgs := make([]*nats.Msg, len(es))
				for i, e := range es {
					msgs[i] = &nats.Msg{Subject: subj.Journal("room:survey", events.ChainKey{RunID: run, CapsuleID: capsule}), Data: e.Canonical(), Header: nats.Header{}}
				}
				if _, err := jetstreamext.PublishMsgBatch(context.Background(), be.js, msgs); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				sv, err := be.gate.Survey(context.Background())
				if err != nil || sv.ChainsSeen != size.chains || len(sv.Damaged) != 0 {
					b.Fatalf("survey: %+v, %v", sv, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(size.chains), "µs/chain")
		})
	}
}
