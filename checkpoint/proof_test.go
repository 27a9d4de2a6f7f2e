package checkpoint

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// proofFixture builds a room of 37 messages, a checkpoint at 30 signed by
// testKey(1), and the proof of message 12.
func proofFixture(t *testing.T) (*Proof, *Trust) {
	t.Helper()
	k := testKey(1)
	const subject = "roompub.r.journal.x"
	tr := NewTree()
	var contents [][32]byte
	for i := range 37 {
		c := ContentHash([]byte{byte(i)})
		contents = append(contents, c)
		tr.Append(LeafHash(tRoom, subject, c))
	}
	root, _ := tr.RootAt(30)
	signed, err := Sign(mustSigner(t, k), tRoom, 30, root)
	if err != nil {
		t.Fatal(err)
	}
	path, err := tr.InclusionProof(12, 30)
	if err != nil {
		t.Fatal(err)
	}
	return &Proof{
		Room: tRoom, Subject: subject, StreamSeq: 4711,
		ContentHash: contents[12], LeafIndex: 12,
		LeafHash: LeafHash(tRoom, subject, contents[12]),
		TreeSize: 30, Path: path, Checkpoint: string(signed),
	}, mustTrust(t, k.NodeID())
}

func TestProofJSONRoundTrip(t *testing.T) {
	p, trust := proofFixture(t)
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var members map[string]any
	if err := json.Unmarshal(data, &members); err != nil {
		t.Fatal(err)
	}
	want := []string{"checkpoint", "content_hash", "leaf_hash", "leaf_index", "proof", "room", "stream_seq", "subject", "tree_size"}
	var got []string
	for k := range members {
		got = append(got, k)
	}
	if len(got) != len(want) {
		t.Fatalf("members %v, want %v", got, want)
	}
	for _, k := range want {
		if _, ok := members[k]; !ok {
			t.Fatalf("member %q missing in %s", k, data)
		}
	}
	if members["content_hash"] != strings.ToLower(members["content_hash"].(string)) || len(members["content_hash"].(string)) != 64 {
		t.Fatalf("content_hash %v is not lowercase hex", members["content_hash"])
	}
	if n := len(members["proof"].([]any)); n != len(p.Path) || n != 5 {
		t.Fatalf("proof has %d hashes, want %d (leaf 12 of 30)", n, len(p.Path))
	}
	var back Proof
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, p) {
		t.Fatalf("round trip:\n%+v\n%+v", back, *p)
	}
	c, err := back.Verify(trust)
	if err != nil {
		t.Fatal(err)
	}
	if c.Size != 30 || c.Room != tRoom || c.Signer != testKey(1).NodeID() {
		t.Fatalf("Verify = %+v", c)
	}
}

func TestProofVerifyRefuses(t *testing.T) {
	base, trust := proofFixture(t)
	// A checkpoint of the sibling room with a tree of the same shape.
	sib := treeOf(siblingRoom, 30)
	sibSigned, _ := Sign(mustSigner(t, testKey(1)), siblingRoom, 30, sib.Root())
	otherSize := func() string {
		tr := NewTree()
		for i := range 31 {
			tr.Append(LeafHash(tRoom, base.Subject, ContentHash([]byte{byte(i)})))
		}
		s, _ := Sign(mustSigner(t, testKey(1)), tRoom, 31, tr.Root())
		return string(s)
	}()
	for _, tc := range []struct {
		name   string
		mutate func(p *Proof)
		trust  *Trust
		want   error
	}{
		{"untrusted key", func(p *Proof) {}, mustTrust(t, testKey(2).NodeID()), ErrUntrustedPublisher},
		{"content hash", func(p *Proof) { p.ContentHash[0] ^= 1 }, trust, ErrBadProof},
		{"leaf hash", func(p *Proof) { p.LeafHash[0] ^= 1 }, trust, ErrBadProof},
		{"content and leaf hash", func(p *Proof) {
			p.ContentHash[0] ^= 1
			p.LeafHash = LeafHash(p.Room, p.Subject, p.ContentHash)
		}, trust, ErrBadProof},
		{"subject", func(p *Proof) {
			p.Subject += ".y"
			p.LeafHash = LeafHash(p.Room, p.Subject, p.ContentHash)
		}, trust, ErrBadProof},
		{"leaf index", func(p *Proof) { p.LeafIndex = 13 }, trust, ErrBadProof},
		{"leaf index beyond size", func(p *Proof) { p.LeafIndex = 30 }, trust, ErrBadProof},
		{"tree size", func(p *Proof) { p.TreeSize = 31 }, trust, ErrBadProof},
		{"flipped proof byte", func(p *Proof) { p.Path[2][5] ^= 0x20 }, trust, ErrBadProof},
		{"short proof", func(p *Proof) { p.Path = p.Path[:4] }, trust, ErrBadProof},
		{"other size checkpoint", func(p *Proof) { p.Checkpoint = otherSize; p.TreeSize = 31 }, trust, ErrBadProof},
		{"sibling room's checkpoint", func(p *Proof) { p.Checkpoint = string(sibSigned) }, trust, ErrBadCheckpoint},
		{"sibling room's checkpoint and room", func(p *Proof) {
			p.Checkpoint = string(sibSigned)
			p.Room = siblingRoom
			p.LeafHash = LeafHash(p.Room, p.Subject, p.ContentHash)
		}, trust, ErrBadProof},
		{"tampered checkpoint", func(p *Proof) { p.Checkpoint = strings.Replace(p.Checkpoint, "\n30\n", "\n31\n", 1); p.TreeSize = 31 }, trust, ErrBadCheckpoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := *base
			p.Path = append([][32]byte(nil), base.Path...)
			tc.mutate(&p)
			if _, err := p.Verify(tc.trust); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := base.Verify(trust); err != nil {
		t.Fatalf("fixture does not verify: %v", err)
	}
}

func TestProofJSONMalformed(t *testing.T) {
	p, _ := proofFixture(t)
	good, _ := json.Marshal(p)
	hash := strings.Repeat("ab", 32)
	edit := func(member string, value any) string {
		var m map[string]any
		_ = json.Unmarshal(good, &m)
		if value == nil {
			delete(m, member)
		} else {
			m[member] = value
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	for name, doc := range map[string]string{
		"not json":             "{",
		"array":                "[]",
		"trailing data":        string(good) + "{}",
		"unknown member":       edit("extra", 1),
		"missing room":         edit("room", nil),
		"missing proof":        edit("proof", nil),
		"null proof":           edit("proof", json.RawMessage("null")),
		"null room":            edit("room", json.RawMessage("null")),
		"uppercase hex":        edit("content_hash", strings.ToUpper(hash)),
		"short hash":           edit("leaf_hash", hash[:62]),
		"odd hash":             edit("leaf_hash", hash+"a"),
		"non-hex":              edit("content_hash", strings.Repeat("zz", 32)),
		"proof hash not hex":   edit("proof", []string{hash, "xyz"}),
		"proof too long":       edit("proof", make([]string, 65)),
		"negative size":        edit("tree_size", -1),
		"fractional index":     edit("leaf_index", 1.5),
		"string seq":           edit("stream_seq", "5"),
		"checkpoint as number": edit("checkpoint", 5),
	} {
		t.Run(name, func(t *testing.T) {
			var q Proof
			if err := json.Unmarshal([]byte(doc), &q); err == nil {
				t.Fatalf("accepted %s", doc)
			} else if !errors.Is(err, ErrBadProof) && name != "trailing data" {
				// json.Unmarshal checks the document's syntax before calling
				// UnmarshalJSON, so a syntax error is json's own.
				var se *json.SyntaxError
				if !errors.As(err, &se) {
					t.Fatalf("err = %v, want ErrBadProof", err)
				}
			}
		})
	}
}
