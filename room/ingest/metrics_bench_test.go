package ingest_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/ingest"
)

// BenchmarkMetricsItem is the gate's observation of one decided line
// (ingest.Metrics.Item, called for every line of a journal request).
func BenchmarkMetricsItem(b *testing.B) {
	m, err := ingest.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		m.Item(room.KindJournal, room.OutcomeStored, "", 30*time.Microsecond)
	}
}
