package main

import (
	"bytes"
	"testing"

	"github.com/roompub/roompub/validate"
)

// TestVerifyPathsInParallelKeepsOrder: verifying many paths at once prints
// exactly what verifying them one after the other prints, in --json and in
// text, with the usage errors on stderr in the same order.
func TestVerifyPathsInParallelKeepsOrder(t *testing.T) {
	base := []string{
		samples + "/capsules/csv-dedupe",
		samples + "/records/verified.json",
		"no/such/path",
		samples + "/capsules/broken",
		samples + "/records/foreign-evidence.json",
		samples + "/capsules/slugify-run",
		samples + "/capsules/csv-dedupe/journal.ndjson",
	}
	var paths []string
	for range 4 {
		paths = append(paths, base...)
	}
	v, err := validate.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []reportWriter{jsonReport, textReport} {
		var wantOut, wantErr bytes.Buffer
		for _, p := range paths {
			rep, err := v.VerifyPath(p)
			if err != nil {
				wantErr.WriteString("publisher: " + err.Error() + "\n")
			}
			if err := w(&wantOut, rep, err); err != nil {
				t.Fatal(err)
			}
		}
		var out, errOut bytes.Buffer
		err := verifyPaths(v, paths, &streams{out: &out, err: &errOut}, w)
		if err == nil || err.Error() != "4 of 28 paths "+errUnverifiable.Error() {
			t.Errorf("error %v", err)
		}
		if out.String() != wantOut.String() || errOut.String() != wantErr.String() {
			t.Fatalf("parallel output differs:\n%s%s\nsequential:\n%s%s", out.String(), errOut.String(), wantOut.String(), wantErr.String())
		}
	}
}
