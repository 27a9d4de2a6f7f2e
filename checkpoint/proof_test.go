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
	// first puts member ahead of the document's own members.
	first := func(member string) string { return "{" + member + "," + string(good[1:]) }
	for _, c := range []struct {
		name, doc string
		reason    string // what the error says after "not a proof document: "
	}{
		{"not json", "{", "unexpected end of JSON input"},
		{"array", "[]", "a JSON object is required"},
		{"null", "null", "a JSON object is required"},
		{"trailing data", string(good) + "{}", "invalid character '{' after top-level value"},
		{"unknown member", edit("extra", 1), `unknown member "extra"`},
		{"missing room", edit("room", nil), `member "room" is missing or null`},
		{"missing proof", edit("proof", nil), `member "proof" is missing or null`},
		{"null proof", edit("proof", json.RawMessage("null")), `member "proof" is missing or null`},
		{"null room", edit("room", json.RawMessage("null")), `member "room" is missing or null`},
		{"uppercase hex", edit("content_hash", strings.ToUpper(hash)), "content_hash is not 64 lowercase hex characters"},
		{"short hash", edit("leaf_hash", hash[:62]), "leaf_hash is not 64 lowercase hex characters"},
		{"odd hash", edit("leaf_hash", hash+"a"), "leaf_hash is not 64 lowercase hex characters"},
		{"non-hex", edit("content_hash", strings.Repeat("zz", 32)), "content_hash is not 64 lowercase hex characters"},
		{"proof hash not hex", edit("proof", []string{hash, "xyz"}), "proof[1] is not 64 lowercase hex characters"},
		{"proof too long", edit("proof", make([]string, 65)), "65 proof hashes, at most 64"},
		{"negative size", edit("tree_size", -1), `member "tree_size" is number -1, not an integer from 0 to 2^64-1`},
		{"fractional index", edit("leaf_index", 1.5), `member "leaf_index" is number 1.5, not an integer from 0 to 2^64-1`},
		{"string seq", edit("stream_seq", "5"), `member "stream_seq" is string, not an integer from 0 to 2^64-1`},
		{"checkpoint as number", edit("checkpoint", 5), `member "checkpoint" is number, not a string`},
		// One reader must not take one value and another reader another:
		// duplicate names (encoding/json alone keeps the last), names that
		// differ only in case (encoding/json alone matches them).
		{"duplicate room", first(`"room":"room:x"`), `not strict JSON: Duplicate key: "room"`},
		{"duplicate room, escaped", first(`"r\u006fom":"room:x"`), `not strict JSON: Duplicate key: "room"`},
		{"duplicate leaf index", first(`"leaf_index":3`), `not strict JSON: Duplicate key: "leaf_index"`},
		{"duplicate deeper", first(`"extra":[{"a":1,"a":2}]`), `not strict JSON: Duplicate key: "a"`},
		{"another spelling of room", first(`"Room":"room:x"`), `unknown member "Room"`},
		{"lone surrogate", edit("subject", json.RawMessage(`"\ud800"`)), "not strict JSON"},
		{"invalid UTF-8", strings.Replace(string(good), "roompub.r", "roompub.\xff", 1), "not strict JSON: invalid UTF-8"},
		{"byte order mark", "\ufeff" + string(good), "the document starts with a UTF-8 byte order mark (bytes EF BB BF): a proof document is UTF-8 without one"},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, err := ParseProof([]byte(c.doc))
			if want := "not a proof document: " + c.reason; err == nil || !errors.Is(err, ErrBadProofDocument) || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("ParseProof(%s) = %+v, %v; want an error starting %q", c.doc, q, err, want)
			}
			var r Proof
			if err := json.Unmarshal([]byte(c.doc), &r); err == nil {
				t.Fatalf("json.Unmarshal accepted %s", c.doc)
			}
		})
	}
}
