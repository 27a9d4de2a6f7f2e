package integration

// Witnessed rooms end to end: the real `publisher serve --origin
// --witness-policy` keeps the deployment log and has three real
// litewitness processes cosign it; the real `subscriber audit` checks it
// under a witness policy given as a C2SP tlog-policy file and as
// --witness keys with --witness-quorum.

import (
	"fmt"
	"os"
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
	pub, err := events.ParseNodeID(key.id)
	if err != nil {
		t.Fatal(err)
	}
	logKey, err := note.NewEd25519VerifierKey(tOrigin, pub)
	if err != nil {
		t.Fatal(err)
	}
	ws := witnesstest.Start(t, 3, witnesstest.Log{Origin: tOrigin, VKey: logKey})
	policy := "log " + logKey + "\n"
	var names, vkeys []string
	for _, w := range ws {
		policy += fmt.Sprintf("witness %s %s %s\n", w.Name, w.VKey, w.URL)
		names, vkeys = append(names, w.Name), append(vkeys, w.VKey)
	}
	policy += "group two 2 " + strings.Join(names, " ") + "\nquorum two\n"
	policyFile := filepath.Join(t.TempDir(), "witnesses.policy")
	if err := os.WriteFile(policyFile, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startKeyed(t, t.TempDir(), key, "--origin", tOrigin, "--witness-policy", policyFile, "--checkpoint-interval", "200ms")
	shipTo(t, srv.url, "room:eval-csv", filepath.Join(root, csvDir), 0, 14)

	// auditUntil runs the audit until it exits with status (the deployment
	// log is cosigned about a second after the room's checkpoint).
	stateDir := t.TempDir()
	auditUntil := func(status int, args ...string) result {
		t.Helper()
		var r result
		deadline := time.Now().Add(15 * time.Second)
		for {
			r = subRun(t, ckArgs(srv.url, key.id, "audit", append([]string{"--state-dir", stateDir}, args...)...)...)
			if r.status == status || time.Now().After(deadline) {
				return r
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	r := auditUntil(0, "--witness-policy", policyFile)
	if r.status != 0 || !strings.Contains(r.stdout, "deployment log "+tOrigin+" (stream ROOMPUB_DEPLOYMENT): 1 entries") ||
		!strings.Contains(r.stdout, "cosigned by "+strings.Join(names, ", ")) ||
		!strings.Contains(r.stdout, "witnessed: the checkpoint of size 14, deployment log entry 0") {
		t.Fatalf("audit with a 2-of-3 policy: exit %d\n%s%s\nserve:\n%s", r.status, r.stdout, r.stderr, srv.log.String())
	}

	// One witness stops: the next checkpoints have two cosignatures,
	// enough for 2 of 3, short of 3 of 3.
	ws[1].Stop()
	shipTo(t, srv.url, "room:eval-slugify", filepath.Join(root, slugifyDir), 0, 299)
	all := []string{}
	for _, v := range vkeys {
		all = append(all, "--witness", v)
	}
	r = auditUntil(1, append(all, "--origin", tOrigin)...)
	if r.status != 1 || !strings.Contains(r.stdout, "witness_quorum") || !strings.Contains(r.stdout, "short of quorum 3-of-3") {
		t.Fatalf("audit with 3 of 3 and a witness stopped: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	r = auditUntil(0, append(all, "--origin", tOrigin, "--witness-quorum", "2")...)
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
