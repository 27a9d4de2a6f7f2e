package node_test

import (
	"testing"
	"time"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/node"
)

// TestStorageGauges: with --max-store (Embedded.MaxFileStore) the limit
// series is that cap; the room stream's series follow a shipment, and the
// account's use holds the room stream's bytes.
func TestStorageGauges(t *testing.T) {
	const limit = 64 << 20
	s := startServeWith(t, time.Hour, func(o *node.ServeOptions, _ *events.HostKey) { o.Embedded.MaxFileStore = limit })
	addr := s.info.HTTPAddr
	if got := metricSum(t, addr, "roompub_jetstream_storage_limit_bytes"); got != limit {
		t.Fatalf("roompub_jetstream_storage_limit_bytes = %v, want %d", got, limit)
	}
	if got := metricSum(t, addr, "roompub_stream_stored_messages"); got != 0 {
		t.Fatalf("roompub_stream_stored_messages of a new stream = %v", got)
	}
	_, body := roomtest.Journal(t, "run-store", "cap-store", 9)
	if r := s.shipJournal("room:store", body); r.Stored != 9 {
		t.Fatalf("%+v", r)
	}
	msgs, b, used := metricSum(t, addr, "roompub_stream_stored_messages"), metricSum(t, addr, "roompub_stream_stored_bytes"), metricSum(t, addr, "roompub_jetstream_storage_used_bytes")
	if msgs != 9 || b < float64(len(body)) || used < b {
		t.Fatalf("after 9 entries (%d bytes of lines): %v messages, %v bytes, the account uses %v", len(body), msgs, b, used)
	}
	if got := metricSum(t, addr, "roompub_jetstream_api_ok"); got != 1 {
		t.Fatalf("roompub_jetstream_api_ok = %v", got)
	}
}
