package integration

// Witnessed rooms end to end: the real `publisher serve --origin
// --witness-policy` keeps the deployment log and has three real
// litewitness processes cosign it; the real `subscriber audit` checks it
// under a witness policy given as a C2SP tlog-policy file and as
// --witness keys with --witness-quorum.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/internal/witnesstest"
)

const tOrigin = "evidence.example.org/roompub"

func TestWitnessedAudit(t *testing.T) {
	t.Parallel()
	key := newPublisherKey(t)
	wd := startWitnessed(t, key.id)
	ws, names, vkeys := wd.ws, wd.names, wd.vkeys
	policyFile := wd.policy
	srv := startKeyed(t, t.TempDir(), key, "--origin", tOrigin, "--witness-policy", policyFile, "--checkpoint-interval", "200ms")
	shipTo(t, srv.url, "room:eval-csv", filepath.Join(root, csvDir), 0, 14)

	// auditUntil runs the audit until it exits with status and prints
	// want (the deployment log is cosigned about a second after it grows).
	stateDir := t.TempDir()
	auditUntil := func(status int, want string, args ...string) result {
		t.Helper()
		var r result
		deadline := time.Now().Add(15 * time.Second)
		for {
			r = subRun(t, ckArgs(srv.url, key.id, "audit", append([]string{"--state-dir", stateDir}, args...)...)...)
			if r.status == status && strings.Contains(r.stdout, want) || time.Now().After(deadline) {
				return r
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	r := auditUntil(0, "witnessed: the checkpoint of size 14", "--witness-policy", policyFile)
	if r.status != 0 || !strings.Contains(r.stdout, "deployment log "+tOrigin+" (stream ROOMPUB_DEPLOYMENT): 1 entries") ||
		!strings.Contains(r.stdout, "cosigned by "+strings.Join(names, ", ")) ||
		!strings.Contains(r.stdout, "witnessed: the checkpoint of size 14, deployment log entry 0") {
		t.Fatalf("audit with a 2-of-3 policy: exit %d\n%s%s\nserve:\n%s", r.status, r.stdout, r.stderr, srv.log.String())
	}

	// follow with the same policy serves the room's 14 entries.
	fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer fcancel()
	follow := exec.CommandContext(fctx, subscriberBin(t), ckArgs(srv.url, key.id, "follow", "--room", "room:eval-csv", "--durable", "witnessed",
		"--state-dir", t.TempDir(), "--witness-policy", policyFile)...)
	var fout, ferr bytes.Buffer
	follow.Stdout, follow.Stderr = &fout, &ferr
	_ = follow.Run() // killed at the deadline
	if n := strings.Count(fout.String(), "\n"); n != 14 || !strings.Contains(ferr.String(), "subscriber: following room:eval-csv") || strings.Contains(ferr.String(), "set aside") {
		t.Fatalf("follow with a witness policy: %d events\n%s%s", n, fout.String(), ferr.String())
	}

	// One witness stops: the next checkpoints have two cosignatures,
	// enough for 2 of 3, short of 3 of 3.
	ws[1].Stop()
	shipTo(t, srv.url, "room:eval-slugify", filepath.Join(root, slugifyDir), 0, 299)
	all := []string{}
	for _, v := range vkeys {
		all = append(all, "--witness", v)
	}
	r = auditUntil(1, "short of quorum 3-of-3", append(all, "--origin", tOrigin)...)
	if r.status != 1 || !strings.Contains(r.stdout, "witness_quorum") || !strings.Contains(r.stdout, "short of quorum 3-of-3") {
		t.Fatalf("audit with 3 of 3 and a witness stopped: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	r = auditUntil(0, "cosigned by "+names[0]+", "+names[2], append(all, "--origin", tOrigin, "--witness-quorum", "2")...)
	if r.status != 0 || !strings.Contains(r.stdout, "cosigned by "+names[0]+", "+names[2]) {
		t.Fatalf("audit with 2 of 3 and a witness stopped: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	// A revoked key never counts: 2 of 3 with one witness stopped and
	// another's key revoked is short.
	r = subRun(t, ckArgs(srv.url, key.id, "audit", append([]string{"--state-dir", stateDir, "--origin", tOrigin, "--witness-quorum", "2", "--revoked-witness", vkeys[2]}, all...)...)...)
	if r.status != 1 || !strings.Contains(r.stdout, "witness_quorum") || !strings.Contains(r.stdout, "1 valid cosignature(s) ["+names[0]+"]") {
		t.Fatalf("audit with a revoked key: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	if !strings.Contains(srv.log.String(), "a witness did not cosign the deployment checkpoint") {
		t.Errorf("serve did not report the stopped witness:\n%s", srv.log.String())
	}
	// Usage: a policy without trusted publishers, or a quorum above the keys.
	for _, args := range [][]string{
		{"audit", "--server", srv.url, "--witness-policy", policyFile},
		append([]string{"audit", "--server", srv.url, "--trusted-publisher", key.id, "--witness-quorum", "4"}, all...),
	} {
		if r := subRun(t, args...); r.status != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, r.status, r.stderr)
		}
	}
	key.noKeyMaterial(t, "outputs", srv.log.String())
}

// TestStoreV010Witnessed serves the store v0.1.0 wrote (room checkpoints
// in the room-id form) with --origin and three witnesses: the deployment
// log takes every stored room checkpoint, the witnesses cosign it, and a
// witnessed audit of the old rooms is clean; a new entry's checkpoint, in
// the origin form, extends alpha's old one and is witnessed in turn.
func TestStoreV010Witnessed(t *testing.T) {
	t.Parallel()
	store := filepath.Join(t.TempDir(), "store")
	copyTree(t, filepath.Join(root, v010Dir, "store"), store)
	keyData, err := os.ReadFile(filepath.Join(root, v010Dir, "keys", "publisher-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "publisher-key.pem")
	if err := os.WriteFile(key, keyData, 0o600); err != nil {
		t.Fatal(err)
	}
	wd := startWitnessed(t, v010Publisher)
	policyFile := wd.policy
	srv := startServe(t, store, true, "--listen", "127.0.0.1:-1", "--store-dir", store, "--trusted-host", v010Host,
		"--publisher-key", key, "--checkpoint-interval", "200ms", "--origin", tOrigin, "--witness-policy", policyFile)
	audit := func(want string) result {
		t.Helper()
		var r result
		deadline := time.Now().Add(20 * time.Second)
		for {
			r = subRun(t, "audit", "--server", srv.url, "--trusted-publisher", v010Publisher, "--trusted-host", v010Host,
				"--state-dir", t.TempDir(), "--witness-policy", policyFile)
			if r.status == 0 && strings.Contains(r.stdout, want) || time.Now().After(deadline) {
				return r
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// v0.1.0 wrote 6 room checkpoints (alpha 2, beta 2, gamma 2).
	const clean = "\nCLEAN: 103 messages, 94 entries and 3 records verified, 0 set aside; 4 chains ok, 0 broken; stream append-only: true\n"
	r := audit("witnessed: size 6,")
	if r.status != 0 || !strings.HasSuffix(r.stdout, clean) || strings.Count(r.stdout, "  witnessed: the checkpoint of size") != 3 {
		t.Fatalf("witnessed audit of the v0.1.0 store: exit %d\n%s%s\nserve:\n%s", r.status, r.stdout, r.stderr, srv.log.String())
	}
	if rr := runPub(t, nil, "journal", "--json", "--server", srv.url, "--room", "room:store-alpha", storeCapsule(t, 30, "alpha-2-next.ndjson")); rr.status != 0 {
		t.Fatalf("the continuation: exit %d\n%s%s", rr.status, rr.stdout, rr.stderr)
	}
	r = audit("witnessed: the checkpoint of size 44, deployment log entry 6")
	if r.status != 0 || !strings.Contains(r.stdout, "witnessed: the checkpoint of size 44, deployment log entry 6") {
		t.Fatalf("witnessed audit after a new entry: exit %d\n%s%s\nserve:\n%s", r.status, r.stdout, r.stderr, srv.log.String())
	}
}

// witnessed is a deployment's witnesses for the integration tests: three
// litewitness processes that know the log of the publisher node id, and
// a C2SP tlog-policy file naming them with a quorum of 2.
type witnessed struct {
	ws     []*witnesstest.Witness
	names  []string
	vkeys  []string
	policy string // the policy file
}

// startWitnessed starts the witnesses of the deployment tOrigin whose
// log key is publisherID named by the origin, and writes their policy.
func startWitnessed(t *testing.T, publisherID string) witnessed {
	t.Helper()
	pub, err := events.ParseNodeID(publisherID)
	if err != nil {
		t.Fatal(err)
	}
	logKey, err := note.NewEd25519VerifierKey(tOrigin, pub)
	if err != nil {
		t.Fatal(err)
	}
	w := witnessed{ws: witnesstest.Start(t, 3, witnesstest.Log{Origin: tOrigin, VKey: logKey})}
	text := "log " + logKey + "\n"
	for _, x := range w.ws {
		text += fmt.Sprintf("witness %s %s %s\n", x.Name, x.VKey, x.URL)
		w.names, w.vkeys = append(w.names, x.Name), append(w.vkeys, x.VKey)
	}
	text += "group two 2 " + strings.Join(w.names, " ") + "\nquorum two\n"
	w.policy = filepath.Join(t.TempDir(), "witnesses.policy")
	if err := os.WriteFile(w.policy, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return w
}
