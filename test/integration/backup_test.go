package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// backupLine is `publisher backup --json` and `restore --json`.
type backupLine struct {
	Stream   string `json:"stream"`
	Messages uint64 `json:"messages"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
}

// runBackup runs `publisher <args> --json` and decodes its line; the exit
// status must be 0.
func runBackup(t *testing.T, args ...string) backupLine {
	t.Helper()
	r := runPub(t, nil, append(args, "--json")...)
	var l backupLine
	if r.status != 0 || json.Unmarshal([]byte(r.stdout), &l) != nil {
		t.Fatalf("publisher %v: exit %d\n%s%s", args, r.status, r.stdout, r.stderr)
	}
	return l
}

// TestBackupRestoreCommands runs the procedure of docs/operations.md,
// "Backup and restore", with the built commands: B1 taken with serve
// running (--server) after checkpoint C1 (size 20), more entries and C2
// (size 30) which a reader keeps (--state-dir), B2 taken with serve
// stopped (--store-dir); the store is lost; B2 restored: serve starts on
// it, the audit against C2 is CLEAN (exit 0) and the chain takes its next
// entry; B1 restored into a wiped store: the audit against C2 refuses the
// room as rolled back (checkpoint_mismatch, exit 1).
func TestBackupRestoreCommands(t *testing.T) {
	key := newPublisherKey(t)
	tmp := t.TempDir()
	store := filepath.Join(tmp, "store")
	const rb = "room:backup"
	ckSubj := room.Subjects{}.Checkpoint(rb)
	meta := events.CapsuleMeta{RunID: "run-20261202-backup-0001", CapsuleID: "cap-backup-0001-a", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	lines := entries(t, meta, 31)
	// Checkpoints only on SIGTERM, so their stream seqs are known.
	serve := func() *server { return startKeyed(t, store, key, "--checkpoint-interval", "1h") }
	copyState := func(src string) string {
		t.Helper()
		dst := filepath.Join(t.TempDir(), "state")
		if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
			t.Fatalf("cp -a: %v\n%s", err, out)
		}
		return dst
	}

	srv := serve()
	shipTo(t, srv.url, rb, capsuleOf(t, meta, lines[:20]), 0, 20)
	srv.stop() // C1: size 20 at stream seq 21
	srv = serve()
	b1 := filepath.Join(tmp, "B1")
	if l := runBackup(t, "backup", "--server", srv.url, b1); l.Stream != room.DefaultStream || l.Messages != 21 || l.FirstSeq != 1 || l.LastSeq != 21 {
		t.Fatalf("B1: %+v, want 21 messages, seqs 1 to 21", l)
	}
	shipTo(t, srv.url, rb, capsuleOf(t, meta, lines[:30]), 20, 10)
	srv.stop() // C2: size 30 at stream seq 32

	srv = serve()
	state := filepath.Join(tmp, "S")
	rep, res := ckAudit(t, ckArgs(srv.url, key.id, "audit", "--json", "--state-dir", state)...)
	if res.status != 0 || rep.Totals.Messages != 32 || rep.Totals.Entries != 30 || len(rep.Violations) != 0 {
		t.Fatalf("audit before the backups: exit %d, %+v\n%s", res.status, rep.Totals, res.stderr)
	}
	// A backup with serve running on the store: the store's lock refuses.
	if r := runPub(t, nil, "backup", "--store-dir", store, filepath.Join(tmp, "locked")); r.status != 2 {
		t.Fatalf("backup --store-dir of a served store: exit %d, want 2\n%s%s", r.status, r.stdout, r.stderr)
	}
	srv.stop()
	b2 := filepath.Join(tmp, "B2")
	if l := runBackup(t, "backup", "--store-dir", store, b2); l.Messages != 32 || l.LastSeq != 32 {
		t.Fatalf("B2: %+v, want 32 messages", l)
	}

	t.Run("restore B2", func(t *testing.T) {
		if err := os.RemoveAll(store); err != nil {
			t.Fatal(err)
		}
		if l := runBackup(t, "restore", "--store-dir", store, b2); l.Messages != 32 || l.LastSeq != 32 {
			t.Fatalf("restored %+v, want 32 messages", l)
		}
		r := runPub(t, nil, "restore", "--store-dir", store, b2)
		if r.status != 2 || !strings.Contains(r.stderr, "the stream exists") {
			t.Fatalf("restore over the restored stream: exit %d, want 2 naming the existing stream\n%s", r.status, r.stderr)
		}
		srv := serve()
		rep, res := ckAudit(t, ckArgs(srv.url, key.id, "audit", "--json", "--state-dir", copyState(state))...)
		if res.status != 0 || rep.Totals.Messages != 32 || rep.Totals.Entries != 30 || rep.Totals.ChainsOK != 1 || len(rep.Violations) != 0 {
			t.Fatalf("audit of B2 against C2: exit %d, %+v, violations %v\n%s", res.status, rep.Totals, rep.violations(), res.stderr)
		}
		if f := rep.Checkpoints[rep.facts(t, rb)]; f.Latest == nil || f.Latest.Size != 30 || f.Stored == nil || f.Stored.Size != 30 || !f.StoredConsistent {
			t.Fatalf("checkpoint facts of B2 against C2: %+v", f)
		}
		if l := shipTo(t, srv.url, rb, capsuleOf(t, meta, lines), 30, 1); l.Head.StreamSeq != 33 {
			t.Fatalf("the next entry after the restore at stream seq %d, want 33", l.Head.StreamSeq)
		}
		srv.stop()
	})

	t.Run("restore the older B1", func(t *testing.T) {
		if err := os.RemoveAll(store); err != nil {
			t.Fatal(err)
		}
		if l := runBackup(t, "restore", "--store-dir", store, b1); l.Messages != 21 {
			t.Fatalf("restored %+v, want 21 messages", l)
		}
		srv := serve()
		rep, res := ckAudit(t, ckArgs(srv.url, key.id, "audit", "--json", "--state-dir", copyState(state))...)
		if want := []subWant{{21, "checkpoint_mismatch", ckSubj}}; res.status != 1 || !slices.Equal(rep.violations(), want) {
			t.Fatalf("audit of B1 against C2: exit %d, violations %v; want 1 and %v\n%s%s", res.status, rep.violations(), want, res.stdout, res.stderr)
		}
		if v := rep.Violations[0]; v.Room != rb || !strings.Contains(v.Reason, "rolled back") ||
			!strings.Contains(v.Reason, "verified a checkpoint of size 30") || !strings.Contains(v.Reason, "newest verified checkpoint has size 20") {
			t.Fatalf("reason: %s", v.Reason)
		}
		srv.stop()
	})
}
