package ingest_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestStoreLostRestoredInPlace: a damaged chain whose store is restored
// in place while the gate runs (the server restarted on a store that
// holds the lost positions again; the gate's connection reconnects). The
// verdict the gate kept for the damaged chain no longer stands once the
// chain's subjects changed: a Head (a state that never saw the chain)
// judges it afresh and finds it whole, and it leaves Damaged. Taken
// from the kept verdict unchecked, the Head kept answering lost.
func TestStoreLostRestoredInPlace(t *testing.T) {
	const roomID = "room:restored"
	key := events.ChainKey{RunID: "run-a", CapsuleID: "cap-a"}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	e := roomtest.NewEnvWith(t, embedded.Options{Listen: addr})
	a, _ := roomtest.Journal(t, "run-a", "cap-a", 20)
	if r := e.ShipJournal(roomID, roomtest.Lines(a)); r.Stored != 20 {
		t.Fatalf("ship: %+v", r)
	}
	e.Stop()
	backup := t.TempDir() + "/store"
	if err := os.CopyFS(backup, os.DirFS(e.Dir)); err != nil {
		t.Fatal(err)
	}
	e.DamageKeepingState([]byte(a[19].EntryHash()))
	e.Start()

	nc, err := nats.Connect("nats://"+addr, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	g, err := ingest.NewGate(context.Background(), nc, ingest.GateOptions{Validator: e.V})
	if err != nil {
		t.Fatal(err)
	}
	if sv, err := g.Survey(context.Background()); err != nil || len(sv.Damaged) != 1 {
		t.Fatalf("survey: %+v, %v", sv, err)
	}
	if h, err := g.Head(context.Background(), key); err != nil || h.Lost == nil {
		t.Fatalf("head on the damaged store: %+v, %v", h, err)
	}

	// Restore the store in place (what the damage took is back).
	e.Stop()
	if err := os.RemoveAll(e.Dir); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(e.Dir, os.DirFS(backup)); err != nil {
		t.Fatal(err)
	}
	e.Start()
	for i := 0; !nc.IsConnected() && i < 200; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := e.CountOn("rooms.restored.journal.run-a.cap-a"); n != 20 {
		t.Fatalf("restored store holds %d", n)
	}
	// A fresh gate finds the chain whole: the store holds it all.
	if h, err := e.NewGate(e.Nc).Head(context.Background(), key); err != nil || h.Lost != nil {
		t.Fatalf("fresh gate on the restored store: %+v, %v", h, err)
	}
	h, err := g.Head(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if h.Lost != nil || len(g.Damaged()) != 0 {
		t.Errorf("head after the store was restored: lost %v, damaged %v; a fresh gate says whole", h.Lost, fmt.Sprint(g.Damaged()))
	}
}
