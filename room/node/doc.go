// Package node is the publisher's process: Serve assembles the embedded
// (or a given) NATS server, the room stream and its guard (the remembered
// stream mark, foreign writers), the gate, the ingest service, the
// checkpointer and the HTTP endpoint of health and metrics, and runs them
// until its context ends (docs/design.md, "Processes"). It is what
// `publisher serve` and the benchmark's publisher call; it is the only
// package that wires roles together (room/internal/roomtest does the same
// for tests).
//
// node imports the gate, the checkpointer and the embedded server, never
// the readers, the client or secure mode, and only the commands import it
// (test/layout; docs/design.md, "Package map and import rules").
package node
