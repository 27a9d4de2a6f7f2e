package checkpointer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
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
// quorum of two; a new checkpointer, which knows no witness's size,
// learns it from their 409 and is cosigned again.
func TestDeploymentLogWitnessed(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	ws, wws := roomtest.StartWitnesses(t, 3, key)
	opts := checkpointer.Options{Key: key, Origin: tDeployment, Every: 5, Interval: time.Hour,
		Deployment: checkpointer.DeploymentOptions{Interval: 100 * time.Millisecond, Witnesses: wws}}
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), opts)
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
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
			return err == nil && c.Size == uint64(want)
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

	ws[1].Stop()
	appendTo(rooms[0], 5, 10)
	last := waitLog(3, 2)
	var qe *witness.QuorumError
	if _, err := policy(3).Check(last.Data, logV); !errors.As(err, &qe) || len(qe.Cosigned) != 2 {
		t.Fatalf("3 of 3 with a witness stopped: %v", err)
	}

	// A new checkpointer knows no witness's size: the witnesses' 409
	// tell it.
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	ws[1].Start()
	ckp2, _ := roomtest.StartCheckpointer(t, e.Connect(), opts)
	gate = roomtest.AttestingGate(e, e.Connect(), key, ckp2, ingest.GateOptions{})
	appendTo(rooms[1], 5, 10)
	waitLog(4, 3)
}
