package validate_test

import (
	"path/filepath"
	"testing"

	"github.com/roompub/roompub/events"
)

// TestUpstreamVerdictNonObjectLine: a line that is JSON but not an object
// is invalid_entry at that line, as upstream ("envelope must be a plain
// data object"), not corrupt_entry (testdata/upstream-divergences).
func TestUpstreamVerdictNonObjectLine(t *testing.T) {
	rep, err := newValidator(t).VerifyPath(filepath.Join("..", "testdata", "upstream-divergences", "non_object_line"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.Refusal == nil || rep.Code != events.InvalidEntry || rep.Refusal.At.Line != 1 || len(rep.Problems) != 1 {
		t.Fatalf("report %+v, want invalid_entry at line 1", rep)
	}
}
