package client_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestShipStoreLost: the store lost positions 50..99 of a capsule's chain
// from inside the stream. Shipping the capsule again (its 150 shipped
// lines, then with 10 more) never counts a line as already stored: the
// result is refused store_lost at the file line of the first lost
// position, names the positions and the stream seqs around them, stores
// nothing, and the head it reports says what is lost.
func TestShipStoreLost(t *testing.T) {
	e := roomtest.NewEnv(t)
	const roomID = "room:lossy"
	a, _ := roomtest.Journal(t, "run-a", "cap-a", 160)
	b, _ := roomtest.Journal(t, "run-b", "cap-b", 100)
	at100 := e.ChainWithHole(roomID, a, b)
	cl := client.New(e.Connect(), client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []int{150, 160} {
		dir := roomtest.CapsuleDir(t, "run-a", "cap-a", roomtest.Lines(a[:n]))
		res, err := client.ShipCapsule(ctx, cl, dir, roomID, client.ShipOptions{})
		if err != nil || res.Refused == nil || res.Skipped != 0 || res.Stored != 0 || res.Duplicates != 0 {
			t.Fatalf("%d lines: %+v, %v; want refused, nothing already stored", n, res, err)
		}
		jpath := filepath.Join(dir, "journal.ndjson")
		p := res.Refused.Problem
		want := fmt.Sprintf("the store lost 50 of the chain's 150 acknowledged entries, positions 50-99 (between stream seqs 50 and %d); the chain is closed, nothing more is stored on it (docs/reliability.md)", at100)
		if p.Code != events.StoreLost || p.At.File != jpath || p.At.Line != 51 || p.Reason != want {
			t.Errorf("%d lines: refusal %+v\nwant store_lost at %s:51: %s", n, p, jpath, want)
		}
		wantRun := fmt.Sprintf("the stream acknowledged positions 50-99 (lines 51-100) of this chain and no longer holds it (it was between stream seqs 50 and %d): the chain is closed (docs/reliability.md)", at100)
		if len(res.Refused.Problems) != 1 || res.Refused.Problems[0].Reason != wantRun || res.Refused.Problems[0].At.Line != 51 {
			t.Errorf("%d lines: problems %+v", n, res.Refused.Problems)
		}
		if res.Head.Lost == nil || res.Head.Lost.Count != 50 || res.Head.Next != 150 {
			t.Errorf("%d lines: head %+v", n, res.Head)
		}
	}
	if st := e.State(); st.LastSeq != at100+49 {
		t.Errorf("something was stored: %+v", st)
	}
}
