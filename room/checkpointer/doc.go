// Package checkpointer writes signed checkpoints of every room: it
// follows the room stream, verifies each message's attestation by the
// publishers it trusts, keeps each room's RFC 6962 tree (a
// checkpoint.LeanTree) and appends a C2SP signed-note checkpoint to the
// room's checkpoint subject every Every messages or Interval, under a
// per-room lease in a JetStream key-value bucket so that one writer signs
// a room at a time (docs/checkpoints.md).
//
// checkpointer never imports the NATS server, the gate or the readers;
// the gate tells it what it stored through its Stored and Expect methods.
package checkpointer
