package roomtest

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// NewPublisherKey makes a publisher key (what `publisher keygen` makes).
func NewPublisherKey(t testing.TB) *events.HostKey {
	t.Helper()
	k, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// AttestingGate is a gate of e's stream that attests with key and tells
// sink (nil: nobody).
func AttestingGate(e *Env, nc *nats.Conn, key *events.HostKey, sink ingest.AttestationSink, o ingest.GateOptions) *ingest.Gate {
	e.T.Helper()
	o.Validator, o.PublisherKey, o.Attested = e.V, key, sink
	g, err := ingest.NewGate(context.Background(), nc, o)
	if err != nil {
		e.T.Fatal(err)
	}
	return g
}

// StartCheckpointer starts a checkpointer on nc with o (Key required) and
// stops it when the test ends; its logs go to the returned observer.
func StartCheckpointer(t *testing.T, nc *nats.Conn, o checkpointer.Options) (*checkpointer.Checkpointer, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	o.Logger = zap.New(core)
	c, err := checkpointer.Start(context.Background(), nc, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c, logs
}

// RoomTree is a room rebuilt from the stream independently of the
// checkpointer: its leaves (attested messages) and its checkpoints, in
// stream order.
type RoomTree struct {
	Tree        *checkpoint.Tree
	LeafSeqs    []uint64 // stream seq of each leaf
	NotLeaves   []uint64 // stream seqs of journal and exec messages that are no leaf
	Checkpoints []*checkpoint.Checkpoint
	CkptSeqs    []uint64
	SizeAt      []uint64 // the tree's size when each checkpoint was read
	Aside       []uint64 // RebuildWith: stream seqs of checkpoint-subject messages that are no checkpoint
}

// Rebuild reads every message of e's stream and rebuilds roomID with trust:
// a journal message is a leaf when its attestation verifies at "seq:" of
// its entry's seq, an exec message at "index:" of its ordinal among all
// messages on the room's exec subject, each batch's signature over all its
// messages (a BatchCollector, by stream seq).
func Rebuild(e *Env, roomID string, trust *checkpoint.Trust) *RoomTree {
	e.T.Helper()
	return RebuildWith(e, roomID, trust, false)
}

// RebuildWith is rebuild; with aside, a message on the checkpoint subject
// that does not parse as a checkpoint of roomID signed under trust is
// listed in rt.aside instead of failing the test.
func RebuildWith(e *Env, roomID string, trust *checkpoint.Trust, aside bool) *RoomTree {
	e.T.Helper()
	rt := &RoomTree{Tree: checkpoint.NewTree()}
	var execIndex uint64
	subjects := room.Subjects{}
	verdicts := map[uint64]error{}
	bc := checkpoint.NewBatchCollector(trust)
	take := func(vs []checkpoint.BatchVerdict) {
		for _, v := range vs {
			verdicts[v.ID] = v.Err
		}
	}
	for _, m := range e.Stored() {
		p, err := subjects.Parse(m.Subject)
		if err != nil || p.RoomID != roomID || !p.Kind.Leaf() {
			continue
		}
		var position string
		if p.Kind == room.KindExecution {
			position = checkpoint.RecordPosition(execIndex)
			execIndex++
		} else {
			en, err := events.ParseEntry(m.Data)
			if err != nil {
				continue
			}
			seq, _ := en.Seq()
			position = checkpoint.OwnedJournalPosition(seq, m.Header.Get(room.HeaderOwner))
		}
		take(bc.Add(m.Sequence, checkpoint.AttestationOf(m.Header),
			checkpoint.Statement{Room: roomID, Subject: m.Subject, Position: position, Content: checkpoint.ContentHash(m.Data)}))
	}
	take(bc.Flush())
	for _, m := range e.Stored() {
		p, err := subjects.Parse(m.Subject)
		if err != nil || p.RoomID != roomID || p.Kind == room.KindMarker {
			continue // a record marker is no leaf by kind, as a checkpoint
		}
		if p.Kind == room.KindCheckpoint {
			ck, err := checkpoint.Parse(m.Data, roomID, trust)
			if err != nil && aside {
				rt.Aside = append(rt.Aside, m.Sequence)
				continue
			}
			if err != nil {
				e.T.Fatalf("checkpoint at stream seq %d: %v", m.Sequence, err)
			}
			rt.Checkpoints = append(rt.Checkpoints, ck)
			rt.CkptSeqs = append(rt.CkptSeqs, m.Sequence)
			rt.SizeAt = append(rt.SizeAt, rt.Tree.Size())
			continue
		}
		content := checkpoint.ContentHash(m.Data)
		if err, ok := verdicts[m.Sequence]; !ok || err != nil {
			rt.NotLeaves = append(rt.NotLeaves, m.Sequence)
			continue
		}
		rt.Tree.Append(checkpoint.LeafHash(roomID, m.Subject, content))
		rt.LeafSeqs = append(rt.LeafSeqs, m.Sequence)
	}
	return rt
}

// CheckCheckpoints asserts that every checkpoint of rt verifies (Parse did),
// covers no more than the leaves before it, has the independent tree's root
// at its size, and that sizes never shrink; it returns their sizes.
func (rt *RoomTree) CheckCheckpoints(t *testing.T) []uint64 {
	t.Helper()
	var sizes []uint64
	for i, ck := range rt.Checkpoints {
		if ck.Size > rt.SizeAt[i] {
			t.Fatalf("checkpoint %d (stream seq %d) covers %d leaves; only %d are before it", i, rt.CkptSeqs[i], ck.Size, rt.SizeAt[i])
		}
		root, err := rt.Tree.RootAt(ck.Size)
		if err != nil || root != ck.Root {
			t.Fatalf("checkpoint %d (stream seq %d) at size %d: root %x, the independent tree has %x (%v)", i, rt.CkptSeqs[i], ck.Size, ck.Root, root, err)
		}
		if i > 0 && ck.Size < sizes[i-1] {
			t.Fatalf("checkpoint sizes shrink: %v then %d", sizes, ck.Size)
		}
		sizes = append(sizes, ck.Size)
	}
	return sizes
}

// WaitFor polls cond every 20ms for up to d.
func WaitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RecordNamed signs a copy of the reference record for roomID with a fresh
// idempotency key and run ref named n.
func RecordNamed(e *Env, roomID, n string) []byte {
	e.T.Helper()
	base := ReferenceRecord(e.T, "verified.json")
	return e.Sign(base, map[string]any{"room/id": roomID, "idempotency/key": "key-" + n, "run/ref": "operator-task-run:" + n,
		"execution/ref": nil, "signature": nil}).Canonical()
}
