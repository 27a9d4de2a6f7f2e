package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestCurveFlags holds the curve flags' rules: points need a curve, are
// positive, and a curve runs alone (no modes, no floors).
func TestCurveFlags(t *testing.T) {
	checkUsage(t, []usageCase{
		{[]string{"--points", "10"}, "--points needs --curve"},
		{[]string{"--curve", "rooms", "--points", "0"}, "--points must be at least 1, not 0"},
		{[]string{"--curve", "chains", "--check"}, "--curve excludes --modes and --check"},
		{[]string{"--curve", "chains", "--curve-entries", "0"}, "--curve-entries and --curve-chains must be at least 1"},
		{[]string{"--curve", "sideways"}, "--curve must be one of"},
	})
}

// usageCase is a command line the bench must refuse, and what its error
// must say.
type usageCase struct {
	args []string
	want string
}

// checkUsage runs each case and wants exit 2 with its error on stderr.
func checkUsage(t *testing.T, cases []usageCase) {
	t.Helper()
	for _, tc := range cases {
		var out, errOut bytes.Buffer
		if code := run(tc.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// TestParallelRoom holds the parallel row's rooms: the scenario's one
// room by default (the table's rooms of before), chain i in room i mod N.
func TestParallelRoom(t *testing.T) {
	if got := parallelRoom("pub", 7, 1); got != "room:bench-pub-par" {
		t.Errorf("one room: %q", got)
	}
	if got := parallelRoom("raw", 10007, 10000); got != "room:bench-raw-par-00007" {
		t.Errorf("chain 10007 of 10,000 rooms: %q", got)
	}
}
