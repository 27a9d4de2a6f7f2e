// Package witness asks transparency-log witnesses to cosign roompub's
// checkpoints and checks that a checkpoint carries enough of their
// cosignatures (docs/witnesses.md).
//
// The rules come from C2SP: cosignature verifier keys and the
// cosignature/v1 signed message from tlog-cosignature (Ed25519, key type
// 0x04), the add-checkpoint request and its answers from tlog-witness,
// note signature lines and key names from signed-note, and the policy file
// from tlog-policy. Signed notes are golang.org/x/mod/sumdb/note's.
//
// The package holds no roompub state and imports no NATS: callers hand it
// signed checkpoint notes and a function that proves consistency from any
// earlier size.
package witness
