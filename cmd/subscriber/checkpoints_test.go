package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/reader"
)

// The attestation and checkpoint commands end to end, in process, against an embedded
// server holding a room written as an attesting publisher writes it.

func invoke(t *testing.T, stdin string, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	var grammar cli
	status = config.Run("subscriber", "", "test", &grammar, args, &out, &errOut, &streams{in: strings.NewReader(stdin), out: &out, err: &errOut})
	return status, out.String(), errOut.String()
}

const cliRoom = "room:cli"

// attestedServer starts a server and writes 6 attested entries of one
// chain (a batch of 5, a checkpoint at 5 signed by pub, a batch of 1) and
// a forged seventh entry. It returns the server URL, the entries and the checkpoint note.
func attestedServer(t *testing.T, pub *events.HostKey) (url string, es []*events.Entry, note []byte, tree *checkpoint.Tree) {
	t.Helper()
	return attestedRoom(t, pub, cliRoom, true)
}

// attestedRoom is attestedServer writing roomID, without the forged
// entry unless forged.
func attestedRoom(t *testing.T, pub *events.HostKey, roomID string, forged bool) (url string, es []*events.Entry, note []byte, tree *checkpoint.Tree) {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	var subj room.Subjects
	ctx := context.Background()
	if _, err := room.EnsureStream(ctx, js, room.StreamConfig("", subj, 1), subj); err != nil {
		t.Fatal(err)
	}
	publish := func(subject string, data []byte, att string) {
		m := nats.NewMsg(subject)
		m.Data = data
		if att != "" {
			m.Header.Set(checkpoint.AttestationHeader, att)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	key := events.ChainKey{RunID: "run-1", CapsuleID: "cap-1"}
	subject := subj.Journal(roomID, key)
	parent := events.ZeroHash
	tree = checkpoint.NewTree()
	var batch []checkpoint.Statement
	for i := range 7 {
		e, err := events.NewEntry(map[string]any{
			"schema": events.EntrySchema, "run_id": key.RunID, "capsule_id": key.CapsuleID, "seq": json.Number(fmt.Sprint(i)),
			"ts": "2026-09-02T00:00:00.000Z", "lineage": "attempt", "kind": "tool.call", "effect_class": "SE0",
			"harness_version": "test/1", "task_family": "slugify", "parent_hash": parent,
			"payload": map[string]any{"tool": "bash", "duration_ms": json.Number("12.5"), "status": "ok"},
		})
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
		parent = e.EntryHash()
		c := checkpoint.ContentHash(e.Canonical())
		if i == 6 {
			if forged {
				publish(subject, e.Canonical(), "") // no attestation
			}
			continue
		}
		tree.Append(checkpoint.LeafHash(roomID, subject, c))
		if i == 5 {
			// A batch of one, as an append of one entry is.
			publish(subject, e.Canonical(), checkpoint.Attest(pub, roomID, subject, checkpoint.JournalPosition(int64(i)), c))
			continue
		}
		batch = append(batch, checkpoint.Statement{Room: roomID, Subject: subject, Position: checkpoint.JournalPosition(int64(i)), Content: c})
		if i == 4 {
			// Entries 0-4: one atomic batch, one signature (the gate's
			// way), stored in order.
			for j, h := range checkpoint.AttestBatch(pub, batch) {
				publish(subject, es[j].Canonical(), h)
			}
			s, err := checkpoint.NewNoteSigner(pub)
			if err != nil {
				t.Fatal(err)
			}
			if note, err = checkpoint.Sign(s, roomID, tree.Size(), tree.Root()); err != nil {
				t.Fatal(err)
			}
			publish(subj.Checkpoint(roomID), note, "")
		}
	}
	return srv.ClientURL(), es, note, tree
}

func TestProveAndVerifyProof(t *testing.T) {
	pub, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := events.GenerateHostKey(rand.Reader)
	url, es, _, _ := attestedServer(t, pub)
	dir := t.TempDir()
	status, stdout, stderr := invoke(t, "", "prove", "--server", url, "--room", cliRoom, "--entry", es[2].EntryHash(), "--trusted-publisher", pub.NodeID())
	if status != config.ExitOK {
		t.Fatalf("prove: status %d\n%s\n%s", status, stdout, stderr)
	}
	if strings.Contains(stderr, "--trusted-host") {
		t.Errorf("prove --entry warns of records it does not read: %s", stderr)
	}
	var p checkpoint.Proof
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatal(err)
	}
	if p.LeafIndex != 2 || p.TreeSize != 5 || p.StreamSeq != 3 || p.Room != cliRoom {
		t.Errorf("proof %+v", p)
	}
	good := filepath.Join(dir, "proof.json")
	if err := os.WriteFile(good, []byte(stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(dir, "tampered.json")
	bad := p
	bad.LeafIndex = 3
	b, _ := json.Marshal(bad)
	if err := os.WriteFile(tampered, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		stdin  string
		args   []string
		status int
		out    string
	}{
		{"valid", "", []string{good, "--trusted-publisher", pub.NodeID()}, config.ExitOK, "(stream seq 3 as reported by the prover, not proven)"},
		{"valid from stdin", stdout, []string{"-", "--trusted-publisher", pub.NodeID()}, config.ExitOK, "is leaf 2 of the checkpoint of size 5 signed by " + pub.NodeID()},
		{"valid JSON", "", []string{good, "--json", "--trusted-publisher", pub.NodeID()}, config.ExitOK, `{"valid":true,"room":"room:cli"`},
		{"tampered", "", []string{tampered, "--trusted-publisher", pub.NodeID()}, config.ExitRefused, "invalid: checkpoint_mismatch: proof does not verify: inclusion of leaf 3 at size 5"},
		{"another key", "", []string{good, "--trusted-publisher", other.NodeID()}, config.ExitRefused, "invalid: checkpoint_mismatch: untrusted publisher: checkpoint signed only by " + pub.NodeID()},
		{"not JSON", "{", []string{"-", "--trusted-publisher", pub.NodeID()}, config.ExitRefused, "invalid: malformed_json: not a proof document: unexpected end of JSON input\n"},
		{"no such file", "", []string{filepath.Join(dir, "nope"), "--trusted-publisher", pub.NodeID()}, config.ExitUsage, ""},
		{"no key", "", []string{good}, config.ExitUsage, ""},
	} {
		status, out, errOut := invoke(t, c.stdin, append([]string{"verify-proof"}, c.args...)...)
		if status != c.status || !strings.Contains(out, c.out) {
			t.Errorf("%s: status %d (want %d)\n%s\n%s", c.name, status, c.status, out, errOut)
		}
	}
	// No proof: not covered (entry 5), forged (entry 6: set aside, said
	// so), not in the room, neither selector.
	for _, c := range []struct {
		name   string
		args   []string
		status int
		err    string
	}{
		{"not covered", []string{"--entry", es[5].EntryHash()}, config.ExitRefused, "not covered by a verified checkpoint"},
		{"forged", []string{"--entry", es[6].EntryHash()}, config.ExitRefused, "subscriber: prove: entry_hash " + es[6].EntryHash() + " in " + cliRoom +
			" is set aside at stream seq 8 (rooms.cli.journal.run-1.cap-1): checkpoint_mismatch: the message has no Roompub-Attestation header"},
		{"not there", []string{"--entry", strings.Repeat("0", 64)}, config.ExitRefused, "subscriber: prove: no such verified message: entry_hash " + strings.Repeat("0", 64) + " in " + cliRoom + ": refused"},
		{"both", []string{"--entry", es[1].EntryHash(), "--ref", "x"}, config.ExitUsage, ""},
		{"neither", nil, config.ExitUsage, ""},
	} {
		status, out, errOut := invoke(t, "", append([]string{"prove", "--server", url, "--room", cliRoom, "--trusted-publisher", pub.NodeID()}, c.args...)...)
		if status != c.status || !strings.Contains(errOut, c.err) {
			t.Errorf("prove %s: status %d (want %d)\n%s\n%s", c.name, status, c.status, out, errOut)
		}
	}
}

func TestAuditCheckpointFlags(t *testing.T) {
	pub, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	url, _, note, tree := attestedServer(t, pub)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	goodNote := filepath.Join(dir, "good.note")
	if err := os.WriteFile(goodNote, note, 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := checkpoint.NewNoteSigner(pub)
	forkedTree := checkpoint.NewTree()
	for i := range 5 {
		forkedTree.Append([32]byte{byte(i)})
	}
	forked, err := checkpoint.Sign(s, cliRoom, 5, forkedTree.Root())
	if err != nil {
		t.Fatal(err)
	}
	forkedNote := filepath.Join(dir, "forked.note")
	if err := os.WriteFile(forkedNote, forked, 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"audit", "--server", url, "--trusted-publisher", pub.NodeID(), "--state-dir", state}

	// The forged entry is refused; the report names the room's facts.
	status, stdout, stderr := invoke(t, "", append(base, "--checkpoint", goodNote, "--json")...)
	if status != config.ExitRefused {
		t.Fatalf("audit: status %d\n%s\n%s", status, stdout, stderr)
	}
	var rep reader.AuditReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != 1 || rep.Violations[0].Code != events.CheckpointMismatch || rep.Violations[0].Seq != 8 {
		t.Errorf("violations %+v", rep.Violations)
	}
	r5, err := tree.RootAt(5)
	if err != nil {
		t.Fatal(err)
	}
	root := fmt.Sprintf("%x", r5)
	if len(rep.Checkpoints) != 1 || rep.Checkpoints[0].Latest.Size != 5 || rep.Checkpoints[0].Latest.Root != root || rep.Checkpoints[0].Tail != 1 ||
		len(rep.Checkpoints[0].External) != 1 || !rep.Attestation.Checked {
		t.Errorf("checkpoints %+v, attestation %+v", rep.Checkpoints, rep.Attestation)
	}
	for _, key := range []string{`"attestation":{"checked":true`, `"admitted":6`, `"covered":5`, `"tail":1`, `"attestations_verified":1`, `"batches_verified":1`, `"admitted_by_checkpoint":5`, `"latest":{"size":5,"root":"` + root} {
		if !strings.Contains(stdout, key) {
			t.Errorf("report lacks %s: %s", key, stdout)
		}
	}
	c, err := (&reader.CheckpointState{Dir: state}).Load(cliRoom)
	if err != nil || c == nil || c.Size != 5 {
		t.Errorf("state: %+v, %v", c, err)
	}

	// Text output.
	status, stdout, _ = invoke(t, "", base...)
	for _, line := range []string{
		"attestations and checkpoints: checked; trusted publishers " + pub.NodeID(),
		"checkpoints: 1 verified, 0 refused; 6 admitted messages: 5 covered by the latest checkpoint, 1 after it (no checkpoint covers them: their attestations were verified, one signature per batch)",
		"latest checkpoint: size 5, root " + root + ", signed by " + pub.NodeID() + ", stream seq 6",
		"signatures: 1 attestations verified (1 batch signatures), 5 messages admitted by a covering checkpoint",
		"stored checkpoint (state dir): size 5, root " + root + ": consistent",
		"checkpoint_mismatch at stream seq 8 (rooms.cli.journal.run-1.cap-1): the message has no Roompub-Attestation header",
	} {
		if !strings.Contains(stdout, line) {
			t.Errorf("text report lacks %q:\n%s", line, stdout)
		}
	}
	if status != config.ExitRefused {
		t.Errorf("status %d", status)
	}

	// A forked note from elsewhere is refused.
	status, stdout, _ = invoke(t, "", append(base, "--checkpoint", forkedNote)...)
	if status != config.ExitRefused || !strings.Contains(stdout, "checkpoint "+forkedNote+" (size 5): forked: the room as read has root "+root) {
		t.Errorf("forked note: status %d\n%s", status, stdout)
	}
	// A file that is no checkpoint the keys verify, or of a room not
	// audited, is the operator's error: refused before the stream is read,
	// naming the file, and counted nowhere.
	garbage := filepath.Join(dir, "garbage.note")
	if err := os.WriteFile(garbage, []byte("not a note\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--checkpoint", garbage}, "subscriber: invalid configuration: --checkpoint: not a usable checkpoint from elsewhere: " + garbage + ": bad checkpoint"},
		{[]string{"--checkpoint", goodNote, "--room", "room:other"}, "subscriber: invalid configuration: --checkpoint: not a usable checkpoint from elsewhere: " + goodNote + " (size 5): its room " + cliRoom + " is not among the rooms audited (room:other)"},
	} {
		status, stdout, stderr = invoke(t, "", append(base, c.args...)...)
		if status != config.ExitUsage || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("audit %v: status %d, stderr %q, want %q; stdout %q", c.args, status, stderr, c.want, stdout)
		}
	}
	// Without keys: not checked, said so; --checkpoint needs keys.
	status, stdout, _ = invoke(t, "", "audit", "--server", url)
	if status != config.ExitOK || !strings.Contains(stdout, "attestations and checkpoints: not checked (no trusted publisher keys (--trusted-publisher))") {
		t.Errorf("untrusting audit: status %d\n%s", status, stdout)
	}
	if status, _, stderr = invoke(t, "", "audit", "--server", url, "--checkpoint", goodNote); status != config.ExitUsage || !strings.Contains(stderr, "--checkpoint needs --trusted-publisher") {
		t.Errorf("--checkpoint without keys: status %d %s", status, stderr)
	}
}

// TestAuditStateOfAnotherDeployment: two deployments audited with one
// --state-dir, each trusting its own publisher key. The first audit keeps
// its room's checkpoint; the audit of the second, clean, deployment ignores
// it (another key signed it), says so on stderr and in the report, exits
// 0 and leaves it in place. Trusting both keys, the first deployment's
// room is absent from the second's stream: rolled back.
func TestAuditStateOfAnotherDeployment(t *testing.T) {
	var keys [2]*events.HostKey
	for i := range keys {
		k, err := events.GenerateHostKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = k
	}
	urlA, _, _, _ := attestedRoom(t, keys[0], "room:tt", false)
	urlB, _, _, _ := attestedRoom(t, keys[1], "room:b", false)
	state := filepath.Join(t.TempDir(), "state")
	audit := func(url string, json bool, keys ...*events.HostKey) (int, string, string) {
		args := []string{"audit", "--server", url, "--state-dir", state}
		if json {
			args = append(args, "--json")
		}
		for _, k := range keys {
			args = append(args, "--trusted-publisher", k.NodeID())
		}
		return invoke(t, "", args...)
	}
	if status, stdout, stderr := audit(urlA, false, keys[0]); status != config.ExitOK || strings.Contains(stderr, "ignored") {
		t.Fatalf("audit of A: status %d\n%s\n%s", status, stdout, stderr)
	}
	kept, err := os.ReadDir(state)
	if err != nil || len(kept) != 1 {
		t.Fatalf("state after A: %v, %v", kept, err)
	}
	keptA, _ := os.ReadFile(filepath.Join(state, kept[0].Name()))

	status, stdout, stderr := audit(urlB, false, keys[1])
	if status != config.ExitOK || strings.Contains(stdout, "checkpoint_mismatch") ||
		!strings.Contains(stdout, "state dir: 1 kept checkpoint(s) ignored (signed by a key not in --trusted-publisher") ||
		!strings.Contains(stdout, "another deployment's state): room:tt\n") ||
		!strings.Contains(stderr, "subscriber: audit: "+state+": 1 kept checkpoint(s) ignored and left in place") ||
		!strings.Contains(stderr, "so no rollback of room:tt is found against them") {
		t.Errorf("audit of B beside A's state: status %d\n%s\n%s", status, stdout, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(state, kept[0].Name())); err != nil || !bytes.Equal(b, keptA) {
		t.Errorf("A's kept checkpoint after B's audit: %v", err)
	}
	status, stdout, _ = audit(urlB, true, keys[1])
	var rep reader.AuditReport
	if err := json.Unmarshal([]byte(stdout), &rep); status != config.ExitOK || err != nil || rep.Attestation.StateIgnored != 1 || !strings.Contains(stdout, `"state_ignored":1,"state_ignored_rooms":["room:tt"]`) {
		t.Errorf("json audit of B: status %d, %v\n%s", status, err, stdout)
	}

	// Trusting A's key too, A's kept checkpoint is this reader's: its room
	// is not on B's stream.
	status, stdout, _ = audit(urlB, false, keys[1], keys[0])
	if status != config.ExitRefused || !strings.Contains(stdout, "checkpoint_mismatch at stream seq 0 (rooms.tt.checkpoint): rolled back or forked: this reader verified a checkpoint of size 5") {
		t.Errorf("audit of B trusting A's key: status %d\n%s", status, stdout)
	}
}

// TestReadFlag: audit, evidence and prove take --read; the audit's report
// says how it read the stream, and both paths give the same verdicts.
func TestReadFlag(t *testing.T) {
	pub, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	url, es, _, _ := attestedServer(t, pub)
	base := []string{"audit", "--server", url, "--trusted-publisher", pub.NodeID(), "--json"}
	var reports []string
	for _, c := range []struct{ flag, by string }{{"", reader.ReadByConsumer}, {"--read=auto", reader.ReadByConsumer}, {"--read=consumer", reader.ReadByConsumer}, {"--read=direct", reader.ReadByDirect}} {
		args := append(slices.Clip(base), "--state-dir", t.TempDir()) // each its own: nothing stored before
		if c.flag != "" {
			args = append(args, c.flag)
		}
		status, stdout, stderr := invoke(t, "", args...)
		var rep reader.AuditReport
		if err := json.Unmarshal([]byte(stdout), &rep); status != config.ExitRefused || err != nil {
			t.Fatalf("audit %s: status %d, %v\n%s\n%s", c.flag, status, err, stdout, stderr)
		}
		if rep.ReadBy != c.by || !strings.Contains(stdout, `"read_by":"`+c.by+`"`) {
			t.Errorf("audit %s: read by %q", c.flag, rep.ReadBy)
		}
		if len(rep.Violations) != 1 || rep.Violations[0].Seq != 8 || rep.Totals.Entries != 6 {
			t.Errorf("audit %s: totals %+v, violations %v", c.flag, rep.Totals, rep.Violations)
		}
		rep.ReadBy, rep.ReadWhy = "", ""
		b, _ := json.Marshal(rep)
		reports = append(reports, string(b))
	}
	for _, r := range reports[1:] {
		if r != reports[0] {
			t.Errorf("reports differ:\n%s\n%s", r, reports[0])
		}
	}
	status, stdout, _ := invoke(t, "", "audit", "--server", url, "--trusted-publisher", pub.NodeID(), "--state-dir", t.TempDir(), "--read", "direct")
	if status != config.ExitRefused || !strings.Contains(stdout, "  read by direct_get: asked for (ReadDirect: subscriber --read direct, or --read auto as a user named by --user, --nkey or --creds)\n") {
		t.Errorf("text audit --read direct: status %d\n%s", status, stdout)
	}
	if status, _, stderr := invoke(t, "", "audit", "--server", url, "--read", "sideways"); status != config.ExitUsage || !strings.Contains(stderr, "--read") {
		t.Errorf("--read sideways: status %d, %s", status, stderr)
	}
	if status, stdout, stderr := invoke(t, "", "prove", "--server", url, "--room", cliRoom, "--entry", es[2].EntryHash(), "--trusted-publisher", pub.NodeID(), "--read", "direct"); status != config.ExitOK || !strings.Contains(stdout, `"leaf_index":2`) {
		t.Errorf("prove --read direct: status %d\n%s\n%s", status, stdout, stderr)
	}
	if status, _, stderr := invoke(t, "", "evidence", "--server", url, "--instance", "environment:x", "--read", "direct"); status != config.ExitOK {
		t.Errorf("evidence --read direct: status %d\n%s", status, stderr)
	}
}
