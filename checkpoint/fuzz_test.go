package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
)

// FuzzParseCheckpoint: Parse and ParseUnverified never panic; what Parse
// accepts ParseUnverified reads the same, its body is exactly what
// formats/log would write, and signing its fields again gives a note that
// parses to the same checkpoint.
func FuzzParseCheckpoint(f *testing.F) {
	k1, k2 := testKey(1), testKey(2)
	s1, s2 := mustSigner(f, k1), mustSigner(f, k2)
	trust := mustTrust(f, k1.NodeID())
	root := sha256.Sum256([]byte("root"))
	for _, size := range []uint64{0, 1, 1000, 1 << 63} {
		n, _ := Sign(s1, tRoom, size, root)
		f.Add(n, tRoom)
	}
	n2, _ := Sign(s2, tRoom, 7, root)
	f.Add(n2, tRoom)
	both, _ := note.Sign(&note.Note{Text: tRoom + "\n7\n" + base64.StdEncoding.EncodeToString(root[:]) + "\n"}, s2, s1)
	f.Add(both, tRoom)
	f.Add(both, "room:other")
	f.Add([]byte("room:x\n1\nAAAA\n\n— a b\n"), "room:x")
	f.Fuzz(func(t *testing.T, data []byte, room string) {
		u, uerr := ParseUnverified(data)
		if uerr != nil && !errors.Is(uerr, ErrBadCheckpoint) {
			t.Fatalf("ParseUnverified error %v does not wrap ErrBadCheckpoint", uerr)
		}
		c, err := Parse(data, room, trust)
		if err != nil {
			if !errors.Is(err, ErrBadCheckpoint) && !errors.Is(err, ErrUntrustedPublisher) {
				t.Fatalf("Parse error %v wraps neither sentinel", err)
			}
			return
		}
		if uerr != nil {
			t.Fatalf("Parse accepted what ParseUnverified refused: %v", uerr)
		}
		if c.Room != room || u.Room != c.Room || u.Size != c.Size || u.Root != c.Root || !bytes.Equal(c.Note, data) {
			t.Fatalf("Parse %+v, ParseUnverified %+v", c, u)
		}
		body := log.Checkpoint{Origin: c.Room, Size: c.Size, Hash: c.Root[:]}.Marshal()
		if !bytes.HasPrefix(data, append(body, '\n')) {
			t.Fatalf("accepted body is not canonical:\n%q", data)
		}
		again, err := Sign(s1, c.Room, c.Size, c.Root)
		if err != nil {
			t.Fatalf("Sign of an accepted checkpoint: %v", err)
		}
		c2, err := Parse(again, room, trust)
		if err != nil || c2.Size != c.Size || c2.Root != c.Root || c2.Signer != k1.NodeID() {
			t.Fatalf("re-signed: %+v, %v", c2, err)
		}
	})
}

// FuzzVerifyAttestation: header parsing never panics; every error wraps one
// of the three sentinels; AttestationSigner accepts whatever
// VerifyAttestation accepts; an accepted header is exactly what Attest
// writes for those fields.
func FuzzVerifyAttestation(f *testing.F) {
	k := testKey(1)
	trust := mustTrust(f, k.NodeID(), testKey(2).NodeID())
	c := ContentHash([]byte("x"))
	f.Add(Attest(k, tRoom, tSubject, JournalPosition(3), c), tRoom, tSubject, JournalPosition(3), []byte("x"))
	f.Add(Attest(testKey(2), tRoom, tSubject, RecordPosition(0), c), tRoom, tSubject, RecordPosition(0), []byte("x"))
	f.Add(Attest(testKey(3), tRoom, tSubject, RecordPosition(0), c), tRoom, tSubject, RecordPosition(0), []byte("x"))
	f.Add(k.NodeID()+" "+string(bytes.Repeat([]byte("A"), 86)), tRoom, tSubject, "seq:0", []byte{})
	f.Add("", tRoom, tSubject, "seq:0", []byte{})
	f.Add("node:did:key:z6Mk x", "", "", "", []byte{})
	f.Fuzz(func(t *testing.T, header, room, subject, position string, data []byte) {
		content := ContentHash(data)
		signer, err := trust.VerifyAttestation(header, room, subject, position, content)
		peek, perr := trust.AttestationSigner(header)
		if err != nil {
			if !errors.Is(err, ErrNoAttestation) && !errors.Is(err, ErrBadAttestation) && !errors.Is(err, ErrUntrustedPublisher) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			if perr == nil && (errors.Is(err, ErrNoAttestation) || errors.Is(err, ErrUntrustedPublisher)) {
				t.Fatalf("AttestationSigner accepted a header VerifyAttestation refused as %v", err)
			}
			return
		}
		if perr != nil || peek != signer {
			t.Fatalf("AttestationSigner = %q, %v; VerifyAttestation = %q", peek, perr, signer)
		}
		if signer == k.NodeID() {
			if want := Attest(k, room, subject, position, content); header != want {
				t.Fatalf("accepted header %q, Attest writes %q", header, want)
			}
		}
		id, sig, err := parseAttestation(header)
		if err != nil || id+" "+base64.RawURLEncoding.EncodeToString(sig) != header {
			t.Fatalf("accepted header does not re-encode to itself: %q", header)
		}
	})
}

// FuzzProofJSON: decoding never panics and errors wrap ErrBadProof (or are
// json's syntax errors); a decoded proof encodes to a document that decodes
// to the same proof and encodes to the same bytes; Verify never panics.
func FuzzProofJSON(f *testing.F) {
	k := testKey(1)
	trust := mustTrust(f, k.NodeID())
	tr := treeOf(tRoom, 9)
	signed, _ := Sign(mustSigner(f, k), tRoom, 9, tr.Root())
	path, _ := tr.InclusionProof(4, 9)
	good, _ := json.Marshal(&Proof{Room: tRoom, Subject: "roompub.r.journal.x", StreamSeq: 5, ContentHash: ContentHash([]byte{4}),
		LeafIndex: 4, LeafHash: leafN(tRoom, 4), TreeSize: 9, Path: path, Checkpoint: string(signed)})
	f.Add(good)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"room":"r","subject":"s","stream_seq":0,"content_hash":"","leaf_index":0,"leaf_hash":"","tree_size":0,"proof":[],"checkpoint":""}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Proof
		if err := json.Unmarshal(data, &p); err != nil {
			var se *json.SyntaxError
			var te *json.UnmarshalTypeError
			if !errors.Is(err, ErrBadProof) && !errors.As(err, &se) && !errors.As(err, &te) {
				t.Fatalf("error %v: not ErrBadProof", err)
			}
			return
		}
		out, err := json.Marshal(&p)
		if err != nil {
			t.Fatalf("Marshal of a decoded proof: %v", err)
		}
		var q Proof
		if err := json.Unmarshal(out, &q); err != nil {
			t.Fatalf("re-decode of %s: %v", out, err)
		}
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("round trip changed the proof:\n%+v\n%+v", p, q)
		}
		out2, _ := json.Marshal(&q)
		if !bytes.Equal(out, out2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", out, out2)
		}
		if c, err := p.Verify(trust); err == nil && (c.Size != p.TreeSize || c.Room != p.Room) {
			t.Fatalf("Verify accepted a proof whose checkpoint is %+v", c)
		}
	})
}
