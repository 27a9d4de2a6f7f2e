package checkpoint

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
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

// UnmarshalJSON reads the proof document strictly: no unknown, missing or
// null members, hashes exactly 64 lowercase hex characters, at most 64 proof
// hashes. Errors wrap ErrBadProof.
func (p *Proof) UnmarshalJSON(data []byte) error {
	var w proofJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("%w: %w", ErrBadProof, err)
	}
	// A second pass sees which members are present (and, unlike Decode,
	// refuses data after the object).
	var present map[string]json.RawMessage
	if err := json.Unmarshal(data, &present); err != nil {
		return fmt.Errorf("%w: %w", ErrBadProof, err)
	}
	for _, k := range []string{"room", "subject", "stream_seq", "content_hash", "leaf_index", "leaf_hash", "tree_size", "proof", "checkpoint"} {
		if v, ok := present[k]; !ok || string(v) == "null" {
			return fmt.Errorf("%w: member %q is missing or null", ErrBadProof, k)
		}
	}
	if len(w.Proof) > maxProofLen {
		return fmt.Errorf("%w: %d proof hashes, at most %d", ErrBadProof, len(w.Proof), maxProofLen)
	}
	out := Proof{
		Room: w.Room, Subject: w.Subject, StreamSeq: w.StreamSeq,
		LeafIndex: w.LeafIndex, TreeSize: w.TreeSize, Checkpoint: w.Checkpoint,
		Path: make([][32]byte, len(w.Proof)),
	}
	var err error
	if out.ContentHash, err = parseHex("content_hash", w.ContentHash); err != nil {
		return err
	}
	if out.LeafHash, err = parseHex("leaf_hash", w.LeafHash); err != nil {
		return err
	}
	for i, s := range w.Proof {
		if out.Path[i], err = parseHex(fmt.Sprintf("proof[%d]", i), s); err != nil {
			return err
		}
	}
	*p = out
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
		return h, fmt.Errorf("%w: %s is not 64 lowercase hex characters", ErrBadProof, member)
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
