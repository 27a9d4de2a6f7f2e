package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/reader"
)

type verifyProofCmd struct {
	publisherTrust
	config.WitnessPolicy
	File string `arg:"" name:"file" placeholder:"FILE|-" help:"The proof (JSON, as 'subscriber prove' prints it) or evidence bundle (as 'subscriber export' writes it; needs the witness flags); - reads standard input."`
	JSON bool   `name:"json" help:"Print the verdict as one JSON object."`
}

func (c *verifyProofCmd) Validate() error {
	if len(c.TrustedPublishers) == 0 {
		return fmt.Errorf("%w: verify-proof needs --trusted-publisher", config.ErrInvalid)
	}
	return errors.Join(c.publisherTrust.validate(), c.WitnessPolicy.Validate(len(c.TrustedPublishers)))
}

// maxProofBytes bounds a single-level proof: a few KB (at most 64
// hashes and a signed note).
const maxProofBytes = 1 << 20

// Run checks the proof or bundle offline: no server, only the file and
// the trusted keys (and, for a bundle, the origin and the witness
// policy). Exit 0 valid, 1 invalid, 2 usage (a file that cannot be read,
// a bundle without a witness policy).
func (c *verifyProofCmd) Run(s *streams) error {
	t, err := c.trust()
	if err != nil {
		return err
	}
	// --origin pins the deployment for a plain proof too: a room
	// checkpoint of another deployment signed by the same key is refused,
	// as audit, prove, export and follow refuse it.
	witnessing, t, err := c.Policy(t)
	if err != nil {
		return err
	}
	var r io.Reader = s.in
	if c.File != "-" {
		f, err := os.Open(c.File)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, reader.MaxEvidenceBytes+1))
	if err != nil {
		return err
	}
	if reader.IsEvidence(data) {
		return c.verifyBundle(s, data, t, witnessing)
	}
	var p *checkpoint.Proof
	var ck *checkpoint.Checkpoint
	tooLarge := len(data) > maxProofBytes
	switch {
	case len(data) > reader.MaxEvidenceBytes:
		// Cut short where it was read: whichever it was meant to be.
		err = fmt.Errorf("%w: more than %d bytes, the most an evidence bundle holds (a proof: %d)", checkpoint.ErrBadProofDocument, reader.MaxEvidenceBytes, maxProofBytes)
	case tooLarge:
		err = fmt.Errorf("%w: more than %d bytes", checkpoint.ErrBadProofDocument, maxProofBytes)
	default:
		p, err = checkpoint.ParseProof(data)
	}
	if err == nil {
		ck, err = p.Verify(t)
	}
	type verdict struct {
		Valid bool `json:"valid"`
		// Code is the refusal's code (proofCode).
		Code    events.Code `json:"code,omitempty"`
		Reason  string      `json:"reason,omitempty"`
		Room    string      `json:"room,omitempty"`
		Subject string      `json:"subject,omitempty"`
		// ReportedStreamSeq is the proof's stream_seq as the prover read
		// it: not covered by the signature or the proof.
		ReportedStreamSeq uint64 `json:"reported_stream_seq,omitempty"`
		// LeafIndex is the proof's leaf_index, also when it is refused;
		// absent when the document could not be read.
		LeafIndex *uint64 `json:"leaf_index,omitempty"`
		TreeSize  uint64  `json:"tree_size,omitempty"`
		Signer    string  `json:"signer,omitempty"`
		// Origin is the checkpoint note's origin line: the deployment
		// (and room) the signature covers.
		Origin string `json:"origin,omitempty"`
	}
	out := verdict{Valid: err == nil}
	if p != nil {
		out.LeafIndex = &p.LeafIndex
	}
	if err != nil {
		out.Code, out.Reason = proofCode(data, tooLarge, err), err.Error()
	} else {
		out.Room, out.Subject, out.ReportedStreamSeq, out.TreeSize, out.Signer, out.Origin = p.Room, p.Subject, p.StreamSeq, ck.Size, ck.Signer, ck.Origin
	}
	switch {
	case c.JSON:
		b, _ := json.Marshal(out)
		fmt.Fprintf(s.out, "%s\n", b)
	case err == nil:
		// A checkpoint in the deployment's origin form names the
		// deployment; one in the room id form names no more than the room.
		origin := ""
		if ck.Origin != p.Room {
			origin = " (origin " + ck.Origin + ")"
		}
		fmt.Fprintf(s.out, "valid: %s (%s) is leaf %d of the checkpoint of size %d%s signed by %s (stream seq %d as reported by the prover, not proven)\n",
			p.Room, p.Subject, p.LeafIndex, ck.Size, origin, ck.Signer, p.StreamSeq)
	default:
		fmt.Fprintf(s.out, "invalid: %s: %v\n", out.Code, err)
	}
	if err != nil {
		return fmt.Errorf("verify-proof: %w", errRefused)
	}
	return nil
}

// proofCode is the code of a proof document data refused with err:
// too_large over maxProofBytes; for a document that is no proof
// (checkpoint.ErrBadProofDocument) empty_input, malformed_json or
// schema_invalid (events.DocumentCode); else checkpoint_mismatch, as
// readers refuse what a trusted publisher did not sign
// (docs/refusal-codes.md).
func proofCode(data []byte, tooLarge bool, err error) events.Code {
	switch {
	case tooLarge:
		return events.TooLarge
	case errors.Is(err, checkpoint.ErrBadProofDocument):
		return events.DocumentCode(data)
	}
	return events.CheckpointMismatch
}

// verifyBundle checks an evidence bundle (reader.VerifyEvidence) and
// prints the verdict: what was proven, or the code and the check that
// failed.
func (c *verifyProofCmd) verifyBundle(s *streams, data []byte, t *checkpoint.Trust, witnessing *reader.Witnessing) error {
	if witnessing == nil {
		return fmt.Errorf("%w: an evidence bundle needs the witness policy (--witness or --witness-policy) and the deployment's --origin", config.ErrInvalid)
	}
	v, err := reader.VerifyEvidence(data, t, witnessing.Policy)
	var ee *reader.EvidenceError
	if err != nil && !errors.As(err, &ee) {
		return err
	}
	if c.JSON {
		out := struct {
			Valid  bool                `json:"valid"`
			Code   string              `json:"code,omitempty"`
			Failed reader.EvidencePart `json:"failed,omitempty"`
			Reason string              `json:"reason,omitempty"`
			*reader.VerifiedEvidence
		}{Valid: err == nil, VerifiedEvidence: v}
		if ee != nil {
			out.Code, out.Failed, out.Reason = string(ee.Code), ee.Part, ee.Err.Error()
		}
		b, _ := json.Marshal(out)
		fmt.Fprintf(s.out, "%s\n", b)
	} else if err == nil {
		cosigners := strings.Join(v.Cosigners, ", ")
		if cosigners == "" {
			cosigners = "no witness"
		}
		att, pos := "checked (a batch of one)", v.Position
		if !v.AttestationChecked {
			att = fmt.Sprintf("by %s, not checked alone (a message of a batch of %d: the room checkpoint's signature covers its leaf)", v.AttestedBy, v.BatchSize)
			pos += " as reported"
		}
		fmt.Fprintf(s.out, "valid: %s %s (%s, content %s) is leaf %d of the room's checkpoint of size %d signed by %s;\n"+
			"  that checkpoint is entry %d of the deployment log %s in its checkpoint of size %d, cosigned by %s (quorum %s);\n"+
			"  attestation %s; stream seq %d as reported by the exporter, not proven\n",
			v.Room, v.Subject, pos, v.ContentHash, v.LeafIndex, v.RoomSize, v.RoomSigner,
			v.DeploymentIndex, v.Origin, v.DeploymentSize, cosigners, v.Quorum, att, v.ReportedStreamSeq)
	} else {
		fmt.Fprintf(s.out, "invalid: %v\n", err)
	}
	if err != nil {
		return fmt.Errorf("verify-proof: %w", errRefused)
	}
	return nil
}
