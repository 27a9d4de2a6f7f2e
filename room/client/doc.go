// Package client is the ingest service's client: Client sends head,
// journal and record requests (docs/wire.md) as one identity, and
// ShipCapsule and FollowCapsule send a capsule directory's journal,
// whole or as it grows, resending what the gate answered ahead or did
// not store. It is what `publisher journal` and `publisher execution`
// call.
//
// client never imports the NATS server, the gate or the readers
// (test/layout).
package client
