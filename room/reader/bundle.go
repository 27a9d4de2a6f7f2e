package reader

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/witness"
)

// EvidenceFormat is the format member of an evidence bundle
// (docs/witnesses.md, "Portable evidence").
const EvidenceFormat = "roompub-evidence/v1"

// EvidenceExt is the file extension of an evidence bundle.
const EvidenceExt = ".roompub-evidence.json"

// MaxEvidenceBytes bounds an evidence bundle: a message of up to 8 MiB
// (the server's default max payload is 1 MiB) in base64, and two proofs
// of a few KB.
const MaxEvidenceBytes = 12 << 20

// Evidence is the portable, offline-verifiable evidence that one admitted
// message is in its room and that witnesses saw the room's checkpoint
// (docs/witnesses.md, "Portable evidence"): the message as stored, and
// two C2SP tlog-proofs. RoomProof proves the leaf
// checkpoint.LeafData(Room, Subject, SHA-256(Data)) (carried as its
// extra) in a room checkpoint C; DeploymentProof proves C's exact bytes
// as an entry of the deployment log in a deployment checkpoint carrying
// the witnesses' cosignatures. Its JSON form is
//
//	{"format": "roompub-evidence/v1", "room", "subject", "stream_seq",
//	 "position", "attestation", "data": base64, "room_proof": text,
//	 "deployment_proof": text}
//
// StreamSeq is informational (neither proof covers it); Position is the
// attested position (checkpoint.JournalPosition, OwnedJournalPosition or
// RecordPosition), covered only by the attestation of a batch of one.
type Evidence struct {
	Room            string
	Subject         string
	StreamSeq       uint64
	Position        string
	Attestation     string // the checkpoint.AttestationHeader value
	Data            []byte // the stored bytes
	RoomProof       *checkpoint.TlogProof
	DeploymentProof *checkpoint.TlogProof
}

// evidenceJSON is Evidence on the wire.
type evidenceJSON struct {
	Format          string `json:"format"`
	Room            string `json:"room"`
	Subject         string `json:"subject"`
	StreamSeq       uint64 `json:"stream_seq"`
	Position        string `json:"position"`
	Attestation     string `json:"attestation"`
	Data            []byte `json:"data"`
	RoomProof       string `json:"room_proof"`
	DeploymentProof string `json:"deployment_proof"`
}

var evidenceMembers = []string{"format", "room", "subject", "stream_seq", "position", "attestation", "data", "room_proof", "deployment_proof"}

// MarshalJSON writes the bundle (indented: a file meant for people too).
func (e *Evidence) MarshalJSON() ([]byte, error) {
	if e.RoomProof == nil || e.DeploymentProof == nil {
		return nil, errors.New("evidence: a bundle needs both proofs")
	}
	return json.MarshalIndent(evidenceJSON{Format: EvidenceFormat, Room: e.Room, Subject: e.Subject, StreamSeq: e.StreamSeq,
		Position: e.Position, Attestation: e.Attestation, Data: e.Data,
		RoomProof: string(e.RoomProof.Marshal()), DeploymentProof: string(e.DeploymentProof.Marshal())}, "", "  ")
}

// ErrBadEvidence is wrapped by ParseEvidence's errors: the bytes are not
// a bundle.
var ErrBadEvidence = errors.New("not an evidence bundle")

// IsEvidence reports whether data looks like an evidence bundle (a JSON
// object with a format member), as opposed to a single-level
// checkpoint.Proof, which has none: how verify-proof tells them apart.
// A byte order mark before the object is looked past, so that
// ParseEvidence, not ParseProof, names it.
func IsEvidence(data []byte) bool {
	var probe struct {
		Format *string `json:"format"`
	}
	if events.HasBOM(data) {
		data = data[3:] // a bundle saved with one, which ParseEvidence names
	}
	return json.Unmarshal(data, &probe) == nil && probe.Format != nil
}

// ParseEvidence reads a bundle strictly: strict JSON (events.Canonicalize:
// no member named twice at any depth), an object with every member
// present and non-null and no other (names exactly as written), format EvidenceFormat, data
// standard base64, both proofs C2SP tlog-proofs (checkpoint.ParseTlogProof),
// nothing after the object, at most MaxEvidenceBytes, no byte order mark
// before it (the error names one). It checks no
// signature or proof. Errors wrap ErrBadEvidence.
func ParseEvidence(data []byte) (*Evidence, error) {
	bad := func(format string, args ...any) (*Evidence, error) {
		return nil, fmt.Errorf("%w: %s", ErrBadEvidence, fmt.Sprintf(format, args...))
	}
	if len(data) > MaxEvidenceBytes {
		return bad("more than %d bytes", MaxEvidenceBytes)
	}
	if events.HasBOM(data) {
		return bad("%s", events.BOMReason("the bundle", "an evidence bundle"))
	}
	// Strict JSON, as a record: a member named twice would be read
	// last-one-wins below. A syntax error is left to json, whose words
	// say more.
	if _, err := events.Canonicalize(data); err != nil && json.Valid(data) {
		return bad("%v", err)
	}
	var w evidenceJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return bad("%v", err)
	}
	var present map[string]json.RawMessage
	if err := json.Unmarshal(data, &present); err != nil {
		return bad("%v", err)
	}
	for _, k := range evidenceMembers {
		if v, ok := present[k]; !ok || string(v) == "null" {
			return bad("member %q is missing or null", k)
		}
	}
	if len(present) != len(evidenceMembers) {
		// encoding/json matches names case-insensitively: "Room" beside
		// "room" would be a second spelling.
		return bad("members other than %v", evidenceMembers)
	}
	if w.Format != EvidenceFormat {
		return bad("format %q, want %q", clipText(w.Format), EvidenceFormat)
	}
	rp, err := checkpoint.ParseTlogProof([]byte(w.RoomProof))
	if err != nil {
		return bad("room_proof: %v", err)
	}
	dp, err := checkpoint.ParseTlogProof([]byte(w.DeploymentProof))
	if err != nil {
		return bad("deployment_proof: %v", err)
	}
	if w.Data == nil {
		w.Data = []byte{}
	}
	return &Evidence{Room: w.Room, Subject: w.Subject, StreamSeq: w.StreamSeq, Position: w.Position, Attestation: w.Attestation,
		Data: w.Data, RoomProof: rp, DeploymentProof: dp}, nil
}

// clipText cuts s for a message.
func clipText(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// EvidencePart names the check of VerifyEvidence that failed.
type EvidencePart string

// The checks of VerifyEvidence, in the order it makes them.
const (
	PartBundle               EvidencePart = "bundle"
	PartAttestation          EvidencePart = "attestation"
	PartLeaf                 EvidencePart = "leaf"
	PartRoomCheckpoint       EvidencePart = "room checkpoint"
	PartRoomInclusion        EvidencePart = "room inclusion"
	PartDeploymentCheckpoint EvidencePart = "deployment checkpoint"
	PartDeploymentInclusion  EvidencePart = "deployment inclusion"
	PartWitnessQuorum        EvidencePart = "witness quorum"
)

// EvidenceError is VerifyEvidence's refusal: the check that failed, its
// code (for a bundle that is no bundle, PartBundle, the document's code:
// events.DocumentCode, or events.TooLarge over MaxEvidenceBytes;
// events.WitnessQuorum when the cosignatures fall short of the policy's
// quorum; events.CheckpointMismatch for everything else: the readers'
// code for what a trusted publisher did not sign) and the cause
// (ErrBadEvidence, checkpoint.ErrBadAttestation, ErrBadProof,
// ErrBadCheckpoint, ErrUntrustedPublisher, *witness.QuorumError).
type EvidenceError struct {
	Code events.Code
	Part EvidencePart
	Err  error
}

func (e *EvidenceError) Error() string {
	return fmt.Sprintf("%s: %s: %v", e.Code, e.Part, e.Err)
}

func (e *EvidenceError) Unwrap() error { return e.Err }

// VerifiedEvidence is what VerifyEvidence established, for people and
// --json: the message's room, subject and leaf index; the room checkpoint
// (size, signer) and its entry index in the deployment log; the
// deployment checkpoint's size and the witnesses that validly cosigned it
// under the policy. ReportedStreamSeq is the exporter's word only.
type VerifiedEvidence struct {
	Room              string `json:"room"`
	Subject           string `json:"subject"`
	ReportedStreamSeq uint64 `json:"reported_stream_seq"`
	// Position is proven only with AttestationChecked (the leaf does not
	// bind it); a journal entry's data holds its chain seq all the same.
	Position    string `json:"position"`
	ContentHash string `json:"content_hash"` // lowercase hex SHA-256 of the stored bytes
	// AttestedBy is the attestation's signer; AttestationChecked says
	// whether its signature was verified here: only a batch of one can
	// be (BatchSize), a message of a larger batch rests on the room
	// checkpoint's signature over its leaf.
	AttestedBy         string   `json:"attested_by"`
	AttestationChecked bool     `json:"attestation_checked"`
	BatchSize          int      `json:"batch_size"`
	LeafIndex          uint64   `json:"leaf_index"`
	RoomSize           uint64   `json:"room_checkpoint_size"`
	RoomSigner         string   `json:"room_checkpoint_signer"`
	DeploymentIndex    uint64   `json:"deployment_index"`
	DeploymentSize     uint64   `json:"deployment_checkpoint_size"`
	Origin             string   `json:"origin"`
	Quorum             string   `json:"quorum"`
	Cosigners          []string `json:"cosigners"`
}

// VerifyEvidence checks a bundle offline (docs/witnesses.md, "Portable
// evidence") with nothing but the trusted publisher keys and deployment
// origin of t (checkpoint.Trust.WithOrigin) and the witness policy p:
//
//  1. the bundle parses (ParseEvidence);
//  2. the attestation is well formed and by a trusted publisher, and,
//     for a batch of one, its signature verifies over room, subject,
//     position and SHA-256(data) (checkpoint.Trust.VerifyAttestation); a
//     message of a larger batch cannot be checked alone, and rests on 4;
//  3. the room proof's extra is the leaf data of room, subject and
//     SHA-256(data) (checkpoint.LeafData), recomputed;
//  4. the room proof's checkpoint C is a room checkpoint of the room
//     signed by a trusted publisher under t's origin (checkpoint.Parse),
//     and the leaf is at the proof's index in C's tree (RFC 6962);
//  5. the deployment proof's checkpoint D is signed by a trusted
//     publisher under the origin (checkpoint.ParseDeployment), has no
//     extra, and C's exact bytes are its entry at the proof's index
//     (leaf checkpoint.EntryLeaf);
//  6. D carries the policy's quorum of cosignatures
//     (witness.Policy.CheckWith, C2SP tlog-cosignature).
//
// Errors: *EvidenceError naming the failed check, or, before any check,
// checkpoint.ErrNoOrigin when t has no origin.
func VerifyEvidence(bundle []byte, t *checkpoint.Trust, p *witness.Policy) (*VerifiedEvidence, error) {
	if t.Origin() == "" {
		return nil, checkpoint.ErrNoOrigin
	}
	if p == nil {
		return nil, errors.New("evidence: no witness policy")
	}
	fail := func(part EvidencePart, err error) (*VerifiedEvidence, error) {
		return nil, &EvidenceError{Code: events.CheckpointMismatch, Part: part, Err: err}
	}
	e, err := ParseEvidence(bundle)
	if err != nil {
		code := events.DocumentCode(bundle)
		if len(bundle) > MaxEvidenceBytes {
			code = events.TooLarge
		}
		return nil, &EvidenceError{Code: code, Part: PartBundle, Err: err}
	}
	content := checkpoint.ContentHash(e.Data)
	v := &VerifiedEvidence{Room: e.Room, Subject: e.Subject, ReportedStreamSeq: e.StreamSeq, Position: e.Position,
		ContentHash: fmt.Sprintf("%x", content), Origin: t.Origin(), Quorum: p.QuorumName()}

	a, err := checkpoint.ParseAttestation(e.Attestation)
	if err == nil && !t.Trusts(a.Signer) {
		_, err = t.AttestationSigner(e.Attestation)
	}
	if err == nil && a.Count == 1 {
		_, err = t.VerifyAttestation(e.Attestation, e.Room, e.Subject, e.Position, content)
	}
	if err != nil {
		return fail(PartAttestation, err)
	}
	v.AttestedBy, v.BatchSize, v.AttestationChecked = a.Signer, a.Count, a.Count == 1

	leafData := checkpoint.LeafData(e.Room, e.Subject, content)
	if !bytes.Equal(e.RoomProof.Extra, leafData) {
		return fail(PartLeaf, fmt.Errorf("%w: the room proof's extra is not the leaf data of room, subject and the stored bytes (%q)",
			checkpoint.ErrBadProof, clipText(string(leafData))))
	}
	c, err := checkpoint.Parse(e.RoomProof.Checkpoint, e.Room, t)
	if err != nil {
		return fail(PartRoomCheckpoint, err)
	}
	if err := e.RoomProof.Verify(checkpoint.LeafHash(e.Room, e.Subject, content), c); err != nil {
		return fail(PartRoomInclusion, err)
	}
	v.LeafIndex, v.RoomSize, v.RoomSigner = e.RoomProof.Index, c.Size, c.Signer

	d, err := checkpoint.ParseDeployment(e.DeploymentProof.Checkpoint, t)
	if err != nil {
		return fail(PartDeploymentCheckpoint, err)
	}
	if len(e.DeploymentProof.Extra) > 0 {
		return fail(PartDeploymentInclusion, fmt.Errorf("%w: the deployment proof carries extra data (its entry is the room checkpoint itself)", checkpoint.ErrBadProof))
	}
	if err := e.DeploymentProof.Verify(checkpoint.EntryLeaf(e.RoomProof.Checkpoint), d); err != nil {
		return fail(PartDeploymentInclusion, err)
	}
	v.DeploymentIndex, v.DeploymentSize = e.DeploymentProof.Index, d.Size

	keys, _ := DeploymentLogKeys(p, t)
	cosigners, err := p.CheckWith(d.Note, keys)
	if err != nil {
		code := events.CheckpointMismatch
		var qe *witness.QuorumError
		if errors.As(err, &qe) {
			code = events.WitnessQuorum
		}
		return nil, &EvidenceError{Code: code, Part: PartWitnessQuorum, Err: err}
	}
	v.Cosigners = cosigners
	return v, nil
}

// FileName is the bundle's file name, safe on any file system: the room's
// origin segment (checkpoint.RoomSegment: only A-Z a-z 0-9 - _ ~ and %XX,
// never . or /), the stream seq, "entry" or "record", then EvidenceExt,
// e.g. "eval-csv.138.entry.roompub-evidence.json". A segment over 100
// bytes is cut, with 16 hex digits of its SHA-256 after it, so the name
// stays under the usual 255-byte limit.
func (e *Evidence) FileName() string {
	seg := checkpoint.RoomSegment(e.Room)
	if len(seg) > 100 {
		sum := sha256.Sum256([]byte(seg))
		cut := 100
		if i := strings.LastIndexByte(seg[:cut], '%'); i >= cut-2 {
			cut = i // not inside a %XX
		}
		seg = seg[:cut] + "-" + hex.EncodeToString(sum[:8])
	}
	kind := "entry"
	if strings.HasPrefix(e.Position, "index:") {
		kind = "record"
	}
	return seg + "." + strconv.FormatUint(e.StreamSeq, 10) + "." + kind + EvidenceExt
}

// WriteEvidence writes each bundle into dir (created if missing, mode
// 0755) as FileName(), one JSON object and a newline, through a
// temporary file in dir, fsync and a rename, so a reader never sees half a
// bundle and a crash leaves the old file or the new one. It returns the
// paths written, in order; errors are the file system's.
func WriteEvidence(dir string, bundles []*Evidence) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, b := range bundles {
		data, err := b.MarshalJSON()
		if err != nil {
			return paths, err
		}
		path := filepath.Join(dir, b.FileName())
		if err := writeFileAtomic(path, append(data, '\n')); err != nil {
			return paths, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// writeFileAtomic writes data to path through a temporary file in the
// same directory, fsync and a rename.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".evidence-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
