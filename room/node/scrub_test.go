package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/node"
)

// TestServeScrubFindsUnreadable: a message in the middle of a chain that
// the server counts but cannot read (its state file kept) is found by no
// check at a normal start; the start's scrub names it on /healthz and in
// roompub_store_unreadable_messages, and the survey it starts closes the
// chain, so a re-ship is refused store_lost. Without a scrub the start
// says ok.
func TestServeScrubFindsUnreadable(t *testing.T) {
	store := t.TempDir()
	run := func(scrub time.Duration) *served {
		return startServeWith(t, time.Hour, func(o *node.ServeOptions, _ *events.HostKey) {
			o.Embedded.StoreDir = store
			o.ScrubInterval = scrub
		})
	}
	a, body := roomtest.Journal(t, "run-a", "cap-a", 60)
	s := run(0)
	if r := s.shipJournal("room:scrub", body); r.Stored != 60 {
		t.Fatalf("%+v", r)
	}
	s.stop()
	roomtest.DamageStore(t, store, room.DefaultStream, []byte(a[30].EntryHash()), true)

	s = run(0)
	s.waitHealth(200, "ok\n")
	s.stop()

	s = run(time.Hour)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, b := s.get("/healthz")
		if c == 503 && strings.Contains(b, "the server counts 1 messages it can no longer read (stream seqs 31,") &&
			strings.Contains(b, "room:scrub run-a/cap-a: 1 lost (positions 30 (between stream seqs 30 and 32))") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz after the scrub: %d %q", c, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := metricSum(t, s.info.HTTPAddr, "roompub_store_unreadable_messages"); n != 1 {
		t.Fatalf("roompub_store_unreadable_messages %v, want 1", n)
	}
	r := s.shipJournal("room:scrub", body)
	if r.Stored != 0 || r.Refused != 1 || r.Items[0].Code != events.StoreLost {
		t.Fatalf("re-ship: %+v", r)
	}
}
