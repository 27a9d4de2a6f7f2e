// Package events defines roompub's two evidence formats and everything that
// can be computed from their bytes alone: RFC 8785 canonical form, the
// journal entry hash chain (seed 000, capsule envelope v1), the execution
// record's ref, digests and ed25519+domain-v1 signature (seed 004), did:key
// host identities, and the typed refusal every check reports.
//
// Schema validation and rules that need configuration live in package
// validate, which passes its entry check into the chain verifier here, so
// this package imports neither JSON Schema nor NATS.
package events
