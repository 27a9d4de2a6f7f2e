package checkpoint

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestLeaseRoundTrip: a signed lease verifies for its key under a trust
// that holds its signer, and says who and when, to the millisecond.
func TestLeaseRoundTrip(t *testing.T) {
	k := testKey(1)
	at := time.Date(2026, 12, 1, 21, 30, 0, 123_456_789, time.UTC)
	v, err := SignLease(k, "room/a", at)
	if err != nil {
		t.Fatal(err)
	}
	if want := k.NodeID() + " 1796160600123 "; !strings.HasPrefix(v, want) || len(v) != len(want)+86 {
		t.Fatalf("value %q, want %q and 86 characters of signature", v, want)
	}
	l, err := mustTrust(t, k.NodeID()).VerifyLease("room/a", []byte(v))
	if err != nil || l != (Lease{Key: "room/a", NodeID: k.NodeID(), At: at.Truncate(time.Millisecond)}) {
		t.Fatalf("%+v %v", l, err)
	}
}

// TestLeaseRefused: what VerifyLease refuses, and with which error.
func TestLeaseRefused(t *testing.T) {
	k, other := testKey(1), testKey(2)
	at := time.UnixMilli(1_796_160_600_123)
	v, err := SignLease(k, "room/a", at)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Split(v, " ")
	trust := mustTrust(t, k.NodeID())
	byOther, err := SignLease(other, "room/a", at)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key, value string
		want             error
	}{
		{"bare node id (the old format)", "room/a", k.NodeID(), ErrBadLease},
		{"JSON", "room/a", `{"node":"x"}`, ErrBadLease},
		{"another room's key", "room/b", v, ErrBadLease},
		{"time changed", "room/a", fields[0] + " 1796160600124 " + fields[2], ErrBadLease},
		{"time with a leading zero", "room/a", fields[0] + " 01796160600123 " + fields[2], ErrBadLease},
		{"short signature", "room/a", fields[0] + " " + fields[1] + " " + fields[2][:80], ErrBadLease},
		{"another key's signature under the trusted id", "room/a", fields[0] + " " + fields[1] + " " + strings.Split(byOther, " ")[2], ErrBadLease},
		{"untrusted signer", "room/a", byOther, ErrUntrustedPublisher},
		{"four fields", "room/a", v + " x", ErrBadLease},
	} {
		if _, err := trust.VerifyLease(tc.key, []byte(tc.value)); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, key := range []string{"", "room a", "room\na"} {
		if _, err := SignLease(k, key, at); !errors.Is(err, ErrBadLease) {
			t.Errorf("SignLease(%q): %v, want ErrBadLease", key, err)
		}
	}
}
