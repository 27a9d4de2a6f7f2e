package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/internal/witnesstest"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/witness"
)

// The deployment origins of the witnessed mode: one for the write rows'
// publisher, one for the read stream's. Two logs, so that a witness, which
// keeps one size per origin, never sees two histories of one origin (the
// read stream's log is built afresh each run, the write rows' too).
const (
	writeOrigin = "bench.roompub.test/write"
	readOrigin  = "bench.roompub.test/read"
)

// deploymentKey is a publisher key made for the run and the deployment
// origin it signs under; vkey is the log key witnesses know it by.
type deploymentKey struct {
	key    *events.HostKey
	origin string
	vkey   string
}

// newDeploymentKey makes a publisher key for the deployment of origin.
func newDeploymentKey(origin string) (*deploymentKey, error) {
	key, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	vkey, err := note.NewEd25519VerifierKey(origin, key.Public())
	if err != nil {
		return nil, err
	}
	return &deploymentKey{key: key, origin: origin, vkey: vkey}, nil
}

// witnessed is what the witnessed mode runs with: real litewitness
// processes (internal/witnesstest, as the tests run them) that know both
// deployment logs, their keys as the checkpointer and readers see them, and
// the policy audit checks (quorum of all).
type witnessed struct {
	group       *witnesstest.Group
	ws          []witness.Witness
	policy      *witness.Policy
	write, read *deploymentKey
}

// startWitnesses makes the two deployments' keys and launches the
// witnesses, once per run; close stops them.
func (b *bench) startWitnesses() error {
	if b.wit != nil {
		return nil
	}
	w := &witnessed{}
	var err error
	if w.write, err = newDeploymentKey(writeOrigin); err != nil {
		return err
	}
	if w.read, err = newDeploymentKey(readOrigin); err != nil {
		return err
	}
	n := b.c.witnessCount()
	b.logf("witnessed: starting %d litewitness processes (built once into the user cache dir), quorum %d", n, b.c.quorum())
	start := time.Now()
	if w.group, err = witnesstest.Launch(n, witnesstest.Log{Origin: w.write.origin, VKey: w.write.vkey}, witnesstest.Log{Origin: w.read.origin, VKey: w.read.vkey}); err != nil {
		return fmt.Errorf("witnesses (built with the go command from this module's go.mod: run the bench in the checkout, as make bench does): %w", err)
	}
	b.wit = w
	for _, g := range w.group.Witnesses {
		v, err := witness.ParseVerifierKey(g.VKey)
		if err != nil {
			return fmt.Errorf("witness %s: %w", g.Name, err)
		}
		w.ws = append(w.ws, witness.Witness{Name: g.Name, Verifier: v, URL: g.URL})
	}
	if w.policy, err = witness.NewPolicy(w.ws, b.c.quorum()); err != nil {
		return err
	}
	b.logf("witnessed: %d witnesses answer (%.1fs)", n, time.Since(start).Seconds())
	return nil
}

// dropDeploymentLog deletes the deployment log's stream, if there is one:
// each log is built afresh for the run's witnesses.
func (b *bench) dropDeploymentLog(ctx context.Context) error {
	name := room.DeploymentLog{}.StreamName()
	if err := b.js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete the deployment log %s of an earlier run: %w", name, err)
	}
	return nil
}

// serveDeploymentLog runs a checkpointer of the deployment dk over stream
// from start to stop, as a serve of the deployment started on it and
// stopped would (on a connection of its own, with serve's defaults): it
// reads the stream from its first message, appends every room checkpoint
// a trusted publisher (dk's key, trusted) signed that the log lacks, and as
// it stops signs the log and has the witnesses cosign it. It fails when
// the checkpointer logged an error. It returns how long it took.
func (b *bench) serveDeploymentLog(stream string, subjects room.Subjects, dk *deploymentKey, trusted []string) (time.Duration, error) {
	nc, err := nats.Connect(b.emb.ClientURL(), nats.Name("roompub-bench-deployment"))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	var errs atomic.Int64
	start := time.Now()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute)
	defer cancel()
	ck, err := checkpointer.Start(ctx, nc, checkpointer.Options{Stream: stream, Subjects: subjects, Key: dk.key, Origin: dk.origin,
		Deployment: checkpointer.DeploymentOptions{Witnesses: b.wit.ws}, TrustedPublishers: trusted, Replicas: b.c.Replicas,
		Logger: newLogger(b.out.err, &errs)})
	if err != nil {
		return 0, err
	}
	if err := ck.Stop(ctx); err != nil {
		return 0, err
	}
	if n := errs.Load(); n > 0 {
		return 0, fmt.Errorf("the checkpointer logged %d errors (above)", n)
	}
	return time.Since(start), nil
}

// buildReadDeployment builds the read stream's deployment log for this
// run's witnesses: a checkpointer of the read deployment (origin
// readOrigin, its own key) trusting the fill's publisher key reads the
// stream and appends its room checkpoints (written by the fill, in the
// room-id form, which readers pinning an origin accept). It writes no
// room checkpoint, as no room grew: the stream in the cache is left as
// it was, which is checked.
func (b *bench) buildReadDeployment(subjects room.Subjects, fill readFill) error {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := b.dropDeploymentLog(ctx); err != nil {
		return err
	}
	b.logf("read: building the read stream's deployment log (origin %s), cosigned by %d witnesses (untimed)", readOrigin, len(b.wit.ws))
	took, err := b.serveDeploymentLog(readStream, subjects, b.wit.read, []string{fill.nodeID})
	if err != nil {
		return fmt.Errorf("the read stream's deployment log: %w", err)
	}
	entries, ckpts, err := b.storedOn(readStream, subjects, subjects.All())
	if err != nil {
		return err
	}
	if entries != b.sz.readChains*b.sz.readLength || ckpts != fill.checkpoints {
		return fmt.Errorf("the read stream holds %d entries and %d checkpoints after its deployment log was built, want %d and %d: it was written to",
			entries, ckpts, b.sz.readChains*b.sz.readLength, fill.checkpoints)
	}
	b.logf("read: deployment log built in %.1fs", took.Seconds())
	return nil
}

// readWitnessArgs are audit's flags for the read stream's deployment log:
// the read deployment's key trusted beside the fill's, its origin, every
// witness's cosignature key and the quorum.
func (b *bench) readWitnessArgs() []string {
	args := []string{"--trusted-publisher", b.wit.read.key.NodeID(), "--origin", readOrigin}
	for _, w := range b.wit.group.Witnesses {
		args = append(args, "--witness", w.VKey)
	}
	return append(args, "--witness-quorum", fmt.Sprint(b.c.quorum()))
}

// checkWitnessed checks an audit's report of a witnessed deployment: the
// deployment log verified (no checkpoint refused), its latest checkpoint
// covers every entry and has the quorum, and every room's latest
// checkpoint is witnessed. It returns the facts for the JSON line.
func (b *bench) checkWitnessed(rep *reader.AuditReport) (map[string]any, error) {
	w := rep.Witness
	if w == nil {
		return nil, errors.New("no witness facts in the report")
	}
	if w.Refused != 0 || w.Witnessed == nil || w.Latest == nil || w.Entries == 0 || w.Witnessed.Size != w.Entries || w.Latest.Size != w.Entries ||
		len(w.Witnessed.Cosigners) < b.c.quorum() {
		return nil, fmt.Errorf("the deployment log: %d entries, %d checkpoints, %d refused, latest %+v, witnessed %+v (quorum %s)",
			w.Entries, w.Checkpoints, w.Refused, w.Latest, w.Witnessed, w.Quorum)
	}
	rooms := 0
	for _, rc := range rep.Checkpoints {
		if rc.Latest == nil || rc.Witnessed == nil || rc.Witnessed.Size != rc.Latest.Size {
			return nil, fmt.Errorf("room %s: latest checkpoint %+v, witnessed %+v: not every room witnessed", rc.RoomID, rc.Latest, rc.Witnessed)
		}
		rooms++
	}
	if rooms == 0 {
		return nil, errors.New("no room witnessed")
	}
	b.logf("witnessed: the deployment log holds %d room checkpoints, %d checkpoints verified, the latest cosigned by %v (quorum %s); %d rooms witnessed",
		w.Entries, w.Checkpoints, w.Witnessed.Cosigners, w.Quorum, rooms)
	return map[string]any{"witness_entries": w.Entries, "witness_checkpoints": w.Checkpoints, "witness_cosigners": len(w.Witnessed.Cosigners),
		"witness_quorum": w.Quorum, "witness_rooms_witnessed": rooms}, nil
}
