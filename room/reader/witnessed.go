package reader

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

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

// deploymentRead is what checkWitnessed read of the deployment log, kept
// on the reader for Export: the log's tree and entries, its latest
// checkpoint and latest witnessed one (notes as stored, cosignatures
// included), and per room the entries that are checkpoints of the room
// matching it as read, in log order.
type deploymentRead struct {
	facts     *WitnessFacts
	tree      *checkpoint.Tree
	entries   []dlEntry
	latest    *checkpoint.Checkpoint
	witnessed *checkpoint.Checkpoint
	rooms     map[string][]roomEntry
	missing   string // why there is no log to read ("" when there is)
}

// roomEntry is a deployment log entry that is a checkpoint of size size
// of a room.
type roomEntry struct {
	index uint64
	size  uint64
}

// checkWitnessed reads the deployment log and checks it against the rooms
// the reader read (whose ledgers keep full trees), reporting through out.
// It fills rep.Witness and each room's witnessed size.
func checkWitnessed(ctx context.Context, js jetstream.JetStream, r *Reader, o AuditOptions, rep *AuditReport, out func(*Event, *SetAside)) (map[string]*RoomWitness, error) {
	w := o.Witnessing
	origin := o.Trust.Origin()
	name := w.Log.StreamName()
	facts := &WitnessFacts{Stream: name, Origin: origin, Quorum: w.Policy.QuorumName()}
	rep.Witness = facts
	logAside := func(seq uint64, subject string, code events.Code, reason string) {
		p := events.Problem{Code: code, At: events.Location{Seq: seq}, Reason: reason}
		ref := events.NewRefusal([]events.Problem{p})
		out(nil, &SetAside{Seq: seq, Subject: subject, Code: ref.Code, Reason: ref.Reason, Problems: ref.Problems})
	}
	logV := o.Trust.OriginVerifiers()
	var entries []dlEntry
	var err error
	tree := checkpoint.NewTree()
	var latest, witnessed *checkpoint.Checkpoint
	var latestW, witnessedW *WitnessedCheckpoint
	err = readAll(ctx, js, name, w.Log.Subjects().All(), func(m jsapi.Msg) {
		switch m.Subject {
		case w.Log.Entry():
			entries = append(entries, dlEntry{index: tree.Size(), seq: m.Seq, data: m.Data})
			tree.Append(checkpoint.EntryLeaf(m.Data))
		case w.Log.Checkpoint():
			ck, err := checkpoint.ParseDeployment(m.Data, o.Trust)
			if err != nil {
				facts.Refused++
				logAside(m.Seq, m.Subject, events.CheckpointMismatch, "deployment log checkpoint: "+err.Error())
				return
			}
			root, rerr := tree.RootAt(ck.Size)
			switch {
			case rerr != nil:
				facts.Refused++
				logAside(m.Seq, m.Subject, events.CheckpointMismatch, fmt.Sprintf("deployment log checkpoint of size %d: the log as read has %d entries: it is behind the checkpoint, or forked", ck.Size, tree.Size()))
				return
			case root != ck.Root:
				facts.Refused++
				logAside(m.Seq, m.Subject, events.CheckpointMismatch, fmt.Sprintf("deployment log checkpoint of size %d: forked: the log as read has root %s at that size, the checkpoint %s", ck.Size, hexRoot(root), hexRoot(ck.Root)))
				return
			case latest != nil && ck.Size < latest.Size:
				facts.Refused++
				logAside(m.Seq, m.Subject, events.CheckpointMismatch, fmt.Sprintf("deployment log checkpoint of size %d is smaller than the one of size %d before it", ck.Size, latest.Size))
				return
			}
			facts.Checkpoints++
			cosigners, qerr := w.Policy.CheckWith(m.Data, logV)
			wc := &WitnessedCheckpoint{Size: ck.Size, Root: hexRoot(ck.Root), Seq: m.Seq, Cosigners: cosigners}
			latest, latestW = ck, wc
			if qerr == nil {
				witnessed, witnessedW = ck, wc
			}
		}
	})
	dr := &deploymentRead{facts: facts, tree: tree, rooms: map[string][]roomEntry{}}
	r.deployment = dr
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		dr.missing = fmt.Sprintf("no deployment log (stream %s): nothing is witnessed", name)
		logAside(0, name, events.WitnessQuorum, dr.missing)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("deployment log %s: %w", name, err)
	}
	facts.Entries, facts.Latest, facts.Witnessed = tree.Size(), latestW, witnessedW
	dr.entries, dr.latest, dr.witnessed = entries, latest, witnessed
	switch {
	case latest == nil:
		logAside(0, w.Log.Checkpoint(), events.WitnessQuorum, "the deployment log has no checkpoint that covers its entries: nothing is witnessed")
	case witnessed == nil || witnessed.Size < latest.Size:
		have := uint64(0)
		if witnessed != nil {
			have = witnessed.Size
		}
		logAside(latestW.Seq, w.Log.Checkpoint(), events.WitnessQuorum, fmt.Sprintf(
			"the deployment log's latest checkpoint (size %d) has %d valid cosignature(s) %v, short of quorum %s: entries after %d are not witnessed",
			latest.Size, len(latestW.Cosigners), latestW.Cosigners, facts.Quorum, have))
	}

	// The rooms: every checkpoint of a room read that the log holds must
	// match the room as read; the largest within the witnessed size is
	// the room's witnessed checkpoint.
	out2 := map[string]*RoomWitness{}
	for _, e := range entries {
		u, err := checkpoint.ParseUnverified(e.data)
		if err != nil || (len(o.Rooms) > 0 && !slices.Contains(o.Rooms, u.Room)) {
			if err != nil {
				logAside(e.seq, w.Log.Entry(), events.CheckpointMismatch, fmt.Sprintf("deployment log entry %d is not a room checkpoint: %v", e.index, err))
			}
			continue
		}
		c, err := checkpoint.Parse(e.data, u.Room, o.Trust)
		if err != nil {
			logAside(e.seq, w.Log.Entry(), events.CheckpointMismatch, fmt.Sprintf("deployment log entry %d: %v", e.index, err))
			continue
		}
		l := r.ledgers[c.Room]
		if l == nil || l.refused != "" {
			if l == nil {
				// A room the log holds a checkpoint of that the stream
				// shows nothing of: withheld from this reader.
				l = r.ledgerOf(c.Room)
			} else {
				continue
			}
		}
		if err := l.CheckOther(c); err != nil {
			why := fmt.Sprintf("split view: the deployment log's entry %d (stream seq %d) is a checkpoint of the room of size %d that the room as read does not match: %v", e.index, e.seq, c.Size, err)
			l.refused = why
			_, seq := l.Latest()
			out(nil, roomAside(o.Subjects, c.Room, seq, why))
			continue
		}
		dr.rooms[c.Room] = append(dr.rooms[c.Room], roomEntry{index: e.index, size: c.Size})
		if witnessed != nil && e.index < witnessed.Size {
			if rw := out2[c.Room]; rw == nil || c.Size >= rw.Size {
				out2[c.Room] = &RoomWitness{Size: c.Size, Entry: e.index}
			}
		}
	}
	for _, id := range r.ledgerRooms() {
		l := r.ledgers[id]
		latestRoom, seq := l.Latest()
		if latestRoom == nil || l.refused != "" || out2[id] != nil {
			continue
		}
		out(nil, &SetAside{RoomID: id, Kind: room.KindCheckpoint, Seq: seq, Subject: o.Subjects.Checkpoint(id), Code: events.WitnessQuorum,
			Reason: "no checkpoint of the room is covered by a deployment log checkpoint with the witness quorum " + facts.Quorum,
			Problems: []events.Problem{{Code: events.WitnessQuorum, At: events.Location{Seq: seq},
				Reason: "no checkpoint of the room is covered by a deployment log checkpoint with the witness quorum " + facts.Quorum}}})
	}
	return out2, nil
}

// readAll reads every message of stream under filter, in stream order,
// with batch direct gets.
func readAll(ctx context.Context, js jetstream.JetStream, stream, filter string, f func(jsapi.Msg)) error {
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
	for next := uint64(1); next <= last; {
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
