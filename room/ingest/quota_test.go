package ingest

import (
	"fmt"
	"strings"
	"testing"
)

// TestServiceQuotaAdmit: the bounds of quotas, one at a time, with exact
// figures: an identity's requests, its bytes (a first request of any
// size is admitted), the service's total and its reserve of one share for
// identities holding nothing; waiting for the chain leaves the request
// count; release gives everything back and forgets the identity.
func TestServiceQuotaAdmit(t *testing.T) {
	c := charge(100)
	q := newQuotas(2, 3*c, 8*c)
	admit := func(token string, n int, want string) {
		t.Helper()
		got := q.admit(token, n)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Fatalf("admit(%q, %d) = %q, want one naming %q", token, n, got, want)
		}
	}
	admit("a", 100, "")
	admit("a", 100, "")
	admit("a", 100, "IdentityConcurrency")
	q.idle("a", false) // one of a's waits for its chain
	admit("a", 100, "")
	q.idle("a", false)                      // another
	admit("a", 100, "IdentityPendingBytes") // 4 would be over 3 × c
	if r, b, total := q.held("a"); r != 1 || b != 3*c || total != 3*c {
		t.Fatalf("a holds %d requests, %d bytes; total %d", r, b, total)
	}
	admit("b", 4*c-RequestOverheadBytes, "") // over b's share, but b holds nothing
	// 8 × c and one byte: past the total, into the reserve, as c holds
	// nothing; c's next, and one past the reserve, are refused.
	admit("c", c-RequestOverheadBytes+1, "")
	admit("c", 100, "PendingBytes")
	if got := q.admit("c", 100); strings.Contains(got, fmt.Sprint(q.total)) {
		t.Fatalf("the answer %q names the service's total, %d: what other identities hold is theirs", got, q.total)
	}
	admit("d", 3*c-RequestOverheadBytes, "a reserve of 3372 for identities holding nothing")
	admit("d", 3*c-RequestOverheadBytes-1, "") // 11 × c: the total and the reserve
	q.release("b", 4*c-RequestOverheadBytes)
	q.release("d", 3*c-RequestOverheadBytes-1)
	admit("c", 100, "")
	q.idle("a", true)
	q.idle("a", true)
	for range 3 {
		q.release("a", 100)
	}
	q.release("c", 100)
	q.release("c", c-RequestOverheadBytes+1)
	if r, b, total := q.held("a"); r != 0 || b != 0 || total != 0 || len(q.ids) != 0 {
		t.Fatalf("after release: a %d requests, %d bytes; total %d; %d identities", r, b, total, len(q.ids))
	}
}
