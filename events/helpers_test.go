package events_test

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/roompub/roompub/events"
)

// refDir is the copy of the upstream reference vectors (testdata/reference),
// relative to this package's directory.
var refDir = filepath.Join("..", "testdata", "reference")

// Known values of the reference vectors (testdata/reference/capsule-journals/README.md).
const (
	refJournalSHA256 = "36c5df0c9b513d460b5140600a55aa922599dac8a21bcf5ac917ad9ab3101984"
	refEntry0Hash    = "fcd830e206d3732ad19d87e6cfebcb04a03bd8cc6f90f181d44af3de035f9b67"
	refEntry1Hash    = "0c8dcb85ab9282775188d293863964c77ebf85e6c08f42526dd14a7e2021dc3d"
	refSingleHash    = "b24439ebdbd58c19e3128d496a47739c59c7736cc82cecaacb00814d54c0c782"
	refHostDIDKey    = "z6MkqB3fVxzXFbVUK2q1GPrLQzaxgwDGGVuxkDzaf5tsLnpo"
)

func readRef(tb testing.TB, parts ...string) []byte {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(append([]string{refDir}, parts...)...))
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// refJournalLines returns the reference journal's lines without their newlines.
func refJournalLines(tb testing.TB) [][]byte {
	tb.Helper()
	raw := readRef(tb, "capsule-journals", "canonical", "journal.ndjson")
	return bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
}

// members decodes a JSON object into the members map SignRecord and NewEntry take.
func members(tb testing.TB, raw []byte) map[string]any {
	tb.Helper()
	obj, _, err := events.DecodeObject(raw)
	if err != nil {
		tb.Fatal(err)
	}
	return obj
}

// seededKey returns a deterministic host key and its private key.
func seededKey(b byte) (*events.HostKey, ed25519.PrivateKey) {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{b}, ed25519.SeedSize))
	return events.NewHostKey(priv), priv
}

// entryMembers is a valid capsule envelope v1 entry without entry_hash.
func entryMembers(seq int, parent string) map[string]any {
	return map[string]any{
		"schema":          events.EntrySchema,
		"run_id":          "run-7",
		"capsule_id":      "cap-7",
		"seq":             seq,
		"ts":              "2026-09-02T00:00:00.000Z",
		"lineage":         "attempt",
		"kind":            "tool.call",
		"effect_class":    "SE0",
		"harness_version": "test/1",
		"task_family":     "slugify",
		"parent_hash":     parent,
		"payload":         map[string]any{"task_id": "t01", "tool": "bash", "exit_code": 0, "message": "Alpha ok"},
	}
}

// chainLines builds n chained entries with events.NewEntry, so hashes and
// links are right; mut, if not nil, edits entry i after seq and parent_hash
// are set and before it is hashed.
func chainLines(tb testing.TB, n int, mut func(i int, m map[string]any)) [][]byte {
	tb.Helper()
	parent := events.ZeroHash
	lines := make([][]byte, 0, n)
	for i := range n {
		m := entryMembers(i, parent)
		if mut != nil {
			mut(i, m)
		}
		e, err := events.NewEntry(m)
		if err != nil {
			tb.Fatal(err)
		}
		lines = append(lines, bytes.Clone(e.Canonical()))
		parent = e.EntryHash()
	}
	return lines
}

// journal joins lines, each followed by "\n".
func journal(lines ...[]byte) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func hashOf(tb testing.TB, line []byte) string {
	tb.Helper()
	e, err := events.ParseEntry(line)
	if err != nil {
		tb.Fatal(err)
	}
	return e.EntryHash()
}

func asRefusal(tb testing.TB, err error) *events.Refusal {
	tb.Helper()
	if err == nil {
		tb.Fatal("accepted, want a refusal")
	}
	var ref *events.Refusal
	if !errors.As(err, &ref) {
		tb.Fatalf("error %T %v is not a *events.Refusal", err, err)
	}
	return ref
}
