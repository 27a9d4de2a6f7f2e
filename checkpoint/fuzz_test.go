package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/roompub/roompub/events"
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
	f.Add(k.NodeID()+" "+string(bytes.Repeat([]byte("A"), 86))+" 0/1", tRoom, tSubject, "seq:0", []byte{})
	f.Add(AttestBatch(k, []Statement{{tRoom, tSubject, "seq:0", c}, {tRoom, tSubject, "seq:1", c}})[1], tRoom, tSubject, "seq:1", []byte("x"))
	f.Add("", tRoom, tSubject, "seq:0", []byte{})
	f.Add("node:did:key:z6Mk x", "", "", "", []byte{})
	f.Fuzz(func(t *testing.T, header, room, subject, position string, data []byte) {
		content := ContentHash(data)
		signer, err := trust.VerifyAttestation(header, room, subject, position, content)
		peek, perr := trust.AttestationSigner(header)
		if err != nil {
			if !errors.Is(err, ErrNoAttestation) && !errors.Is(err, ErrBadAttestation) && !errors.Is(err, ErrUntrustedPublisher) && !errors.Is(err, ErrIncompleteBatch) {
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
		a, err := ParseAttestation(header)
		if err != nil || a.String() != header || a.Count != 1 {
			t.Fatalf("accepted header does not re-encode to itself or is not a batch of one: %q", header)
		}
	})
}

// FuzzProofJSON: decoding never panics and errors wrap ErrBadProofDocument
// (or are json's syntax errors); a decoded proof holds all the document
// says and nothing else (the document and the proof's encoding have one
// canonical form: no duplicate or unknown member was passed over); it
// encodes to a document that decodes to the same proof and encodes to the
// same bytes; Verify never panics.
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
	// Duplicate and case-folded names: encoding/json alone takes the last.
	f.Add(append([]byte(`{"room":"room:x",`), good[1:]...))
	f.Add(append([]byte(`{"ROOM":"room:x",`), good[1:]...))
	f.Add(append([]byte(`{"leaf_index":5,`), good[1:]...))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Proof
		if err := json.Unmarshal(data, &p); err != nil {
			var se *json.SyntaxError
			if !errors.Is(err, ErrBadProofDocument) && !errors.As(err, &se) {
				t.Fatalf("error %v: not ErrBadProofDocument", err)
			}
			return
		}
		parsed, err := ParseProof(data)
		if err != nil || !reflect.DeepEqual(*parsed, p) {
			t.Fatalf("ParseProof = %+v, %v; json.Unmarshal gave %+v", parsed, err, p)
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
		in, err1 := events.Canonicalize(data)
		back, err2 := events.Canonicalize(out)
		if err1 != nil || err2 != nil || !bytes.Equal(in, back) {
			t.Fatalf("the document says more or other than the proof it gave:\n%s\n%s", in, out)
		}
		if c, err := p.Verify(trust); err == nil && (c.Size != p.TreeSize || c.Room != p.Room) {
			t.Fatalf("Verify accepted a proof whose checkpoint is %+v", c)
		}
	})
}

// FuzzParseAttestation: parsing never panics; errors wrap ErrNoAttestation
// or ErrBadAttestation; an accepted header re-encodes to itself, has
// 0 <= index < count <= MaxBatch, and AttestationSigner agrees with the
// trust set on it.
func FuzzParseAttestation(f *testing.F) {
	k := testKey(1)
	trust := mustTrust(f, k.NodeID())
	for _, h := range AttestBatch(k, stmts(3)) {
		f.Add(h)
	}
	every, err := Reform(AttestBatch(k, stmts(3)), FormEveryMessage)
	if err != nil {
		f.Fatal(err)
	}
	for _, h := range every {
		f.Add(h)
	}
	f.Add(k.NodeID() + " 2/3")
	f.Add(k.NodeID() + "  0/3")
	f.Add(Attest(testKey(2), tRoom, tSubject, "seq:0", ContentHash(nil)))
	f.Add(k.NodeID() + " " + string(bytes.Repeat([]byte("_"), 86)) + " 999999/1000000")
	f.Add(k.NodeID() + " " + string(bytes.Repeat([]byte("A"), 86)) + " 0/01")
	f.Add("")
	f.Add("node:did:key:z6Mk x 0/1")
	f.Fuzz(func(t *testing.T, header string) {
		a, err := ParseAttestation(header)
		signer, serr := trust.AttestationSigner(header)
		if err != nil {
			if !errors.Is(err, ErrNoAttestation) && !errors.Is(err, ErrBadAttestation) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			if serr == nil {
				t.Fatalf("AttestationSigner accepted %q, ParseAttestation refused it: %v", header, err)
			}
			return
		}
		if a.String() != header || a.Index < 0 || a.Index >= a.Count || a.Count > MaxBatch {
			t.Fatalf("accepted %q as %+v (%q)", header, a, a.String())
		}
		if (serr == nil) != (a.Signer == k.NodeID()) || (serr == nil && signer != a.Signer) {
			t.Fatalf("AttestationSigner = %q, %v for %+v", signer, serr, a)
		}
		other := a
		other.Index = (a.Index + 1) % a.Count
		if !a.SameBatch(other) {
			t.Fatal("another index of one batch is not SameBatch")
		}
		if a.Signed {
			other.Sig[0] ^= 1
			if a.SameBatch(other) {
				t.Fatal("another signature is SameBatch")
			}
		} else if a.Count > 2 {
			// A signed message before the last is of the every-message
			// form, never of a compact batch.
			every := a
			every.Index, every.Signed = (a.Index+1)%(a.Count-1), true
			if a.SameBatch(every) || every.SameBatch(a) {
				t.Fatalf("%+v and %+v, of two forms, are SameBatch", a, every)
			}
		}
	})
}

// FuzzBatchCollector: any sequence of messages (genuine batch members,
// edited, duplicated, reordered or dropped, under growing ids) never
// panics; every message added gets exactly one verdict by the end of Flush;
// Pending is 0 after Flush; a message is admitted only with its genuine
// header and statement; and a message is admitted exactly when it lies in
// a window of the sequence that holds its batch whole: messages 0..n-1 of
// it, genuine, at consecutive ids (the rule as docs/checkpoints.md states
// it, independent of BatchRun's way of following it).
func FuzzBatchCollector(f *testing.F) {
	k := testKey(1)
	trust := mustTrust(f, k.NodeID(), testKey(2).NodeID())
	f.Add([]byte{0, 1, 2, 3, 4})
	f.Add([]byte{4, 3, 2, 1, 0, 0x80, 7})
	f.Add([]byte{0, 0, 1, 0x41, 2, 0xc3})
	f.Add([]byte{0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 200 {
			return
		}
		// Batches of 1, 3 and 5 messages by two keys, of both forms; op bits:
		// low 3 bits: member index; bits 3-4: which batch; bit 5: gap in
		// ids; bit 6: edit the statement; bit 7: foreign signer.
		type batch struct {
			ss []Statement
			hs []string
		}
		var batches []batch
		for bi, n := range []int{1, 3, 5, 5} {
			ss := stmts(n)
			for i := range ss {
				ss[i].Subject += strings.Repeat("x", bi)
			}
			hs := AttestBatch(k, ss)
			if bi == 3 {
				// The every-message form, beside a compact batch of the
				// same key and size whose unsigned headers are alike.
				var err error
				if hs, err = Reform(hs, FormEveryMessage); err != nil {
					t.Fatal(err)
				}
			}
			batches = append(batches, batch{ss, hs})
		}
		foreign := AttestBatch(testKey(3), stmts(5))
		c := NewBatchCollector(trust)
		verdicts := map[uint64]BatchVerdict{}
		genuine := map[uint64]bool{}
		take := func(vs []BatchVerdict) {
			for _, v := range vs {
				if _, dup := verdicts[v.ID]; dup {
					t.Fatalf("second verdict for %d", v.ID)
				}
				if (v.Err == nil) != (v.Signer != "") {
					t.Fatalf("verdict %+v", v)
				}
				verdicts[v.ID] = v
			}
		}
		type sent struct {
			id       uint64
			batch, i int
			genuine  bool
		}
		var seq []sent
		id := uint64(0)
		for _, op := range ops {
			b := batches[int(op>>3&3)]
			i := int(op&7) % len(b.ss)
			seq = append(seq, sent{id: id + 1 + uint64(op&7)*uint64(op>>5&1), batch: int(op >> 3 & 3), i: i, genuine: op&0xc0 == 0})
			st, h := b.ss[i], b.hs[i]
			if op&0x40 != 0 {
				st.Content[0] ^= 1
			}
			if op&0x80 != 0 {
				h = foreign[i]
			}
			id++
			if op&0x20 != 0 {
				id += uint64(op & 7)
			}
			genuine[id] = op&0xc0 == 0
			take(c.Add(id, h, st))
		}
		take(c.Flush())
		if c.Pending() != 0 || len(verdicts) != len(genuine) {
			t.Fatalf("pending %d, %d verdicts for %d messages", c.Pending(), len(verdicts), len(genuine))
		}
		for id, v := range verdicts {
			if v.Err == nil && !genuine[id] {
				t.Fatalf("admitted message %d that was edited or foreign", id)
			}
		}
		for p, m := range seq {
			n := len(batches[m.batch].ss)
			whole := p-m.i >= 0 && p-m.i+n <= len(seq)
			for j := 0; whole && j < n; j++ {
				o := seq[p-m.i+j]
				whole = o.batch == m.batch && o.i == j && o.genuine && o.id == seq[p-m.i].id+uint64(j)
			}
			if v := verdicts[m.id]; (v.Err == nil) != whole {
				t.Fatalf("message %d (%d of batch %d): verdict %v, whole %v", m.id, m.i, m.batch, v.Err, whole)
			}
		}
	})
}

// FuzzVerifyLease: no lease value makes VerifyLease panic, and one it
// accepts is the signer's own statement: signing what it says again gives
// the same value (Ed25519 signatures are deterministic).
func FuzzVerifyLease(f *testing.F) {
	k := testKey(1)
	good, err := SignLease(k, "room/a", time.UnixMilli(1_796_160_600_123))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("room/a", good)
	f.Add("room/a", k.NodeID())
	f.Add("room/b", good)
	f.Add("room/a", k.NodeID()+" 01 x")
	f.Add("", "  ")
	trust, err := NewTrust(k.NodeID())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key, value string) {
		l, err := trust.VerifyLease(key, []byte(value))
		if err != nil {
			return
		}
		again, err := SignLease(k, key, l.At)
		if err != nil || again != value {
			t.Fatalf("accepted %q for key %q, which the signer signs as %q (%v)", value, key, again, err)
		}
	})
}

// FuzzParseResume: any header value either parses to a Resume whose
// String parses to the same, or is refused with ErrBadResume; never a
// panic.
func FuzzParseResume(f *testing.F) {
	f.Add("1 5 3 0123456789abcdef AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	f.Add("1 9 0 0123456789abcdef AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseResume(s)
		if err != nil {
			if !errors.Is(err, ErrBadResume) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		again, err := ParseResume(r.String())
		if err != nil || again.String() != r.String() {
			t.Fatalf("%q: again %+v %v", s, again, err)
		}
	})
}
