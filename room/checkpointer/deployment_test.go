package checkpointer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/witness"
)

const tDeployment = roomtest.Deployment

// deploymentLog reads the deployment log's stream: its entries and its
// checkpoints, in stream order.
func deploymentLog(t *testing.T, e *roomtest.Env) (entries, ckpts []*jetstream.RawStreamMsg) {
	t.Helper()
	d := room.DeploymentLog{}
	s, err := e.Js.Stream(context.Background(), d.StreamName())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		switch m.Subject {
		case d.Entry():
			entries = append(entries, m)
		case d.Checkpoint():
			ckpts = append(ckpts, m)
		default:
			t.Fatalf("seq %d on %s", seq, m.Subject)
		}
	}
	return entries, ckpts
}

// TestDeploymentLogWitnessed runs the deployment log against three real
// litewitness processes: its entries are the rooms' checkpoints as
// stored, in order; each of its checkpoints covers them and carries the
// cosignatures of the witnesses that answered; a stopped witness leaves a
// quorum of two, and once back it cosigns the same checkpoint in a later
// round; a new checkpointer, which knows no witness's size, learns it
// from their 409 and is cosigned again.
func TestDeploymentLogWitnessed(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	ws, wws := roomtest.StartWitnesses(t, 3, key)
	opts := checkpointer.Options{Key: key, Origin: tDeployment, Every: 5, Interval: time.Hour,
		Deployment: checkpointer.DeploymentOptions{Interval: 100 * time.Millisecond, Witnesses: wws}}
	reg := prometheus.NewRegistry()
	first := opts
	first.Registerer = reg
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), first)
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	// witnessed checks the witness gauges after a round of the log at
	// size: cosigs cosignatures, cosigned within the last minute.
	witnessed := func(size, cosigs float64) {
		t.Helper()
		got, _ := roomtest.MetricValue(t, reg, "roompub_witness_cosigned_size_entries")
		n, _ := roomtest.MetricValue(t, reg, "roompub_witness_round_cosignatures")
		at, _ := roomtest.MetricValue(t, reg, "roompub_witness_cosigned_timestamp_seconds")
		if age := float64(time.Now().UnixNano())/1e9 - at; got != size || n != cosigs || age < 0 || age > 60 {
			t.Fatalf("witness gauges: cosigned size %v, round cosignatures %v, age %v s; want %v, %v, under a minute", got, n, age, size, cosigs)
		}
	}
	trust, err := roomtest.Trusting(t, key).WithOrigin(tDeployment)
	if err != nil {
		t.Fatal(err)
	}
	logV, err := note.NewVerifier(roomtest.DeploymentVKey(t, key))
	if err != nil {
		t.Fatal(err)
	}
	policy := func(k int) *witness.Policy { return roomtest.Policy(t, wws, k) }
	rooms := []string{"room:dl-a", "room:dl+b"}
	esA, _ := roomtest.Journal(t, "run-d", "cap-a", 10)
	esB, _ := roomtest.Journal(t, "run-d", "cap-b", 10)
	appendTo := func(r string, from, to int) {
		t.Helper()
		es := esA
		if r == rooms[1] {
			es = esB
		}
		if res, err := gate.AppendJournal(ctx, r, roomtest.Lines(es[from:to]), nil); err != nil || res.Stored != to-from {
			t.Fatalf("%+v %v", res, err)
		}
	}
	// waitLog waits for the log to hold want entries and a checkpoint of
	// that size, and checks both.
	waitLog := func(want int, cosigners int) *jetstream.RawStreamMsg {
		t.Helper()
		var last *jetstream.RawStreamMsg
		roomtest.WaitFor(t, 20*time.Second, fmt.Sprintf("a deployment checkpoint of size %d", want), func() bool {
			entries, ckpts := deploymentLog(t, e)
			if len(entries) != want || len(ckpts) == 0 {
				return false
			}
			last = ckpts[len(ckpts)-1]
			c, err := checkpoint.ParseDeployment(last.Data, trust)
			if err != nil || c.Size != uint64(want) {
				return false
			}
			got, _ := policy(cosigners).Check(last.Data, logV)
			return len(got) == cosigners
		})
		entries, _ := deploymentLog(t, e)
		// The entries are the rooms' checkpoints, byte for byte, in the
		// order they were stored.
		var roomCkpts [][]byte
		for _, m := range e.Stored() {
			if p, err := (room.Subjects{}).Parse(m.Subject); err == nil && p.Kind == room.KindCheckpoint {
				roomCkpts = append(roomCkpts, m.Data)
			}
		}
		if len(roomCkpts) < want {
			t.Fatalf("%d room checkpoints, %d entries", len(roomCkpts), want)
		}
		tree := checkpoint.NewTree()
		for i, m := range entries {
			if !bytes.Equal(m.Data, roomCkpts[i]) {
				t.Fatalf("entry %d is not the room checkpoint %d:\n%s\n%s", i, i, m.Data, roomCkpts[i])
			}
			tree.Append(checkpoint.EntryLeaf(m.Data))
		}
		c, err := checkpoint.ParseDeployment(last.Data, trust)
		if err != nil || c.Root != tree.Root() || c.Origin != tDeployment || c.Signer != key.NodeID() {
			t.Fatalf("deployment checkpoint %+v, %v; want the root of the entries", c, err)
		}
		got, err := policy(cosigners).Check(last.Data, logV)
		if err != nil || len(got) != cosigners {
			t.Fatalf("cosigned by %v: %v; want %d witnesses", got, err, cosigners)
		}
		return last
	}

	appendTo(rooms[0], 0, 5)
	appendTo(rooms[1], 0, 5)
	waitLog(2, 3)
	witnessed(2, 3)

	ws[1].Stop()
	appendTo(rooms[0], 5, 10)
	last := waitLog(3, 2)
	witnessed(3, 2)
	if v, _ := roomtest.MetricValue(t, reg, "roompub_witness_answers_total", "answer", "failed"); v < 1 {
		t.Fatalf("failed witness answers: %v, want at least the stopped witness's", v)
	}
	var qe *witness.QuorumError
	if _, err := policy(3).Check(last.Data, logV); !errors.As(err, &qe) || len(qe.Cosigned) != 2 {
		t.Fatalf("3 of 3 with a witness stopped: %v", err)
	}

	// The witness is back: the round is run again for the same
	// checkpoint, without the log growing, and all three cosign it.
	ws[1].Start()
	waitLog(3, 3)
	witnessed(3, 3)

	// A new checkpointer knows no witness's size: the witnesses' 409
	// tell it.
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	ckp2, _ := roomtest.StartCheckpointer(t, e.Connect(), opts)
	gate = roomtest.AttestingGate(e, e.Connect(), key, ckp2, ingest.GateOptions{})
	appendTo(rooms[1], 5, 10)
	waitLog(4, 3)
}

// TestDeploymentKeyRotation rotates the publisher key, which signs the
// deployment log under its origin too: the witnesses are told the new
// key first (witnessctl add-key), a serve with the new key trusting the
// old one goes on with the log, whose next checkpoint the witnesses
// cosign as an extension of the old key's; readers trusting both keys
// find everything witnessed. Once the witnesses drop the old key
// (del-key), a checkpoint it signs is refused (403).
func TestDeploymentKeyRotation(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	oldKey, newKey := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	ws, wws := roomtest.StartWitnesses(t, 3, oldKey)
	dopts := checkpointer.DeploymentOptions{Interval: 50 * time.Millisecond, Witnesses: wws}
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: oldKey, Origin: tDeployment, Every: 5, Interval: time.Hour, Deployment: dopts})
	gate := roomtest.AttestingGate(e, e.Nc, oldKey, ckp, ingest.GateOptions{})
	esA, _ := roomtest.Journal(t, "run-r", "cap-a", 10)
	if r, err := gate.AppendJournal(ctx, "room:rot-a", roomtest.Lines(esA[:5]), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	trust, err := roomtest.Trusting(t, oldKey, newKey).WithOrigin(tDeployment)
	if err != nil {
		t.Fatal(err)
	}
	waitWitnessed := func(size uint64, signer string) {
		t.Helper()
		roomtest.WaitFor(t, 20*time.Second, fmt.Sprintf("a deployment checkpoint of %d", size), func() bool {
			_, ckpts := deploymentLog(t, e)
			if len(ckpts) == 0 {
				return false
			}
			c, err := checkpoint.ParseDeployment(ckpts[len(ckpts)-1].Data, trust)
			return err == nil && c.Size == size && c.Signer == signer
		})
		rep, err := reader.Audit(ctx, e.Js, reader.AuditOptions{Validator: e.V, Trust: trust, Witnessing: &reader.Witnessing{Policy: roomtest.Policy(t, wws, 3)}})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Clean() || rep.Witness.Witnessed == nil || rep.Witness.Witnessed.Size != size || len(rep.Witness.Witnessed.Cosigners) != 3 {
			t.Fatalf("audit at %d: clean %v %v, %+v", size, rep.Clean(), rep.Violations, rep.Witness)
		}
	}
	waitWitnessed(1, oldKey.NodeID())
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	for _, w := range ws {
		w.AddKey(tDeployment, roomtest.DeploymentVKey(t, newKey))
	}
	ckp2, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: newKey, TrustedPublishers: []string{oldKey.NodeID()},
		Origin: tDeployment, Every: 5, Interval: time.Hour, Deployment: dopts})
	gate = roomtest.AttestingGate(e, e.Connect(), newKey, ckp2, ingest.GateOptions{TrustedPublishers: []string{oldKey.NodeID()}})
	if r, err := gate.AppendJournal(ctx, "room:rot-a", roomtest.Lines(esA[5:]), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	waitWitnessed(2, newKey.NodeID())

	// The rotation ends: the witnesses forget the old key.
	for _, w := range ws {
		w.DelKey(tDeployment, roomtest.DeploymentVKey(t, oldKey))
	}
	oldSigner, err := checkpoint.NewNamedNoteSigner(oldKey, tDeployment)
	if err != nil {
		t.Fatal(err)
	}
	_, ckpts := deploymentLog(t, e)
	c, _ := checkpoint.ParseDeployment(ckpts[len(ckpts)-1].Data, trust)
	replay, err := checkpoint.Sign(oldSigner, tDeployment, c.Size, c.Root)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wws {
		cl, err := witness.NewClient(w.URL)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.AddCheckpoint(ctx, c.Size, nil, replay); !errors.Is(err, witness.ErrForbidden) {
			t.Fatalf("witness %s on the old key after del-key: %v, want 403", w.Name, err)
		}
	}
	esB, _ := roomtest.Journal(t, "run-r", "cap-b", 5)
	if r, err := gate.AppendJournal(ctx, "room:rot-b", roomtest.Lines(esB), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	waitWitnessed(3, newKey.NodeID())
}

// TestDeploymentLogFinal: the room checkpoints Stop writes (not read back)
// enter the deployment log and its final checkpoint, cosigned.
func TestDeploymentLogFinal(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	_, wws := roomtest.StartWitnesses(t, 3, key)
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Origin: tDeployment, Every: 100, Interval: time.Hour,
		Deployment: checkpointer.DeploymentOptions{Interval: time.Hour, Witnesses: wws}})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	es, _ := roomtest.Journal(t, "run-final", "cap-final", 3)
	if r, err := gate.AppendJournal(ctx, "room:final", roomtest.Lines(es), nil); err != nil || r.Stored != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	if entries, _ := deploymentLog(t, e); len(entries) != 0 {
		t.Fatalf("%d entries before Stop", len(entries))
	}
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	entries, ckpts := deploymentLog(t, e)
	roomCkpts := e.OnSubject(room.Subjects{}.Checkpoint("room:final"))
	if len(roomCkpts) != 1 || len(entries) != 1 || !bytes.Equal(entries[0].Data, roomCkpts[0].Data) || len(ckpts) != 1 {
		t.Fatalf("after Stop: %d room checkpoints, %d entries, %d deployment checkpoints", len(roomCkpts), len(entries), len(ckpts))
	}
	trust, _ := roomtest.Trusting(t, key).WithOrigin(tDeployment)
	if c, err := checkpoint.ParseDeployment(ckpts[0].Data, trust); err != nil || c.Size != 1 {
		t.Fatalf("final deployment checkpoint %+v, %v", c, err)
	}
	if got, err := roomtest.Policy(t, wws, 3).CheckWith(ckpts[0].Data, trust.OriginVerifiers()); err != nil || len(got) != 3 {
		t.Fatalf("cosigned by %v: %v", got, err)
	}
}

// TestDeploymentLogGuards: serve keeps one origin per deployment log and
// never makes a lost log anew: a start with another origin, and a start
// after the log's stream was deleted while the rooms hold checkpoints of
// its origin, are refused with ErrDeployment; an entry written around
// serve is logged, and its Roompub-Source header, no one's word, is not
// taken: one naming a room stream seq far ahead made the log drop every
// later checkpoint of that stream.
func TestDeploymentLogGuards(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	opts := checkpointer.Options{Key: key, Origin: tDeployment, Every: 5, Interval: time.Hour,
		Deployment: checkpointer.DeploymentOptions{Interval: 50 * time.Millisecond}}
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), opts)
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	es, _ := roomtest.Journal(t, "run-g", "cap-g", 5)
	if r, err := gate.AppendJournal(ctx, "room:guard", roomtest.Lines(es), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "the deployment log's checkpoint", func() bool {
		_, ckpts := deploymentLog(t, e)
		return len(ckpts) > 0
	})
	jm := &nats.Msg{Subject: room.DeploymentLog{}.Entry(), Data: []byte("junk"), Header: nats.Header{}}
	jm.Header.Set(room.SourceHeader, room.FormatSource(room.DefaultStream, 1<<40))
	ack, err := e.Js.PublishMsg(ctx, jm)
	if err != nil {
		t.Fatal(err)
	}
	junk := ack.Sequence
	roomtest.WaitFor(t, 10*time.Second, "the junk entry logged", func() bool {
		for _, l := range logs.FilterMessageSnippet("no room checkpoint a trusted publisher signed").All() {
			if l.ContextMap()["stream_seq"] == junk {
				return true
			}
		}
		return false
	})
	// The room's next checkpoint is still logged after the junk entry.
	more, _ := roomtest.Journal(t, "run-g2", "cap-g2", 5)
	if r, err := gate.AppendJournal(ctx, "room:guard", roomtest.Lines(more), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "the room's next checkpoint in the deployment log", func() bool {
		entries, _ := deploymentLog(t, e)
		return len(entries) > 0 && entries[len(entries)-1].Sequence > junk
	})
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	other := opts
	other.Origin = "other.example.org/roompub"
	if _, err := checkpointer.Start(ctx, e.Connect(), other); !errors.Is(err, checkpointer.ErrDeployment) ||
		!strings.Contains(err.Error(), `signed for origin "`+tDeployment+`", not "other.example.org/roompub"`) {
		t.Fatalf("another origin: %v", err)
	}
	if err := e.Js.DeleteStream(ctx, room.DeploymentLog{}.StreamName()); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpointer.Start(ctx, e.Connect(), opts); !errors.Is(err, checkpointer.ErrDeployment) ||
		!strings.Contains(err.Error(), "is gone, but room:guard's checkpoint") {
		t.Fatalf("the log deleted: %v", err)
	}
}

// TestDeploymentRetryKeepsCosignatures: a witness round run again for the
// checkpoint the log holds (a witness was missing) stores nothing while
// it adds no cosignature: it stored, every retry, a copy with only that
// round's, so with every witness down the newest checkpoint of the size
// lost the quorum the log had (the tiles' /checkpoint serves the newest)
// and the log grew by one copy a retry. A witness back from its outage
// adds its cosignature to those the stored one has.
func TestDeploymentRetryKeepsCosignatures(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	ws, wws := roomtest.StartWitnesses(t, 2, key)
	opts := checkpointer.Options{Key: key, Origin: tDeployment, Every: 5, Interval: time.Hour,
		Deployment: checkpointer.DeploymentOptions{Interval: 100 * time.Millisecond, Witnesses: wws}}
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), opts)
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	logV, err := note.NewVerifier(roomtest.DeploymentVKey(t, key))
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := roomtest.Policy(t, wws, 1), roomtest.Policy(t, wws, 2)
	ws[1].Stop()
	es, _ := roomtest.Journal(t, "run-r", "cap-r", 5)
	if _, err := gate.AppendJournal(ctx, "room:rr", roomtest.Lines(es), nil); err != nil {
		t.Fatal(err)
	}
	roomtest.WaitFor(t, 20*time.Second, "a checkpoint cosigned by witness 0", func() bool {
		_, ck := deploymentLog(t, e)
		return len(ck) > 0 && checkOK(p1, ck[len(ck)-1].Data, logV)
	})
	_, before := deploymentLog(t, e)
	ws[0].Stop()
	time.Sleep(2 * time.Second) // four retry rounds (5 intervals each)
	_, after := deploymentLog(t, e)
	if len(after) != len(before) || !checkOK(p1, after[len(after)-1].Data, logV) {
		t.Fatalf("with every witness down: %d deployment checkpoints (%d before), the newest cosigned by one witness: %v\n%s",
			len(after), len(before), checkOK(p1, after[len(after)-1].Data, logV), after[len(after)-1].Data)
	}
	ws[1].Start()
	roomtest.WaitFor(t, 20*time.Second, "the checkpoint cosigned by both witnesses", func() bool {
		_, ck := deploymentLog(t, e)
		return checkOK(p2, ck[len(ck)-1].Data, logV)
	})
}

func checkOK(p *witness.Policy, data []byte, v note.Verifier) bool {
	_, err := p.Check(data, v)
	return err == nil
}
