package validate_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

func TestDetectKind(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"record", readRef(t, "execution-records", "verified.json"), validate.KindExecution},
		{"record that is not strict JSON", append(readRef(t, "execution-records", "verified.json"), '}'), validate.KindExecution},
		{"journal", readRef(t, "capsule-journals", "canonical", "journal.ndjson"), validate.KindJournal},
		{"single entry", readRef(t, "capsule-journals", "single-entry.json"), validate.KindJournal},
		{"entry that mentions schema/v in a payload", []byte(`{"schema":"capsule-envelope/v1","payload":{"note":"\"schema/v\""}}` + "\n" + `{"schema":"x"}` + "\n"), validate.KindJournal},
		{"empty", nil, validate.KindJournal},
		{"garbage", []byte("\x00\xff"), validate.KindJournal},
		{"journal entry on one line", firstLine(readRef(t, "capsule-journals", "canonical", "journal.ndjson")), validate.KindJournal},
		{"object on one line without schema or a name with /", []byte(`{"a":1}` + "\n"), validate.KindJournal},
		{"record without schema/v", withoutLine(t, readRef(t, "execution-records", "verified.json"), `"schema/v"`), validate.KindExecution},
		{"record without schema/v on one line", []byte(`{"execution/ref":"x","room/id":"room:x"}` + "\n"), validate.KindExecution},
		{"object over several lines without schema", []byte("{\n  \"a\": 1\n}\n"), validate.KindExecution},
		{"object over several lines, not strict JSON", []byte("{\n  \"a\": 1,\n  \"a\": 1\n}\n"), validate.KindExecution},
		{"array over several lines", []byte("[\n  1\n]\n"), validate.KindExecution},
		{"record without schema/v cut short", []byte("{\n  \"execution/ref\": \"x\",\n  \"room/id\""), validate.KindExecution},
		{"journal entry cut short", []byte("{\n  \"schema\": \"capsule-envelope/v1\",\n"), validate.KindJournal},
	}
	for _, tt := range tests {
		if got := validate.DetectKind(tt.data); got != tt.want {
			t.Errorf("%s: DetectKind = %s, want %s", tt.name, got, tt.want)
		}
	}
}

// firstLine is data's first line with its newline.
func firstLine(data []byte) []byte {
	i := bytes.IndexByte(data, '\n')
	return data[:i+1]
}

// withoutLine is data without the lines that contain substr; it fails the
// test if there is none.
func withoutLine(t *testing.T, data []byte, substr string) []byte {
	t.Helper()
	var out []byte
	for _, l := range bytes.SplitAfter(data, []byte("\n")) {
		if !bytes.Contains(l, []byte(substr)) {
			out = append(out, l...)
		}
	}
	if len(out) == len(data) {
		t.Fatalf("no line holds %s", substr)
	}
	return out
}

// TestVerifyPathRecordWithoutSchemaV: a pretty-printed record that lacks
// "schema/v" is verified as a record and refused as the gate refuses it
// (Validator.Record), schema_invalid, not read as a journal of corrupt
// lines.
func TestVerifyPathRecordWithoutSchemaV(t *testing.T) {
	v := newValidator(t)
	data := withoutLine(t, readRef(t, "execution-records", "verified.json"), `"schema/v"`)
	p := filepath.Join(t.TempDir(), "record.json")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := v.VerifyPath(p)
	if err != nil || rep.OK || rep.Kind != validate.KindExecution || rep.Code != events.SchemaInvalid || rep.Ref == "" {
		t.Fatalf("got kind %q code %q ok %v ref %q err %v; want a record refused schema_invalid", rep.Kind, rep.Code, rep.OK, rep.Ref, err)
	}
	for _, pr := range rep.Problems {
		if pr.Code == events.CorruptEntry {
			t.Errorf("problem %v: read as a journal", pr)
		}
	}
	_, gerr := v.Record(data, events.Location{File: p})
	var ref *events.Refusal
	if !errors.As(gerr, &ref) || ref.Code != rep.Code {
		t.Errorf("the gate's verdict %v, verify's %s", gerr, rep.Code)
	}
}

func TestVerifyPathUsageErrors(t *testing.T) {
	v := newValidator(t)
	dir := t.TempDir()
	for name, path := range map[string]string{
		"missing file":              filepath.Join(dir, "absent.json"),
		"directory without journal": dir,
	} {
		rep, err := v.VerifyPath(path)
		if !errors.Is(err, validate.ErrUsage) {
			t.Errorf("%s: error %v, want ErrUsage", name, err)
		}
		var ref *events.Refusal
		if errors.As(err, &ref) || rep.Refusal != nil {
			t.Errorf("%s: reported as a refusal", name)
		}
	}
}

func TestVerifyPathFiles(t *testing.T) {
	v := newValidator(t)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lines := chainLines(t, 2, nil)

	// The kind is told from content, not the file name.
	p := write("looks-like-a-record.json", journalBytes(lines...))
	rep, err := v.VerifyPath(p)
	if err != nil || !rep.OK || rep.Kind != validate.KindJournal || rep.Head != hashOf(t, lines[1]) {
		t.Errorf("journal under a .json name: %+v, %v", rep, err)
	}

	key, _ := testKey(10)
	p = write("journal.ndjson", signed(t, recordMembers(t), key))
	rep, err = v.VerifyPath(p)
	if err != nil || !rep.OK || rep.Kind != validate.KindExecution || rep.Ref == "" {
		t.Errorf("record under a .ndjson name: %+v, %v", rep, err)
	}

	// Nothing tells an empty file's kind: it is refused as neither.
	for _, name := range []string{"empty", "record.json", "journal.ndjson"} {
		p = write(name, []byte(" \n"))
		rep, err = v.VerifyPath(p)
		if err != nil || rep.OK || rep.Kind != "" || rep.Code != events.EmptyInput || rep.Entries != nil ||
			rep.Refusal.Reason != "the file is empty: it holds no journal entry and no execution record" {
			t.Errorf("empty file %s: %+v, %v", name, rep, err)
		}
	}

	p = write("bad-record.json", []byte(`{"schema/v":1,"schema/v":1}`))
	rep, err = v.VerifyPath(p)
	if err != nil || rep.OK || rep.Kind != validate.KindExecution || rep.Code != events.MalformedJSON || rep.Ref != "" {
		t.Errorf("malformed record: %+v, %v", rep, err)
	}

	bad := chainLines(t, 2, at(1, func(m map[string]any) { m["seq"] = 4 }))
	p = write("bad.ndjson", journalBytes(bad...))
	rep, err = v.VerifyPath(p)
	if err != nil || rep.OK || rep.Code != events.Reordered || rep.At != p+":2 /seq" || len(rep.Problems) != 1 || rep.Head != hashOf(t, bad[0]) {
		t.Errorf("refused journal: %+v, %v", rep, err)
	}
}

func TestReadCapsuleMeta(t *testing.T) {
	meta, err := validate.ReadCapsuleMeta(refPath("capsule-journals", "canonical"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (events.CapsuleMeta{RunID: "run-canonical", CapsuleID: "cap-canonical", HarnessVersion: "test/1", TaskFamily: "compatibility"}); meta != want {
		t.Errorf("meta %+v, want %+v", meta, want)
	}
	dir := t.TempDir()
	_, err = validate.ReadCapsuleMeta(dir)
	ref := expectRefusal(t, err, want{events.InvalidCapsule, 0, ""})
	if ref.At.File != filepath.Join(dir, validate.CapsuleFile) {
		t.Errorf("refusal names %q", ref.At.File)
	}
}
