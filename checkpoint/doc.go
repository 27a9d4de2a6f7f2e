// Package checkpoint makes a room's messages tamper-evident
// (docs/checkpoints.md): each
// admitted message carries a publisher's attestation header (one Ed25519
// signature per atomic batch, over the digests of its messages' statements;
// BatchRun reassembles the batches in stream order and BatchCollector
// verifies them), the room's
// admitted messages are the leaves of an RFC 6962 Merkle tree, and
// publishers sign C2SP tlog-checkpoint notes over that tree, so a reader can
// prove that a message is in the room (inclusion proof) and that a later
// checkpoint extends an earlier one (consistency proof).
//
// The Merkle tree hashing and proofs come from
// github.com/transparency-dev/merkle (rfc6962, compact, proof), the
// checkpoint body from github.com/transparency-dev/formats/log and the
// signed note from golang.org/x/mod/sumdb/note. This package adds only
// roompub's leaf and attestation formats, the key plumbing from
// events.HostKey, and a tree that keeps every complete subtree hash so proofs
// for any earlier size are O(log n) lookups.
//
// It is the one trust core of the gate, the checkpointer and the readers:
// BatchRun is the rule by which all three reassemble atomic batches, and
// Ledger holds a room's tree and checks its checkpoints against it (size,
// root, consistency with the previous one and with one an earlier read
// verified), so that they reach the same verdicts (the conformance suite's
// trust rows hold them to it).
//
// Like events, it imports no NATS: callers pass bytes, subjects and
// positions in.
package checkpoint
