// Package room puts verified evidence into NATS JetStream and reads it
// back: the subject scheme, the append-only room stream, the embedded
// nats-server, the gate that decides every append, and the ingest service
// that exposes the gate to NATS clients.
//
// Layout (docs/design.md, "The room stream"): one stream (default "ROOMS") holds every room on
// subjects under one prefix (default "rooms"):
//
//	rooms.<room>.journal.<run_id>.<capsule_id>   one subject per chain
//	rooms.<room>.exec                            the room's execution records
//
// Ids are encoded into single subject tokens by EncodeToken, injectively
// and reversibly. The server decides every race: journal appends carry
// Nats-Msg-Id = entry_hash and an expected last sequence over the chain's
// subject in every room, record appends carry Nats-Msg-Id = content digest
// and an expected last sequence over the room's record subject.
package room
