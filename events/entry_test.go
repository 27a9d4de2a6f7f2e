package events_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
)

func TestSingleEntryVector(t *testing.T) {
	raw := readRef(t, "capsule-journals", "single-entry.json")
	canonical := readRef(t, "capsule-journals", "single-entry.canonical.txt")

	// The vector's hash is the SHA-256 of its canonical bytes (seed 000).
	if sum := sha256.Sum256(canonical); hex.EncodeToString(sum[:]) != refSingleHash {
		t.Fatalf("sha256(single-entry.canonical.txt) = %x, want %s", sum, refSingleHash)
	}

	m := members(t, raw)
	e, err := events.NewEntry(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.EntryHash(); got != refSingleHash {
		t.Errorf("NewEntry(single-entry.json).EntryHash() = %s, want %s", got, refSingleHash)
	}
	if got := e.ComputedHash(); got != refSingleHash {
		t.Errorf("ComputedHash() = %s, want %s", got, refSingleHash)
	}
	// The entry line is the vector's canonical form with entry_hash added in key order.
	want := bytes.Replace(canonical, []byte(`"effect_class":"SE0",`),
		[]byte(`"effect_class":"SE0","entry_hash":"`+refSingleHash+`",`), 1)
	if !bytes.Equal(e.Canonical(), want) {
		t.Errorf("Canonical() =\n%s\nwant\n%s", e.Canonical(), want)
	}
	if _, ok := m["entry_hash"]; ok {
		t.Error("NewEntry added entry_hash to the caller's map")
	}
}

func TestReferenceJournalEntries(t *testing.T) {
	raw := readRef(t, "capsule-journals", "canonical", "journal.ndjson")
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != refJournalSHA256 {
		t.Fatalf("sha256(journal.ndjson) = %x, want %s (testdata copy altered?)", sum, refJournalSHA256)
	}
	lines := refJournalLines(t)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	wantHash := []string{refEntry0Hash, refEntry1Hash}
	wantParent := []string{events.ZeroHash, refEntry0Hash}
	for i, line := range lines {
		e, err := events.ParseEntry(line)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if e.ComputedHash() != wantHash[i] || e.EntryHash() != wantHash[i] {
			t.Errorf("line %d: computed %s, claimed %s, want %s", i+1, e.ComputedHash(), e.EntryHash(), wantHash[i])
		}
		if e.ParentHash() != wantParent[i] {
			t.Errorf("line %d: parent_hash %s, want %s", i+1, e.ParentHash(), wantParent[i])
		}
		if seq, ok := e.Seq(); !ok || seq != int64(i) {
			t.Errorf("line %d: Seq() = %d, %v; want %d, true", i+1, seq, ok, i)
		}
		if !bytes.Equal(e.Canonical(), line) {
			t.Errorf("line %d: Canonical() differs from the line", i+1)
		}
		want := events.CapsuleMeta{RunID: "run-canonical", CapsuleID: "cap-canonical", HarnessVersion: "test/1", TaskFamily: "compatibility"}
		if got := e.Metadata(); got != want {
			t.Errorf("line %d: Metadata() = %+v, want %+v", i+1, got, want)
		}
		if got := e.Metadata().Key(); got != (events.ChainKey{RunID: "run-canonical", CapsuleID: "cap-canonical"}) {
			t.Errorf("line %d: Key() = %+v", i+1, got)
		}
	}
}

func TestNewEntryReplacesClaimedHash(t *testing.T) {
	m := entryMembers(0, events.ZeroHash)
	m["entry_hash"] = "not-a-hash"
	e, err := events.NewEntry(m)
	if err != nil {
		t.Fatal(err)
	}
	if e.EntryHash() != e.ComputedHash() || len(e.EntryHash()) != 64 {
		t.Fatalf("EntryHash %q, ComputedHash %q", e.EntryHash(), e.ComputedHash())
	}
	if m["entry_hash"] != "not-a-hash" {
		t.Error("NewEntry modified the caller's map")
	}
	// The hash is over the canonical entry without entry_hash.
	pre, err := events.CanonicalWithout(e.Object(), "entry_hash")
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(pre); hex.EncodeToString(sum[:]) != e.EntryHash() {
		t.Errorf("entry_hash %s is not sha256 of %s", e.EntryHash(), pre)
	}
}

func TestParseEntryKeepsClaimedHash(t *testing.T) {
	line := refJournalLines(t)[0]
	forged := bytes.Replace(line, []byte(refEntry0Hash), bytes.Repeat([]byte("a"), 64), 1)
	e, err := events.ParseEntry(forged)
	if err != nil {
		t.Fatal(err)
	}
	if e.EntryHash() != string(bytes.Repeat([]byte("a"), 64)) {
		t.Errorf("EntryHash() = %s, want the claimed value", e.EntryHash())
	}
	if e.ComputedHash() != refEntry0Hash {
		t.Errorf("ComputedHash() = %s, want %s", e.ComputedHash(), refEntry0Hash)
	}
}

func TestEntrySeq(t *testing.T) {
	tests := []struct {
		name   string
		seq    any
		want   int64
		wantOK bool
	}{
		{"zero", 0, 0, true},
		{"positive", 41, 41, true},
		{"negative", -1, -1, true},
		{"float", 1.5, 0, false},
		{"string", "1", 0, false},
		{"null", nil, 0, false},
		{"too big for int64", 1e19, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := entryMembers(0, events.ZeroHash)
			m["seq"] = tt.seq
			e, err := events.NewEntry(m)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := e.Seq()
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Seq() = %d, %v; want %d, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
	m := entryMembers(0, events.ZeroHash)
	delete(m, "seq")
	e, err := events.NewEntry(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Seq(); ok {
		t.Error("Seq() ok for an entry without seq")
	}
}

func TestEntryStringAccessorsIgnoreNonStrings(t *testing.T) {
	e, err := events.ParseEntry([]byte(`{"run_id":1,"capsule_id":null,"parent_hash":{},"entry_hash":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if e.RunID() != "" || e.CapsuleID() != "" || e.ParentHash() != "" || e.EntryHash() != "" {
		t.Errorf("accessors returned %q %q %q %q, want empty", e.RunID(), e.CapsuleID(), e.ParentHash(), e.EntryHash())
	}
}

func TestParseEntryRefusesNonObjects(t *testing.T) {
	for _, in := range []string{``, " \t", `{"a":1,"a":2}`, `{"a":"\ud800","a":1}`, `["\ud800"`} {
		if e, err := events.ParseEntry([]byte(in)); !errors.Is(err, events.ErrNotJSON) || e != nil {
			t.Errorf("ParseEntry(%q) = %v, %v; want nil, ErrNotJSON", in, e, err)
		}
	}
	for _, in := range []string{`[]`, `"entry"`, `1`, `null`, `["\ud800"]`, `"\udc00"`, ` [{"a":"\ud800"}] `} {
		if e, err := events.ParseEntry([]byte(in)); !errors.Is(err, events.ErrNotObject) || e != nil {
			t.Errorf("ParseEntry(%q) = %v, %v; want nil, ErrNotObject", in, e, err)
		}
	}
}

func TestParseCapsule(t *testing.T) {
	got, err := events.ParseCapsule(readRef(t, "capsule-journals", "canonical", "capsule.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := events.CapsuleMeta{RunID: "run-canonical", CapsuleID: "cap-canonical", HarnessVersion: "test/1", TaskFamily: "compatibility"}
	if got != want {
		t.Fatalf("ParseCapsule(reference) = %+v, want %+v", got, want)
	}

	bad := []struct{ name, in string }{
		{"not JSON", `{"run_id":`},
		{"array", `[]`},
		{"missing task_family", `{"run_id":"r","capsule_id":"c","harness_version":"h"}`},
		{"empty run_id", `{"run_id":"","capsule_id":"c","harness_version":"h","task_family":"f"}`},
		{"number capsule_id", `{"run_id":"r","capsule_id":7,"harness_version":"h","task_family":"f"}`},
		{"duplicate key", `{"run_id":"r","run_id":"r","capsule_id":"c","harness_version":"h","task_family":"f"}`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := events.ParseCapsule([]byte(tt.in)); !errors.Is(err, events.ErrInvalidCapsule) {
				t.Errorf("ParseCapsule(%s) error = %v, want ErrInvalidCapsule", tt.in, err)
			}
		})
	}
}

// TestKnownIndex: the switch finds each indexed member where knownKeys
// lists it, and no other key.
func TestKnownIndex(t *testing.T) {
	for k, key := range events.KnownKeys {
		if got := events.KnownIndex(key); got != k {
			t.Errorf("KnownIndex(%q) = %d, want %d", key, got, k)
		}
	}
	for _, key := range []string{"", "payload", "schema", "ts", "entry_hashes", "Seq", "seq "} {
		if got := events.KnownIndex(key); got != -1 {
			t.Errorf("KnownIndex(%q) = %d, want -1", key, got)
		}
	}
}

// TestHashIs: the entry_hash comparison accepts ComputedHash alone: any
// other byte at any position (an upper-case digit included), and every
// other length, differ.
func TestHashIs(t *testing.T) {
	e, err := events.ParseEntry(chainLines(t, 1, nil)[0])
	if err != nil {
		t.Fatal(err)
	}
	want := e.ComputedHash()
	if !e.HashIs(want) {
		t.Fatalf("HashIs(ComputedHash()) = false for %s", want)
	}
	for pos := range len(want) {
		for c := range 256 {
			if byte(c) == want[pos] {
				continue
			}
			b := []byte(want)
			b[pos] = byte(c)
			if e.HashIs(string(b)) {
				t.Fatalf("HashIs(%q) = true, ComputedHash is %s", b, want)
			}
		}
	}
	for _, s := range []string{"", want[:63], want + "0", want[1:] + "0"} {
		if e.HashIs(s) {
			t.Errorf("HashIs(%q) = true, ComputedHash is %s", s, want)
		}
	}
}

// TestHexWord8: every byte value, at each of the four places of a word,
// is written as hex.EncodeToString writes it.
func TestHexWord8(t *testing.T) {
	for b := range 256 {
		for place := range 4 {
			var d [4]byte
			d[place] = byte(b)
			d[(place+1)%4] = byte(255 - b)
			want := hex.EncodeToString(d[:])
			w := events.HexWord8(uint64(d[0]) | uint64(d[1])<<16 | uint64(d[2])<<32 | uint64(d[3])<<48)
			var got [8]byte
			for i := range got {
				got[i] = byte(w >> (8 * i))
			}
			if string(got[:]) != want {
				t.Fatalf("hexWord8 of %x = %q, want %q", d, got, want)
			}
		}
	}
}

// TestTokenAt: a name compared as words is found exactly where
// strings.HasPrefix finds it: with any one byte changed, cut short, or
// followed by anything.
func TestTokenAt(t *testing.T) {
	for _, tok := range []string{`"ts":`, `"seq":`, `"kind":`, `"run_id":`, `"payload":`, `"parent_hash":`, `"harness_version":`, `"a_name_of_24_bytes_xx":`} {
		for _, rest := range []string{"", "x", `"2026-09-02T00:00:00Z"}`, strings.Repeat("y", 30)} {
			src := tok + rest
			if !events.TokenAt(tok, src) {
				t.Errorf("TokenAt(%q, %q) = false", tok, src)
			}
			for i := range len(tok) {
				b := []byte(src)
				b[i] ^= 0x20
				if got, want := events.TokenAt(tok, string(b)), strings.HasPrefix(string(b), tok); got != want {
					t.Errorf("TokenAt(%q, %q) = %v, want %v", tok, b, got, want)
				}
			}
			for n := range len(src) {
				if got, want := events.TokenAt(tok, src[:n]), strings.HasPrefix(src[:n], tok); got != want {
					t.Errorf("TokenAt(%q, %q) = %v, want %v", tok, src[:n], got, want)
				}
			}
		}
	}
}
