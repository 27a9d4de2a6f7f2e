package main

import (
	"bytes"
	"crypto/rand"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// TestGeneratedEntriesAreCanonicalAndValid proves the fast generator
// honest: every entry it writes is byte-equal to its RFC 8785 form as
// events.Canonicalize (gowebpki/jcs) computes it, and passes every rule of
// the verifier (schema, payload allowlist, secret canaries, entry_hash,
// seq, parent_hash, metadata).
func TestGeneratedEntriesAreCanonicalAndValid(t *testing.T) {
	v, err := validate.New()
	if err != nil {
		t.Fatal(err)
	}
	const perChain = 1000
	var total, size int
	for i, meta := range []events.CapsuleMeta{
		chainMeta("run-bench-raw-long", "cap-bench-raw-long"),
		chainMeta("run-bench-read-0007", "cap-bench-read-0007"),
		chainMeta("r", "c"),
	} {
		g := newChainGen(meta, uint64(i+1))
		cv := v.NewChain(&meta)
		for seq := range perChain {
			line, hash := g.next()
			canon, err := events.Canonicalize(line)
			if err != nil {
				t.Fatalf("%s entry %d: %v\n%s", meta.RunID, seq, err, line)
			}
			if !bytes.Equal(canon, line) {
				t.Fatalf("%s entry %d is not canonical:\n got %s\nwant %s", meta.RunID, seq, line, canon)
			}
			e, problems := cv.Check(line, events.Location{Line: seq + 1})
			if len(problems) > 0 {
				t.Fatalf("%s entry %d refused: %v\n%s", meta.RunID, seq, problems, line)
			}
			if e.EntryHash() != hash || e.ComputedHash() != hash {
				t.Fatalf("%s entry %d: generator says hash %s, entry claims %s, computed %s", meta.RunID, seq, hash, e.EntryHash(), e.ComputedHash())
			}
			total++
			size += len(line)
		}
		if cv.Next() != perChain {
			t.Fatalf("%s: verifier at %d, want %d", meta.RunID, cv.Next(), perChain)
		}
	}
	if avg := size / total; avg < 500 || avg > 750 {
		t.Errorf("average entry is %d bytes; the bench wants entries like the samples' (~600)", avg)
	}
}

// TestGeneratedSidesAreTheSameSize checks what the bench's fairness rests
// on: two chains from one seed whose ids have equal lengths have entries of
// equal lengths (raw and roompub send the same number of bytes).
func TestGeneratedSidesAreTheSameSize(t *testing.T) {
	a := genChain(chainMeta("run-bench-raw-long", "cap-bench-raw-long"), 42, 500)
	b := genChain(chainMeta("run-bench-pub-long", "cap-bench-pub-long"), 42, 500)
	if a.bytes != b.bytes {
		t.Fatalf("raw chain %d bytes, roompub chain %d bytes", a.bytes, b.bytes)
	}
	for i := range a.lines {
		if len(a.lines[i]) != len(b.lines[i]) || bytes.Equal(a.lines[i], b.lines[i]) {
			t.Fatalf("entry %d: lengths %d and %d (want equal), bytes equal %v (want different)", i, len(a.lines[i]), len(b.lines[i]), bytes.Equal(a.lines[i], b.lines[i]))
		}
	}
}

// TestWrittenCapsuleVerifies checks a capsule directory as `publisher
// verify` reads it.
func TestWrittenCapsuleVerifies(t *testing.T) {
	v, err := validate.New()
	if err != nil {
		t.Fatal(err)
	}
	c := genChain(chainMeta("run-bench-verify", "cap-bench-verify"), 7, 300)
	dir := filepath.Join(t.TempDir(), "capsule")
	if err := writeChain(dir, c); err != nil {
		t.Fatal(err)
	}
	rep, err := v.VerifyPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Entries == nil || *rep.Entries != 300 || rep.Head != c.hashes[299] {
		t.Fatalf("verify: ok %v, entries %v, head %s (want %s): %s at %s: %s", rep.OK, rep.Entries, rep.Head, c.hashes[299], rep.Code, rep.At, rep.Reason)
	}
}

// TestGeneratedRecordsVerify checks signed records against a validator that
// trusts their host, and that two sides' records have the same length.
func TestGeneratedRecordsVerify(t *testing.T) {
	key, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	v, err := validate.New(validate.WithTrustedHosts(key.NodeID()))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := genRecords(key, "room:bench-raw-records", "raw", 3)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := genRecords(key, "room:bench-pub-records", "pub", 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, rec := range append(raw, pub...) {
		got, err := v.Record(rec.Canonical(), events.Location{})
		if err != nil {
			t.Fatalf("record %d refused: %v", i, err)
		}
		if !strings.HasPrefix(got.RoomID(), "room:bench-") {
			t.Fatalf("record %d room %q", i, got.RoomID())
		}
	}
	if len(raw[0].Canonical()) != len(pub[0].Canonical()) {
		t.Fatalf("record lengths %d and %d", len(raw[0].Canonical()), len(pub[0].Canonical()))
	}
}
