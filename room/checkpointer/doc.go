// Package checkpointer writes signed checkpoints of every room: it
// follows the room stream, verifies each message's attestation by the
// publishers it trusts, keeps each room's RFC 6962 tree and checkpoints
// in a checkpoint.Ledger (the readers' rules; its tree a
// checkpoint.LeanTree) and appends a C2SP signed-note checkpoint to the
// room's checkpoint subject every Every leaves or Interval, under a
// per-room lease in a JetStream key-value bucket so that one writer signs
// a room at a time (docs/checkpoints.md). Each checkpoint carries what
// the next checkpointer needs to resume the room from it without reading
// its leaves again (checkpoint.ResumeHeader), verified at its start.
//
// checkpointer never imports the NATS server, the gate or the readers
// (test/layout); the gate tells it what it stored through the methods of
// ingest.AttestationSink (Expect, Stored, Unstored), which room/node wires.
package checkpointer
