package reader

import (
	"testing"
)

// TestUnreadSeqs: the seqs a read in stream order skipped, counted in
// full and named up to ten, however long the run.
func TestUnreadSeqs(t *testing.T) {
	for _, tc := range []struct {
		seen []uint64 // the seqs read, then the last + 1
		want string
	}{
		{[]uint64{1, 2, 4, 5, 7, 8}, "stream seqs 3, 6 (2 messages)"},
		{[]uint64{3, 4}, "stream seqs 1, 2 (2 messages)"},
		{[]uint64{1, 2_000_002}, "stream seqs 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 … (2000000 messages)"},
		{[]uint64{1, 13, 15}, "stream seqs 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 … (12 messages)"},
	} {
		var u unreadSeqs
		for _, s := range tc.seen {
			u.saw(s)
		}
		if got := u.String(); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.seen, got, tc.want)
		}
	}
	u := unreadSeqs{last: 4}
	u.saw(5)
	u.saw(6)
	if u.count != 0 {
		t.Errorf("from a first seq of 5: %d unread, want 0", u.count)
	}
}
