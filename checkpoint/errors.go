package checkpoint

import "errors"

// ErrNoAttestation is returned by (*Trust).VerifyAttestation and
// (*Trust).AttestationSigner when the header is empty: the message was not
// attested, so it is not a leaf.
var ErrNoAttestation = errors.New("no attestation")

// ErrIncompleteBatch is returned (wrapped) by (*Trust).VerifyAttestation for
// a header of a batch of more than one message, and wrapped by
// IncompleteBatchError (BatchRun, BatchCollector) for a message whose
// batch was not read whole at consecutive stream sequences: its signature
// covers messages the caller did not pass, so it cannot be checked.
var ErrIncompleteBatch = errors.New("incomplete batch")

// ErrUntrustedPublisher is returned (wrapped) when an attestation or a
// checkpoint is signed by a key that is not in the Trust.
var ErrUntrustedPublisher = errors.New("untrusted publisher")

// ErrBadAttestation is returned (wrapped) when an attestation header is
// malformed or its signature does not verify for the message it is on.
var ErrBadAttestation = errors.New("bad attestation")

// ErrBadCheckpoint is returned (wrapped) by Parse, ParseUnverified and Sign
// when a checkpoint note is malformed, names another room, or carries an
// invalid signature by a trusted key.
var ErrBadCheckpoint = errors.New("bad checkpoint")

// ErrBadProof is returned (wrapped) by VerifyInclusion, VerifyConsistency and
// (*Proof).Verify when a proof does not lead to the expected root; the
// merkle/proof error (e.g. proof.RootMismatchError with both roots) is
// wrapped too.
var ErrBadProof = errors.New("proof does not verify")

// ErrBadProofDocument is returned (wrapped) by ParseProof and
// (*Proof).UnmarshalJSON when the bytes are not a proof document: not
// strict JSON (duplicate member names at any depth, invalid UTF-8, lone
// surrogates: events.Canonicalize), not an object, a member missing, null,
// unknown or of the wrong type, or a malformed hash. Nothing was verified.
var ErrBadProofDocument = errors.New("not a proof document")

// ErrTreeSize is returned (wrapped) by Tree methods asked about a size or
// index the tree does not have.
var ErrTreeSize = errors.New("size out of range")
