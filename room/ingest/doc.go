// Package ingest decides every append to the room stream: the Gate checks
// each journal line and execution record with the offline verifier's code
// (events, validate), then against what the stream holds (chain head,
// owner, room, record relations), and appends only what passes, with the
// headers that let the server decide every race (docs/design.md, "The
// gate"). The ingest Service exposes the gate on NATS micro endpoints
// (docs/wire.md), with per-identity quotas and fair slots; Metrics counts
// what it decided.
//
// Rules come from the seeds (journal envelope, execution record), RFC
// 8785 and docs/design.md, "Refusal codes and their order". ingest never
// imports the NATS server, the readers or the checkpointer: it tells the
// checkpointer what it stored through AttestationSink.
package ingest
