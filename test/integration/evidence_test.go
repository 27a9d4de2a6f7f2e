package integration

// Portable witnessed evidence end to end: `publisher serve --origin
// --witness-policy` with three real litewitness processes; `publisher
// journal --receipt` and `execution --receipt` write the bundles once
// witnessed; `subscriber export` writes them on demand; `subscriber
// verify-proof` checks them offline; with every witness stopped a receipt
// times out naming what is not witnessed and why.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
)

func TestWitnessedEvidence(t *testing.T) {
	t.Parallel()
	key := newPublisherKey(t)
	wd := startWitnessed(t, key.id)
	ws, names, _ := wd.ws, wd.names, wd.vkeys
	policyFile := wd.policy
	srv := startKeyed(t, t.TempDir(), key, "--origin", tOrigin, "--witness-policy", policyFile, "--checkpoint-interval", "200ms")
	witnessFlags := []string{"--trusted-publisher", key.id, "--witness-policy", policyFile}
	var outputs []string
	keep := func(r result) result { outputs = append(outputs, r.stdout, r.stderr); return r }

	// The journal's receipt: the chain's head, entry 13 of 14.
	receipts := t.TempDir()
	r := keep(runPub(t, nil, append([]string{"journal", "--server", srv.url, "--room", "room:eval-csv", "--receipt", receipts, "--receipt-timeout", "30s",
		filepath.Join(root, csvDir)}, witnessFlags...)...))
	headFile := filepath.Join(receipts, "eval-csv.14.entry.roompub-evidence.json")
	if r.status != 0 || !strings.Contains(r.stdout, "receipt  "+headFile+": room:eval-csv seq:13, leaf 13, deployment log entry 0") {
		t.Fatalf("journal --receipt: exit %d\n%s%s\nserve:\n%s", r.status, r.stdout, r.stderr, srv.log.String())
	}
	verify := func(file string, extra ...string) result {
		t.Helper()
		return keep(subRun(t, append(append([]string{"verify-proof", "--trusted-publisher", key.id}, extra...), file)...))
	}
	r = verify(headFile, "--witness-policy", policyFile)
	valid := regexp.MustCompile(`^valid: room:eval-csv \S+ \(seq:13 as reported, content [0-9a-f]{64}\) is leaf 13 of the room's checkpoint of size 14 signed by ` +
		regexp.QuoteMeta(key.id) + `;\n  that checkpoint is entry 0 of the deployment log ` + regexp.QuoteMeta(tOrigin) +
		` in its checkpoint of size 1, cosigned by ` + regexp.QuoteMeta(strings.Join(names, ", ")) + ` \(quorum two\);\n`)
	if r.status != 0 || !valid.MatchString(r.stdout) {
		t.Fatalf("verify-proof of the receipt: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}

	// A record's receipt.
	recReceipts := t.TempDir()
	r = keep(runPub(t, nil, append([]string{"execution", "--server", srv.url, "--receipt", recReceipts, samples + "/records/verified.json"}, witnessFlags...)...))
	recFile := filepath.Join(recReceipts, "qmail-open-relay.16.record.roompub-evidence.json")
	if r.status != 0 || !strings.Contains(r.stdout, "receipt  "+recFile+": room:qmail-open-relay index:0, leaf 0") {
		t.Fatalf("execution --receipt: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	if r = verify(recFile, "--witness-policy", policyFile); r.status != 0 || !strings.Contains(r.stdout, "attestation checked (a batch of one)") {
		t.Fatalf("verify-proof of the record's receipt: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}

	// subscriber export of entry 5, and of the heads; one flipped byte.
	lines := fileLines(t, filepath.Join(root, csvDir, "journal.ndjson"))
	e5, err := events.ParseEntry(lines[5])
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	r = keep(subRun(t, append(ckArgs(srv.url, key.id, "export", "--room", "room:eval-csv", "--entry", e5.EntryHash(), "--out", out), "--witness-policy", policyFile)...))
	e5File := filepath.Join(out, "eval-csv.6.entry.roompub-evidence.json")
	if r.status != 0 || !strings.HasPrefix(r.stdout, "wrote "+e5File+": room:eval-csv seq:5 leaf 5 of the room's checkpoint of size 14, deployment log entry 0") {
		t.Fatalf("export --entry: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	if r = verify(e5File, "--witness-policy", policyFile); r.status != 0 || !strings.Contains(r.stdout, "is leaf 5 of the room's checkpoint of size 14") {
		t.Fatalf("verify-proof of the export: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	r = keep(subRun(t, append(ckArgs(srv.url, key.id, "export", "--room", "room:eval-csv", "--heads", "--out", out), "--witness-policy", policyFile)...))
	if r.status != 0 || strings.Count(r.stdout, "wrote ") != 1 || !strings.Contains(r.stdout, "eval-csv.14.entry.roompub-evidence.json") {
		t.Fatalf("export --heads: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	// prove with a witness policy prints the same bundle; export of an
	// entry the room does not hold exits 1 naming it.
	r = keep(subRun(t, append(ckArgs(srv.url, key.id, "prove", "--room", "room:eval-csv", "--entry", e5.EntryHash()), "--witness-policy", policyFile)...))
	exported, err := os.ReadFile(e5File)
	if err != nil {
		t.Fatal(err)
	}
	if r.status != 0 || r.stdout != string(exported) {
		t.Fatalf("prove with a witness policy: exit %d\n%s%s\nwant\n%s", r.status, r.stdout, r.stderr, exported)
	}
	missing := strings.Repeat("ab", 32)
	r = keep(subRun(t, append(ckArgs(srv.url, key.id, "export", "--room", "room:eval-csv", "--entry", missing, "--out", out), "--witness-policy", policyFile)...))
	if r.status != 1 || r.stdout != "" || !strings.Contains(r.stderr, "subscriber: export: no such verified message: entry_hash "+missing+" in room:eval-csv\n") {
		t.Fatalf("export of a missing entry: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	r = keep(subRun(t, append(ckArgs(srv.url, key.id, "export", "--room", "room:eval-nothing", "--all", "--out", out), "--witness-policy", policyFile)...))
	if r.status != 1 || !strings.Contains(r.stderr, "subscriber: export: room:eval-nothing has no admitted message to export\n") {
		t.Fatalf("export of an empty room: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	r = verify(e5File, "--witness-policy", policyFile, "--json")
	if r.status != 0 || !strings.HasPrefix(r.stdout, `{"valid":true,"room":"room:eval-csv",`) ||
		!strings.Contains(r.stdout, `"leaf_index":5,"room_checkpoint_size":14,`) || !strings.Contains(r.stdout, `"quorum":"two","cosigners":["`+strings.Join(names, `","`)+`"]}`) {
		t.Fatalf("verify-proof --json: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	data, err := os.ReadFile(e5File)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(data), `"data": "`) + len(`"data": "`) + 20
	flipped := []byte(string(data))
	flipped[i] = map[bool]byte{true: 'B', false: 'A'}[flipped[i] == 'A']
	bad := filepath.Join(out, "flipped.json")
	if err := os.WriteFile(bad, flipped, 0o644); err != nil {
		t.Fatal(err)
	}
	if r = verify(bad, "--witness-policy", policyFile); r.status != 1 || !strings.HasPrefix(r.stdout, "invalid: checkpoint_mismatch: ") {
		t.Fatalf("verify-proof of a flipped byte: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	// A bundle needs the witness policy; an unreadable file is usage too.
	if r = verify(e5File); r.status != 2 || !strings.Contains(r.stderr, "an evidence bundle needs the witness policy") {
		t.Fatalf("verify-proof of a bundle without a policy: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	if r = verify(filepath.Join(out, "missing.json"), "--witness-policy", policyFile); r.status != 2 {
		t.Fatalf("verify-proof of a missing file: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}

	// Every witness stopped: the next capsule is stored, but no quorum
	// cosigns what covers it, and the receipt times out saying so.
	for _, w := range ws {
		w.Stop()
	}
	r = keep(runPub(t, nil, append([]string{"journal", "--server", srv.url, "--room", "room:eval-slugify", "--receipt", t.TempDir(), "--receipt-timeout", "5s",
		filepath.Join(root, slugifyDir)}, witnessFlags...)...))
	if r.status != 1 || !strings.Contains(r.stdout, "299 stored") ||
		!regexp.MustCompile(`publisher: receipt: entry_hash [0-9a-f]{64} in room:eval-slugify \(stream seq \d+, leaf 298\) is not witnessed yet: `+
			`the deployment log's entry 2 \(the room's checkpoint of size 299\) is not covered by a witnessed checkpoint: `+
			`the deployment log's latest checkpoint \(size 3\) has no valid cosignature, short of quorum two \(the latest witnessed one has size 2\)\n`).MatchString(r.stderr) ||
		!strings.Contains(r.stderr, "1 of 1 message(s) not witnessed within --receipt-timeout (5s)") {
		t.Fatalf("journal --receipt with the witnesses stopped: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	key.noKeyMaterial(t, "outputs", append(outputs, srv.log.String())...)
}
