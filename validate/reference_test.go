package validate_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// Acceptance criteria of the core record formats, against the upstream
// reference vectors in testdata/reference.

const (
	refJournalSHA256 = "36c5df0c9b513d460b5140600a55aa922599dac8a21bcf5ac917ad9ab3101984"
	refEntry0Hash    = "fcd830e206d3732ad19d87e6cfebcb04a03bd8cc6f90f181d44af3de035f9b67"
	refHead          = "0c8dcb85ab9282775188d293863964c77ebf85e6c08f42526dd14a7e2021dc3d"
	refSingleHash    = "b24439ebdbd58c19e3128d496a47739c59c7736cc82cecaacb00814d54c0c782"
)

func TestReferenceCapsuleJournal(t *testing.T) {
	v := newValidator(t)
	raw := readRef(t, "capsule-journals", "canonical", "journal.ndjson")
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != refJournalSHA256 {
		t.Fatalf("sha256(journal.ndjson) = %x, want %s", sum, refJournalSHA256)
	}
	for _, path := range []string{
		refPath("capsule-journals", "canonical"),
		refPath("capsule-journals", "canonical", "journal.ndjson"),
	} {
		t.Run(path, func(t *testing.T) {
			rep, err := v.VerifyPath(path)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK || rep.Kind != validate.KindJournal || rep.Refusal != nil {
				t.Fatalf("report %+v, want an accepted journal", rep)
			}
			if rep.Head != refHead {
				t.Errorf("head %s, want %s", rep.Head, refHead)
			}
			if rep.Entries == nil || *rep.Entries != 2 {
				t.Errorf("entries %v, want 2", rep.Entries)
			}
		})
	}

	lines := bytes.SplitAfter(raw, []byte("\n"))
	chain := v.NewChain(nil)
	e, problems := chain.Check(bytes.TrimSuffix(lines[0], []byte("\n")), events.Location{Line: 1})
	if len(problems) != 0 {
		t.Fatalf("entry 0: %v", problems)
	}
	if e.EntryHash() != refEntry0Hash || e.ComputedHash() != refEntry0Hash {
		t.Errorf("entry 0 hash %s (computed %s), want %s", e.EntryHash(), e.ComputedHash(), refEntry0Hash)
	}
}

func TestReferenceSingleEntry(t *testing.T) {
	raw := readRef(t, "capsule-journals", "single-entry.json")
	want := readRef(t, "capsule-journals", "single-entry.canonical.txt")
	got, err := events.Canonicalize(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("canonical form differs from single-entry.canonical.txt:\n got %s\nwant %s", got, want)
	}
	obj, _, err := events.DecodeObject(raw)
	if err != nil {
		t.Fatal(err)
	}
	e, err := events.NewEntry(obj)
	if err != nil {
		t.Fatal(err)
	}
	if e.EntryHash() != refSingleHash {
		t.Fatalf("entry_hash %s, want %s", e.EntryHash(), refSingleHash)
	}
	// The vector, hashed, is a valid one-entry journal.
	res, err := newValidator(t).Journal(bytes.NewReader(append(bytes.Clone(e.Canonical()), '\n')), "single", nil)
	expectRefusal(t, err)
	if res.Head != refSingleHash || res.Entries != 1 || res.Valid != 1 {
		t.Errorf("result %+v", res)
	}
}

func TestReferenceExecutionRecords(t *testing.T) {
	v := newValidator(t)
	tests := []struct {
		file  string
		wants []want // the first is the refusal's code and pointer
	}{
		{"verified.json", nil},
		{"refused.json", nil},
		{"foreign-evidence.json", []want{{events.ForeignEvidence, 0, "/evidence/0/environment~1ref"}}},
		{"invalid/inline-output.json", []want{
			{events.SchemaInvalid, 0, "/evidence/0"},
			{events.RefMismatch, 0, "/execution~1ref"},
			{events.SignatureInvalid, 0, "/signature"},
		}},
		{"invalid/refused-without-code.json", []want{
			{events.SchemaInvalid, 0, ""},
			{events.RefMismatch, 0, "/execution~1ref"},
			{events.SignatureInvalid, 0, "/signature"},
		}},
		{"invalid/verified-without-instance.json", []want{
			{events.SchemaInvalid, 0, ""},
			{events.RefMismatch, 0, "/execution~1ref"},
			{events.SignatureInvalid, 0, "/signature"},
			{events.ForeignEvidence, 0, "/evidence/0"},
			{events.ForeignEvidence, 0, "/evidence/1"},
			{events.ForeignEvidence, 0, "/evidence/2"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := refPath("execution-records", tt.file)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := v.Record(raw, events.Location{File: path})
			expectRefusal(t, err, tt.wants...)
			if rec == nil {
				t.Fatal("no record returned for a parseable record")
			}
			claimed := rec.ExecutionRef()
			if tt.wants == nil || tt.wants[0].code == events.ForeignEvidence {
				// An accepted record's, and a foreign-evidence record's, execution/ref is its own.
				if rec.ComputedRef() != claimed {
					t.Errorf("computed execution/ref %s, claimed %s", rec.ComputedRef(), claimed)
				}
			}

			rep, err := v.VerifyPath(path)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Kind != validate.KindExecution || rep.Ref != rec.ComputedRef() || rep.OK != (tt.wants == nil) {
				t.Errorf("VerifyPath report %+v", rep)
			}
			if tt.wants != nil && (rep.Code != tt.wants[0].code || rep.Refusal == nil || rep.Refusal.At.File != path) {
				t.Errorf("VerifyPath code %s at %+v, want %s", rep.Code, rep.Refusal, tt.wants[0].code)
			}
		})
	}
}

func TestReferenceRecordRefs(t *testing.T) {
	refs := map[string]string{
		"verified.json":         "corpus-task-pack-execution:sha256:PEaap8mlrUCWgXaNN_ov8LMrV0U6McBdaRiHIbFzaS0",
		"refused.json":          "corpus-task-pack-execution:sha256:bOfnms-342jheEQTRshIkvucGZG2pRO1bZfNtctasY4",
		"foreign-evidence.json": "corpus-task-pack-execution:sha256:I8RhiWxfbEvK6Wk7tNiofmjR4GkYRgFjKsfM4pQMXiw",
	}
	for file, ref := range refs {
		rep, err := newValidator(t).VerifyPath(refPath("execution-records", file))
		if err != nil {
			t.Fatal(err)
		}
		if rep.Ref != ref {
			t.Errorf("%s: computed execution/ref %s, want %s", file, rep.Ref, ref)
		}
	}
}
