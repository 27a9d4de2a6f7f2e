package integration

// Signed room checkpoints end to end: the real `publisher serve
// --publisher-key` attests what its gate appends and writes checkpoints;
// the real `subscriber follow`, `audit`, `prove` and `verify-proof` check
// them. A writer with publish rights but without the publisher's key is
// played by raw nats.go publishes; a restored backup by `cp -a` of the
// store directory.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// publisherKey is a key made by `publisher keygen`: its file, the node id
// keygen printed, and the strings that would betray the private key if
// they appeared in any output.
type publisherKey struct {
	file, id string
	secrets  []string
}

func newPublisherKey(t *testing.T) publisherKey {
	t.Helper()
	file := filepath.Join(t.TempDir(), "publisher.pem")
	r := runPub(t, nil, "keygen", "--out", file)
	if r.status != 0 {
		t.Fatalf("keygen: exit %d: %s", r.status, r.stderr)
	}
	k := publisherKey{file: file, id: strings.TrimSpace(r.stdout)}
	if _, err := events.ParseNodeID(k.id); err != nil {
		t.Fatalf("keygen printed %q: %v", r.stdout, err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" || len(block.Bytes) < 32 {
		t.Fatalf("keygen wrote %q", data)
	}
	// The PEM body, line by line and whole; the Ed25519 seed (the last 32
	// bytes of the PKCS #8 DER) in the encodings a careless log would use,
	// and the signed-note private key form (0x01 then the seed).
	body := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(string(data)), "-----BEGIN PRIVATE KEY-----"), "-----END PRIVATE KEY-----"))
	seed := block.Bytes[len(block.Bytes)-32:]
	k.secrets = append(strings.Fields(body), strings.ReplaceAll(body, "\n", ""),
		hex.EncodeToString(seed), base64.StdEncoding.EncodeToString(seed), base64.RawURLEncoding.EncodeToString(seed),
		base64.RawStdEncoding.EncodeToString(seed), base64.StdEncoding.EncodeToString(append([]byte{1}, seed...)), "PRIVATE+KEY")
	// The check can fail: the key file itself and its seed betray it.
	if k.leaked(string(data)) == "" || k.leaked("seed "+hex.EncodeToString(seed)+".") == "" {
		t.Fatal("the key's secrets are not found in the key file")
	}
	return k
}

// leaked returns the first of the key's secrets that text holds, or "".
func (k publisherKey) leaked(text string) string {
	for _, s := range k.secrets {
		if strings.Contains(text, s) {
			return s
		}
	}
	return ""
}

// noKeyMaterial fails the test when any of texts holds the key's secret
// in one of its forms.
func (k publisherKey) noKeyMaterial(t *testing.T, what string, texts ...string) {
	t.Helper()
	for _, text := range texts {
		if s := k.leaked(text); s != "" {
			t.Errorf("%s prints the private key (%.12s…):\n%s", what, s, text)
		}
	}
}

// startKeyed starts `publisher serve` with --publisher-key on a free port
// with its store in store (stdout and stderr both in s.log), waits until
// it serves, and stops it (SIGTERM, exit 0 expected) when the test ends.
func startKeyed(t *testing.T, store string, key publisherKey, extra ...string) *server {
	t.Helper()
	return startServe(t, store, true, append([]string{"--listen", "127.0.0.1:-1", "--store-dir", store, "--trusted-host", trustedHost,
		"--publisher-key", key.file}, extra...)...)
}

// unmarkStream has serve make the room stream in store, then takes its
// record markers off, as a stream made before them: records are then
// stored one message each.
func unmarkStream(t *testing.T, store string) {
	t.Helper()
	srv := startServer(t, store)
	in := inspect(t, srv.url)
	js, err := jetstream.New(in.nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := in.stream.CachedInfo().Config
	delete(cfg.Metadata, room.MetadataRecordMarkers)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := js.UpdateStream(ctx, cfg); err != nil || room.RecordMarkers(st.CachedInfo().Config) {
		t.Fatalf("take the record markers off the stream: %v", err)
	}
	srv.stop()
}

// ckArgs are a subscriber command's connection and trust flags: the
// reference host (for the sample records) and the publisher key.
func ckArgs(url, publisherID, cmd string, more ...string) []string {
	return append([]string{cmd, "--server", url, "--trusted-host", trustedHost, "--trusted-publisher", publisherID}, more...)
}

// ckFact is a checkpoint as the audit report names it.
type ckFact struct {
	Size   uint64 `json:"size"`
	Root   string `json:"root"`
	Signer string `json:"signer"`
	Seq    uint64 `json:"stream_seq"`
}

// ckReport is `subscriber audit --json` with its attestation and checkpoint facts.
type ckReport struct {
	subAuditReport
	Notices []struct {
		Verified bool   `json:"verified"`
		Signer   string `json:"signer"`
		Notice   struct {
			Chains []struct {
				Loss struct {
					Count int64 `json:"count"`
				} `json:"loss"`
			} `json:"chains"`
			Checkpoint *struct {
				Size uint64 `json:"size"`
			} `json:"checkpoint"`
		} `json:"notice"`
	} `json:"notices"`
	Attestation struct {
		Checked           bool     `json:"checked"`
		Why               string   `json:"why"`
		TrustedPublishers []string `json:"trusted_publishers"`
	} `json:"attestation"`
	Checkpoints []struct {
		Room                 string   `json:"room"`
		Admitted             uint64   `json:"admitted"`
		Verified             uint64   `json:"checkpoints_verified"`
		Refused              uint64   `json:"checkpoints_refused"`
		Latest               *ckFact  `json:"latest"`
		Covered              uint64   `json:"covered"`
		Tail                 uint64   `json:"tail"`
		AttestationsVerified uint64   `json:"attestations_verified"`
		AdmittedByCheckpoint uint64   `json:"admitted_by_checkpoint"`
		Stored               *ckFact  `json:"stored"`
		StoredConsistent     bool     `json:"stored_consistent"`
		External             []ckFact `json:"external"`
		RoomRefused          string   `json:"refused"`
	} `json:"checkpoints"`
}

// ckAudit runs `subscriber audit --json` and decodes its one line.
func ckAudit(t *testing.T, args ...string) (ckReport, result) {
	t.Helper()
	res := subRun(t, args...)
	var rep ckReport
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || strings.Count(res.stdout, "\n") != 1 {
		t.Fatalf("subscriber %v: exit %d, not one JSON line: %v\n%s%s", args, res.status, err, res.stdout, res.stderr)
	}
	return rep, res
}

// violations lists the report's set-aside messages.
func (r ckReport) violations() []subWant {
	var out []subWant
	for _, v := range r.Violations {
		out = append(out, subWant{v.Seq, v.Code, v.Subject})
	}
	return out
}

// facts returns the checkpoint facts of roomID (failing when there are
// none).
func (r ckReport) facts(t *testing.T, roomID string) int {
	t.Helper()
	for i, f := range r.Checkpoints {
		if f.Room == roomID {
			return i
		}
	}
	t.Fatalf("no checkpoint facts for %s in %+v", roomID, r.Checkpoints)
	return -1
}

// readRoom returns every message on the room's subjects (checkpoints
// included), in stream order, with headers.
func (in *inspector) readRoom(roomID string) []roomMsg {
	in.t.Helper()
	filter := strings.TrimSuffix(room.Subjects{}.Checkpoint(roomID), ".checkpoint") + ".>"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := in.stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		in.t.Fatal(err)
	}
	var want uint64
	for _, n := range info.State.Subjects {
		want += n
	}
	return in.fetchAll(filter, int(want))
}

// expectedRoot is the RFC 6962 root over the room's messages except the
// checkpoints and the stream seqs in skip: the tree an honest publisher
// signs, computed here from the stored bytes with the leaf rule.
func expectedRoot(roomID string, msgs []roomMsg, skip ...uint64) (size uint64, rootHex string) {
	tree := checkpoint.NewTree()
	ck := room.Subjects{}.Checkpoint(roomID)
	for _, m := range msgs {
		if m.subject == ck || slices.Contains(skip, m.seq) {
			continue
		}
		tree.Append(checkpoint.LeafHash(roomID, m.subject, checkpoint.ContentHash(m.data)))
	}
	r := tree.Root()
	return tree.Size(), hex.EncodeToString(r[:])
}

// waitCheckpoint waits until the room's newest checkpoint on the stream has
// the given size and returns its stream seq and its note.
func (in *inspector) waitCheckpoint(roomID string, size uint64, within time.Duration) (uint64, []byte) {
	in.t.Helper()
	subject := room.Subjects{}.Checkpoint(roomID)
	deadline := time.Now().Add(within)
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := in.stream.GetLastMsgForSubject(ctx, subject)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			last = "no checkpoint"
		case err != nil:
			in.t.Fatal(err)
		default:
			c, err := checkpoint.ParseUnverified(m.Data)
			if err != nil {
				in.t.Fatalf("checkpoint at stream seq %d: %v\n%s", m.Sequence, err, m.Data)
			}
			if c.Size == size {
				return m.Sequence, m.Data
			}
			last = fmt.Sprintf("size %d at stream seq %d", c.Size, m.Sequence)
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("%s: newest checkpoint %s after %s, want size %d", roomID, last, within, size)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// capsuleOf writes a capsule directory holding lines and returns it.
func capsuleOf(t *testing.T, meta events.CapsuleMeta, lines [][]byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), meta.CapsuleID)
	writeCapsule(t, dir, meta, joinLines(lines))
	return dir
}

// shipTo ships a capsule directory into roomID and checks the counts.
func shipTo(t *testing.T, url, roomID, dir string, alreadyStored, stored int) shipLine {
	t.Helper()
	r := runPub(t, nil, "journal", "--json", "--server", url, "--room", roomID, dir)
	if r.status != 0 {
		t.Fatalf("journal %s: exit %d\n%s%s", dir, r.status, r.stdout, r.stderr)
	}
	l := oneShipLine(t, r)
	if l.AlreadyStored != alreadyStored || l.Stored != stored || l.Duplicates != 0 {
		t.Fatalf("journal %s: %d already stored, %d stored, %d duplicates; want %d and %d", dir, l.AlreadyStored, l.Stored, l.Duplicates, alreadyStored, stored)
	}
	return l
}

// forkOf returns an entry at e's chain position with another payload: well
// formed and hash-chained to e's parent.
func forkOf(t *testing.T, line []byte) []byte {
	t.Helper()
	e, err := events.ParseEntry(line)
	if err != nil {
		t.Fatal(err)
	}
	return subForkOf(t, e).Canonical()
}

// TestCheckpointForgedContinuation: a writer with publish rights but
// without the publisher's key appends the chain's true next entry (well
// formed, correctly hash-chained) straight into the stream, and then a fork
// of it carrying the attestation header copied from the entry before.
// Neither is admitted by the publisher's checkpoints (the next checkpoint's
// root is the tree without them), `subscriber audit` refuses both as
// checkpoint_mismatch at their stream seqs (exit 1), and `subscriber
// follow` never serves them. Without --trusted-publisher the hash chain
// alone takes the forged continuation for a sound entry.
func TestCheckpointForgedContinuation(t *testing.T) {
	t.Parallel()
	key := newPublisherKey(t)
	const forge = "room:forge"
	srv := startKeyed(t, t.TempDir(), key, "--checkpoint-every", "5", "--checkpoint-interval", "500ms", "--log-level", "debug")
	in := inspect(t, srv.url)
	js, err := jetstream.New(in.nc)
	if err != nil {
		t.Fatal(err)
	}
	var outputs []string
	keep := func(r result) result { outputs = append(outputs, r.stdout, r.stderr); return r }

	meta := events.CapsuleMeta{RunID: "run-20260910-forge-0001", CapsuleID: "cap-forge-0001-a", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	lines := entries(t, meta, 13)
	subj := journalSubject("forge", meta.RunID, meta.CapsuleID)
	if l := shipTo(t, srv.url, forge, capsuleOf(t, meta, lines[:12]), 0, 12); l.Head.StreamSeq != 12 {
		t.Fatalf("head at stream seq %d, want 12", l.Head.StreamSeq)
	}
	in.waitCheckpoint(forge, 12, 10*time.Second)

	// Forgery 1: the true next entry, no attestation.
	ack, err := js.Publish(context.Background(), subj, lines[12])
	if err != nil {
		t.Fatal(err)
	}
	forged1 := ack.Sequence
	// Forgery 2: a fork of it with entry 11's attestation header copied.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prev, err := in.stream.GetMsg(ctx, 12)
	if err != nil {
		t.Fatal(err)
	}
	att := prev.Header.Get(checkpoint.AttestationHeader)
	if !bytes.Equal(prev.Data, lines[11]) || !strings.HasPrefix(att, key.id+" ") {
		t.Fatalf("stream seq 12 is not entry 11 attested by %s: header %q\n%s", key.id, att, prev.Data)
	}
	fork := forkOf(t, lines[12])
	msg := nats.NewMsg(subj)
	msg.Data, msg.Header = fork, nats.Header{checkpoint.AttestationHeader: []string{att}}
	if ack, err = js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	forged2 := ack.Sequence

	// Honest traffic after the forgeries: a second capsule in the same room;
	// the publisher's next checkpoint covers 12 + 14 leaves, not the forged.
	csv := shipTo(t, srv.url, forge, filepath.Join(root, csvDir), 0, 14)
	ckSeq, _ := in.waitCheckpoint(forge, 26, 10*time.Second)
	msgs := in.readRoom(forge)
	size, ckRoot := expectedRoot(forge, msgs, forged1, forged2)
	if size != 26 {
		t.Fatalf("expected tree of %d leaves", size)
	}
	// What the gate appended, each message attested: the stream seqs follow
	// must serve.
	var served []uint64
	csvSubj := journalSubject("forge", csv.Chain.RunID, csv.Chain.CapsuleID)
	for _, m := range msgs {
		if (m.subject == subj || m.subject == csvSubj) && m.seq != forged1 && m.seq != forged2 {
			served = append(served, m.seq)
			if m.header.Get(checkpoint.AttestationHeader) == "" {
				t.Errorf("the gate's entry at stream seq %d carries no attestation", m.seq)
			}
		}
	}
	if len(served) != 26 || !slices.Equal(served[:12], subSeqs(1, 12)) || served[25] != csv.Head.StreamSeq {
		t.Fatalf("the gate's entries at stream seqs %v", served)
	}

	// audit: exactly the two forgeries, as checkpoint_mismatch.
	rep, res := ckAudit(t, ckArgs(srv.url, key.id, "audit", "--json", "--room", forge, "--state-dir", t.TempDir())...)
	keep(res)
	want := []subWant{{forged1, "checkpoint_mismatch", subj}, {forged2, "checkpoint_mismatch", subj}}
	if res.status != 1 || !slices.Equal(rep.violations(), want) {
		t.Fatalf("audit: exit %d, violations %v; want 1 and %v\n%s", res.status, rep.violations(), want, res.stderr)
	}
	for _, v := range rep.Violations {
		if v.Room != forge || v.Reason == "" || len(v.Problems) != 1 || v.Problems[0].Code != "checkpoint_mismatch" || v.Problems[0].At.Seq != v.Seq {
			t.Errorf("violation %+v", v)
		}
	}
	if !strings.Contains(rep.Violations[0].Reason, "no Roompub-Attestation header") {
		t.Errorf("forgery 1's reason: %s", rep.Violations[0].Reason)
	}
	// Entry 11's header names its place in the gate's atomic batch of
	// entries 0-11: "11/12"; on the fork it follows no message 10 of
	// that batch.
	if r := rep.Violations[1].Reason; !strings.Contains(r, "incomplete batch: message 11 of a batch of 12 by "+key.id+": the message before it on the stream is not message 10 of that batch") {
		t.Errorf("forgery 2's reason: %s", r)
	}
	f := rep.Checkpoints[rep.facts(t, forge)]
	if f.Admitted != 26 || f.Latest == nil || f.Latest.Size != 26 || f.Latest.Root != ckRoot || f.Latest.Seq != ckSeq ||
		f.Latest.Signer != key.id || f.Covered != 26 || f.Tail != 0 || f.Refused != 0 || f.RoomRefused != "" {
		t.Errorf("checkpoint facts %+v (latest %+v); want 26 admitted, latest size 26 root %s at stream seq %d", f, f.Latest, ckRoot, ckSeq)
	}
	if tot := rep.Totals; tot.SetAside != 2 || tot.Entries != 26 || tot.ByCode["checkpoint_mismatch"] != 2 || len(tot.ByCode) != 1 {
		t.Errorf("totals %+v", tot)
	}
	var chains []string
	for _, c := range rep.Chains {
		chains = append(chains, fmt.Sprintf("%s %d %s", c.Chain.RunID, c.Entries, c.Verdict))
	}
	if wantChains := []string{"run-20260903-csv-dedupe-0009 14 ok", meta.RunID + " 12 ok"}; !slices.Equal(chains, wantChains) {
		t.Errorf("chains %q, want %q", chains, wantChains)
	}
	// The text report says the same.
	res = keep(subRun(t, ckArgs(srv.url, key.id, "audit", "--room", forge, "--state-dir", t.TempDir())...))
	for _, w := range []string{
		fmt.Sprintf("checkpoint_mismatch at stream seq %d (%s): ", forged1, subj),
		fmt.Sprintf("checkpoint_mismatch at stream seq %d (%s): ", forged2, subj),
		fmt.Sprintf("latest checkpoint: size 26, root %s, signed by %s, stream seq %d\n", ckRoot, key.id, ckSeq),
		"REFUSED: ",
	} {
		if !strings.Contains(res.stdout, w) {
			t.Errorf("text audit lacks %q:\n%s", w, res.stdout)
		}
	}
	if res.status != 1 {
		t.Errorf("text audit: exit %d", res.status)
	}

	// Without the publisher's key the chain cannot tell: forgery 1 is the
	// chain's sound entry 12, and only forgery 2 is refused, as a fork.
	var plain subAuditReport
	res = keep(subRun(t, "audit", "--json", "--server", srv.url, "--trusted-host", trustedHost, "--room", forge))
	if err := json.Unmarshal([]byte(res.stdout), &plain); err != nil || res.status != 1 || len(plain.Violations) != 1 ||
		plain.Violations[0].Seq != forged2 || plain.Violations[0].Code != "fork" {
		t.Errorf("audit without --trusted-publisher: exit %d %v\n%s", res.status, err, res.stdout)
	}

	// follow: serves the 26 admitted messages, sets the forgeries aside.
	state := t.TempDir()
	fl := subStartFollow(t, ckArgs(srv.url, key.id, "follow", "--room", forge, "--durable", "solver-1", "--state-dir", state), nil)
	qpath := filepath.Join(state, "solver-1.set-aside.ndjson")
	fl.waitFor(t, "every message", func() bool {
		q, _ := os.ReadFile(qpath)
		return strings.Count(fl.stdout.String(), "\n") >= 26 && bytes.Count(q, []byte("\n")) >= 2
	})
	time.Sleep(300 * time.Millisecond) // nothing more may come
	fl.stop(t)
	outputs = append(outputs, fl.stdout.String(), fl.stderr.String())
	evs := subEvents(t, fl.stdout.String())
	if got := subEventSeqs(evs); !slices.Equal(got, served) {
		t.Errorf("follow served stream seqs %v, want %v", got, served)
	}
	if asides := setAsides(t, qpath); !slices.Equal(asides, want) {
		t.Errorf("follow set aside %v, want %v", asides, want)
	}
	for _, w := range want {
		if line := fmt.Sprintf("set aside: checkpoint_mismatch at stream seq %d (%s): ", w.Seq, w.Subject); !strings.Contains(fl.stderr.String(), line) {
			t.Errorf("follow's stderr lacks %q:\n%s", line, fl.stderr)
		}
	}

	srv.stop()
	// The debug log names the key by its node id and never shows it.
	if !strings.Contains(srv.log.String(), key.id) {
		t.Errorf("serve's log never names the publisher key %s", key.id)
	}
	key.noKeyMaterial(t, "publisher serve", srv.log.String())
	key.noKeyMaterial(t, "subscriber", outputs...)
}

// TestCheckpointRollback: a store directory restored from an older copy is
// caught. serve on A, ship 20 entries, SIGTERM (final checkpoint, size 20),
// copy A; serve on A again, ship 15 more, SIGTERM (size 35); an audit with
// --state-dir keeps size 35. Served from the older copy, the room is
// refused as rolled back by that reader, and by a fresh reader given the
// newer checkpoint with --checkpoint; the older copy grown past 35 with
// other entries is refused as forked.
func TestCheckpointRollback(t *testing.T) {
	t.Parallel()
	key := newPublisherKey(t)
	const rb = "room:rollback"
	ckSubj := room.Subjects{}.Checkpoint(rb)
	tmp := t.TempDir()
	storeA, older := filepath.Join(tmp, "A"), filepath.Join(tmp, "A-older")
	var outputs []string
	keep := func(r result) result { outputs = append(outputs, r.stdout, r.stderr); return r }
	// Checkpoints only on SIGTERM, so their stream seqs are known.
	var servers []*server
	serve := func(store string, extra ...string) *server {
		s := startKeyed(t, store, key, append([]string{"--checkpoint-interval", "1h"}, extra...)...)
		servers = append(servers, s)
		return s
	}
	meta := events.CapsuleMeta{RunID: "run-20260910-rollback-0002", CapsuleID: "cap-rollback-0002-a", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	lines := entries(t, meta, 35)

	srv := serve(storeA)
	shipTo(t, srv.url, rb, capsuleOf(t, meta, lines[:20]), 0, 20)
	srv.stop() // final checkpoint: size 20 at stream seq 21
	if out, err := exec.Command("cp", "-a", storeA, older).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	srv = serve(storeA)
	if l := shipTo(t, srv.url, rb, capsuleOf(t, meta, lines), 20, 15); l.Head.StreamSeq != 36 {
		t.Fatalf("head at stream seq %d, want 36", l.Head.StreamSeq)
	}
	srv.stop() // size 35 at stream seq 37

	srv = serve(storeA)
	in := inspect(t, srv.url)
	ckSeq, newer := in.waitCheckpoint(rb, 35, 5*time.Second)
	msgs := in.readRoom(rb)
	var ckSeqs []uint64
	for _, m := range msgs {
		if m.subject == ckSubj {
			ckSeqs = append(ckSeqs, m.seq)
		}
	}
	if ckSeq != 37 || !slices.Equal(ckSeqs, []uint64{21, 37}) || len(msgs) != 37 {
		t.Fatalf("checkpoints at stream seqs %v (newest %d) of %d messages; want 21 and 37 of 37", ckSeqs, ckSeq, len(msgs))
	}
	_, root35 := expectedRoot(rb, msgs)
	_, root20 := expectedRoot(rb, msgs[:20])
	newerFile := filepath.Join(tmp, "newer.note")
	if err := os.WriteFile(newerFile, newer, 0o644); err != nil {
		t.Fatal(err)
	}

	// The reader with state dir S verifies and keeps size 35.
	state := filepath.Join(tmp, "S")
	rep, res := ckAudit(t, ckArgs(srv.url, key.id, "audit", "--json", "--state-dir", state)...)
	keep(res)
	f := rep.Checkpoints[rep.facts(t, rb)]
	if res.status != 0 || len(rep.Violations) != 0 || f.Verified != 2 || f.Latest == nil || f.Latest.Size != 35 || f.Latest.Root != root35 || f.Latest.Seq != 37 || f.Stored != nil {
		t.Fatalf("audit of A: exit %d, violations %v, facts %+v\n%s", res.status, rep.Violations, f, res.stderr)
	}
	expectState(t, state, rb, 35, root35)
	// A fresh reader with the newer checkpoint from elsewhere: consistent.
	rep, res = ckAudit(t, ckArgs(srv.url, key.id, "audit", "--json", "--state-dir", t.TempDir(), "--checkpoint", newerFile)...)
	keep(res)
	if f := rep.Checkpoints[rep.facts(t, rb)]; res.status != 0 || len(f.External) != 1 || f.External[0].Size != 35 || f.External[0].Root != root35 {
		t.Errorf("audit of A --checkpoint: exit %d, facts %+v\n%s", res.status, f, res.stdout)
	}
	srv.stop()

	// The older copy: its newest checkpoint has size 20.
	srv = serve(older, "--checkpoint-every", "16")
	for range 2 { // and the refusal does not wear off: the state keeps 35
		rep, res = ckAudit(t, ckArgs(srv.url, key.id, "audit", "--json", "--state-dir", state)...)
		keep(res)
		if want := []subWant{{21, "checkpoint_mismatch", ckSubj}}; res.status != 1 || !slices.Equal(rep.violations(), want) {
			t.Fatalf("audit of the older copy: exit %d, violations %v; want 1 and %v\n%s%s", res.status, rep.violations(), want, res.stdout, res.stderr)
		}
		v := rep.Violations[0]
		if v.Room != rb || !strings.Contains(v.Reason, "rolled back") ||
			!strings.Contains(v.Reason, fmt.Sprintf("verified a checkpoint of size 35 (root %s) before", root35)) ||
			!strings.Contains(v.Reason, "newest verified checkpoint has size 20") {
			t.Errorf("reason: %s", v.Reason)
		}
		f = rep.Checkpoints[rep.facts(t, rb)]
		if f.Latest == nil || f.Latest.Size != 20 || f.Latest.Root != root20 || f.Latest.Seq != 21 || f.Stored == nil || f.Stored.Size != 35 ||
			f.StoredConsistent || f.RoomRefused == "" {
			t.Errorf("facts %+v (latest %+v, stored %+v)", f, f.Latest, f.Stored)
		}
		expectState(t, state, rb, 35, root35)
	}
	res = keep(subRun(t, ckArgs(srv.url, key.id, "audit", "--state-dir", state)...))
	if res.status != 1 || !strings.Contains(res.stdout, "  room refused: ") || !strings.Contains(res.stdout, "stored checkpoint (state dir): size 35, root "+root35+": NOT consistent") {
		t.Errorf("text audit of the older copy: exit %d\n%s", res.status, res.stdout)
	}

	// follow with the same state: the room is refused at once (stream seq
	// 0: the room, not a message), then every message of it; nothing is
	// served.
	fl := subStartFollow(t, ckArgs(srv.url, key.id, "follow", "--room", rb, "--durable", "solver-rb", "--state-dir", state), nil)
	qpath := filepath.Join(state, "solver-rb.set-aside.ndjson")
	fl.waitFor(t, "every message set aside", func() bool {
		q, _ := os.ReadFile(qpath)
		return bytes.Count(q, []byte("\n")) >= 22
	})
	time.Sleep(300 * time.Millisecond) // nothing more may come
	fl.stop(t)
	outputs = append(outputs, fl.stdout.String(), fl.stderr.String())
	wantAside := []subWant{{0, "checkpoint_mismatch", ckSubj}}
	for seq := uint64(1); seq <= 20; seq++ {
		wantAside = append(wantAside, subWant{seq, "checkpoint_mismatch", journalSubject("rollback", meta.RunID, meta.CapsuleID)})
	}
	wantAside = append(wantAside, subWant{21, "checkpoint_mismatch", ckSubj})
	if got := setAsides(t, qpath); fl.stdout.String() != "" || !slices.Equal(got, wantAside) {
		t.Errorf("follow of the older copy served %q and set aside %v; want nothing and %v", fl.stdout, got, wantAside)
	}
	if want := "set aside: checkpoint_mismatch at stream seq 0 (" + ckSubj + "): rolled back or forked: this reader verified a checkpoint of size 35 (root " +
		root35 + ") before; the newest on the stream has size 20 (root " + root20 + ", stream seq 21)\n"; !strings.Contains(fl.stderr.String(), want) {
		t.Errorf("follow's stderr lacks %q:\n%s", want, fl.stderr)
	}
	expectState(t, state, rb, 35, root35)

	// A reader who never saw A, given A's newest checkpoint.
	fresh := t.TempDir()
	rep, res = ckAudit(t, ckArgs(srv.url, key.id, "audit", "--json", "--state-dir", fresh, "--checkpoint", newerFile)...)
	keep(res)
	if want := []subWant{{0, "checkpoint_mismatch", ckSubj}}; res.status != 1 || !slices.Equal(rep.violations(), want) {
		t.Fatalf("audit of the older copy --checkpoint: exit %d, violations %v; want 1 and %v\n%s", res.status, rep.violations(), want, res.stdout)
	}
	if v := rep.Violations[0]; v.Room != rb || !strings.Contains(v.Reason, "checkpoint "+newerFile+" (size 35): the room as read has 20 admitted messages") {
		t.Errorf("reason: %s", v.Reason)
	}

	// The older copy grows past 35 with other entries (a restored publisher
	// does not know it was rolled back): its checkpoint of size 36 is not
	// consistent with the kept 35.
	other := events.CapsuleMeta{RunID: "run-20260910-rollback-0003", CapsuleID: "cap-rollback-0003-a", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	shipTo(t, srv.url, rb, capsuleOf(t, other, entries(t, other, 16)), 0, 16)
	in = inspect(t, srv.url)
	forkSeq, _ := in.waitCheckpoint(rb, 36, 10*time.Second)
	if forkSeq != 38 {
		t.Errorf("the older copy's checkpoint of size 36 at stream seq %d, want 38", forkSeq)
	}
	rep, res = ckAudit(t, ckArgs(srv.url, key.id, "audit", "--json", "--state-dir", state)...)
	keep(res)
	if want := []subWant{{38, "checkpoint_mismatch", ckSubj}}; res.status != 1 || !slices.Equal(rep.violations(), want) {
		t.Fatalf("audit of the grown older copy: exit %d, violations %v; want 1 and %v\n%s", res.status, rep.violations(), want, res.stdout)
	}
	if v := rep.Violations[0]; !strings.Contains(v.Reason, "verified a checkpoint of size 35") || !strings.Contains(v.Reason, "size 36 is not consistent") {
		t.Errorf("reason: %s", v.Reason)
	}
	expectState(t, state, rb, 35, root35)
	srv.stop()
	for _, s := range servers {
		outputs = append(outputs, s.log.String())
	}
	if len(servers) != 4 {
		t.Errorf("%d servers", len(servers))
	}
	key.noKeyMaterial(t, "publisher serve and subscriber", outputs...)
}

// setAsides reads a follow set-aside list.
func setAsides(t *testing.T, path string) []subWant {
	t.Helper()
	q, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []subWant
	for _, l := range strings.Split(strings.TrimSuffix(string(q), "\n"), "\n") {
		var a struct {
			Seq     uint64 `json:"stream_seq"`
			Code    string `json:"code"`
			Subject string `json:"subject"`
			Reason  string `json:"reason"`
		}
		if err := json.Unmarshal([]byte(l), &a); err != nil || a.Reason == "" {
			t.Fatalf("set-aside line %q: %v", l, err)
		}
		out = append(out, subWant{a.Seq, a.Code, a.Subject})
	}
	return out
}

// expectState checks the state dir's one kept checkpoint of roomID.
func expectState(t *testing.T, dir, roomID string, size uint64, rootHex string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.checkpoint.json"))
	if err != nil || len(files) != 1 {
		t.Fatalf("state dir %s holds %v (%v), want one checkpoint", dir, files, err)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var kept struct {
		Room string `json:"room"`
		Size uint64 `json:"size"`
		Root string `json:"root"`
	}
	if err := json.Unmarshal(data, &kept); err != nil || kept.Room != roomID || kept.Size != size || kept.Root != rootHex {
		t.Errorf("state dir keeps %+v (%v), want %s size %d root %s", kept, err, roomID, size, rootHex)
	}
}

// proofDoc is `subscriber prove`'s output.
type proofDoc struct {
	Room        string   `json:"room"`
	Subject     string   `json:"subject"`
	StreamSeq   uint64   `json:"stream_seq"`
	ContentHash string   `json:"content_hash"`
	LeafIndex   uint64   `json:"leaf_index"`
	LeafHash    string   `json:"leaf_hash"`
	TreeSize    uint64   `json:"tree_size"`
	Proof       []string `json:"proof"`
	Checkpoint  string   `json:"checkpoint"`
}

// TestCheckpointProve: `subscriber prove` prints inclusion proofs of a
// journal entry (--entry) and an execution record (--ref) against the
// latest checkpoint; `subscriber verify-proof` accepts them offline (exit
// 0) and refuses (exit 1) an edited one, one checked against another key
// and one carrying another checkpoint; usage errors exit 2. A message not
// yet covered by a checkpoint has no proof.
func TestCheckpointProve(t *testing.T) {
	t.Parallel()
	key := newPublisherKey(t)
	other := newPublisherKey(t)
	const slug, qmail = "room:eval-slugify", "room:qmail-open-relay"
	store := t.TempDir()
	var outputs []string
	keep := func(r result) result { outputs = append(outputs, r.stdout, r.stderr); return r }
	srv := startKeyed(t, store, key, "--checkpoint-interval", "1h")
	shipTo(t, srv.url, slug, filepath.Join(root, slugifyDir), 0, 299)
	verified, refused := samples+"/records/verified.json", samples+"/records/refused.json"
	if r := runPub(t, nil, "execution", "--server", srv.url, verified, refused); r.status != 0 {
		t.Fatalf("execution: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	lines := fileLines(t, slugifyJournal)
	e137, err := events.ParseEntry(lines[137])
	if err != nil {
		t.Fatal(err)
	}
	// No checkpoint yet (every 1000, interval 1h): nothing is covered.
	res := keep(subRun(t, ckArgs(srv.url, key.id, "prove", "--room", slug, "--entry", e137.EntryHash())...))
	if res.status != 1 || res.stdout != "" || !strings.Contains(res.stderr, "not covered") {
		t.Errorf("prove before any checkpoint: exit %d\n%s%s", res.status, res.stdout, res.stderr)
	}
	srv.stop() // the final checkpoints: 299 and 2
	outputs = append(outputs, srv.log.String())
	srv = startKeyed(t, store, key, "--checkpoint-interval", "1h")
	in := inspect(t, srv.url)
	_, slugNote := in.waitCheckpoint(slug, 299, 5*time.Second)
	_, qmailNote := in.waitCheckpoint(qmail, 2, 5*time.Second)

	prove := func(roomID, flag, value string) (proofDoc, string) {
		t.Helper()
		res := keep(subRun(t, ckArgs(srv.url, key.id, "prove", "--room", roomID, flag, value)...))
		var p proofDoc
		if err := json.Unmarshal([]byte(res.stdout), &p); err != nil || res.status != 0 || strings.Count(res.stdout, "\n") != 1 {
			t.Fatalf("prove %s %s: exit %d %v\n%s%s", flag, value, res.status, err, res.stdout, res.stderr)
		}
		return p, res.stdout
	}
	slugSubj := journalSubject("eval-slugify", "run-20260902-slugify-0417", "cap-slugify-0417-a")
	p, entryProof := prove(slug, "--entry", e137.EntryHash())
	content := sha256.Sum256(lines[137])
	leaf := checkpoint.LeafHash(slug, slugSubj, content)
	if p.Room != slug || p.Subject != slugSubj || p.StreamSeq != 138 || p.ContentHash != hex.EncodeToString(content[:]) ||
		p.LeafIndex != 137 || p.LeafHash != hex.EncodeToString(leaf[:]) || p.TreeSize != 299 || len(p.Proof) != 9 || p.Checkpoint != string(slugNote) {
		t.Errorf("entry proof %+v", p)
	}
	rec, err := events.ParseRecord(subReference(t, "refused.json"))
	if err != nil {
		t.Fatal(err)
	}
	p, recordProof := prove(qmail, "--ref", rec.ComputedRef())
	content = sha256.Sum256(rec.Canonical())
	// Stream seq 306: 299 entries, the verified record at 300 and its five
	// markers, then this one (leaf 1 of the room).
	if p.Room != qmail || p.Subject != execSubject || p.StreamSeq != 306 || p.ContentHash != hex.EncodeToString(content[:]) ||
		p.LeafIndex != 1 || p.TreeSize != 2 || len(p.Proof) != 1 || p.Checkpoint != string(qmailNote) {
		t.Errorf("record proof %+v", p)
	}

	dir := t.TempDir()
	file := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	edit := func(doc string, change func(*proofDoc)) string {
		var p proofDoc
		if err := json.Unmarshal([]byte(doc), &p); err != nil {
			t.Fatal(err)
		}
		change(&p)
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	flip := func(h string) string { // one bit of the first byte
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != 32 {
			t.Fatalf("not a hash: %q", h)
		}
		b[0] ^= 1
		return hex.EncodeToString(b)
	}
	entryFile, recordFile := file("entry.json", entryProof), file("record.json", recordProof)
	valid := fmt.Sprintf("valid: %s (%s) is leaf 137 of the checkpoint of size 299 signed by %s (stream seq 138 as reported by the prover, not proven)\n", slug, slugSubj, key.id)
	for _, tc := range []struct {
		name   string
		stdin  string
		args   []string
		status int
		out    string // stdout, exactly or (ending in "…") its start
	}{
		{"entry", "", []string{entryFile}, 0, valid},
		{"entry from stdin", entryProof, []string{"-"}, 0, valid},
		{"record", "", []string{recordFile}, 0,
			fmt.Sprintf("valid: %s (%s) is leaf 1 of the checkpoint of size 2 signed by %s (stream seq 306 as reported by the prover, not proven)\n", qmail, execSubject, key.id)},
		{"entry, JSON", "", []string{"--json", entryFile}, 0,
			fmt.Sprintf(`{"valid":true,"room":%q,"subject":%q,"reported_stream_seq":138,"leaf_index":137,"tree_size":299,"signer":%q,"origin":%q}`+"\n", slug, slugSubj, key.id, slug)},
		{"a proof hash flipped", "", []string{file("path.json", edit(entryProof, func(p *proofDoc) { p.Proof[4] = flip(p.Proof[4]) }))}, 1, "invalid: …"},
		{"the content hash flipped", "", []string{file("content.json", edit(recordProof, func(p *proofDoc) { p.ContentHash = flip(p.ContentHash) }))}, 1, "invalid: …"},
		{"the leaf hash flipped", "", []string{file("leaf.json", edit(entryProof, func(p *proofDoc) { p.LeafHash = flip(p.LeafHash) }))}, 1, "invalid: …"},
		{"another leaf index", "", []string{file("index.json", edit(entryProof, func(p *proofDoc) { p.LeafIndex = 138 }))}, 1, "invalid: …"},
		{"another subject", "", []string{file("subject.json", edit(entryProof, func(p *proofDoc) { p.Subject = journalSubject("eval-slugify", "run-x", "cap-x") }))}, 1, "invalid: …"},
		{"the other room's checkpoint", "", []string{file("wrong-ckpt.json", edit(entryProof, func(p *proofDoc) { p.Checkpoint = string(qmailNote) }))}, 1, "invalid: …"},
		{"the signature edited", "", []string{file("sig.json", edit(entryProof, func(p *proofDoc) {
			p.Checkpoint = strings.Replace(p.Checkpoint, "\n299\n", "\n298\n", 1)
		}))}, 1, "invalid: …"},
		{"not JSON", "{", []string{"-"}, 1, "invalid: malformed_json: not a proof document: …"},
		{"JSON verdict of an invalid proof", "", []string{"--json", file("path2.json", edit(entryProof, func(p *proofDoc) { p.Proof[0] = flip(p.Proof[0]) }))}, 1, `{"valid":false,"code":"checkpoint_mismatch","reason":"proof does not verify: …`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := keep(subRunIn(t, tc.stdin, append([]string{"verify-proof", "--trusted-publisher", key.id}, tc.args...)...))
			if res.status != tc.status || !matches(res.stdout, tc.out) {
				t.Errorf("exit %d, want %d\n got %q\nwant %q\n%s", res.status, tc.status, res.stdout, tc.out, res.stderr)
			}
		})
	}
	// Another key: the same valid proof is refused.
	res = keep(subRunIn(t, "", "verify-proof", "--trusted-publisher", other.id, entryFile))
	if res.status != 1 || !strings.HasPrefix(res.stdout, "invalid: ") || !strings.Contains(res.stdout, "untrusted") {
		t.Errorf("verify-proof with another key: exit %d\n%s%s", res.status, res.stdout, res.stderr)
	}
	// Both keys trusted: valid (rotation: the old key keeps verifying).
	res = keep(subRunIn(t, "", "verify-proof", "--trusted-publisher", other.id, "--trusted-publisher", key.id, entryFile))
	if res.status != 0 || res.stdout != valid {
		t.Errorf("verify-proof with both keys: exit %d\n%s%s", res.status, res.stdout, res.stderr)
	}

	// Usage errors: exit 2, nothing on stdout.
	for name, args := range map[string][]string{
		"verify-proof without a key":   {"verify-proof", entryFile},
		"verify-proof, no file":        {"verify-proof", "--trusted-publisher", key.id},
		"verify-proof, missing file":   {"verify-proof", "--trusted-publisher", key.id, filepath.Join(dir, "nope.json")},
		"verify-proof, bad node id":    {"verify-proof", "--trusted-publisher", "node:did:key:z6MkNOPE", entryFile},
		"verify-proof, two files":      {"verify-proof", "--trusted-publisher", key.id, entryFile, recordFile},
		"verify-proof, unknown flag":   {"verify-proof", "--trusted-publisher", key.id, "--no-such-flag", entryFile},
		"prove without a key":          {"prove", "--server", srv.url, "--room", slug, "--entry", e137.EntryHash()},
		"prove with --entry and --ref": ckArgs(srv.url, key.id, "prove", "--room", slug, "--entry", e137.EntryHash(), "--ref", rec.ComputedRef()),
		"prove without what":           ckArgs(srv.url, key.id, "prove", "--room", slug),
		"prove, bad room":              ckArgs(srv.url, key.id, "prove", "--room", "eval-slugify", "--entry", e137.EntryHash()),
	} {
		t.Run(name, func(t *testing.T) {
			res := keep(subRunIn(t, "", args...))
			if res.status != 2 || res.stdout != "" || res.stderr == "" {
				t.Errorf("exit %d, want 2 and a message\nstdout %q\nstderr %q", res.status, res.stdout, res.stderr)
			}
		})
	}
	// An entry that is not in the room: refused, no proof.
	res = keep(subRun(t, ckArgs(srv.url, key.id, "prove", "--room", slug, "--entry", strings.Repeat("ab", 32))...))
	if res.status != 1 || res.stdout != "" {
		t.Errorf("prove of a missing entry: exit %d\n%s%s", res.status, res.stdout, res.stderr)
	}

	srv.stop()
	outputs = append(outputs, srv.log.String())
	key.noKeyMaterial(t, "publisher serve and subscriber", outputs...)
}

// subRunIn is subRun with stdin.
func subRunIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, subscriberBin(t), args...)
	cmd.Dir = root
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("subscriber %v: %v", args, err)
	}
	return result{status: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
}

// matches: got equals want, or starts with want's text before a final "…".
func matches(got, want string) bool {
	if prefix, ok := strings.CutSuffix(want, "…"); ok {
		return strings.HasPrefix(got, prefix)
	}
	return got == want
}

// TestCheckpointKeyFileRefused: serve refuses a file that is not a key
// made by keygen with exit 2, naming the file but not its content.
func TestCheckpointKeyFileRefused(t *testing.T) {
	t.Parallel()
	key := newPublisherKey(t)
	data, err := os.ReadFile(key.file)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "not-a-key.pem")
	if err := os.WriteFile(bad, bytes.ReplaceAll(data, []byte("PRIVATE KEY"), []byte("EC PRIVATE KEY")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{bad, filepath.Join(t.TempDir(), "missing.pem")} {
		r := runPub(t, nil, "serve", "--listen", "127.0.0.1:-1", "--store-dir", t.TempDir(), "--publisher-key", file)
		if r.status != 2 || !strings.Contains(r.stderr, file) || strings.Contains(r.stderr, "serving on") {
			t.Errorf("serve --publisher-key %s: exit %d, want 2 naming the file\n%s%s", file, r.status, r.stdout, r.stderr)
		}
		key.noKeyMaterial(t, "publisher serve with a bad key file", r.stdout, r.stderr)
	}
}

// TestCheckpointKeyRotation: a publisher rotates its key as
// docs/checkpoints.md, "Keys and rotation", says. serve with key1 ships 10 entries and a record and writes its final
// checkpoints on SIGTERM; serve with --publisher-key key2
// --trusted-publisher key1 on the same store ships 6 more entries and a
// record and writes checkpoints that extend key1's. A reader trusting both
// admits everything, the newest checkpoints signed by key2 covering every
// message of each room; a reader trusting one key refuses exactly what the
// other signed (messages and checkpoints) as checkpoint_mismatch; a state
// dir kept while only key1 was trusted (and only its checkpoints existed)
// finds key2's checkpoints consistent with it. serve with key2 that does
// not trust key1 admits none of key1's messages, reads key1's checkpoints
// as contradicting the room, and writes no checkpoint for either room.
func TestCheckpointKeyRotation(t *testing.T) {
	t.Parallel()
	key1, key2 := newPublisherKey(t), newPublisherKey(t)
	const rot, qmail = "room:rotate", "room:qmail-open-relay"
	rotSubj, rotCk, qmailCk := journalSubject("rotate", "run-20260911-rotate-0001", "cap-rotate-0001-a"), room.Subjects{}.Checkpoint(rot), room.Subjects{}.Checkpoint(qmail)
	meta := events.CapsuleMeta{RunID: "run-20260911-rotate-0001", CapsuleID: "cap-rotate-0001-a", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	lines := entries(t, meta, 20)
	store := t.TempDir()
	var outputs []string
	keep := func(r result) result { outputs = append(outputs, r.stdout, r.stderr); return r }
	record := func(url, file string) {
		t.Helper()
		if r := keep(runPub(t, nil, "execution", "--server", url, samples+"/records/"+file)); r.status != 0 {
			t.Fatalf("execution %s: exit %d\n%s%s", file, r.status, r.stdout, r.stderr)
		}
	}
	// Checkpoints only on SIGTERM, so the stream seqs are known but for
	// the order of the two rooms' checkpoints.
	quiet := []string{"--checkpoint-interval", "1h"}

	// A stream made before record markers, as a deployment upgraded to
	// this release has: one message per leaf, at the stream seqs below.
	unmarkStream(t, store)
	// key1: stream seqs 1-10 entries 0-9, 11 the verified record, then the
	// final checkpoints (rotate 10, qmail 1) at 12 and 13.
	srv := startKeyed(t, store, key1, quiet...)
	shipTo(t, srv.url, rot, capsuleOf(t, meta, lines[:10]), 0, 10)
	record(srv.url, "verified.json")
	srv.stop()
	outputs = append(outputs, srv.log.String())

	// key2, trusting key1. Before it ships anything, a reader trusting
	// key1 only keeps key1's checkpoints in its state dir.
	srv = startKeyed(t, store, key2, append(quiet, "--trusted-publisher", key1.id)...)
	state := t.TempDir()
	rep, res := ckAudit(t, ckArgs(srv.url, key1.id, "audit", "--json", "--state-dir", state)...)
	keep(res)
	if res.status != 0 || len(rep.Violations) != 0 || len(rep.Checkpoints) != 2 {
		t.Fatalf("audit trusting key1 after key1's serve: exit %d, violations %v, facts %+v\n%s", res.status, rep.Violations, rep.Checkpoints, res.stderr)
	}
	for roomID, size := range map[string]uint64{rot: 10, qmail: 1} {
		if f := rep.Checkpoints[rep.facts(t, roomID)]; f.Latest == nil || f.Latest.Size != size || f.Latest.Signer != key1.id || f.Verified != 1 || f.Stored != nil {
			t.Errorf("%s after key1's serve: facts %+v (latest %+v), want key1's checkpoint of size %d", roomID, f, f.Latest, size)
		}
	}
	// key2: stream seqs 14-19 entries 10-15, 20 the refused record, then
	// the final checkpoints (rotate 16, qmail 2) at 21 and 22.
	if l := shipTo(t, srv.url, rot, capsuleOf(t, meta, lines[:16]), 10, 6); l.Head.StreamSeq != 19 {
		t.Fatalf("head at stream seq %d, want 19", l.Head.StreamSeq)
	}
	record(srv.url, "refused.json")
	srv.stop()
	outputs = append(outputs, srv.log.String())

	// Audits through a serve without a key (it writes nothing).
	srv = startServer(t, store)
	if !strings.Contains(srv.log.String(), "no publisher key (--publisher-key)") {
		t.Errorf("serve without --publisher-key does not warn:\n%s", srv.log)
	}
	in := inspect(t, srv.url)
	rotMsgs, qmailMsgs := in.readRoom(rot), in.readRoom(qmail)
	// Who signed what, as stored.
	signedBy := func(msgs []roomMsg, ckSubj string) (by1, by2, ck1, ck2 []uint64) {
		for _, m := range msgs {
			var signer string
			if m.subject == ckSubj {
				c, err := checkpoint.ParseUnverified(m.data)
				if err != nil {
					t.Fatalf("checkpoint at stream seq %d: %v", m.seq, err)
				}
				signer = c.Signer
			} else {
				signer, _, _ = strings.Cut(m.header.Get(checkpoint.AttestationHeader), " ")
			}
			switch {
			case signer == key1.id && m.subject == ckSubj:
				ck1 = append(ck1, m.seq)
			case signer == key2.id && m.subject == ckSubj:
				ck2 = append(ck2, m.seq)
			case signer == key1.id:
				by1 = append(by1, m.seq)
			case signer == key2.id:
				by2 = append(by2, m.seq)
			default:
				t.Fatalf("stream seq %d (%s) signed by %q", m.seq, m.subject, signer)
			}
		}
		return by1, by2, ck1, ck2
	}
	rotBy1, rotBy2, rotCk1, rotCk2 := signedBy(rotMsgs, rotCk)
	qmailBy1, qmailBy2, qmailCk1, qmailCk2 := signedBy(qmailMsgs, qmailCk)
	if !slices.Equal(rotBy1, subSeqs(1, 10)) || !slices.Equal(rotBy2, subSeqs(14, 19)) || !slices.Equal(qmailBy1, []uint64{11}) || !slices.Equal(qmailBy2, []uint64{20}) {
		t.Fatalf("attested by key1: %v %v, by key2: %v %v", rotBy1, qmailBy1, rotBy2, qmailBy2)
	}
	if len(rotCk1) != 1 || len(qmailCk1) != 1 || len(rotCk2) != 1 || len(qmailCk2) != 1 ||
		!slices.Equal(slices.Sorted(slices.Values([]uint64{rotCk1[0], qmailCk1[0]})), []uint64{12, 13}) ||
		!slices.Equal(slices.Sorted(slices.Values([]uint64{rotCk2[0], qmailCk2[0]})), []uint64{21, 22}) {
		t.Fatalf("checkpoints by key1 at %v %v, by key2 at %v %v; want 12-13 and 21-22", rotCk1, qmailCk1, rotCk2, qmailCk2)
	}
	rotSize, rotRoot := expectedRoot(rot, rotMsgs)
	qmailSize, qmailRoot := expectedRoot(qmail, qmailMsgs)
	_, rotRoot10 := expectedRoot(rot, rotMsgs[:10])
	if rotSize != 16 || qmailSize != 2 {
		t.Fatalf("rooms of %d and %d messages", rotSize, qmailSize)
	}

	// Trusting both: every message admitted, the newest checkpoints by
	// key2 cover all of each room, consistent with key1's before them and
	// with the state dir kept while only key1 was trusted.
	both := ckArgs(srv.url, key1.id, "audit", "--json", "--trusted-publisher", key2.id)
	rep, res = ckAudit(t, append(both, "--state-dir", state)...)
	keep(res)
	if res.status != 0 || len(rep.Violations) != 0 || rep.Totals.Entries != 16 || rep.Totals.Records != 2 || ckTotal(t, res.stdout) != 4 ||
		!rep.Attestation.Checked || !slices.Equal(slices.Sorted(slices.Values(rep.Attestation.TrustedPublishers)), slices.Sorted(slices.Values([]string{key1.id, key2.id}))) {
		t.Fatalf("audit trusting both keys: exit %d, violations %v, totals %+v, attestation %+v\n%s", res.status, rep.Violations, rep.Totals, rep.Attestation, res.stdout)
	}
	for _, w := range []struct {
		roomID      string
		size        uint64
		root        string
		seq, stored uint64
	}{{rot, 16, rotRoot, rotCk2[0], 10}, {qmail, 2, qmailRoot, qmailCk2[0], 1}} {
		f := rep.Checkpoints[rep.facts(t, w.roomID)]
		if f.Admitted != w.size || f.Verified != 2 || f.Refused != 0 || f.Covered != w.size || f.Tail != 0 || f.AttestationsVerified != 0 ||
			f.AdmittedByCheckpoint != w.size || f.RoomRefused != "" || f.Latest == nil || *f.Latest != (ckFact{w.size, w.root, key2.id, w.seq}) ||
			f.Stored == nil || f.Stored.Size != w.stored || f.Stored.Signer != key1.id || !f.StoredConsistent {
			t.Errorf("%s: facts %+v (latest %+v, stored %+v); want %d admitted by 2 checkpoints, the latest by key2 at stream seq %d, stored %d by key1 consistent",
				w.roomID, f, f.Latest, f.Stored, w.size, w.seq, w.stored)
		}
	}
	if kept := keptCheckpoints(t, state); fmt.Sprint(kept) != fmt.Sprint(map[string]string{rot: "16 " + rotRoot, qmail: "2 " + qmailRoot}) {
		t.Errorf("the state dir keeps %v, want key2's checkpoints of sizes 16 and 2", kept)
	}
	// serve released its leases on SIGTERM; the bucket's TTL is 30s.
	js, err := jetstream.New(in.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, room.DefaultLeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := kv.Status(ctx); err != nil || st.TTL() != 30*time.Second || st.History() != 1 {
		t.Errorf("lease bucket status %+v (%v), want TTL 30s and history 1", st, err)
	}
	if keys, err := kv.Keys(ctx); !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Errorf("leases held after SIGTERM: %v (%v)", keys, err)
	}

	// Trusting one key: what the other signed is refused, messages and
	// checkpoints, at their stream seqs. Trusting key2 only, key2's
	// checkpoints cover messages that reader does not admit, and the
	// chain, whose first 10 entries key1 attested, has a gap where key2's
	// part begins (a reader must keep the old key for as long as it reads
	// the room's old messages).
	untrusted := func(id string) string {
		return "the message was not admitted by a trusted publisher: untrusted publisher: attestation by " + id
	}
	ckUntrusted := func(id string) string {
		return "not a checkpoint of the room signed by a trusted publisher (set aside; the room's checkpoints are checked without it): untrusted publisher: checkpoint signed only by " + id
	}
	type refusal struct {
		seq           uint64
		code, subject string
		reason        string
	}
	var only2 []refusal
	for seq := uint64(1); seq <= 10; seq++ {
		only2 = append(only2, refusal{seq, "checkpoint_mismatch", rotSubj, untrusted(key1.id)})
	}
	only2 = append(only2, refusal{11, "checkpoint_mismatch", execSubject, untrusted(key1.id)},
		refusal{rotCk1[0], "checkpoint_mismatch", rotCk, ckUntrusted(key1.id)},
		refusal{qmailCk1[0], "checkpoint_mismatch", qmailCk, ckUntrusted(key1.id)},
		refusal{14, "gap", rotSubj, "chain position 0 is not in the room: its entry at stream seq 1 was set aside (checkpoint_mismatch)"})
	for seq := uint64(15); seq <= 19; seq++ {
		only2 = append(only2, refusal{seq, "chain_broken", rotSubj, "the chain is broken at stream seq 14 (gap): later entries are not served"})
	}
	only2 = append(only2,
		refusal{rotCk2[0], "checkpoint_mismatch", rotCk, "the checkpoint does not match the room: it covers 16 messages, but only 6 admitted messages of the room precede it"},
		refusal{qmailCk2[0], "checkpoint_mismatch", qmailCk, "the checkpoint does not match the room: it covers 2 messages, but only 1 admitted messages of the room precede it"})
	var only1 []refusal
	for seq := uint64(14); seq <= 19; seq++ {
		only1 = append(only1, refusal{seq, "checkpoint_mismatch", rotSubj, untrusted(key2.id)})
	}
	only1 = append(only1, refusal{20, "checkpoint_mismatch", execSubject, untrusted(key2.id)},
		refusal{rotCk2[0], "checkpoint_mismatch", rotCk, ckUntrusted(key2.id)},
		refusal{qmailCk2[0], "checkpoint_mismatch", qmailCk, ckUntrusted(key2.id)})
	for _, refs := range [][]refusal{only1, only2} {
		slices.SortFunc(refs, func(a, b refusal) int { return int(a.seq) - int(b.seq) })
	}
	_, qmailRoot1 := expectedRoot(qmail, qmailMsgs[:1])
	type roomFacts struct {
		admitted, verified, refused, covered, tail, oneByOne uint64
		latest                                               *ckFact
	}
	for _, tc := range []struct {
		name    string
		trusted publisherKey
		want    []refusal
		entries uint64
		facts   map[string]roomFacts
	}{
		{"key2 only", key2, only2, 0, map[string]roomFacts{
			rot:   {admitted: 6, refused: 2, tail: 6, oneByOne: 6},
			qmail: {admitted: 1, refused: 2, tail: 1, oneByOne: 1},
		}},
		{"key1 only", key1, only1, 10, map[string]roomFacts{
			rot:   {admitted: 10, verified: 1, refused: 1, covered: 10, latest: &ckFact{10, rotRoot10, key1.id, rotCk1[0]}},
			qmail: {admitted: 1, verified: 1, refused: 1, covered: 1, latest: &ckFact{1, qmailRoot1, key1.id, qmailCk1[0]}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, res := ckAudit(t, ckArgs(srv.url, tc.trusted.id, "audit", "--json", "--state-dir", t.TempDir())...)
			keep(res)
			var got []refusal
			for _, v := range rep.Violations {
				got = append(got, refusal{v.Seq, v.Code, v.Subject, v.Reason})
			}
			if res.status != 1 || !slices.Equal(got, tc.want) || rep.Totals.Entries != tc.entries || rep.Totals.Records != 1 {
				t.Errorf("exit %d, %d entries and %d records verified, violations\n%v\nwant 1, %d entries and 1 record, violations\n%v",
					res.status, rep.Totals.Entries, rep.Totals.Records, got, tc.entries, tc.want)
			}
			for roomID, w := range tc.facts {
				f := rep.Checkpoints[rep.facts(t, roomID)]
				g := roomFacts{f.Admitted, f.Verified, f.Refused, f.Covered, f.Tail, f.AttestationsVerified, f.Latest}
				sameLatest := (g.latest == nil) == (w.latest == nil) && (g.latest == nil || *g.latest == *w.latest)
				g.latest, w.latest = nil, nil
				if g != w || !sameLatest || f.RoomRefused != "" {
					t.Errorf("%s: facts %+v (latest %+v), want %+v (latest %+v)", roomID, f, f.Latest, w, tc.facts[roomID].latest)
				}
			}
		})
	}
	srv.stop()
	outputs = append(outputs, srv.log.String())

	// key2 without --trusted-publisher key1: key1's 11 messages are no
	// leaves and key1's checkpoints (untrusted) are set aside (a warning
	// and roompub_checkpoint_set_aside_total), so key2's (larger than the
	// 6 and 1 leaves before them) contradict the rooms: an error log per
	// checkpoint, both rooms blocked, and no checkpoint written, not while
	// it runs (every 2 leaves, every 200ms) and not on SIGTERM.
	srv = startKeyed(t, store, key2, "--checkpoint-every", "2", "--checkpoint-interval", "200ms", "--http", "127.0.0.1:0")
	waitLog := func(what string, cond func(logLine) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !slices.ContainsFunc(logLines(t, srv.log.String()), cond) {
			if time.Now().After(deadline) {
				t.Fatalf("serve did not log %s:\n%s", what, srv.log)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitLog("that the checkpointer caught up", func(l logLine) bool { return l.Msg == "checkpointer caught up with the stream" })
	// Caught up at its first message (stream seq >= the start's last, 22):
	// all four checkpoints are read by then.
	waitLog("the second contradiction", func(l logLine) bool { return l.Seq == 22 && l.Level == "error" })
	var contradictions []string
	for _, l := range logLines(t, srv.log.String()) {
		if l.Level == "error" {
			contradictions = append(contradictions, fmt.Sprintf("%s %d %s: %s: %s", l.Room, l.Seq, l.Signer, l.Msg, l.Reason))
		}
	}
	slices.Sort(contradictions)
	const blocked = "checkpointer: the room's latest checkpoint contradicts its messages: no checkpoint will be written for the room"
	wantContradictions := []string{
		fmt.Sprintf("%s %d %s: %s: it covers 2 messages, but only 1 admitted messages of the room precede it", qmail, qmailCk2[0], key2.id, blocked),
		fmt.Sprintf("%s %d %s: %s: it covers 16 messages, but only 6 admitted messages of the room precede it", rot, rotCk2[0], key2.id, blocked),
	}
	slices.Sort(wantContradictions)
	if !slices.Equal(contradictions, wantContradictions) {
		t.Errorf("serve's error logs\n%s\nwant\n%s", strings.Join(contradictions, "\n"), strings.Join(wantContradictions, "\n"))
	}
	// key1's messages are no leaves: each room's first is logged at warn
	// level, the others at debug level (not shown at info).
	var notLeaves []string
	for _, l := range logLines(t, srv.log.String()) {
		if strings.Contains(l.Msg, "is not a leaf") {
			notLeaves = append(notLeaves, fmt.Sprintf("%s %s %d: %s", l.Level, l.Room, l.Seq, l.Msg))
		}
	}
	const notLeaf = "checkpointer: a message whose attestation does not verify is not a leaf (the room's first; later ones are logged at debug level)"
	if want := []string{"warn " + rot + " 1: " + notLeaf, "warn " + qmail + " 11: " + notLeaf}; !slices.Equal(notLeaves, want) {
		t.Errorf("serve's logs of messages that are no leaves\n%s\nwant\n%s", strings.Join(notLeaves, "\n"), strings.Join(want, "\n"))
	}
	// Both rooms grow past every threshold.
	if l := shipTo(t, srv.url, rot, capsuleOf(t, meta, lines), 16, 4); l.Head.StreamSeq != 26 {
		t.Fatalf("head at stream seq %d, want 26", l.Head.StreamSeq)
	}
	time.Sleep(time.Second) // five intervals
	wantMetrics := map[string]string{
		"roompub_checkpoints_written_total":                      "0",
		"roompub_checkpoint_leases_held":                         "0",
		"roompub_checkpoint_rooms_blocked":                       "2",
		"roompub_checkpoint_unadmitted_messages_total":           "11",
		`roompub_checkpoint_set_aside_total{reason="untrusted"}`: "2",
		`roompub_checkpoint_set_aside_total{reason="malformed"}`: "0",
	}
	if got := scrapeMetrics(t, srv.log.String(), wantMetrics); fmt.Sprint(got) != fmt.Sprint(wantMetrics) {
		t.Errorf("metrics %v, want %v", got, wantMetrics)
	}
	srv.stop()
	outputs = append(outputs, srv.log.String())
	srv = startServer(t, store)
	in = inspect(t, srv.url)
	in.expectCounts(map[string]uint64{rotSubj: 20, execSubject: 2, rotCk: 2, qmailCk: 2})
	// A reader trusting both keys: still sound, key2's checkpoints the
	// latest, the 4 new entries an uncovered tail verified one by one.
	rep, res = ckAudit(t, ckArgs(srv.url, key1.id, "audit", "--json", "--trusted-publisher", key2.id, "--state-dir", state)...)
	keep(res)
	f := rep.Checkpoints[rep.facts(t, rot)]
	if res.status != 0 || len(rep.Violations) != 0 || rep.Totals.Entries != 20 || f.Admitted != 20 || f.Covered != 16 || f.Tail != 4 ||
		f.AttestationsVerified != 4 || f.Latest == nil || *f.Latest != (ckFact{16, rotRoot, key2.id, rotCk2[0]}) || !f.StoredConsistent {
		t.Errorf("audit trusting both after the blocked serve: exit %d, violations %v, facts %+v (latest %+v)", res.status, rep.Violations, f, f.Latest)
	}
	srv.stop()
	outputs = append(outputs, srv.log.String())
	key1.noKeyMaterial(t, "serve and subscriber", outputs...)
	key2.noKeyMaterial(t, "serve and subscriber", outputs...)
}

// keptCheckpoints returns the checkpoints a state dir keeps, per room:
// "size root".
func keptCheckpoints(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var kept struct {
			Room string `json:"room"`
			Size uint64 `json:"size"`
			Root string `json:"root"`
		}
		if err := json.Unmarshal(data, &kept); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out[kept.Room] = fmt.Sprintf("%d %s", kept.Size, kept.Root)
	}
	return out
}

// logLine is one of serve's JSON log lines, with the checkpointer's
// fields.
type logLine struct {
	Level  string `json:"level"`
	Msg    string `json:"msg"`
	Room   string `json:"room"`
	Seq    uint64 `json:"stream_seq"`
	Signer string `json:"signer"`
	Reason string `json:"reason"`
	HTTP   string `json:"http"`
}

// logLines decodes serve's log (lines that are not JSON are skipped).
func logLines(t *testing.T, log string) []logLine {
	t.Helper()
	var out []logLine
	for _, s := range strings.Split(log, "\n") {
		var l logLine
		if json.Unmarshal([]byte(s), &l) == nil && l.Msg != "" {
			out = append(out, l)
		}
	}
	return out
}

// scrapeMetrics reads serve's /metrics (its address from the "publisher
// serving" log line) and returns the values of the named metrics.
func scrapeMetrics(t *testing.T, log string, names map[string]string) map[string]string {
	t.Helper()
	addr := ""
	for _, l := range logLines(t, log) {
		if l.Msg == "publisher serving" {
			addr = l.HTTP
		}
	}
	if addr == "" {
		t.Fatalf("serve logged no metrics address:\n%s", log)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(body), "\n") {
		if name, value, ok := strings.Cut(l, " "); ok {
			if _, want := names[name]; want {
				out[name] = value
			}
		}
	}
	return out
}

// ckTotal is an audit report's count of checkpoints not set aside
// (totals.checkpoints).
func ckTotal(t *testing.T, report string) uint64 {
	t.Helper()
	var r struct {
		Totals struct {
			Checkpoints uint64 `json:"checkpoints"`
		} `json:"totals"`
	}
	if err := json.Unmarshal([]byte(report), &r); err != nil {
		t.Fatal(err)
	}
	return r.Totals.Checkpoints
}
