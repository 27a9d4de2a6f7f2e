package validate_test

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// A record signed by a host verifies; the same record with one member
// changed is refused, with the first failing rule as its code.
func ExampleValidator_Record() {
	v, err := validate.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	// A fixed seed keeps the output stable; a real host uses
	// events.GenerateHostKey(crypto/rand.Reader).
	key := events.NewHostKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize)))
	members, _, err := events.DecodeObject([]byte(`{
		"schema/v": 1,
		"query/id": "query:qmail-open-relay",
		"room/id": "room:qmail-open-relay",
		"proposal/ref": "corpus-experiment:sha256:Z9OINYzXKjCv2n467f8hCPYp0bbqrW6vf1_HGWXLVj0",
		"proposal/digest": "sha256:Z9OINYzXKjCv2n467f8hCPYp0bbqrW6vf1_HGWXLVj0",
		"review/ref": "corpus-experiment-review:sha256:-wZwDPaemdSvfdPbI3S8uRNxpVHyDBJEXL9P-n9Ny7A",
		"review/digest": "sha256:-wZwDPaemdSvfdPbI3S8uRNxpVHyDBJEXL9P-n9Ny7A",
		"decision/ref": "corpus-experiment-chair-decision:sha256:oA28VKhsifc4ODhCXQhTYA5qikyleR46w0_GrRwpceE",
		"decision/digest": "sha256:oA28VKhsifc4ODhCXQhTYA5qikyleR46w0_GrRwpceE",
		"candidate": {
			"artifact/type": "operator-task-experiment-candidate.v1",
			"ref": "operator-task-experiment-candidate:qmail-01",
			"artifact-ref": "object-store:sha256:FPidKwubLf5d6OzruHL3EWrUJ9fzGOjhGJsB9p0N1-A",
			"digest": "sha256:FPidKwubLf5d6OzruHL3EWrUJ9fzGOjhGJsB9p0N1-A"
		},
		"target": {
			"task-profile/ref": "operator-task-profile:qmail-local-administration",
			"task-profile/digest": "sha256:qOpwTunafl7k27Iz3HYIQMMrPniAOvCKLp48kU16a70",
			"binding/ref": "operator-task-local-binding:qmail-on-workbench-a"
		},
		"plan/ref": "operator-task-plan:run-01",
		"plan/digest": "sha256:ZIeffWuWCgGQl2LZEaMtRYLCABDFZB7pAni2RKnjtSU",
		"run/ref": "operator-task-run:run-01",
		"environment/ref": "environment:qmail-01",
		"outcome": "verified",
		"result/digest": "sha256:srBF33Om3u50aloxxdNXou1JSRtY06tPWNOaomGIpJE",
		"evidence": [{
			"step/id": "inspect-qmail",
			"artifact-ref": "object-store:sha256:clS9L-u50lBvnKL4B8jKpD190PLkfS86KUobKiQVHCE",
			"digest": "sha256:clS9L-u50lBvnKL4B8jKpD190PLkfS86KUobKiQVHCE",
			"environment/ref": "environment:qmail-01"
		}],
		"recorded-at": "2026-09-25T12:15:00Z",
		"idempotency/key": "qmail-open-relay-01-execution"
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	rec, err := events.SignRecord(members, key)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := v.Record(rec.Canonical(), events.Location{File: "record.json"}); err == nil {
		fmt.Println("accepted", rec.HostNodeID())
	}

	tampered := bytes.Replace(rec.Canonical(), []byte(`"outcome":"verified"`), []byte(`"outcome":"verification-failed"`), 1)
	_, err = v.Record(tampered, events.Location{File: "record.json"})
	var ref *events.Refusal
	if errors.As(err, &ref) {
		for _, p := range ref.Problems {
			fmt.Println(p.Code, p.At)
		}
	}
	// Output:
	// accepted node:did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX
	// ref_mismatch record.json /execution~1ref
	// signature_invalid record.json /signature
}

// Journal verifies a capsule journal as one hash chain and reports its head,
// or refuses it naming the line and rule.
func ExampleValidator_Journal() {
	v, err := validate.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	var journal bytes.Buffer
	parent := events.ZeroHash
	for seq, kind := range []string{"gate.start", "tool.call"} {
		e, err := events.NewEntry(map[string]any{
			"schema": events.EntrySchema, "run_id": "run-1", "capsule_id": "capsule-1", "seq": seq,
			"ts": "2026-09-02T00:00:00.000Z", "lineage": "plan", "kind": kind, "effect_class": "SE0",
			"harness_version": "test/1", "task_family": "slugify", "parent_hash": parent,
			"payload": map[string]any{"task_id": "t01", "status": "ok"},
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		journal.Write(e.Canonical())
		journal.WriteByte('\n')
		parent = e.EntryHash()
	}
	meta := &events.CapsuleMeta{RunID: "run-1", CapsuleID: "capsule-1", HarnessVersion: "test/1", TaskFamily: "slugify"}

	res, err := v.Journal(bytes.NewReader(journal.Bytes()), "journal.ndjson", meta)
	fmt.Println(res.Entries, res.Head, err)

	// Lines in the wrong order.
	lines := bytes.SplitAfter(journal.Bytes(), []byte("\n"))
	swapped := append(bytes.Clone(lines[1]), lines[0]...)
	_, err = v.Journal(bytes.NewReader(swapped), "journal.ndjson", meta)
	fmt.Println(err)
	// Output:
	// 2 5bacd8c18e951410714a38074bebe88528ed9cc83d424f9e81c17cf13c10c7ca <nil>
	// reordered at journal.ndjson:1 /seq: seq is not the entry's position in the chain (expected "0", got "1") (and 3 more problem(s))
}

// VerifyPath checks a capsule directory, a journal or a record file, telling
// the kind from the content.
func ExampleValidator_VerifyPath() {
	v, err := validate.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, path := range []string{
		"../testdata/reference/capsule-journals/canonical",
		"../testdata/reference/execution-records/verified.json",
		"../testdata/reference/execution-records/foreign-evidence.json",
	} {
		rep, err := v.VerifyPath(path)
		if err != nil {
			fmt.Println(err)
			continue
		}
		if rep.OK {
			fmt.Println(rep.Kind, "ok")
			continue
		}
		fmt.Println(rep.Kind, rep.Code)
	}
	// Output:
	// journal ok
	// execution ok
	// execution foreign_evidence
}
