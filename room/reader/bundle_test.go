package reader_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/witness"
)

// TestExportEvidence: with three real litewitness processes cosigning the
// deployment log, Export gives the bundle of a journal entry (message 4
// of an atomic batch of 10) and of an execution record (a batch of one);
// VerifyEvidence checks each offline with the exact facts; every part
// tampered with is refused by the check it breaks; a quorum no
// checkpoint meets makes Export say what is missing.
func TestExportEvidence(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	_, wws := roomtest.StartWitnesses(t, 3, key)
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Origin: roomtest.Deployment, Every: 5, Interval: 100 * time.Millisecond,
		Deployment: checkpointer.DeploymentOptions{Interval: 50 * time.Millisecond, Witnesses: wws}})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	const roomA = "room:ev/a"
	es, _ := roomtest.Journal(t, "run-ev", "cap-ev", 10)
	if r, err := gate.AppendJournal(ctx, roomA, roomtest.Lines(es), nil); err != nil || r.Stored != 10 {
		t.Fatalf("%+v %v", r, err)
	}
	trust, err := roomtest.Trusting(t, key).WithOrigin(roomtest.Deployment)
	if err != nil {
		t.Fatal(err)
	}
	all3 := roomtest.Policy(t, wws, 3)
	// The room's checkpoint of 10 in the log and witnessed, then a record:
	// the room's checkpoint of 11 is the log's entry 1.
	roomtest.WaitFor(t, 20*time.Second, "a witnessed deployment checkpoint of 1", func() bool { return witnessedSize(t, e, trust, all3) == 1 })
	rec := roomtest.RecordIn(t, e.Key, roomA, "ev-1", nil)
	if r := gate.AppendRecord(ctx, rec.Canonical()); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("record: %+v", r)
	}
	roomtest.WaitFor(t, 20*time.Second, "a witnessed deployment checkpoint of 2", func() bool { return witnessedSize(t, e, trust, all3) == 2 })

	export := func(p *witness.Policy, o reader.ExportOptions) ([]*reader.Evidence, error) {
		t.Helper()
		o.Room, o.Validator, o.Trust, o.Witnessing = roomA, e.V, trust, &reader.Witnessing{Policy: p}
		return reader.Export(ctx, e.Js, o)
	}
	two := roomtest.Policy(t, wws, 2)
	bundles, err := export(two, reader.ExportOptions{Entries: []string{es[4].EntryHash()}, Refs: []string{rec.ComputedRef()}})
	if err != nil || len(bundles) != 2 {
		t.Fatalf("export: %d bundles, %v", len(bundles), err)
	}
	subjects := room.Subjects{}
	entrySubject := subjects.Journal(roomA, events.ChainKey{RunID: "run-ev", CapsuleID: "cap-ev"})
	entry, record := bundles[0], bundles[1]
	if entry.Room != roomA || entry.Subject != entrySubject || entry.StreamSeq != 5 || entry.Position != "seq:4" ||
		!bytes.Equal(entry.Data, es[4].Canonical()) || entry.RoomProof.Index != 4 || entry.DeploymentProof.Index != 1 ||
		!strings.HasSuffix(entry.Attestation, " 4/10") {
		t.Fatalf("entry bundle %+v", entry)
	}
	if record.Subject != subjects.Records(roomA) || record.Position != "index:0" || !bytes.Equal(record.Data, rec.Canonical()) ||
		record.RoomProof.Index != 10 || !strings.HasSuffix(record.Attestation, " 0/1") {
		t.Fatalf("record bundle %+v", record)
	}
	names := []string{wws[0].Name, wws[1].Name, wws[2].Name}
	verify := func(b *reader.Evidence, p *witness.Policy) (*reader.VerifiedEvidence, error) {
		t.Helper()
		data, err := b.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		return reader.VerifyEvidence(data, trust, p)
	}
	v, err := verify(entry, two)
	if err != nil {
		t.Fatalf("entry: %v", err)
	}
	want := reader.VerifiedEvidence{Room: roomA, Subject: entrySubject, ReportedStreamSeq: 5, Position: "seq:4",
		ContentHash: fmt.Sprintf("%x", checkpoint.ContentHash(es[4].Canonical())), AttestedBy: key.NodeID(), AttestationChecked: false,
		BatchSize: 10, LeafIndex: 4, RoomSize: 11, RoomSigner: key.NodeID(), DeploymentIndex: 1, DeploymentSize: 2,
		Origin: roomtest.Deployment, Quorum: "2-of-3", Cosigners: names}
	if fmt.Sprint(*v) != fmt.Sprint(want) {
		t.Fatalf("entry verified as\n%+v, want\n%+v", *v, want)
	}
	v, err = verify(record, all3)
	if err != nil || !v.AttestationChecked || v.BatchSize != 1 || v.LeafIndex != 10 || v.RoomSize != 11 || v.DeploymentIndex != 1 ||
		v.DeploymentSize != 2 || v.Quorum != "3-of-3" || !slices.Equal(v.Cosigners, names) || v.Position != "index:0" {
		t.Fatalf("record verified as %+v, %v", v, err)
	}

	// Tampering, each part refused by its check.
	clone := func(b *reader.Evidence) *reader.Evidence {
		c := *b
		c.Data = bytes.Clone(b.Data)
		rp, dp := *b.RoomProof, *b.DeploymentProof
		rp.Path, dp.Path = slices.Clone(rp.Path), slices.Clone(dp.Path)
		rp.Checkpoint, dp.Checkpoint = bytes.Clone(rp.Checkpoint), bytes.Clone(dp.Checkpoint)
		c.RoomProof, c.DeploymentProof = &rp, &dp
		return &c
	}
	releaf := func(b *reader.Evidence) { // what a forger would also change
		b.RoomProof.Extra = checkpoint.LeafData(b.Room, b.Subject, checkpoint.ContentHash(b.Data))
	}
	older := roomCheckpointOfSize(t, e, roomA, trust, 10)
	pathAt10 := func() [][32]byte { // entry 4's path in the room's tree of 10, rebuilt independently
		tree := checkpoint.NewTree()
		for _, x := range es {
			tree.Append(checkpoint.LeafHash(roomA, entrySubject, checkpoint.ContentHash(x.Canonical())))
		}
		p, err := tree.InclusionProof(4, 10)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}()
	other := roomtest.NewPublisherKey(t)
	untrusted, _ := roomtest.Trusting(t, other).WithOrigin(roomtest.Deployment)
	for _, c := range []struct {
		name   string
		of     *reader.Evidence
		change func(*reader.Evidence)
		policy *witness.Policy
		trust  *checkpoint.Trust
		part   reader.EvidencePart
		code   events.Code
		cause  error
		reason string
	}{
		{"record: a stored byte", record, func(b *reader.Evidence) { b.Data[10] ^= 1 }, two, nil, reader.PartAttestation, events.CheckpointMismatch, checkpoint.ErrBadAttestation, "does not verify"},
		{"entry: a stored byte", entry, func(b *reader.Evidence) { b.Data[10] ^= 1 }, two, nil, reader.PartLeaf, events.CheckpointMismatch, checkpoint.ErrBadProof, "not the leaf data"},
		{"entry: a stored byte and the leaf", entry, func(b *reader.Evidence) { b.Data[10] ^= 1; releaf(b) }, two, nil, reader.PartRoomInclusion, events.CheckpointMismatch, checkpoint.ErrBadProof, "inclusion of leaf 4 at size 11"},
		{"record: the subject", record, func(b *reader.Evidence) { b.Subject = entrySubject }, two, nil, reader.PartAttestation, events.CheckpointMismatch, checkpoint.ErrBadAttestation, "does not verify"},
		{"entry: the subject and the leaf", entry, func(b *reader.Evidence) { b.Subject = subjects.Records(roomA); releaf(b) }, two, nil, reader.PartRoomInclusion, events.CheckpointMismatch, checkpoint.ErrBadProof, "calculated root"},
		{"record: the position", record, func(b *reader.Evidence) { b.Position = "index:1" }, two, nil, reader.PartAttestation, events.CheckpointMismatch, checkpoint.ErrBadAttestation, "index:1"},
		{"entry: the index", entry, func(b *reader.Evidence) { b.RoomProof.Index = 5 }, two, nil, reader.PartRoomInclusion, events.CheckpointMismatch, checkpoint.ErrBadProof, "inclusion of leaf 5 at size 11"},
		{"entry: a room proof hash", entry, func(b *reader.Evidence) { b.RoomProof.Path[1][0] ^= 1 }, two, nil, reader.PartRoomInclusion, events.CheckpointMismatch, checkpoint.ErrBadProof, "calculated root"},
		{"entry: a deployment proof hash", entry, func(b *reader.Evidence) { b.DeploymentProof.Path[0][31] ^= 1 }, two, nil, reader.PartDeploymentInclusion, events.CheckpointMismatch, checkpoint.ErrBadProof, "inclusion of leaf 1 at size 2"},
		{"entry: the deployment index", entry, func(b *reader.Evidence) { b.DeploymentProof.Index = 0 }, two, nil, reader.PartDeploymentInclusion, events.CheckpointMismatch, checkpoint.ErrBadProof, "inclusion of leaf 0 at size 2"},
		{"entry: the room checkpoint's root", entry, func(b *reader.Evidence) { b.RoomProof.Checkpoint = editLine(b.RoomProof.Checkpoint, 2, flipB64) }, two, nil, reader.PartRoomCheckpoint, events.CheckpointMismatch, checkpoint.ErrBadCheckpoint, "invalid signature for key " + checkpoint.RoomOrigin(roomtest.Deployment, roomA) + "+"},
		// Another genuine checkpoint of the room, with the right path: the
		// message is in it, but it is not the deployment log's entry 1.
		{"entry: another room checkpoint", entry, func(b *reader.Evidence) { b.RoomProof.Checkpoint, b.RoomProof.Path = older, pathAt10 }, two, nil, reader.PartDeploymentInclusion, events.CheckpointMismatch, checkpoint.ErrBadProof, "inclusion of leaf 1 at size 2"},
		{"entry: the deployment checkpoint's size", entry, func(b *reader.Evidence) {
			b.DeploymentProof.Checkpoint = editLine(b.DeploymentProof.Checkpoint, 1, func(string) string { return "3" })
		}, two, nil, reader.PartDeploymentCheckpoint, events.CheckpointMismatch, checkpoint.ErrBadCheckpoint, "invalid signature for key " + roomtest.Deployment + "+"},
		{"entry: a cosignature line, 3 of 3", entry, func(b *reader.Evidence) {
			b.DeploymentProof.Checkpoint = editSigLine(b.DeploymentProof.Checkpoint, names[1], flipB64)
		}, all3, nil, reader.PartWitnessQuorum, events.WitnessQuorum, nil, "quorum 3-of-3 not met: 2 of 3 witnesses cosigned [" + names[0] + " " + names[2] + "]"},
		{"entry: two cosignatures removed, 2 of 3", entry, func(b *reader.Evidence) {
			b.DeploymentProof.Checkpoint = editSigLine(editSigLine(b.DeploymentProof.Checkpoint, names[0], nil), names[2], nil)
		}, two, nil, reader.PartWitnessQuorum, events.WitnessQuorum, nil, "quorum 2-of-3 not met: 1 of 3 witnesses cosigned [" + names[1] + "]"},
		{"record: a revoked witness, 3 of 3", record, func(*reader.Evidence) {}, revoked(t, wws, wws[2].Verifier), nil, reader.PartWitnessQuorum, events.WitnessQuorum, nil, "2 of 3 witnesses cosigned [" + names[0] + " " + names[1] + "]"},
		{"record: another publisher trusted", record, func(*reader.Evidence) {}, two, untrusted, reader.PartAttestation, events.CheckpointMismatch, checkpoint.ErrUntrustedPublisher, key.NodeID()},
		{"record: the deployment log's signature removed", record, func(b *reader.Evidence) {
			b.DeploymentProof.Checkpoint = editSigLine(b.DeploymentProof.Checkpoint, roomtest.Deployment, nil)
		}, two, nil, reader.PartDeploymentCheckpoint, events.CheckpointMismatch, checkpoint.ErrUntrustedPublisher, "deployment checkpoint signed only by "},
	} {
		b := clone(c.of)
		c.change(b)
		tr := trust
		if c.trust != nil {
			tr = c.trust
		}
		data, err := b.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		_, err = reader.VerifyEvidence(data, tr, c.policy)
		var ee *reader.EvidenceError
		if !errors.As(err, &ee) || ee.Part != c.part || ee.Code != c.code || (c.cause != nil && !errors.Is(err, c.cause)) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: %v\nwant %s %s %v %q", c.name, err, c.code, c.part, c.cause, c.reason)
		}
		if c.part == reader.PartWitnessQuorum {
			var qe *witness.QuorumError
			if !errors.As(err, &qe) {
				t.Errorf("%s: no QuorumError in %v", c.name, err)
			}
		}
	}
	// Another deployment: the room checkpoint's origin is not its.
	elsewhere, _ := roomtest.Trusting(t, key).WithOrigin("elsewhere.example/roompub")
	data, _ := entry.MarshalJSON()
	var ee *reader.EvidenceError
	if _, err := reader.VerifyEvidence(data, elsewhere, two); !errors.As(err, &ee) || ee.Part != reader.PartRoomCheckpoint {
		t.Errorf("another deployment's trust: %v", err)
	}
	if _, err := reader.VerifyEvidence(data, roomtest.Trusting(t, key), two); !errors.Is(err, checkpoint.ErrNoOrigin) {
		t.Errorf("no origin: %v", err)
	}
	// No bundle at all: the document's code, not what a publisher signed.
	dup := bytes.Replace(data, []byte(`{`), []byte(`{"format":"x",`), 1)
	for _, c := range []struct {
		name string
		doc  []byte
		code events.Code
	}{
		{"a member named twice", dup, events.MalformedJSON},
		{"a member missing", []byte(`{"format":"` + reader.EvidenceFormat + `"}`), events.SchemaInvalid},
		{"a member of another type, one unknown", bytes.Replace(data, []byte(`"stream_seq":`), []byte(`"stream_seq":"1",`+"\"x\":"), 1), events.SchemaInvalid},
		{"over the limit", append(bytes.Clone(data), bytes.Repeat([]byte(" "), reader.MaxEvidenceBytes)...), events.TooLarge},
	} {
		_, err := reader.VerifyEvidence(c.doc, trust, two)
		if !errors.As(err, &ee) || ee.Part != reader.PartBundle || ee.Code != c.code || !errors.Is(err, reader.ErrBadEvidence) {
			t.Errorf("%s: %v, want %s at %s", c.name, err, c.code, reader.PartBundle)
		}
	}

	// Heads and All: the chain's head is entry 9; all is 11 messages.
	heads, err := export(two, reader.ExportOptions{Heads: true})
	if err != nil || len(heads) != 1 || heads[0].Position != "seq:9" || heads[0].RoomProof.Index != 9 {
		t.Fatalf("heads: %v %v", heads, err)
	}
	everything, err := export(two, reader.ExportOptions{All: true, Refs: []string{rec.ComputedRef()}})
	if err != nil || len(everything) != 11 || everything[10].Position != "index:0" {
		t.Fatalf("all: %d %v", len(everything), err)
	}

	// A quorum no checkpoint meets: a fourth witness that never cosigns.
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	vkey, err := witness.NewVerifierKey("absent.example", pub)
	if err != nil {
		t.Fatal(err)
	}
	absent, err := witness.ParseVerifierKey(vkey)
	if err != nil {
		t.Fatal(err)
	}
	four := roomtest.Policy(t, append(slices.Clone(wws), witness.Witness{Name: "absent.example", Verifier: absent}), 4)
	got, err := export(four, reader.ExportOptions{Entries: []string{es[4].EntryHash(), "0000"}})
	var nw *reader.NotWitnessedError
	wantWhy := fmt.Sprintf("the deployment log's entry 0 (the room's checkpoint of size 10) is not covered by a witnessed checkpoint: the deployment log's latest checkpoint (size 2) has 3 valid cosignature(s) (%s), short of quorum 4-of-4 (the latest witnessed one has size 0)", strings.Join(names, ", "))
	if len(got) != 0 || !errors.As(err, &nw) || !errors.Is(err, reader.ErrNotWitnessed) || nw.Leaf != 4 || nw.Seq != 5 || nw.Reason != wantWhy ||
		!errors.Is(err, reader.ErrNoSuchMessage) || !strings.Contains(err.Error(), "entry_hash 0000 in "+roomA) {
		t.Fatalf("not witnessed: %d bundles, %v", len(got), err)
	}
}

// witnessedSize is the size of the deployment log's latest checkpoint
// that p's quorum cosigned (0 when none).
func witnessedSize(t *testing.T, e *roomtest.Env, trust *checkpoint.Trust, p *witness.Policy) uint64 {
	t.Helper()
	dl := room.DeploymentLog{}
	msgs := e.OnStreamSubject(dl.StreamName(), dl.Checkpoint())
	for i := len(msgs) - 1; i >= 0; i-- {
		c, err := checkpoint.ParseDeployment(msgs[i].Data, trust)
		if err != nil {
			continue
		}
		if _, err := p.CheckWith(msgs[i].Data, trust.OriginVerifiers()); err == nil {
			return c.Size
		}
	}
	return 0
}

// roomCheckpointOfSize is the room's stored checkpoint of that size.
func roomCheckpointOfSize(t *testing.T, e *roomtest.Env, roomID string, trust *checkpoint.Trust, size uint64) []byte {
	t.Helper()
	for _, m := range e.OnSubject(room.Subjects{}.Checkpoint(roomID)) {
		if c, err := checkpoint.Parse(m.Data, roomID, trust); err == nil && c.Size == size {
			return m.Data
		}
	}
	t.Fatalf("no checkpoint of %s of size %d", roomID, size)
	return nil
}

// editLine replaces line i (0-based) of a note with f of it.
func editLine(n []byte, i int, f func(string) string) []byte {
	lines := strings.Split(string(n), "\n")
	lines[i] = f(lines[i])
	return []byte(strings.Join(lines, "\n"))
}

// editSigLine replaces the signature line of name with f of it, or
// removes it when f is nil.
func editSigLine(n []byte, name string, f func(string) string) []byte {
	var out []string
	for _, l := range strings.Split(string(n), "\n") {
		if strings.HasPrefix(l, "— "+name+" ") {
			if f == nil {
				continue
			}
			l = f(l)
		}
		out = append(out, l)
	}
	return []byte(strings.Join(out, "\n"))
}

// flipB64 changes the base64 character before the last one of s.
func flipB64(s string) string {
	i := len(strings.TrimRight(s, "=")) - 2
	c := byte('A')
	if s[i] == 'A' {
		c = 'B'
	}
	return s[:i] + string(c) + s[i+1:]
}

// revoked is the 3-of-3 policy over ws with v's key revoked.
func revoked(t *testing.T, ws []witness.Witness, v *witness.Verifier) *witness.Policy {
	t.Helper()
	p := roomtest.Policy(t, ws, 3)
	if err := p.Revoke(v.String()); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestParseEvidenceStrict: the offline bundle verifies; a bundle with a
// member missing, added, spelled otherwise, named twice, null, of another format, with
// data after it, or with a proof that is no tlog-proof, is no bundle.
func TestParseEvidenceStrict(t *testing.T) {
	good, trust, policy := offlineBundle(t)
	v, err := reader.VerifyEvidence(good, trust, policy)
	if err != nil || v.LeafIndex != 0 || v.RoomSize != 1 || v.DeploymentSize != 1 || !v.AttestationChecked || len(v.Cosigners) != 0 || v.Quorum != "0-of-0" {
		t.Fatalf("offline bundle: %+v %v", v, err)
	}
	if !reader.IsEvidence(good) || !reader.IsEvidence(append([]byte("\ufeff"), good...)) || reader.IsEvidence([]byte(`{"room":"x","proof":[]}`)) {
		t.Fatal("IsEvidence")
	}
	for _, c := range []struct{ name, from, to, want string }{
		{"missing", `"position": "index:0",`, ``, `member "position" is missing`},
		{"null", `"position": "index:0"`, `"position": null`, `member "position" is missing or null`},
		{"added", `"room":`, `"extra": 1, "room":`, `unknown field "extra"`},
		{"spelled otherwise", `"room":`, `"ROOM": "room:fuzz", "room":`, `members other than`},
		{"named twice", `"room":`, `"room": "room:other", "room":`, `not strict JSON: Duplicate key: "room"`},
		{"format", `roompub-evidence/v1`, `roompub-evidence/v2`, `format "roompub-evidence/v2"`},
		{"data after", "\n}", "\n} {}", `invalid character '{' after top-level value`},
		{"not base64", `"data": "`, `"data": "!`, `illegal base64`},
		{"proof", `c2sp.org/tlog-proof@v1\nextra`, `c2sp.org/tlog-proof@v1\nextra \nextra`, `room_proof: proof does not verify: tlog-proof line 2`},
		{"byte order mark", "{", "\ufeff{", `the bundle starts with a UTF-8 byte order mark (bytes EF BB BF): an evidence bundle is UTF-8 without one`},
	} {
		bad := strings.Replace(string(good), c.from, c.to, 1)
		if bad == string(good) {
			t.Fatalf("%s: %q not in the bundle", c.name, c.from)
		}
		_, err := reader.VerifyEvidence([]byte(bad), trust, policy)
		var ee *reader.EvidenceError
		if !errors.As(err, &ee) || ee.Part != reader.PartBundle || !errors.Is(err, reader.ErrBadEvidence) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
