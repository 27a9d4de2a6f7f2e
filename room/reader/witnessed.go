package reader

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/witness"
)

// Witnessing is what a trusting reader checks against the deployment log
// (docs/witnesses.md, "What readers check"): every checkpoint of the log
// signed by a trusted publisher under the deployment origin must cover the
// log's entries as read, a checkpoint counts as verified only with the
// Policy's quorum of witness cosignatures (witness_quorum), and every room
// checkpoint the log holds must match its room as read (a split view
// otherwise, checkpoint_mismatch). The reader's Trust must name the
// deployment origin (checkpoint.Trust.WithOrigin).
type Witnessing struct {
	Policy *witness.Policy
	Log    room.DeploymentLog // the deployment log's stream; zero: the defaults
}

// DeploymentLogKeys are the keys a deployment checkpoint may be signed by
// under policy p: the trusted publishers under the deployment origin
// (t.OriginVerifiers), and of those, when the policy names the log's
// keys (C2SP tlog-policy "log" lines), only the ones it names. A policy
// pins the log's key: a checkpoint of another trusted publisher (a fill
// node, a rotated key) is not the log the witnesses were asked about.
// pinned is false when the policy names keys none of which is trusted:
// then nothing verifies, and config refuses such a policy.
func DeploymentLogKeys(p *witness.Policy, t *checkpoint.Trust) (keys note.Verifiers, pinned bool) {
	all := t.OriginVerifiers()
	logs := p.Logs()
	if len(logs) == 0 {
		return all, true
	}
	var named []note.Verifier
	for _, l := range logs {
		if v, err := all.Verifier(l.Name(), l.KeyHash()); err == nil {
			named = append(named, v)
		}
	}
	return note.VerifierList(named...), len(named) > 0
}

// WitnessFacts is what an audit verified of the deployment log.
type WitnessFacts struct {
	Stream  string `json:"stream"`
	Origin  string `json:"origin"`
	Quorum  string `json:"quorum"`
	Entries uint64 `json:"entries"`
	// Checkpoints counts the log's checkpoints that cover its entries as
	// read; Refused those that do not (or are not a trusted publisher's).
	Checkpoints uint64 `json:"checkpoints"`
	Refused     uint64 `json:"refused,omitempty"`
	// Witnessed is the latest checkpoint with the quorum, Latest the
	// latest that covers the entries (witnessed or not).
	Witnessed *WitnessedCheckpoint `json:"witnessed,omitempty"`
	Latest    *WitnessedCheckpoint `json:"latest,omitempty"`
}

// WitnessedCheckpoint is one checkpoint of the deployment log: its size,
// root (lowercase hex), stream seq, and the witnesses that validly
// cosigned it under the policy.
type WitnessedCheckpoint struct {
	Size      uint64   `json:"size"`
	Root      string   `json:"root"`
	Seq       uint64   `json:"stream_seq"`
	Cosigners []string `json:"cosigners"`
}

// RoomWitness is, for one room, the largest of its checkpoints that a
// witnessed deployment checkpoint covers: its size and its entry's index
// in the deployment log.
type RoomWitness struct {
	Size  uint64 `json:"size"`
	Entry uint64 `json:"entry"`
}

// dlEntry is one entry of the deployment log as read.
type dlEntry struct {
	index uint64
	seq   uint64
	data  []byte
}

// deploymentView is a reader's view of the deployment log, read
// incrementally: its tree, its checkpoints as judged, the entries not yet
// judged against their rooms, and each room's witnessed checkpoint. Audit
// reads it once; Follow reads it again as it grows.
type deploymentView struct {
	w     *Witnessing
	trust *checkpoint.Trust
	only  []string // the rooms read; empty: every room
	// of, when set, says which rooms are this partition's (auditTuning.
	// ofPartition); quiet leaves the log's own problems to another
	// partition's audit.
	of    func(string) bool
	quiet bool
	facts WitnessFacts
	out   func(*Event, *SetAside)

	next      uint64 // next stream seq to read
	tree      *checkpoint.Tree
	latest    *checkpoint.Checkpoint
	witnessed *checkpoint.Checkpoint
	pending   []dlEntry               // entries not judged against their rooms yet, in log order
	byRoom    map[string]*RoomWitness // each room's witnessed checkpoint

	// For Export (keep): every entry, and per room the entries that are
	// checkpoints of the room matching it as read, in log order; missing
	// says why there is no log to read ("" when there is).
	keep    bool
	entries []dlEntry
	rooms   map[string][]roomEntry
	missing string
}

// roomEntry is a deployment log entry that is a checkpoint of size size
// of a room.
type roomEntry struct {
	index uint64
	size  uint64
}

func newDeploymentView(w *Witnessing, trust *checkpoint.Trust, rooms []string, out func(*Event, *SetAside)) *deploymentView {
	return &deploymentView{w: w, trust: trust, only: rooms, out: out, next: 1, tree: checkpoint.NewTree(),
		byRoom: map[string]*RoomWitness{}, rooms: map[string][]roomEntry{},
		facts: WitnessFacts{Stream: w.Log.StreamName(), Origin: trust.Origin(), Quorum: w.Policy.QuorumName()}}
}

// aside reports a message of the deployment log (or, seq 0, the log).
func (d *deploymentView) aside(seq uint64, subject string, code events.Code, reason string) {
	if d.quiet {
		return
	}
	p := events.Problem{Code: code, At: events.Location{Seq: seq}, Reason: reason}
	ref := events.NewRefusal([]events.Problem{p})
	d.out(nil, &SetAside{Seq: seq, Subject: subject, Code: ref.Code, Reason: ref.Reason, Problems: ref.Problems})
}

// read reads the log from where it stands to its end: entries grow the
// tree and wait to be judged; each checkpoint is judged against the tree
// (signed by a trusted publisher under the origin, covering the entries as
// read, no smaller than the one before: else checkpoint_mismatch) and
// counts as witnessed with the policy's quorum. jetstream.ErrStreamNotFound
// when there is no deployment log.
func (d *deploymentView) read(ctx context.Context, js jetstream.JetStream) error {
	log := d.w.Log
	return readFrom(ctx, js, log.StreamName(), log.Subjects().All(), d.next, func(m jsapi.Msg) {
		d.next = m.Seq + 1
		switch m.Subject {
		case log.Entry():
			e := dlEntry{index: d.tree.Size(), seq: m.Seq, data: m.Data}
			d.pending = append(d.pending, e)
			if d.keep {
				d.entries = append(d.entries, e)
			}
			d.tree.Append(checkpoint.EntryLeaf(m.Data))
			d.facts.Entries = d.tree.Size()
		case log.Checkpoint():
			d.checkpoint(m)
		}
	})
}

func (d *deploymentView) checkpoint(m jsapi.Msg) {
	refuse := func(format string, args ...any) {
		d.facts.Refused++
		d.aside(m.Seq, m.Subject, events.CheckpointMismatch, "deployment log checkpoint"+fmt.Sprintf(format, args...))
	}
	ck, err := checkpoint.ParseDeployment(m.Data, d.trust)
	if err != nil {
		refuse(": %v", err)
		return
	}
	root, rerr := d.tree.RootAt(ck.Size)
	switch {
	case rerr != nil:
		refuse(" of size %d: the log as read has %d entries: it is behind the checkpoint, or forked", ck.Size, d.tree.Size())
		return
	case root != ck.Root:
		refuse(" of size %d: forked: the log as read has root %s at that size, the checkpoint %s", ck.Size, hexRoot(root), hexRoot(ck.Root))
		return
	case d.latest != nil && ck.Size < d.latest.Size:
		refuse(" of size %d is smaller than the one of size %d before it", ck.Size, d.latest.Size)
		return
	}
	d.facts.Checkpoints++
	keys, _ := DeploymentLogKeys(d.w.Policy, d.trust)
	cosigners, qerr := d.w.Policy.CheckWith(m.Data, keys)
	wc := &WitnessedCheckpoint{Size: ck.Size, Root: hexRoot(ck.Root), Seq: m.Seq, Cosigners: cosigners}
	d.latest, d.facts.Latest = ck, wc
	if qerr == nil {
		d.witnessed, d.facts.Witnessed = ck, wc
	}
}

// shortOfQuorum says why the log's latest checkpoint is not witnessed, or
// "" when it is.
func (d *deploymentView) shortOfQuorum() string {
	switch {
	case d.latest == nil:
		return "the deployment log has no checkpoint that covers its entries: nothing is witnessed"
	case d.witnessed != nil && d.witnessed.Size >= d.latest.Size:
		return ""
	}
	have := uint64(0)
	if d.witnessed != nil {
		have = d.witnessed.Size
	}
	l := d.facts.Latest
	return fmt.Sprintf("the deployment log's latest checkpoint (size %d) has %d valid cosignature(s) %v, short of quorum %s: entries after %d are not witnessed",
		d.latest.Size, len(l.Cosigners), l.Cosigners, d.facts.Quorum, have)
}

// judge checks the pending entries, in log order, against the rooms read:
// an entry of a room read must be a room checkpoint a trusted publisher
// signed and match the room as read (checkpoint.Ledger.CheckOther), else
// the room is refused as a split view. An entry larger than its room as
// read so far waits, unless final (Audit: the room as read is all there
// is). The ledgers must keep full trees.
func (d *deploymentView) judge(r *Reader, subjects room.Subjects, final bool) {
	keep := d.pending[:0]
	for _, e := range d.pending {
		if !d.judgeEntry(r, subjects, e, final) {
			keep = append(keep, e)
		}
	}
	clear(d.pending[len(keep):])
	d.pending = keep
}

// judgeEntry judges one entry; false when it must wait for its room.
func (d *deploymentView) judgeEntry(r *Reader, subjects room.Subjects, e dlEntry, final bool) bool {
	entry := d.w.Log.Entry()
	u, err := checkpoint.ParseUnverified(e.data)
	if err != nil {
		d.aside(e.seq, entry, events.CheckpointMismatch, fmt.Sprintf("deployment log entry %d is not a room checkpoint: %v", e.index, err))
		return true
	}
	if len(d.only) > 0 && !slices.Contains(d.only, u.Room) || d.of != nil && !d.of(u.Room) {
		return true
	}
	c, err := checkpoint.Parse(e.data, u.Room, d.trust)
	if err != nil {
		d.aside(e.seq, entry, events.CheckpointMismatch, fmt.Sprintf("deployment log entry %d: %v", e.index, err))
		return true
	}
	l := r.ledgers[c.Room]
	switch {
	case l != nil && l.refused != "":
		return true
	case l == nil && !final:
		return false
	case l == nil:
		// A room the log holds a checkpoint of that the stream shows
		// nothing of: withheld from this reader.
		l = r.ledgerOf(c.Room)
	case c.Size > l.Size() && !final:
		return false
	}
	if err := l.CheckOther(c); err != nil {
		why := fmt.Sprintf("split view: the deployment log's entry %d (stream seq %d) is a checkpoint of the room of size %d that the room as read does not match: %v", e.index, e.seq, c.Size, err)
		l.refused = why
		delete(d.byRoom, c.Room) // a refused room is witnessed no more
		_, seq := l.Latest()
		d.out(nil, roomAside(subjects, c.Room, seq, why))
		return true
	}
	if d.keep {
		d.rooms[c.Room] = append(d.rooms[c.Room], roomEntry{index: e.index, size: c.Size})
	}
	if d.witnessed != nil && e.index < d.witnessed.Size {
		if rw := d.byRoom[c.Room]; rw == nil || c.Size >= rw.Size {
			d.byRoom[c.Room] = &RoomWitness{Size: c.Size, Entry: e.index}
		}
	}
	return true
}

// checkWitnessed reads the deployment log and checks it against the rooms
// the reader read (whose ledgers keep full trees), reporting through out.
// It fills rep.Witness and returns each room's witnessed checkpoint.
func checkWitnessed(ctx context.Context, js jetstream.JetStream, r *Reader, o AuditOptions, tune auditTuning, rep *AuditReport, out func(*Event, *SetAside)) (map[string]*RoomWitness, error) {
	d := newDeploymentView(o.Witnessing, o.Trust, o.Rooms, out)
	d.keep, d.of, d.quiet = true, tune.ofPartition, tune.quietDeployment
	r.deployment = d
	err := d.read(ctx, js)
	rep.Witness = &d.facts
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		d.missing = fmt.Sprintf("no deployment log (stream %s): nothing is witnessed", d.facts.Stream)
		d.aside(0, d.facts.Stream, events.WitnessQuorum, d.missing)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("deployment log %s: %w", d.facts.Stream, err)
	}
	if why := d.shortOfQuorum(); why != "" {
		seq := uint64(0)
		if d.facts.Latest != nil {
			seq = d.facts.Latest.Seq
		}
		d.aside(seq, o.Witnessing.Log.Checkpoint(), events.WitnessQuorum, why)
	}
	d.judge(r, o.Subjects, true)
	for _, id := range r.ledgerRooms() {
		l := r.ledgers[id]
		latestRoom, seq := l.Latest()
		if latestRoom == nil || l.refused != "" || d.byRoom[id] != nil {
			continue
		}
		why := "no checkpoint of the room is covered by a deployment log checkpoint with the witness quorum " + d.facts.Quorum
		out(nil, &SetAside{RoomID: id, Kind: room.KindCheckpoint, Seq: seq, Subject: o.Subjects.Checkpoint(id), Code: events.WitnessQuorum,
			Reason: why, Problems: []events.Problem{{Code: events.WitnessQuorum, At: events.Location{Seq: seq}, Reason: why}}})
	}
	return d.byRoom, nil
}

// readFrom reads the messages of stream under filter from seq next to the
// stream's last sequence, in stream order, with batch direct gets.
func readFrom(ctx context.Context, js jetstream.JetStream, stream, filter string, next uint64, f func(jsapi.Msg)) error {
	cctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	st, err := js.Stream(cctx, stream)
	var info *jetstream.StreamInfo
	if err == nil {
		info, err = st.Info(cctx)
	}
	cancel()
	if err != nil {
		return err
	}
	last := info.State.LastSeq
	for next <= last {
		msgs, err := jsapi.DirectBatch(ctx, js.Conn(), stream, jsapi.BatchRequest{Seq: next, NextBySubj: filter, Batch: pullMaxMessages, MaxBytes: pullMaxBytes}, room.DefaultTimeout)
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			return nil
		}
		for _, m := range msgs {
			if m.Seq > last {
				return nil
			}
			f(m)
		}
		next = msgs[len(msgs)-1].Seq + 1
	}
	return nil
}
