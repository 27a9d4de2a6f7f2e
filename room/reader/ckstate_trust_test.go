package reader_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// keptNote saves in state a checkpoint of roomID at size 2 signed by k,
// in the origin form when deployment is not "", and returns it.
func keptNote(t *testing.T, state *reader.CheckpointState, k *events.HostKey, roomID, deployment string) *checkpoint.Checkpoint {
	t.Helper()
	origin, name := roomID, k.NodeID()
	if deployment != "" {
		origin = checkpoint.RoomOrigin(deployment, roomID)
		name = origin
	}
	s, err := checkpoint.NewNamedNoteSigner(k, name)
	if err != nil {
		t.Fatal(err)
	}
	n, err := checkpoint.Sign(s, origin, 2, [32]byte{2})
	if err != nil {
		t.Fatal(err)
	}
	c := roomtest.Parsed(t, n)
	c.Signer = k.NodeID() // what Parse maps an origin-named key to
	if err := state.Save(c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAuditKeptOfAnotherDeployment: a state directory shared with another
// deployment holds its kept checkpoints (of rooms absent from this stream
// or of one it holds too, signed by a key this audit does not trust; and
// one signed by a trusted key but of another deployment origin than the
// one the audit pins). They were not verified under this trust: the audit
// of a clean stream is clean, counts them in its report and leaves their
// files as they were (the shared room's too). A kept
// checkpoint signed by a trusted key of a room absent from the stream is
// still a rollback, in the same audit and in follow.
func TestAuditKeptOfAnotherDeployment(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub, stranger := roomtest.NewHostKey(t), roomtest.NewHostKey(t)
	a := roomtest.NewAttestor(t, e.Js, pub, roomtest.AttRoom)
	es, _ := roomtest.Journal(t, "run-k", "cap-k", 5)
	a.Entries(es...)
	a.Checkpoint()
	const shared = "room:shared"
	b := roomtest.NewAttestor(t, e.Js, pub, shared)
	bs, _ := roomtest.Journal(t, "run-s", "cap-s", 3)
	b.Entries(bs...)
	b.Checkpoint()
	trust, err := roomtest.Trusting(t, pub).WithOrigin("this.example/roompub")
	if err != nil {
		t.Fatal(err)
	}
	state := &reader.CheckpointState{Dir: t.TempDir()}
	foreign := []*checkpoint.Checkpoint{
		keptNote(t, state, stranger, "room:tt", ""),
		keptNote(t, state, stranger, "room:tt-origin", "other.example/roompub"),
		keptNote(t, state, pub, "room:other-origin", "other.example/roompub"),
		keptNote(t, state, stranger, shared, ""),
	}

	rep, err := reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Trust: trust, State: state})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() || rep.Attestation.StateIgnored != 4 || len(rep.Checkpoints) != 2 || rep.Checkpoints[0].RoomID != roomtest.AttRoom ||
		rep.Checkpoints[1].RoomID != shared || rep.Checkpoints[1].Stored != nil || rep.Checkpoints[1].Latest.Size != 3 {
		t.Errorf("audit beside another deployment's state: violations %v, attestation %+v, checkpoints %+v", rep.Violations, rep.Attestation, rep.Checkpoints)
	}
	for _, c := range foreign {
		if got, err := state.Load(c.Room); err != nil || got == nil || !slices.Equal(got.Note, c.Note) {
			t.Errorf("kept checkpoint of %s after the audit: %+v, %v", c.Room, got, err)
		}
	}
	if c, err := state.Load(roomtest.AttRoom); err != nil || c == nil || c.Size != 5 {
		t.Errorf("the audited room's state: %+v, %v", c, err)
	}

	// One signed by a trusted key, of a room the stream does not hold (the
	// room-id form, which names no deployment): rolled back.
	keptNote(t, state, pub, "room:gone", "")
	rep, err = reader.Audit(t.Context(), e.Js, reader.AuditOptions{Validator: e.V, Trust: trust, State: state})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != 1 || rep.Violations[0].RoomID != "room:gone" || rep.Violations[0].Code != events.CheckpointMismatch ||
		!strings.Contains(rep.Violations[0].Reason, "rolled back or forked: this reader verified a checkpoint of size 2") || rep.Attestation.StateIgnored != 4 {
		t.Errorf("a trusted kept checkpoint of an absent room: violations %v, attestation %+v", rep.Violations, rep.Attestation)
	}

	// Follow of every room of the state: the trusted one is refused at
	// once, the others are not looked at.
	f := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "kept", Validator: e.V, Trust: trust, State: state}, nil)
	f.WaitSeen(t, 1+len(es)+len(bs)) // the room refused, then the entries (a checkpoint hands out nothing)
	var refused []string
	for _, s := range f.Asides {
		if s.Seq == 0 {
			refused = append(refused, s.RoomID)
		}
	}
	if !slices.Equal(refused, []string{"room:gone"}) || len(f.EventSeqs()) != len(es)+len(bs) {
		t.Errorf("follow: rooms refused %v, served %v", refused, f.EventSeqs())
	}
	_ = f.Stop(t)
	if got, err := state.Load(shared); err != nil || got == nil || !slices.Equal(got.Note, foreign[3].Note) {
		t.Errorf("kept checkpoint of %s after follow: %+v, %v", shared, got, err)
	}
}
