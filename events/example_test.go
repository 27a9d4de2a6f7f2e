package events_test

import (
	"bytes"
	"crypto/ed25519"
	"fmt"

	"github.com/roompub/roompub/events"
)

// Canonicalize returns the RFC 8785 form: members sorted by UTF-16 code
// units, no insignificant whitespace, numbers in their shortest ECMAScript
// form, strings with only the escapes JSON requires.
func ExampleCanonicalize() {
	out, err := events.Canonicalize([]byte(`{ "seq": 1.0, "payload": {"message": "\u0041 snow \u2603", "score": -1.50}, "kind": "start" }`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(out))

	_, err = events.Canonicalize([]byte(`{"seq":0,"seq":1}`))
	fmt.Println(err)
	// Output:
	// {"kind":"start","payload":{"message":"A snow ☃","score":-1.5},"seq":1}
	// not strict JSON: Duplicate key: "seq"
}

// NewEntry computes entry_hash, so a journal writer cannot get it wrong; a
// journal line is the entry's canonical bytes and "\n".
func ExampleNewEntry() {
	e, err := events.NewEntry(map[string]any{
		"schema": events.EntrySchema, "run_id": "run-1", "capsule_id": "capsule-1", "seq": 0,
		"ts": "2026-09-02T00:00:00.000Z", "lineage": "plan", "kind": "gate.start", "effect_class": "SE0",
		"harness_version": "test/1", "task_family": "slugify", "parent_hash": events.ZeroHash,
		"payload": map[string]any{"task_id": "t01", "status": "ok"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.EntryHash())
	// Output:
	// b24439ebdbd58c19e3128d496a47739c59c7736cc82cecaacb00814d54c0c782
}

// SignRecord fills host/node-id, execution/ref and the ed25519+domain-v1
// signature; VerifySignature checks it against key/public.
func ExampleSignRecord() {
	// A fixed seed keeps the example's output stable; use
	// events.GenerateHostKey(crypto/rand.Reader) for a real host key.
	key := events.NewHostKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize)))
	rec, err := events.SignRecord(map[string]any{
		"schema/v": 1,
		"room/id":  "room:example",
		"outcome":  "cancelled",
		"evidence": []any{},
		// … the other members of a task-pack execution record v1
	}, key)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rec.HostNodeID())
	fmt.Println(rec.ExecutionRef() == rec.ComputedRef())
	fmt.Println(events.VerifySignature(rec.Signature(), events.ExecutionDomain, rec.SigningPayload()))

	// Any change to the signed content breaks the signature.
	tampered := bytes.Replace(rec.Canonical(), []byte("room:example"), []byte("room:elsewhere"), 1)
	t, err := events.ParseRecord(tampered)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(events.VerifySignature(t.Signature(), events.ExecutionDomain, t.SigningPayload()))
	// Output:
	// node:did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX
	// true
	// <nil>
	// signature does not verify
}
