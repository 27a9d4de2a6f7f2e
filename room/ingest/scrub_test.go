package ingest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestScrubFindsUnreadable: a message in the middle of chain A that the
// server still counts but cannot read (its state file kept) shows in no
// count and no deletion: the survey finds nothing. A scrub reads the
// stream, names the stream seq, and the next survey reads A (its
// messages span it) and closes it, naming the position; B, stored after,
// is not damaged. A scrub of a whole store finds nothing.
func TestScrubFindsUnreadable(t *testing.T) {
	e := roomtest.NewEnv(t)
	a, abody := roomtest.Journal(t, "run-a", "cap-a", 100)
	_, bbody := roomtest.Journal(t, "run-b", "cap-b", 50)
	for _, body := range [][]byte{abody, bbody} {
		if r := e.ShipJournal("room:scrub", body); r.Refused != 0 || r.Stored == 0 {
			t.Fatalf("ship: %+v", r)
		}
	}
	g := e.NewGate(e.Connect())
	if res, err := g.Scrub(context.Background()); err != nil || res.Err() != nil || res.Read != 150 || res.FirstSeq != 1 || res.LastSeq != 150 {
		t.Fatalf("scrub of a whole store: %+v, %v", res, err)
	}
	e.Stop()
	e.DamageKeepingState([]byte(a[40].EntryHash()))
	e.Start()
	g = e.NewGate(e.Connect())
	if sv, err := g.Survey(context.Background()); err != nil || len(sv.Damaged) != 0 {
		t.Fatalf("survey before the scrub: %+v, %v; want nothing found", sv, err)
	}
	res, err := g.Scrub(context.Background())
	if err != nil || res.Read != 149 || res.Unreadable != 1 || res.Deleted != 0 || !slices.Equal(res.UnreadableSeqs, []uint64{41}) {
		t.Fatalf("scrub: %+v, %v", res, err)
	}
	if err := res.Err(); !errors.Is(err, room.ErrStoreLost) || !strings.Contains(err.Error(), "the server counts 1 messages it can no longer read (stream seqs 41, read by the scrub of stream seqs 1 to 150") {
		t.Fatalf("scrub's error: %v", err)
	}
	sv, err := g.Survey(context.Background())
	if err != nil || len(sv.Damaged) != 1 || sv.Damaged[0].Chain.RunID != "run-a" || sv.Damaged[0].Loss.String() != "positions 40 (between stream seqs 40 and 42)" {
		t.Fatalf("survey after the scrub: %+v, %v", sv, err)
	}
}
