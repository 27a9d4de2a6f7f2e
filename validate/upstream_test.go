package validate_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// upstreamCase is one class of testdata/upstream-divergences: a minimal
// capsule on which roompub and the upstream harness's verifier once
// disagreed, and the verdict that stands (its README says which).
type upstreamCase struct {
	class   string
	ok      bool        // the capsule verifies
	entries int         // with this many entries
	code    events.Code // else the first problem's code,
	line    int         // its line in journal.ndjson (0: none),
	pointer string      // and its JSON pointer
	file    string      // the file it is in, when not journal.ndjson
	kept    bool        // roompub's verdict stands: a deliberate divergence
}

var upstreamCases = []upstreamCase{
	// The upstream verdict stands.
	{class: "empty_journal", ok: true},
	{class: "canary_roompub_broader", ok: true, entries: 1},
	{class: "canary_roompub_narrower", code: events.InvalidEntry, line: 1, pointer: "/payload/message"},
	{class: "capsule_json_laxer", code: events.InvalidCapsule, pointer: "/schema", file: validate.CapsuleFile},
	{class: "invalid_capsule_checked_first", code: events.Reordered, line: 1, pointer: "/seq"},
	{class: "metadata_mismatch_per_line", code: events.BrokenLink, line: 2, pointer: "/parent_hash"},
	{class: "utf8_error_plus_truncated_tail", code: events.NonCanonical, line: 1},
	{class: "non_object_line", code: events.InvalidEntry, line: 1},
	{class: "lone_surrogate", ok: true, entries: 1},
	// roompub's verdict stands (docs/upstream.md, "Deliberate divergences").
	{class: "truncated_mid_utf8_char", code: events.TruncatedTail, line: 2, kept: true},
	{class: "ts_dateparse_lenient", code: events.InvalidEntry, line: 1, pointer: "/ts", kept: true},
	{class: "ts_rfc3339_not_dateparse", ok: true, entries: 1, kept: true},
	{class: "allowlist_38_keys", code: events.InvalidEntry, line: 1, pointer: "/payload", kept: true},
	{class: "duplicate_key", code: events.InvalidCapsule, file: validate.CapsuleFile, kept: true},
	{class: "number_out_of_range", code: events.CorruptEntry, line: 1, kept: true},
	{class: "nesting_depth", code: events.CorruptEntry, line: 1, kept: true},
}

// TestUpstreamDivergences verifies every class's capsule and checks the
// verdict that stands: the upstream's first code and entry where roompub
// must agree, roompub's own where the divergence is deliberate.
func TestUpstreamDivergences(t *testing.T) {
	root := filepath.Join("..", "testdata", "upstream-divergences")
	dirs, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, c := range upstreamCases {
		listed[c.class] = true
	}
	for _, d := range dirs {
		if d.IsDir() && !listed[d.Name()] {
			t.Errorf("class %s has no expected verdict here", d.Name())
		}
	}
	v := newValidator(t)
	for _, c := range upstreamCases {
		t.Run(c.class, func(t *testing.T) {
			dir := filepath.Join(root, c.class)
			rep, err := v.VerifyPath(dir)
			if err != nil {
				t.Fatal(err)
			}
			if c.ok {
				if !rep.OK || rep.Entries == nil || *rep.Entries != c.entries {
					t.Fatalf("report %+v (%v), want ok with %d entries", rep, rep.Refusal, c.entries)
				}
				return
			}
			if rep.OK || rep.Refusal == nil {
				t.Fatalf("report %+v, want %s", rep, c.code)
			}
			file := validate.JournalFile
			if c.file != "" {
				file = c.file
			}
			at := rep.Refusal.At
			if rep.Code != c.code || at.Line != c.line || at.Pointer != c.pointer || at.File != filepath.Join(dir, file) {
				t.Errorf("first problem %v, want %s at %s line %d pointer %q", rep.Refusal.Problem, c.code, file, c.line, c.pointer)
			}
		})
	}
	// The later 38-key upstream revision accepts allowlist_38_keys; so does
	// roompub with the widened schema directory.
	wide := newValidator(t, validate.WithSchemaFS(os.DirFS(filepath.Join("..", "testdata", "samples", "widened", "schemas"))))
	rep, err := wide.VerifyPath(filepath.Join(root, "allowlist_38_keys"))
	if err != nil || !rep.OK {
		t.Errorf("allowlist_38_keys with the widened schemas: %+v, %v; want ok", rep, err)
	}
}
