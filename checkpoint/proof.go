package checkpoint

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/roompub/roompub/events"
)

// Proof is the offline evidence that one message is in a room (an inclusion proof):
// the JSON document `subscriber prove` prints and `subscriber verify-proof`
// reads. Its JSON form is
//
//	{"room", "subject", "stream_seq", "content_hash", "leaf_index",
//	 "leaf_hash", "tree_size", "proof", "checkpoint"}
//
// with hashes as 64 lowercase hex characters, proof as an array of them
// and checkpoint as the signed note text. StreamSeq is informational: the
// leaf binds room, subject and content; its position is LeafIndex.
type Proof struct {
	Room        string
	Subject     string
	StreamSeq   uint64
	ContentHash [32]byte
	LeafIndex   uint64
	LeafHash    [32]byte
	TreeSize    uint64
	Path        [][32]byte // the inclusion proof, "proof" in JSON
	Checkpoint  string     // signed note (Sign's output as text)
}

// proofJSON is Proof on the wire.
type proofJSON struct {
	Room        string   `json:"room"`
	Subject     string   `json:"subject"`
	StreamSeq   uint64   `json:"stream_seq"`
	ContentHash string   `json:"content_hash"`
	LeafIndex   uint64   `json:"leaf_index"`
	LeafHash    string   `json:"leaf_hash"`
	TreeSize    uint64   `json:"tree_size"`
	Proof       []string `json:"proof"`
	Checkpoint  string   `json:"checkpoint"`
}

// maxProofLen bounds the proof array: an inclusion proof in a tree of at
// most 2^64 leaves has at most 64 hashes.
const maxProofLen = 64

// MarshalJSON writes the proof document.
func (p Proof) MarshalJSON() ([]byte, error) {
	w := proofJSON{
		Room: p.Room, Subject: p.Subject, StreamSeq: p.StreamSeq,
		ContentHash: hex.EncodeToString(p.ContentHash[:]),
		LeafIndex:   p.LeafIndex,
		LeafHash:    hex.EncodeToString(p.LeafHash[:]),
		TreeSize:    p.TreeSize,
		Proof:       make([]string, len(p.Path)),
		Checkpoint:  p.Checkpoint,
	}
	for i, h := range p.Path {
		w.Proof[i] = hex.EncodeToString(h[:])
	}
	return json.Marshal(w)
}

// proofMembers are the proof document's member names, exactly as written.
var proofMembers = []string{"room", "subject", "stream_seq", "content_hash", "leaf_index", "leaf_hash", "tree_size", "proof", "checkpoint"}

// ParseProof reads a proof document strictly: strict JSON (I-JSON,
// events.Canonicalize: a duplicate member name at any depth is refused,
// as records with one are refused malformed_json, so no two readers can
// take different values from one document), one object with every
// member present and non-null and no other (names compared exactly:
// encoding/json alone would match "Room" to "room"), hashes exactly 64
// lowercase hex characters, at most 64 proof hashes. It verifies nothing
// ((*Proof).Verify does). Errors wrap ErrBadProofDocument.
func ParseProof(data []byte) (*Proof, error) {
	bad := func(format string, args ...any) (*Proof, error) {
		return nil, fmt.Errorf("%w: %s", ErrBadProofDocument, fmt.Sprintf(format, args...))
	}
	if _, err := events.Canonicalize(data); err != nil {
		if events.HasBOM(data) {
			return bad("%s (%v)", events.BOMReason("the document", "a proof document"), err)
		}
		if !json.Valid(data) {
			// json's own words for a syntax error ("unexpected end of
			// JSON input") say more than jcs's.
			var v any
			err = json.Unmarshal(data, &v)
		}
		return bad("%v", err)
	}
	var present map[string]json.RawMessage
	if err := json.Unmarshal(data, &present); err != nil || present == nil {
		return bad("%v", events.ErrNotObject) // strict JSON, so only that
	}
	for k := range present {
		if !slices.Contains(proofMembers, k) {
			return bad("unknown member %q", clip(k))
		}
	}
	for _, k := range proofMembers {
		if v, ok := present[k]; !ok || string(v) == "null" {
			return bad("member %q is missing or null", k)
		}
	}
	var w proofJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return bad("member %q is %s, not %s", te.Field, te.Value, wireType(te.Type))
		}
		return bad("%v", err)
	}
	if len(w.Proof) > maxProofLen {
		return bad("%d proof hashes, at most %d", len(w.Proof), maxProofLen)
	}
	p := &Proof{
		Room: w.Room, Subject: w.Subject, StreamSeq: w.StreamSeq,
		LeafIndex: w.LeafIndex, TreeSize: w.TreeSize, Checkpoint: w.Checkpoint,
		Path: make([][32]byte, len(w.Proof)),
	}
	var err error
	if p.ContentHash, err = parseHex("content_hash", w.ContentHash); err != nil {
		return nil, err
	}
	if p.LeafHash, err = parseHex("leaf_hash", w.LeafHash); err != nil {
		return nil, err
	}
	for i, s := range w.Proof {
		if p.Path[i], err = parseHex(fmt.Sprintf("proof[%d]", i), s); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// wireType names a proofJSON member's type as the document spells it.
func wireType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Uint64:
		return "an integer from 0 to 2^64-1"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "an array of strings"
	}
	return t.String()
}

// UnmarshalJSON reads the proof document as ParseProof does. Errors wrap
// ErrBadProofDocument.
func (p *Proof) UnmarshalJSON(data []byte) error {
	q, err := ParseProof(data)
	if err != nil {
		return err
	}
	*p = *q
	return nil
}

// parseHex reads a hash as 64 lowercase hex characters.
func parseHex(member, s string) ([32]byte, error) {
	var h [32]byte
	ok := len(s) == 64
	for i := 0; ok && i < len(s); i++ {
		ok = '0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f'
	}
	if ok {
		_, err := hex.Decode(h[:], []byte(s))
		ok = err == nil
	}
	if !ok {
		return h, fmt.Errorf("%w: %s is not 64 lowercase hex characters", ErrBadProofDocument, member)
	}
	return h, nil
}

// Verify checks the proof offline and returns its checkpoint: the note is
// signed by a key in t with origin Room (Parse), TreeSize is the
// checkpoint's size, LeafHash is LeafHash(Room, Subject, ContentHash), and
// the path leads from that leaf at LeafIndex to the checkpoint's root.
// Errors wrap ErrUntrustedPublisher, ErrBadCheckpoint or ErrBadProof.
func (p *Proof) Verify(t *Trust) (*Checkpoint, error) {
	c, err := Parse([]byte(p.Checkpoint), p.Room, t)
	if err != nil {
		return nil, err
	}
	if p.TreeSize != c.Size {
		return nil, fmt.Errorf("%w: tree_size %d, checkpoint size %d", ErrBadProof, p.TreeSize, c.Size)
	}
	if want := LeafHash(p.Room, p.Subject, p.ContentHash); p.LeafHash != want {
		return nil, fmt.Errorf("%w: leaf_hash %x is not the leaf of room, subject and content_hash (%x)", ErrBadProof, p.LeafHash, want)
	}
	if err := VerifyInclusion(p.LeafHash, p.LeafIndex, c.Size, p.Path, c.Root); err != nil {
		return nil, err
	}
	return c, nil
}
