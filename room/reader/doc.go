// Package reader reads a room back and re-verifies it without trusting
// the publisher: Reader applies the chain and record rules to every
// stored message in stream order (the same events and validate code the
// gate ran), keeps each instance's evidence apart (EvidenceIndex), and
// checks publishers' attestations and signed checkpoints against the
// RFC 6962 tree it rebuilds. Audit replays a stream to a verdict, Follow
// serves verified events live to a durable consumer, Prove builds a
// message's inclusion proof against the latest verified checkpoint
// (docs/design.md, "The readers"; docs/checkpoints.md).
//
// reader never imports the NATS server, the gate (room/ingest), the
// embedded server or secure mode: a program that only reads a room links
// none of them (test/layout).
package reader
