package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/config"
)

type verifyProofCmd struct {
	publisherTrust
	File string `arg:"" name:"file" placeholder:"FILE|-" help:"The proof (JSON, as 'subscriber prove' prints it); - reads standard input."`
	JSON bool   `name:"json" help:"Print the verdict as one JSON object."`
}

func (c *verifyProofCmd) Validate() error {
	if len(c.TrustedPublishers) == 0 {
		return fmt.Errorf("%w: verify-proof needs --trusted-publisher", config.ErrInvalid)
	}
	return c.validate()
}

// maxProofBytes bounds what verify-proof reads: a proof is a few KB (at
// most 64 hashes and a signed note).
const maxProofBytes = 1 << 20

// Run checks the proof offline: no server, only the proof, its checkpoint
// and the trusted keys. Exit 0 valid, 1 invalid, 2 usage (a file that
// cannot be read).
func (c *verifyProofCmd) Run(s *streams) error {
	t, err := c.trust()
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
	data, err := io.ReadAll(io.LimitReader(r, maxProofBytes+1))
	if err != nil {
		return err
	}
	var p checkpoint.Proof
	var ck *checkpoint.Checkpoint
	if len(data) > maxProofBytes {
		err = fmt.Errorf("%w: more than %d bytes", checkpoint.ErrBadProof, maxProofBytes)
	} else if err = json.Unmarshal(data, &p); err != nil {
		err = fmt.Errorf("not a proof document: %w", err)
	} else {
		ck, err = p.Verify(t)
	}
	type verdict struct {
		Valid   bool   `json:"valid"`
		Reason  string `json:"reason,omitempty"`
		Room    string `json:"room,omitempty"`
		Subject string `json:"subject,omitempty"`
		// ReportedStreamSeq is the proof's stream_seq as the prover read
		// it: not covered by the signature or the proof.
		ReportedStreamSeq uint64 `json:"reported_stream_seq,omitempty"`
		LeafIndex         uint64 `json:"leaf_index"`
		TreeSize          uint64 `json:"tree_size,omitempty"`
		Signer            string `json:"signer,omitempty"`
	}
	out := verdict{Valid: err == nil}
	if err != nil {
		out.Reason = err.Error()
	} else {
		out.Room, out.Subject, out.ReportedStreamSeq, out.LeafIndex, out.TreeSize, out.Signer = p.Room, p.Subject, p.StreamSeq, p.LeafIndex, ck.Size, ck.Signer
	}
	switch {
	case c.JSON:
		b, _ := json.Marshal(out)
		fmt.Fprintf(s.out, "%s\n", b)
	case err == nil:
		fmt.Fprintf(s.out, "valid: %s (%s) is leaf %d of the checkpoint of size %d signed by %s (stream seq %d as reported by the prover, not proven)\n",
			p.Room, p.Subject, p.LeafIndex, ck.Size, ck.Signer, p.StreamSeq)
	default:
		fmt.Fprintf(s.out, "invalid: %v\n", err)
	}
	if err != nil {
		return fmt.Errorf("verify-proof: %w", errRefused)
	}
	return nil
}
