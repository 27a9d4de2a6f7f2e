package reader_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
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

// TestAuditWitnessed: an audit with a 2-of-3 witness policy verifies the
// deployment log the checkpointer kept with three real litewitness
// processes and finds each room witnessed; then the two split views:
//
//   - a room checkpoint the publisher key signs over another history of a
//     room, appended to the deployment log, keeps the log consistent, so
//     the witnesses cosign it; the reader refuses that room (split view)
//     and the other room stays verified;
//   - a deployment checkpoint the publisher key signs over another history
//     is refused by every witness (422) and by the reader, and the
//     witnessed checkpoint before it stays verified.
func TestAuditWitnessed(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	ws, wws := roomtest.StartWitnesses(t, 3, key)
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Origin: roomtest.Deployment, Every: 5, Interval: time.Hour,
		Deployment: checkpointer.DeploymentOptions{Interval: 50 * time.Millisecond, Witnesses: wws}})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	const roomA, roomB = "room:w-a", "room:w/b"
	esA, _ := roomtest.Journal(t, "run-w", "cap-a", 10)
	esB, _ := roomtest.Journal(t, "run-w", "cap-b", 10)
	for _, p := range []struct {
		room string
		es   []*events.Entry
	}{{roomA, esA}, {roomB, esB}} {
		if r, err := gate.AppendJournal(ctx, p.room, roomtest.Lines(p.es), nil); err != nil || r.Stored != 10 {
			t.Fatalf("%+v %v", r, err)
		}
	}
	dl := room.DeploymentLog{}
	// One room checkpoint each (the 10 entries came in one batch), then a
	// deployment checkpoint of the 2 entries.
	roomtest.WaitFor(t, 20*time.Second, "the deployment log's checkpoint of 2", func() bool {
		return e.CountOnStream(dl.StreamName(), dl.Entry()) == 2 && lastDeploymentSize(t, e, key) == 2
	})
	trust, err := roomtest.Trusting(t, key).WithOrigin(roomtest.Deployment)
	if err != nil {
		t.Fatal(err)
	}
	audit := func(k int) *reader.AuditReport {
		t.Helper()
		rep, err := reader.Audit(ctx, e.Js, reader.AuditOptions{Validator: e.V, Trust: trust,
			Witnessing: &reader.Witnessing{Policy: roomtest.Policy(t, wws, k)}})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := audit(2)
	if !rep.Clean() || rep.Witness == nil || rep.Witness.Entries != 2 || rep.Witness.Witnessed == nil ||
		rep.Witness.Witnessed.Size != 2 || len(rep.Witness.Witnessed.Cosigners) != 3 || rep.Witness.Quorum != "2-of-3" {
		t.Fatalf("clean %v, violations %v, witness %+v", rep.Clean(), rep.Violations, rep.Witness)
	}
	for _, f := range rep.Checkpoints {
		if f.Witnessed == nil || f.Witnessed.Size != 10 || f.Latest.Size != 10 {
			t.Fatalf("room %s: witnessed %+v latest %+v", f.RoomID, f.Witnessed, f.Latest)
		}
	}

	// A forged room checkpoint: room A at size 10 with another root,
	// appended to the deployment log, which the writer then signs and the
	// witnesses cosign.
	rs, err := checkpoint.NewNamedNoteSigner(key, checkpoint.RoomOrigin(roomtest.Deployment, roomA))
	if err != nil {
		t.Fatal(err)
	}
	forgedRoom, err := checkpoint.Sign(rs, checkpoint.RoomOrigin(roomtest.Deployment, roomA), 10, sha256.Sum256([]byte("room A elsewhere")))
	if err != nil {
		t.Fatal(err)
	}
	entrySeq := roomtest.PublishRaw(t, e.Js, dl.Entry(), forgedRoom)
	roomtest.WaitFor(t, 20*time.Second, "a witnessed deployment checkpoint of 3", func() bool { return lastDeploymentSize(t, e, key) == 3 })
	rep = audit(3)
	witnessedBefore := rep.Witness.Witnessed
	if rep.Witness.Witnessed == nil || rep.Witness.Witnessed.Size != 3 || len(rep.Witness.Witnessed.Cosigners) != 3 {
		t.Fatalf("the witnesses did not cosign the consistent log: %+v", rep.Witness)
	}
	var split []string
	for _, v := range rep.Violations {
		split = append(split, fmt.Sprintf("%s %s %s", v.Code, v.RoomID, v.Reason))
	}
	if len(split) != 1 || !strings.HasPrefix(split[0], "checkpoint_mismatch "+roomA+" split view: the deployment log's entry 2 (stream seq "+fmt.Sprint(entrySeq)+")") {
		t.Fatalf("want room A refused as a split view, got %q", split)
	}
	for _, f := range rep.Checkpoints {
		switch f.RoomID {
		case roomA:
			if f.Refused == "" {
				t.Fatalf("room A not refused: %+v", f)
			}
		case roomB:
			if f.Refused != "" || f.Witnessed == nil || f.Witnessed.Size != 10 {
				t.Fatalf("room B: %+v", f)
			}
		}
	}
	// A forged deployment checkpoint: same size, another root.
	signer, err := checkpoint.NewNamedNoteSigner(key, roomtest.Deployment)
	if err != nil {
		t.Fatal(err)
	}
	forgedDL, err := checkpoint.Sign(signer, roomtest.Deployment, 3, sha256.Sum256([]byte("another history")))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wws {
		c, err := witness.NewClient(w.URL)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.AddCheckpoint(ctx, 3, nil, forgedDL); !errors.Is(err, witness.ErrInconsistent) {
			t.Fatalf("witness %s on a forged deployment checkpoint: %v, want 422 inconsistent", w.Name, err)
		}
	}
	var qe *witness.QuorumError
	if _, err := roomtest.Policy(t, wws, 2).CheckWith(forgedDL, trust.OriginVerifiers()); !errors.As(err, &qe) || len(qe.Cosigned) != 0 {
		t.Fatalf("policy on the forged checkpoint: %v", err)
	}
	forgedSeq := roomtest.PublishRaw(t, e.Js, dl.Checkpoint(), forgedDL)
	rep = audit(2)
	var dlAside *reader.SetAside
	for i, v := range rep.Violations {
		if v.Seq == forgedSeq {
			dlAside = &rep.Violations[i]
		}
	}
	if len(rep.Violations) != 2 || dlAside == nil || dlAside.Code != events.CheckpointMismatch || !strings.Contains(dlAside.Reason, "forked") {
		t.Fatalf("after a forged deployment checkpoint: %v", rep.Violations)
	}
	if w := rep.Witness.Witnessed; w == nil || w.Size != witnessedBefore.Size || w.Seq != witnessedBefore.Seq || rep.Witness.Refused != 1 {
		t.Fatalf("the genuine history is no longer verified: %+v", rep.Witness)
	}

	_ = ws
}

// lastDeploymentSize is the size of the deployment log's latest
// checkpoint (0 when none).
func lastDeploymentSize(t *testing.T, e *roomtest.Env, key *events.HostKey) uint64 {
	t.Helper()
	dl := room.DeploymentLog{}
	msgs := e.OnStreamSubject(dl.StreamName(), dl.Checkpoint())
	if len(msgs) == 0 {
		return 0
	}
	trust, _ := roomtest.Trusting(t, key).WithOrigin(roomtest.Deployment)
	c, err := checkpoint.ParseDeployment(msgs[len(msgs)-1].Data, trust)
	if err != nil {
		return 0
	}
	return c.Size
}

// TestFollowWitnessed: a follower with a witness policy serves both rooms
// while the deployment log matches them; once a room checkpoint of
// another history of room A lands in the deployment log, it refuses room
// A (a split view, set aside) and serves nothing more of it, while room B
// goes on.
func TestFollowWitnessed(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key := roomtest.NewPublisherKey(t)
	_, wws := roomtest.StartWitnesses(t, 3, key)
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Origin: roomtest.Deployment, Every: 5, Interval: time.Hour,
		Deployment: checkpointer.DeploymentOptions{Interval: 50 * time.Millisecond, Witnesses: wws}})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	trust, err := roomtest.Trusting(t, key).WithOrigin(roomtest.Deployment)
	if err != nil {
		t.Fatal(err)
	}
	const roomA, roomB = "room:f-a", "room:f-b"
	esA, _ := roomtest.Journal(t, "run-f", "cap-a", 20)
	esB, _ := roomtest.Journal(t, "run-f", "cap-b", 20)
	ship := func(roomID string, es []*events.Entry) {
		t.Helper()
		if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es), nil); err != nil || r.Stored != len(es) {
			t.Fatalf("%+v %v", r, err)
		}
	}
	ship(roomA, esA[:10])
	ship(roomB, esB[:10])
	fl := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "witnessed", Validator: e.V, Trust: trust,
		Witnessing: &reader.Witnessing{Policy: roomtest.Policy(t, wws, 2)}, WitnessEvery: 50 * time.Millisecond}, nil)
	fl.WaitSeen(t, 20)
	dl := room.DeploymentLog{}
	roomtest.WaitFor(t, 20*time.Second, "both rooms' checkpoints in the deployment log", func() bool {
		return e.CountOnStream(dl.StreamName(), dl.Entry()) == 2
	})

	// Room A shown elsewhere: the deployment log holds another checkpoint
	// of it at size 10.
	origin := checkpoint.RoomOrigin(roomtest.Deployment, roomA)
	rs, err := checkpoint.NewNamedNoteSigner(key, origin)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := checkpoint.Sign(rs, origin, 10, sha256.Sum256([]byte("room A elsewhere")))
	if err != nil {
		t.Fatal(err)
	}
	entrySeq := roomtest.PublishRaw(t, e.Js, room.DeploymentLog{}.Entry(), forged)
	roomtest.WaitFor(t, 10*time.Second, "room A refused", func() bool {
		fl.Mu.Lock()
		defer fl.Mu.Unlock()
		for _, a := range fl.Asides {
			if a.RoomID == roomA && a.Code == events.CheckpointMismatch && strings.Contains(a.Reason, fmt.Sprintf("split view: the deployment log's entry 2 (stream seq %d)", entrySeq)) {
				return true
			}
		}
		return false
	})
	ship(roomA, esA[10:])
	ship(roomB, esB[10:])
	// 20 events, the split view, then 10 of B served and 10 of A set
	// aside, plus the rooms' checkpoint messages of the second round
	// (checkpoints are no events).
	roomtest.WaitFor(t, 10*time.Second, "room B's second round served", func() bool {
		fl.Mu.Lock()
		defer fl.Mu.Unlock()
		b := 0
		for _, ev := range fl.Events {
			if ev.RoomID == roomB {
				b++
			}
		}
		return b == 20
	})
	fl.Mu.Lock()
	defer fl.Mu.Unlock()
	a := 0
	for _, ev := range fl.Events {
		if ev.RoomID == roomA {
			a++
		}
	}
	if a != 10 {
		t.Fatalf("room A: %d events served, want the 10 before the split view", a)
	}
}
