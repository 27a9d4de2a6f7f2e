package validate_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// refDir is the copy of the upstream reference vectors (testdata/reference),
// relative to this package's directory.
var refDir = filepath.Join("..", "testdata", "reference")

func refPath(parts ...string) string { return filepath.Join(append([]string{refDir}, parts...)...) }

func readRef(tb testing.TB, parts ...string) []byte {
	tb.Helper()
	data, err := os.ReadFile(refPath(parts...))
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

var defaultValidator = sync.OnceValues(func() (*validate.Validator, error) { return validate.New() })

// newValidator returns the default validator (shared: it is immutable and
// safe for concurrent use), or a new one when options are given.
func newValidator(tb testing.TB, opts ...validate.Option) *validate.Validator {
	tb.Helper()
	if len(opts) == 0 {
		v, err := defaultValidator()
		if err != nil {
			tb.Fatal(err)
		}
		return v
	}
	v, err := validate.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// want is one expected problem: its code, line (journals) and JSON pointer.
type want struct {
	code events.Code
	line int
	ptr  string
}

// expectRefusal asserts that err is a *events.Refusal listing exactly the
// wanted problems in order, whose code is the first one's.
func expectRefusal(tb testing.TB, err error, wants ...want) *events.Refusal {
	tb.Helper()
	if len(wants) == 0 {
		if err != nil {
			tb.Fatalf("refused, want accepted: %v\n%s", err, problemList(err))
		}
		return nil
	}
	if err == nil {
		tb.Fatalf("accepted, want %s", wants[0].code)
	}
	var ref *events.Refusal
	if !errors.As(err, &ref) {
		tb.Fatalf("error %T %v is not a *events.Refusal", err, err)
	}
	if ref.Code != wants[0].code || !errors.Is(err, wants[0].code) {
		tb.Errorf("code %s, want %s\n%s", ref.Code, wants[0].code, problemList(err))
	}
	if ref.At.Line != wants[0].line || ref.At.Pointer != wants[0].ptr {
		tb.Errorf("refusal at line %d pointer %q, want line %d pointer %q", ref.At.Line, ref.At.Pointer, wants[0].line, wants[0].ptr)
	}
	if len(ref.Problems) != len(wants) {
		tb.Fatalf("%d problems, want %d:\n%s", len(ref.Problems), len(wants), problemList(err))
	}
	for i, w := range wants {
		if p := ref.Problems[i]; p.Code != w.code || p.At.Line != w.line || p.At.Pointer != w.ptr {
			tb.Errorf("problem %d is %s at line %d pointer %q, want %s at line %d pointer %q",
				i, p.Code, p.At.Line, p.At.Pointer, w.code, w.line, w.ptr)
		}
	}
	return ref
}

func problemList(err error) string {
	var ref *events.Refusal
	if !errors.As(err, &ref) {
		return ""
	}
	var b strings.Builder
	for _, p := range ref.Problems {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	return b.String()
}

// --- journals -------------------------------------------------------------

var testMeta = events.CapsuleMeta{RunID: "run-7", CapsuleID: "cap-7", HarnessVersion: "test/1", TaskFamily: "slugify"}

// entryMembers is a valid capsule envelope v1 entry without entry_hash.
func entryMembers(seq int, parent string) map[string]any {
	return map[string]any{
		"schema":          events.EntrySchema,
		"run_id":          testMeta.RunID,
		"capsule_id":      testMeta.CapsuleID,
		"seq":             seq,
		"ts":              "2026-09-02T00:00:00.000Z",
		"lineage":         "attempt",
		"kind":            "tool.call",
		"effect_class":    "SE0",
		"harness_version": testMeta.HarnessVersion,
		"task_family":     testMeta.TaskFamily,
		"parent_hash":     parent,
		"payload": map[string]any{
			"task_id": "t01", "tool": "bash", "exit_code": 0, "duration_ms": 12.5, "message": "Alpha ok",
		},
	}
}

// payload returns m's payload map for editing.
func payload(m map[string]any) map[string]any { return m["payload"].(map[string]any) }

// chainLines builds n chained entries with events.NewEntry, so hashes and
// links are right; mut, if not nil, edits entry i after seq and parent_hash
// are set and before it is hashed, and the next entry links to the result.
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

// journalBytes joins lines, each followed by "\n".
func journalBytes(lines ...[]byte) []byte {
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

// replaceOnce replaces the single occurrence of old in line, failing the
// test if there is not exactly one.
func replaceOnce(tb testing.TB, line []byte, old, new string) []byte {
	tb.Helper()
	if n := bytes.Count(line, []byte(old)); n != 1 {
		tb.Fatalf("%q occurs %d times in %s", old, n, line)
	}
	return bytes.Replace(line, []byte(old), []byte(new), 1)
}

// --- records --------------------------------------------------------------

// recordMembers returns verified.json's members, the base every record test
// mutates.
func recordMembers(tb testing.TB) map[string]any {
	tb.Helper()
	obj, _, err := events.DecodeObject(readRef(tb, "execution-records", "verified.json"))
	if err != nil {
		tb.Fatal(err)
	}
	return obj
}

// testKey returns a deterministic host key and its private key.
func testKey(b byte) (*events.HostKey, ed25519.PrivateKey) {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{b}, ed25519.SeedSize))
	return events.NewHostKey(priv), priv
}

// signed signs m with key through events.SignRecord and returns the
// record's canonical bytes.
func signed(tb testing.TB, m map[string]any, key *events.HostKey) []byte {
	tb.Helper()
	rec, err := events.SignRecord(m, key)
	if err != nil {
		tb.Fatal(err)
	}
	return bytes.Clone(rec.Canonical())
}

// seal is an independent implementation of seed 004's execution/ref and
// ed25519+domain-v1 signature. Unlike SignRecord it leaves host/node-id and
// (with keepRef) execution/ref as they are and takes any domain, so a test
// can make a record whose only fault is the one it wants.
func seal(tb testing.TB, m map[string]any, priv ed25519.PrivateKey, domain string, keepRef bool) []byte {
	tb.Helper()
	obj := make(map[string]any, len(m)+2)
	for k, v := range m {
		obj[k] = v
	}
	delete(obj, "signature")
	if !keepRef {
		pre, err := events.CanonicalWithout(obj, "execution/ref")
		if err != nil {
			tb.Fatal(err)
		}
		sum := sha256.Sum256(pre)
		obj["execution/ref"] = "corpus-task-pack-execution:sha256:" + base64.RawURLEncoding.EncodeToString(sum[:])
	}
	payload, err := events.CanonicalWithout(obj)
	if err != nil {
		tb.Fatal(err)
	}
	var msg bytes.Buffer
	msg.WriteString("orbiplex-sig-v1\x00")
	msg.Write(binary.BigEndian.AppendUint32(nil, uint32(len(domain))))
	msg.WriteString(domain)
	msg.Write(binary.BigEndian.AppendUint64(nil, uint64(len(payload))))
	msg.Write(payload)
	m32 := sha256.Sum256(msg.Bytes())
	obj["signature"] = map[string]any{
		"alg":        "ed25519+domain-v1",
		"value":      base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, m32[:])),
		"key/public": events.EncodeDIDKey(priv.Public().(ed25519.PublicKey)),
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := events.Canonicalize(raw)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// evidence returns m's evidence item i for editing.
func evidence(m map[string]any, i int) map[string]any {
	return m["evidence"].([]any)[i].(map[string]any)
}

func jsonIndent(dst *bytes.Buffer, src []byte) error { return json.Indent(dst, src, "", "  ") }
