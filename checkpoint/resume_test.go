package checkpoint

import (
	"errors"
	"testing"
)

// TestResumeRoundTrip: at every size up to 70 and every base below it,
// the resume state a lean ledger gives, through its header value, resumes
// a ledger that accepts the same checkpoint again and whose roots, as the
// leaves after it are appended, are the full tree's.
func TestResumeRoundTrip(t *testing.T) {
	const n, room = 70, "room:resume"
	full := treeOf(room, n)
	for size := uint64(1); size <= n-5; size++ {
		for base := uint64(0); base < size; base += 3 {
			l := NewLedger()
			for i := range size + 2 {
				l.Append(leafN(room, int(i)))
			}
			if base > 0 {
				root, _ := full.RootAt(base)
				if err := l.Accept(&Checkpoint{Room: room, Size: base, Root: root}, 1); err != nil {
					t.Fatal(err)
				}
			}
			r, err := l.ResumeAt(size)
			if err != nil {
				t.Fatalf("size %d base %d: %v", size, base, err)
			}
			r.LeafSeq, r.Records, r.Trust = 1000+size, 7, "0123456789abcdef"
			got, err := ParseResume(r.String())
			if err != nil || got.LeafSeq != r.LeafSeq || got.Records != 7 || got.Trust != r.Trust || got.Last != leafN(room, int(size-1)) {
				t.Fatalf("size %d: parsed %+v, %v", size, got, err)
			}
			root, _ := full.RootAt(size)
			ck := &Checkpoint{Room: room, Size: size, Root: root}
			rl, err := ResumeLedger(ck, 2000, got)
			if err != nil {
				t.Fatalf("size %d base %d: %v", size, base, err)
			}
			if c, seq := rl.Latest(); c != ck || seq != 2000 || rl.Size() != size || rl.Covered() != size {
				t.Fatalf("size %d: latest %v at %d, size %d", size, c, seq, rl.Size())
			}
			if err := rl.Check(ck); err != nil {
				t.Fatalf("size %d: the checkpoint read again: %v", size, err)
			}
			for i := size; i < size+5; i++ {
				rl.Append(leafN(room, int(i)))
				want, _ := full.RootAt(i + 1)
				if got, err := rl.RootAt(i + 1); err != nil || got != want {
					t.Fatalf("size %d: root at %d: %x %v, want %x", size, i+1, got, err, want)
				}
			}
		}
	}
}

// TestResumeLedgerRefuses: a damaged hash, a missing or extra hash, or a
// checkpoint of another root or size does not resume, with ErrBadResume.
func TestResumeLedgerRefuses(t *testing.T) {
	const room = "room:resume"
	full := treeOf(room, 22)
	l := NewLedger()
	for i := range 22 {
		l.Append(leafN(room, i))
	}
	r, err := l.ResumeAt(22)
	if err != nil || len(r.Prefix) != 3 { // 21 = 16+4+1
		t.Fatalf("%d hashes, %v", len(r.Prefix), err)
	}
	root, _ := full.RootAt(22)
	root21, _ := full.RootAt(21)
	damaged := r
	damaged.Prefix = append([][32]byte(nil), r.Prefix...)
	damaged.Prefix[1][5] ^= 1
	lastBad := r
	lastBad.Last[0] ^= 1
	short := r
	short.Prefix = r.Prefix[:2]
	for name, tc := range map[string]struct {
		ck *Checkpoint
		r  Resume
	}{
		"damaged node":  {&Checkpoint{Size: 22, Root: root}, damaged},
		"damaged leaf":  {&Checkpoint{Size: 22, Root: root}, lastBad},
		"missing node":  {&Checkpoint{Size: 22, Root: root}, short},
		"other root":    {&Checkpoint{Size: 22, Root: root21}, r},
		"other size":    {&Checkpoint{Size: 21, Root: root21}, r},
		"size zero":     {&Checkpoint{Size: 0, Root: emptyRoot}, Resume{}},
		"the right one": {&Checkpoint{Size: 22, Root: root}, r},
	} {
		_, err := ResumeLedger(tc.ck, 1, tc.r)
		if want := name != "the right one"; want != errors.Is(err, ErrBadResume) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := l.ResumeAt(0); !errors.Is(err, ErrTreeSize) {
		t.Errorf("size 0: %v", err)
	}
	if _, err := NewFullLedger().ResumeAt(1); !errors.Is(err, ErrTreeSize) {
		t.Errorf("a full ledger: %v", err)
	}
}

// TestTrustDigest: the digest changes with the trusted keys and the
// origin, not with the order keys are given in.
func TestTrustDigest(t *testing.T) {
	a, b := testKey(1).NodeID(), testKey(2).NodeID()
	ab, ba, onlyA := TrustDigest(mustTrust(t, a, b)), TrustDigest(mustTrust(t, b, a)), TrustDigest(mustTrust(t, a))
	withOrigin, err := mustTrust(t, a, b).WithOrigin("evidence.example.org/roompub")
	if err != nil {
		t.Fatal(err)
	}
	if ab != ba || ab == onlyA || ab == TrustDigest(withOrigin) || len(ab) != 16 {
		t.Errorf("digests %s %s %s %s", ab, ba, onlyA, TrustDigest(withOrigin))
	}
}

// TestParseResumeRefuses: malformed header values wrap ErrBadResume.
func TestParseResumeRefuses(t *testing.T) {
	h, d := "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", " 0123456789abcdef "
	for _, v := range []string{"", "1", "1 5 0", "1 5 0" + d, "2 5 0" + d + h, "1 0 0" + d + h, "1 x 0" + d + h, "1 5 -1" + d + h,
		"1 5 0" + d + "AAAA", "1 5 0" + d + h + " !!", "1 5 0" + d + " " + h, "1 5 0 0123 " + h, "1 5 0 " + h} {
		if _, err := ParseResume(v); !errors.Is(err, ErrBadResume) {
			t.Errorf("%q: %v", v, err)
		}
	}
	if r, err := ParseResume("1 5 3" + d + h); err != nil || r.LeafSeq != 5 || r.Records != 3 || r.Trust != "0123456789abcdef" || len(r.Prefix) != 0 {
		t.Errorf("a valid one: %+v %v", r, err)
	}
}

// TestResumeSignature: a resume header's signature verifies for its note
// and value under a trust that holds its signer, and for nothing else.
func TestResumeSignature(t *testing.T) {
	k, other := testKey(1), testKey(2)
	trust := mustTrust(t, k.NodeID(), other.NodeID())
	note, value := []byte("origin\n3\nroot\n\n— sig\n"), "1 80 6 b4de5b1a4a853113 AAAA"
	sig, err := SignResume(k, note, value)
	if err != nil {
		t.Fatal(err)
	}
	if err := trust.VerifyResume(k.NodeID(), note, value, sig); err != nil {
		t.Fatalf("the signature does not verify: %v", err)
	}
	otherSig, err := SignResume(other, note, value)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, node, value, sig string
		note                   []byte
		want                   error
	}{
		{"no signature", k.NodeID(), value, "", note, ErrBadResume},
		{"another value", k.NodeID(), "1 80 5 b4de5b1a4a853113 AAAA", sig, note, ErrBadResume},
		{"another note", k.NodeID(), value, sig, []byte("origin\n4\nroot\n\n— sig\n"), ErrBadResume},
		{"another signer's", k.NodeID(), value, otherSig, note, ErrBadResume},
		{"padded", k.NodeID(), value, sig + "==", note, ErrBadResume},
		{"untrusted signer", testKey(3).NodeID(), value, sig, note, ErrUntrustedPublisher},
	} {
		if err := trust.VerifyResume(c.node, c.note, c.value, c.sig); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}
