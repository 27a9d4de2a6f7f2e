// Package room is the vocabulary every role on the room stream shares:
// the subject scheme and room tokens, the stream's configuration and its
// checks, the stream mark, the ingest service's wire types (requests,
// replies, typed Outcome and Kind, headers), identities and their
// service subjects, names and defaults. It holds no role: the gate is
// room/ingest, the readers room/reader, the checkpointer
// room/checkpointer, the process room/node.
//
// Layout (docs/design.md, "The room stream"): one stream (default
// "ROOMS") holds every room on subjects under one prefix (default
// "rooms"):
//
//	rooms.<room>.journal.<run_id>.<capsule_id>   one subject per chain
//	rooms.<room>.exec                            the room's execution records
//	rooms.<room>.checkpoint                      the room's signed checkpoints
//
// Ids are encoded into single subject tokens by EncodeToken, injectively
// and reversibly. The server decides every race: journal appends carry
// Nats-Msg-Id = entry_hash and an expected last sequence over the chain's
// subject in every room, record appends carry Nats-Msg-Id = content digest
// and an expected last sequence over the room's record subject.
//
// room imports events, room/internal/jsapi and nats.go only; never the
// NATS server, never a role (test/layout holds the package map of
// docs/design.md, "Package map and import rules").
package room
