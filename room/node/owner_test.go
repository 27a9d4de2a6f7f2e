package node_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// TestChainOwnerSecure: in secure mode a second harness that knows a
// chain's head (head endpoint) and its journal's lines can neither
// extend the chain, resend its lines, nor claim its id in another room;
// the owner finishes it; every entry carries the owner, and a trusting
// audit verifies the attestations that bind it and names the owner.
func TestChainOwnerSecure(t *testing.T) {
	for _, place := range []string{"embedded", "authconf"} {
		t.Run(place, func(t *testing.T) { chainOwnerSecure(t, place) })
	}
}

func chainOwnerSecure(t *testing.T, place string) {
	id := newIdentities(t, false)
	url := ""
	if place == "authconf" {
		conf, err := id.opts.AuthorizationConf("")
		if err != nil {
			t.Fatal(err)
		}
		url = startConfServer(t, conf).ClientURL()
	}
	p := startSecureServe(t, id, url)
	ctx := context.Background()
	owner := dial(t, p.url, userHarness, id.as(userHarness))
	other := dial(t, p.url, userHarness2, id.as(userHarness2))
	admin := dial(t, p.url, userAdmin, id.as(userAdmin))
	solver := dial(t, p.url, "solver", id.asSolver(t))
	mine, theirs := clientAs(owner, userHarness), clientAs(other, userHarness2)

	data := mustRead(t, roomtest.Testdata("samples/capsules/csv-dedupe/journal.ndjson"))
	lines := bytes.SplitAfter(data, []byte("\n"))[:14]
	first, err := mine.AppendJournal(ctx, "room:secure", nil, bytes.Join(lines[:7], nil))
	if err != nil || first.Stored != 7 {
		t.Fatalf("owner's first 7 lines: %+v %v", first, err)
	}
	h, err := theirs.Head(ctx, first.Chain)
	if err != nil || h.Next != 7 {
		t.Fatalf("the other harness reads the head: %+v %v", h, err)
	}
	for _, tc := range []struct {
		name, room string
		body       []byte
	}{
		{"the next entry", "room:secure", lines[7]},
		{"a stored entry again", "room:secure", lines[0]},
		{"the chain id in another room", "room:elsewhere", lines[7]},
	} {
		reply, err := theirs.AppendJournal(ctx, tc.room, nil, tc.body)
		if err != nil || reply.Refused != 1 || reply.Items[0].Code != events.NotChainOwner {
			t.Fatalf("%s: %+v %v, want not_chain_owner", tc.name, reply, err)
		}
		it := reply.Items[0]
		if it.At == nil || it.At.Line != 1 || !bytes.Contains([]byte(it.Reason), []byte("identity harness in room:secure")) {
			t.Fatalf("%s: where and why: %+v", tc.name, it)
		}
	}
	rest, err := mine.AppendJournal(ctx, "room:secure", nil, bytes.Join(lines[7:], nil))
	if err != nil || rest.Stored != 7 {
		t.Fatalf("owner's last 7 lines: %+v %v", rest, err)
	}
	// The whole journal, line for line what the owner stored, shipped by
	// the other harness: not "already stored" (it is the owner's), but
	// refused not_chain_owner naming the owner; the owner's own shipper
	// finds it all stored.
	dir := roomtest.Testdata("samples/capsules/csv-dedupe")
	res, err := client.ShipCapsule(ctx, theirs, dir, "room:secure", client.ShipOptions{})
	if err != nil || res.Refused == nil || res.Refused.Code != events.NotChainOwner || res.Skipped != 0 || res.Stored != 0 ||
		res.Refused.Expected != userHarness || res.Refused.Actual != room.IdentityName(room.IdentityToken(userHarness2)) || res.Refused.At.Line != 1 ||
		res.Head.Owner != userHarness {
		t.Fatalf("the other harness ships the owner's journal: %+v %v", res, err)
	}
	if res, err := client.ShipCapsule(ctx, mine, dir, "room:secure", client.ShipOptions{}); err != nil || res.Refused != nil || res.Skipped != 14 {
		t.Fatalf("the owner ships it again: %+v %v", res, err)
	}
	st, err := admin.js.Stream(ctx, room.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 14; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(room.HeaderOwner); got != userHarness {
			t.Fatalf("stream seq %d: owner %q, want %q", seq, got, userHarness)
		}
	}
	if n := leavesNow(t, admin); n != 14 {
		t.Fatalf("the stream holds %d leaves, want 14", n)
	}

	trust, err := checkpoint.NewTrust(p.pubKey.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	v, err := validate.New(validate.WithTrustedHosts(roomtest.ReferenceHost))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := reader.Audit(ctx, solver.js, reader.AuditOptions{Validator: v, Trust: trust, Read: reader.ReadDirect})
	if err != nil || !rep.Clean() || rep.Totals.Entries != 14 || len(rep.Chains) != 1 || rep.Chains[0].Owner != userHarness {
		t.Fatalf("trusting audit: %+v %v", rep, err)
	}
}

// TestChainOwnerReader: a reader that trusts no publisher still holds a
// chain to its first entry's owner: an entry written straight into the
// stream under another owner is set aside not_chain_owner, and the chain
// is broken from there. A trusting reader sets it aside earlier: its
// attestation, copied from the genuine entry, binds the genuine owner.
func TestChainOwnerReader(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	entries, data := roomtest.Journal(t, "run-owner", "cap-owner", 6)
	_ = entries
	lines := bytes.SplitAfter(data, []byte("\n"))[:6]
	reply, err := e.Gate.AppendJournalAs(ctx, "room:owner", "alice", bytes.Join(lines[:5], nil), nil)
	if err != nil || reply.Stored != 5 {
		t.Fatalf("alice: %+v %v", reply, err)
	}
	bob, err := e.Gate.AppendJournalAs(ctx, "room:owner", "bob", lines[5], nil)
	if err != nil || bob.Refused != 1 || bob.Items[0].Code != events.NotChainOwner || bob.Items[0].Problems[0].Expected != "alice" || bob.Items[0].Problems[0].Actual != "bob" {
		t.Fatalf("bob: %+v %v", bob, err)
	}
	anon, err := e.Gate.AppendJournal(ctx, "room:owner", lines[5], nil)
	if err != nil || anon.Refused != 1 || anon.Items[0].Code != events.NotChainOwner {
		t.Fatalf("anonymous: %+v %v", anon, err)
	}
	// Straight into the stream, as bob.
	subj := room.Subjects{}.Journal("room:owner", events.ChainKey{RunID: "run-owner", CapsuleID: "cap-owner"})
	msg := &nats.Msg{Subject: subj, Data: bytes.TrimSuffix(lines[5], []byte("\n")), Header: nats.Header{room.HeaderOwner: []string{"bob"}}}
	if _, err := e.Js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	rep, err := reader.Audit(ctx, e.Js, reader.AuditOptions{Validator: e.V})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Totals.Entries != 5 || rep.Totals.SetAside != 1 || len(rep.Violations) != 1 || rep.Violations[0].Code != events.NotChainOwner ||
		rep.Violations[0].Seq != 6 || len(rep.Chains) != 1 || rep.Chains[0].Owner != "alice" || rep.Chains[0].Verdict != "broken" {
		t.Fatalf("audit: %+v", rep)
	}
}

// TestChainOwnerCheckpointer: a checkpointer that did not append an owned
// chain's entries (another publisher's gate did) verifies their
// attestations, which bind the owner, and makes them leaves.
func TestChainOwnerCheckpointer(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	keyA, keyB := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	const roomID = "room:owned"
	roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: keyB, TrustedPublishers: []string{keyA.NodeID()}, Every: 5, Interval: 100 * time.Millisecond})
	gate := roomtest.AttestingGate(e, e.Connect(), keyA, nil, ingest.GateOptions{})
	es, _ := roomtest.Journal(t, "run-o", "cap-o", 10)
	if r, err := gate.AppendJournalAs(ctx, roomID, "alice", roomtest.Lines(es), nil); err != nil || r.Stored != 10 {
		t.Fatalf("%+v %v", r, err)
	}
	trust := roomtest.Trusting(t, keyA, keyB)
	roomtest.WaitFor(t, 10*time.Second, "a checkpoint of size 10", func() bool {
		cks := roomtest.Rebuild(e, roomID, trust).Checkpoints
		return len(cks) > 0 && cks[len(cks)-1].Size == 10
	})
	roomtest.Rebuild(e, roomID, trust).CheckCheckpoints(t)
}
