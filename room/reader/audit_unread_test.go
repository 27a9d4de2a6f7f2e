package reader

import (
	"testing"

	"github.com/roompub/roompub/room/internal/jsapi"
)

// TestUnreadString: the seqs a read in stream order skipped
// (jsapi.Unread), counted in full and named up to ten, however long the
// run, as the audit's stream problem names them.
func TestUnreadString(t *testing.T) {
	for _, tc := range []struct {
		first, last uint64
		seen        []uint64 // the seqs read
		want        string
	}{
		{1, 7, []uint64{1, 2, 4, 5, 7}, "stream seqs 3, 6 (2 messages)"},
		{1, 3, []uint64{3}, "stream seqs 1, 2 (2 messages)"},
		{1, 2_000_001, []uint64{1}, "stream seqs 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 … (2000000 messages)"},
		{1, 14, []uint64{1, 13}, "stream seqs 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 … (12 messages)"},
	} {
		u := jsapi.NewUnread(tc.first, tc.last)
		for _, s := range tc.seen {
			u.Saw(s, nil)
		}
		u.End(nil)
		if got := unreadString(u); got != tc.want {
			t.Errorf("%v of %d..%d: %q, want %q", tc.seen, tc.first, tc.last, got, tc.want)
		}
	}
	u := jsapi.NewUnread(5, 6)
	u.Saw(5, nil)
	u.Saw(6, nil)
	u.End(nil)
	if u.Unreadable != 0 || u.Read != 2 {
		t.Errorf("from a first seq of 5: %d unread, %d read; want 0 and 2", u.Unreadable, u.Read)
	}
}
