package ingest

import (
	"reflect"
	"testing"

	"github.com/roompub/roompub/room"
)

// TestLossOf: the runs of missing positions below next, each with the
// stream seqs of the stored entries around it (0 after: the run starts
// the chain).
func TestLossOf(t *testing.T) {
	for _, c := range []struct {
		name string
		at   map[int64]uint64
		next int64
		want *room.ChainLoss
	}{
		{"whole", map[int64]uint64{0: 3, 1: 7, 2: 9}, 3, nil},
		{"empty chain", map[int64]uint64{}, 0, nil},
		{"one inside", map[int64]uint64{0: 3, 2: 9}, 3, &room.ChainLoss{Count: 1, Stored: 2, Missing: []room.LostRun{{From: 1, To: 1, After: 3, Before: 9}}}},
		{"the start", map[int64]uint64{2: 20, 3: 21}, 4, &room.ChainLoss{Count: 2, Stored: 2, Missing: []room.LostRun{{From: 0, To: 1, After: 0, Before: 20}}}},
		{"two runs", map[int64]uint64{0: 1, 3: 30, 4: 31, 7: 70}, 8, &room.ChainLoss{Count: 4, Stored: 4, Missing: []room.LostRun{
			{From: 1, To: 2, After: 1, Before: 30}, {From: 5, To: 6, After: 31, Before: 70}}}},
		{"up to next", map[int64]uint64{0: 1}, 3, &room.ChainLoss{Count: 2, Stored: 1, Missing: []room.LostRun{{From: 1, To: 2, After: 1, Before: 0}}}},
	} {
		if got := lossOf(c.at, c.next); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
