package validate_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// TestJournalRefusals makes a small journal for each journal refusal code:
// three valid entries built with events.NewEntry, then exactly one thing
// broken, and checks the refusal's code, line and JSON pointer and every
// problem listed, in the order of docs/design.md, "Refusal codes and their
// order".
func TestJournalRefusals(t *testing.T) {
	ff := strings.Repeat("f", 64)
	tests := []struct {
		name  string
		mut   func(i int, m map[string]any) // edits entry i before it is hashed
		edit  func(t *testing.T, lines [][]byte) []byte
		meta  *events.CapsuleMeta
		valid int // entries in the valid prefix
		wants []want
	}{
		{
			name:  "truncated_tail: no final newline",
			edit:  func(_ *testing.T, l [][]byte) []byte { return bytes.TrimSuffix(journalBytes(l...), []byte("\n")) },
			valid: 2,
			wants: []want{{events.TruncatedTail, 3, ""}},
		},
		{
			name:  "truncated_tail: partial entry",
			edit:  func(_ *testing.T, l [][]byte) []byte { return append(journalBytes(l[:2]...), l[2][:40]...) },
			valid: 2,
			wants: []want{{events.TruncatedTail, 3, ""}},
		},
		{
			name:  "corrupt_entry: not JSON",
			edit:  func(_ *testing.T, l [][]byte) []byte { return journalBytes(l[0], l[1][:len(l[1])/2], l[2]) },
			valid: 1,
			wants: []want{{events.CorruptEntry, 2, ""}},
		},
		{
			name: "corrupt_entry: duplicate key",
			edit: func(t *testing.T, l [][]byte) []byte {
				return journalBytes(l[0], replaceOnce(t, l[1], `"kind":"tool.call",`, `"kind":"tool.call","kind":"tool.call",`), l[2])
			},
			valid: 1,
			wants: []want{{events.CorruptEntry, 2, ""}},
		},
		{
			// A lone surrogate is JSON as the upstream writes it: the line
			// parses, and the edit shows in its hash.
			name: "invalid_entry: lone surrogate edited in after hashing",
			edit: func(t *testing.T, l [][]byte) []byte {
				return journalBytes(l[0], replaceOnce(t, l[1], `"Alpha ok"`, `"Alpha \ud800 ok"`), l[2])
			},
			valid: 1,
			wants: []want{{events.InvalidEntry, 2, "/entry_hash"}},
		},
		{
			name:  "invalid_entry: JSON but not an object",
			edit:  func(_ *testing.T, l [][]byte) []byte { return journalBytes(l[0], []byte(`[]`), l[2]) },
			valid: 1,
			wants: []want{{events.InvalidEntry, 2, ""}},
		},
		{
			name:  "invalid_entry: JSON with a lone surrogate but not an object",
			edit:  func(_ *testing.T, l [][]byte) []byte { return journalBytes(l[0], []byte(`["\udc00"]`), l[2]) },
			valid: 1,
			wants: []want{{events.InvalidEntry, 2, ""}},
		},
		{
			name:  "invalid_entry: lineage not in the enum",
			mut:   at(1, func(m map[string]any) { m["lineage"] = "dream" }),
			valid: 1,
			wants: []want{{events.InvalidEntry, 2, "/lineage"}},
		},
		{
			name:  "invalid_entry: missing field",
			mut:   at(1, func(m map[string]any) { delete(m, "effect_class") }),
			valid: 1,
			wants: []want{{events.InvalidEntry, 2, ""}},
		},
		{
			name:  "invalid_entry: ts not a date-time",
			mut:   at(1, func(m map[string]any) { m["ts"] = "2026-02-30T00:00:00Z" }),
			valid: 1,
			wants: []want{{events.InvalidEntry, 2, "/ts"}},
		},
		{
			name:  "invalid_entry: ts without T",
			mut:   at(2, func(m map[string]any) { m["ts"] = "2026-09-02 00:00:00Z" }),
			valid: 2,
			wants: []want{{events.InvalidEntry, 3, "/ts"}},
		},
		{
			name:  "invalid_entry: payload key not allowlisted",
			mut:   at(1, func(m map[string]any) { payload(m)["stdout"] = "total 0" }),
			valid: 1,
			wants: []want{{events.InvalidEntry, 2, "/payload"}},
		},
		{
			name:  "invalid_entry: payload nested object",
			mut:   at(1, func(m map[string]any) { payload(m)["message"] = map[string]any{"text": "hi"} }),
			valid: 1,
			// The schema's type rule and the default-deny value rule.
			wants: []want{{events.InvalidEntry, 2, "/payload/message"}, {events.InvalidEntry, 2, "/payload/message"}},
		},
		{
			name:  "invalid_entry: payload array",
			mut:   at(1, func(m map[string]any) { payload(m)["note"] = []any{"a", "b"} }),
			valid: 1,
			wants: []want{{events.InvalidEntry, 2, "/payload/note"}, {events.InvalidEntry, 2, "/payload/note"}},
		},
		{
			name:  "invalid_entry: payload boolean",
			mut:   at(1, func(m map[string]any) { payload(m)["passed"] = true }),
			valid: 1,
			wants: []want{{events.InvalidEntry, 2, "/payload/passed"}, {events.InvalidEntry, 2, "/payload/passed"}},
		},
		{
			name:  "invalid_entry: run_id with a trailing newline",
			mut:   func(_ int, m map[string]any) { m["run_id"] = "run-7\n" },
			meta:  &events.CapsuleMeta{RunID: "run-7\n", CapsuleID: "cap-7", HarnessVersion: "test/1", TaskFamily: "slugify"},
			valid: 0,
			wants: []want{{events.InvalidEntry, 1, "/run_id"}, {events.InvalidEntry, 2, "/run_id"}, {events.InvalidEntry, 3, "/run_id"}},
		},
		{
			name: "invalid_entry: entry_hash mismatch",
			edit: func(t *testing.T, l [][]byte) []byte {
				return journalBytes(l[0], l[1], replaceOnce(t, l[2], hashOf(t, l[2]), ff))
			},
			valid: 2,
			wants: []want{{events.InvalidEntry, 3, "/entry_hash"}},
		},
		{
			name:  "reordered: seq skips",
			mut:   at(1, func(m map[string]any) { m["seq"] = 2 }),
			valid: 1,
			wants: []want{{events.Reordered, 2, "/seq"}},
		},
		{
			name: "reordered: lines swapped",
			edit: func(_ *testing.T, l [][]byte) []byte { return journalBytes(l[0], l[2], l[1]) },
			// Each swapped line has the wrong seq and the wrong parent.
			valid: 1,
			wants: []want{{events.Reordered, 2, "/seq"}, {events.BrokenLink, 2, "/parent_hash"}, {events.Reordered, 3, "/seq"}, {events.BrokenLink, 3, "/parent_hash"}},
		},
		{
			name:  "broken_link: parent_hash not the previous entry_hash",
			mut:   at(2, func(m map[string]any) { m["parent_hash"] = ff }),
			valid: 2,
			wants: []want{{events.BrokenLink, 3, "/parent_hash"}},
		},
		{
			name:  "broken_link: first entry not linked to zeros",
			mut:   at(0, func(m map[string]any) { m["parent_hash"] = ff }),
			valid: 0,
			wants: []want{{events.BrokenLink, 1, "/parent_hash"}},
		},
		{
			name: "non_canonical: extra whitespace",
			edit: func(t *testing.T, l [][]byte) []byte {
				return journalBytes(l[0], l[1], replaceOnce(t, l[2], `"seq":2`, `"seq": 2`))
			},
			valid: 2,
			wants: []want{{events.NonCanonical, 3, ""}},
		},
		{
			name: "non_canonical: CRLF",
			edit: func(_ *testing.T, l [][]byte) []byte {
				return bytes.ReplaceAll(journalBytes(l...), []byte("\n"), []byte("\r\n"))
			},
			valid: 0,
			wants: []want{{events.NonCanonical, 1, ""}, {events.NonCanonical, 2, ""}, {events.NonCanonical, 3, ""}},
		},
		{
			name: "non_canonical: 1.0",
			edit: func(t *testing.T, l [][]byte) []byte {
				return journalBytes(l[0], replaceOnce(t, l[1], `"seq":1`, `"seq":1.0`), l[2])
			},
			valid: 1,
			wants: []want{{events.NonCanonical, 2, ""}},
		},
		{
			name: "non_canonical: \\u0041 escape",
			edit: func(t *testing.T, l [][]byte) []byte {
				return journalBytes(l[0], l[1], replaceOnce(t, l[2], `"Alpha ok"`, `"\u0041lpha ok"`))
			},
			valid: 2,
			wants: []want{{events.NonCanonical, 3, ""}},
		},
		{
			name: "non_canonical: keys out of order",
			edit: func(t *testing.T, l [][]byte) []byte {
				return journalBytes(replaceOnce(t, l[0], `{"capsule_id":"cap-7","effect_class":"SE0",`, `{"effect_class":"SE0","capsule_id":"cap-7",`), l[1], l[2])
			},
			valid: 0,
			wants: []want{{events.NonCanonical, 1, ""}},
		},
		{
			name: "non_canonical: invalid UTF-8 byte",
			edit: func(t *testing.T, l [][]byte) []byte {
				return journalBytes(l[0], l[1], replaceOnce(t, l[2], "Alpha ok", "Alpha \xff ok"))
			},
			valid: 2,
			wants: []want{{events.NonCanonical, 3, ""}},
		},
		{
			name:  "metadata_mismatch: differs from the first entry",
			mut:   at(1, func(m map[string]any) { m["task_family"] = "other" }),
			valid: 1,
			wants: []want{{events.MetadataMismatch, 2, "/task_family"}},
		},
		{
			name:  "metadata_mismatch: differs from capsule.json",
			meta:  &events.CapsuleMeta{RunID: "run-7", CapsuleID: "cap-7", HarnessVersion: "test/2", TaskFamily: "slugify"},
			valid: 0,
			wants: []want{{events.MetadataMismatch, 1, "/harness_version"}, {events.MetadataMismatch, 2, "/harness_version"}, {events.MetadataMismatch, 3, "/harness_version"}},
		},
		{
			name:  "empty_input",
			edit:  func(*testing.T, [][]byte) []byte { return nil },
			valid: 0,
			wants: []want{{events.EmptyInput, 0, ""}},
		},
		{
			name:  "a blank line is corrupt_entry",
			edit:  func(_ *testing.T, l [][]byte) []byte { return journalBytes(l[0], nil, l[2]) },
			valid: 1,
			wants: []want{{events.CorruptEntry, 2, ""}},
		},
		// Order: the first problem decides the code; every problem is listed.
		{
			name: "reordered and non_canonical on one line",
			mut:  at(1, func(m map[string]any) { m["seq"] = 5 }),
			edit: func(t *testing.T, l [][]byte) []byte {
				return journalBytes(l[0], replaceOnce(t, l[1], `"seq":5`, `"seq":5.0`), l[2])
			},
			valid: 1,
			wants: []want{{events.Reordered, 2, "/seq"}, {events.NonCanonical, 2, ""}},
		},
		{
			name: "non_canonical before metadata_mismatch",
			mut:  at(2, func(m map[string]any) { m["capsule_id"] = "cap-8" }),
			edit: func(t *testing.T, l [][]byte) []byte {
				return journalBytes(l[0], l[1], append(l[2], ' '))
			},
			valid: 2,
			wants: []want{{events.NonCanonical, 3, ""}, {events.MetadataMismatch, 3, "/capsule_id"}},
		},
		{
			name: "every line rule on one line",
			mut: at(1, func(m map[string]any) {
				m["lineage"] = "dream"
				m["seq"] = 7
				m["parent_hash"] = ff
				m["task_family"] = "other"
			}),
			edit: func(t *testing.T, l [][]byte) []byte {
				return journalBytes(l[0], append([]byte(" "), l[1]...), l[2])
			},
			valid: 1,
			// Line 3 links to line 2 as written, so only line 2 is refused.
			wants: []want{
				{events.InvalidEntry, 2, "/lineage"},
				{events.Reordered, 2, "/seq"},
				{events.BrokenLink, 2, "/parent_hash"},
				{events.NonCanonical, 2, ""},
				{events.MetadataMismatch, 2, "/task_family"},
			},
		},
		{
			name: "file-level problems first: invalid UTF-8, then truncated_tail, then lines",
			mut:  at(0, func(m map[string]any) { m["seq"] = 3 }),
			edit: func(t *testing.T, l [][]byte) []byte {
				return append(journalBytes(l[0], l[1], replaceOnce(t, l[2], "Alpha", "Al\xc3pha")), `{"seq":3`...)
			},
			valid: 0,
			wants: []want{{events.NonCanonical, 3, ""}, {events.TruncatedTail, 4, ""}, {events.Reordered, 1, "/seq"}},
		},
	}
	v := newValidator(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines := chainLines(t, 3, tt.mut)
			data := journalBytes(lines...)
			if tt.edit != nil {
				data = tt.edit(t, lines)
			}
			res, err := v.Journal(bytes.NewReader(data), "journal.ndjson", tt.meta)
			ref := expectRefusal(t, err, tt.wants...)
			if ref.At.File != "journal.ndjson" {
				t.Errorf("refusal names file %q", ref.At.File)
			}
			if res.Valid != tt.valid {
				t.Errorf("valid prefix %d entries, want %d", res.Valid, tt.valid)
			}
			wantHead := events.ZeroHash
			if tt.valid > 0 {
				wantHead = hashOf(t, lines[tt.valid-1])
			}
			if res.Head != wantHead {
				t.Errorf("head %s, want %s", res.Head, wantHead)
			}
		})
	}
}

// at applies f to entry i only.
func at(i int, f func(m map[string]any)) func(int, map[string]any) {
	return func(j int, m map[string]any) {
		if j == i {
			f(m)
		}
	}
}

func TestJournalEvidence(t *testing.T) {
	v := newValidator(t)
	t.Run("entry_hash mismatch names both hashes", func(t *testing.T) {
		lines := chainLines(t, 1, nil)
		good := hashOf(t, lines[0])
		bad := strings.Repeat("0", 63) + "1"
		_, err := v.Journal(bytes.NewReader(journalBytes(replaceOnce(t, lines[0], good, bad))), "j", nil)
		ref := expectRefusal(t, err, want{events.InvalidEntry, 1, "/entry_hash"})
		if ref.Expected != good || ref.Actual != bad {
			t.Errorf("expected %q actual %q, want %q %q", ref.Expected, ref.Actual, good, bad)
		}
		if !strings.Contains(ref.Reason, "entry_hash") {
			t.Errorf("reason %q does not name the rule", ref.Reason)
		}
	})
	t.Run("broken_link names both hashes", func(t *testing.T) {
		lines := chainLines(t, 2, at(1, func(m map[string]any) { m["parent_hash"] = strings.Repeat("e", 64) }))
		_, err := v.Journal(bytes.NewReader(journalBytes(lines...)), "j", nil)
		ref := expectRefusal(t, err, want{events.BrokenLink, 2, "/parent_hash"})
		if ref.Expected != hashOf(t, lines[0]) || ref.Actual != strings.Repeat("e", 64) {
			t.Errorf("expected %q actual %q", ref.Expected, ref.Actual)
		}
	})
	t.Run("reordered names both positions", func(t *testing.T) {
		lines := chainLines(t, 2, at(1, func(m map[string]any) { m["seq"] = 0 }))
		_, err := v.Journal(bytes.NewReader(journalBytes(lines...)), "j", nil)
		ref := expectRefusal(t, err, want{events.Reordered, 2, "/seq"})
		if ref.Expected != "1" || ref.Actual != "0" {
			t.Errorf("expected %q actual %q", ref.Expected, ref.Actual)
		}
	})
	t.Run("metadata_mismatch names both values", func(t *testing.T) {
		lines := chainLines(t, 1, nil)
		meta := testMeta
		meta.RunID = "run-8"
		_, err := v.Journal(bytes.NewReader(journalBytes(lines...)), "j", &meta)
		ref := expectRefusal(t, err, want{events.MetadataMismatch, 1, "/run_id"})
		if ref.Expected != "run-8" || ref.Actual != "run-7" {
			t.Errorf("expected %q actual %q", ref.Expected, ref.Actual)
		}
	})
	t.Run("non-JSON reason says why", func(t *testing.T) {
		_, err := v.Journal(strings.NewReader(`{"a":1,"a":2}`+"\n"), "j", nil)
		ref := expectRefusal(t, err, want{events.CorruptEntry, 1, ""})
		if !strings.Contains(ref.Reason, "Duplicate key") {
			t.Errorf("reason %q", ref.Reason)
		}
	})
	t.Run("invalid UTF-8 reason says why", func(t *testing.T) {
		_, err := v.Journal(strings.NewReader("{\"a\":\"\xff\"}\n"), "j", nil)
		ref := expectRefusal(t, err, want{events.NonCanonical, 1, ""})
		if !strings.Contains(ref.Reason, "UTF-8") {
			t.Errorf("reason %q", ref.Reason)
		}
	})
}

func TestJournalAccepts(t *testing.T) {
	v := newValidator(t)
	lines := chainLines(t, 50, func(i int, m map[string]any) {
		p := payload(m)
		p["message"] = "snow \u2603 \u2028 \U0001F600 <&>"
		p["exit_code"] = nil
		p["score"] = -1.5
		p["cost_usd"] = 1e-7
		p["tokens_in"] = 1 << 40
	})
	meta := testMeta
	res, err := v.Journal(bytes.NewReader(journalBytes(lines...)), "j", &meta)
	expectRefusal(t, err)
	if res.Entries != 50 || res.Valid != 50 || res.Head != hashOf(t, lines[49]) {
		t.Errorf("result %+v", res)
	}
}

func TestCapsuleDirectory(t *testing.T) {
	v := newValidator(t)
	lines := chainLines(t, 2, nil)
	capsule := `{"capsule_id":"cap-7","created_at":"2026-09-02T00:00:00.000Z","harness_version":"test/1","run_id":"run-7","schema":"capsule-envelope/v1","task_family":"slugify"}`
	tests := []struct {
		name    string
		capsule *string // nil: no capsule.json
		code    events.Code
		line    int
		ptr     string
		inFile  string
	}{
		{name: "valid", capsule: &capsule},
		{name: "missing capsule.json", code: events.InvalidCapsule, inFile: validate.CapsuleFile},
		{name: "capsule.json not JSON", capsule: ptr(`{"run_id":`), code: events.InvalidCapsule, inFile: validate.CapsuleFile},
		{name: "capsule.json without task_family", capsule: ptr(strings.Replace(capsule, `,"task_family":"slugify"`, "", 1)), code: events.InvalidCapsule, ptr: "/task_family", inFile: validate.CapsuleFile},
		{name: "capsule.json with a number", capsule: ptr(strings.Replace(capsule, `"test/1"`, "1", 1)), code: events.InvalidCapsule, ptr: "/harness_version", inFile: validate.CapsuleFile},
		{name: "capsule.json of another schema", capsule: ptr(strings.Replace(capsule, "/v1", "/v2", 1)), code: events.InvalidCapsule, ptr: "/schema", inFile: validate.CapsuleFile},
		{name: "capsule.json with a created_at Date.parse takes but toISOString never writes", capsule: ptr(strings.Replace(capsule, ".000Z", "Z", 1)), code: events.InvalidCapsule, ptr: "/created_at", inFile: validate.CapsuleFile},
		{name: "metadata_mismatch with capsule.json", capsule: ptr(strings.Replace(capsule, "cap-7", "cap-9", 1)), code: events.MetadataMismatch, line: 1, ptr: "/capsule_id", inFile: validate.JournalFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, validate.JournalFile), journalBytes(lines...), 0o600); err != nil {
				t.Fatal(err)
			}
			if tt.capsule != nil {
				if err := os.WriteFile(filepath.Join(dir, validate.CapsuleFile), []byte(*tt.capsule), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := v.VerifyPath(dir)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Kind != validate.KindJournal {
				t.Errorf("kind %s", rep.Kind)
			}
			if tt.code == "" {
				if !rep.OK || rep.Head != hashOf(t, lines[1]) {
					t.Fatalf("report %+v", rep)
				}
				return
			}
			if rep.OK || rep.Code != tt.code || rep.Refusal == nil {
				t.Fatalf("report %+v, want code %s", rep, tt.code)
			}
			at := rep.Refusal.At
			if at.File != filepath.Join(dir, tt.inFile) || at.Line != tt.line || at.Pointer != tt.ptr {
				t.Errorf("refusal at %+v, want %s line %d pointer %q", at, tt.inFile, tt.line, tt.ptr)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// TestJournalParallelWithRealRules verifies a journal long enough for the
// parallel pipeline, with entries that go to jsonschema and to the secret
// canaries on several goroutines at once (run with -race), and checks the
// problems are found in line order.
func TestJournalParallelWithRealRules(t *testing.T) {
	n := 1200
	if raceEnabled {
		n = 600
	}
	lines := chainLines(t, n, func(i int, m map[string]any) {
		switch i % 100 {
		case 37:
			payload(m)["blob"] = "not allowlisted"
		case 71:
			payload(m)["message"] = canaries()[1].value
		}
	})
	_, err := newValidator(t).Journal(bytes.NewReader(journalBytes(lines...)), "j", nil)
	var wants []want
	for i := range n {
		switch i % 100 {
		case 37:
			wants = append(wants, want{events.InvalidEntry, i + 1, "/payload"})
		case 71:
			wants = append(wants, want{events.InvalidEntry, i + 1, "/payload/message"})
		}
	}
	expectRefusal(t, err, wants...)
}
