package reader

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/validate"
)

// PartitionSpan is what an audit of a deployment of several partitions
// read of one room stream (docs/design.md, "Partitions").
type PartitionSpan struct {
	Stream         string   `json:"stream"`
	FromSeq        uint64   `json:"from_seq"`
	LastSeq        uint64   `json:"last_seq"`
	StreamProblems []string `json:"stream_problems,omitempty"`
	ReadBy         string   `json:"read_by,omitempty"`
}

// OpenLayout reads a deployment's partitions from its placement bucket
// (room.OpenPlacement, never creating it): a deployment without one is
// l's first partition alone, the layout of every release before
// partitions.
func OpenLayout(ctx context.Context, js jetstream.JetStream, l room.Layout) (*room.Placement, error) {
	return room.OpenPlacement(ctx, js, l, 0, false)
}

// AuditDeployment is Audit over every partition of place (OpenLayout):
// each room stream is audited on its own with its rooms (o.Rooms on it,
// or all of them), since no rule spans two rooms, and the reports are
// joined into one. The rooms' checkpoint state, external checkpoints and
// deployment log entries are each checked by the audit of their room's
// partition (a room placed nowhere is on the first, where every room
// written before partitions is); the deployment log's own facts are
// checked once. With one partition it is Audit of it. The report's Stream
// and LastSeq are the first partition's; Partitions lists each one's span.
// o.FromSeq names a sequence of one stream, so it needs one partition.
func AuditDeployment(ctx context.Context, js jetstream.JetStream, o AuditOptions, place *room.Placement) (*AuditReport, error) {
	parts := place.Partitions()
	if len(parts) == 1 {
		o.Stream, o.Subjects = parts[0].Stream, parts[0].Subjects
		return Audit(ctx, js, o)
	}
	if o.FromSeq > 0 {
		return nil, errFromSeqPartitions
	}
	for _, e := range o.External {
		if err := e.Check(o.Trust, uniqueRooms(o.Rooms)); err != nil {
			return nil, err
		}
	}
	// Each room of o.Rooms goes to its partition's audit.
	index := func(id string) (int, error) {
		q, ok, err := place.Room(ctx, id)
		if err != nil || !ok {
			return 0, err
		}
		for i, p := range parts {
			if p.Stream == q.Stream {
				return i, nil
			}
		}
		return 0, nil
	}
	rooms := make([][]string, len(parts))
	for _, id := range o.Rooms {
		i, err := index(id)
		if err != nil {
			return nil, err
		}
		rooms[i] = append(rooms[i], id)
	}
	var out *AuditReport
	for i, p := range parts {
		if len(o.Rooms) > 0 && len(rooms[i]) == 0 {
			continue // nothing asked of it
		}
		po := o
		po.Stream, po.Subjects, po.Rooms = p.Stream, p.Subjects, rooms[i]
		var lookupErr error
		// The first partition audited reports the deployment log's own
		// facts; the others check only their rooms' entries.
		tune := auditTuning{quietDeployment: out != nil, ofPartition: func(id string) bool {
			j, err := index(id)
			if err != nil && lookupErr == nil {
				lookupErr = err
			}
			return j == i
		}}
		rep, _, err := audit(ctx, js, po, tune)
		if err == nil {
			err = lookupErr
		}
		if err != nil {
			return joinAudit(out, rep, i), err
		}
		out = joinAudit(out, rep, i)
	}
	if err := chainsInOneRoom(ctx, out, parts, place); err != nil {
		return out, err
	}
	finishJoined(out, o.Rooms)
	return out, nil
}

// chainsInOneRoom finds the chains of a joined report that more than one
// room holds: each partition's audit refuses a second room of a chain
// within its stream (room_conflict), but no audit sees two streams. The
// room the placement bucket claims the chain for keeps it, or, with no
// claim, the room on the first partition that holds it (a chain written
// before claims existed); every other room's copy is set aside
// room_conflict, its entries counted set aside and the chain broken.
func chainsInOneRoom(ctx context.Context, out *AuditReport, parts []room.Partition, place *room.Placement) error {
	if out == nil {
		return nil
	}
	// The partition each chain was read from (joinAudit kept it).
	partOf := func(i int) int { return out.chainParts[i] }
	byKey := map[events.ChainKey][]int{}
	for i, c := range out.Chains {
		byKey[c.Chain] = append(byKey[c.Chain], i)
	}
	for key, idx := range byKey {
		if len(idx) < 2 {
			continue
		}
		owner, claimed, err := place.ChainRoom(ctx, key)
		if err != nil {
			return err
		}
		if !claimed {
			best := idx[0]
			for _, i := range idx[1:] {
				if partOf(i) < partOf(best) {
					best = i
				}
			}
			owner = out.Chains[best].RoomID
		}
		for _, i := range idx {
			c := &out.Chains[i]
			if c.RoomID == owner {
				continue
			}
			q := parts[partOf(i)]
			why := fmt.Sprintf("the capsule's chain lives in %q (%s), and this copy of it is in %q on room stream %s",
				owner, map[bool]string{true: "claimed in the placement bucket", false: "the first partition that holds it"}[claimed], c.RoomID, q.Stream)
			a := SetAside{RoomID: c.RoomID, Kind: room.KindJournal, Seq: c.FirstSeq, Subject: q.Subjects.Journal(c.RoomID, key), Chain: &key,
				Code: events.RoomConflict, Reason: why, Problems: []events.Problem{validate.RoomConflict(events.Location{Seq: c.FirstSeq}, owner, c.RoomID)}}
			if c.Verdict == "ok" {
				out.Totals.ChainsOK--
				out.Totals.ChainsBroken++
			}
			c.Verdict, c.Broken = "broken", &a
			out.Totals.SetAside += uint64(c.Entries)
			if out.Totals.ByCode == nil {
				out.Totals.ByCode = map[events.Code]int{}
			}
			out.Totals.ByCode[events.RoomConflict] += int(c.Entries)
			out.Violations = append(out.Violations, a)
		}
	}
	return nil
}

var errFromSeqPartitions = errors.New("a start sequence (--from-seq) names a position in one room stream; a deployment of several partitions is replayed from a time (--since), or whole")

// joinAudit adds rep, partition i's report, to out (nil: rep starts it).
func joinAudit(out, rep *AuditReport, i int) *AuditReport {
	if rep == nil {
		return out
	}
	out = joinReport(out, rep)
	for len(out.chainParts) < len(out.Chains) {
		out.chainParts = append(out.chainParts, i)
	}
	return out
}

func joinReport(out, rep *AuditReport) *AuditReport {
	span := PartitionSpan{Stream: rep.Stream, FromSeq: rep.FromSeq, LastSeq: rep.LastSeq, StreamProblems: rep.StreamProblems, ReadBy: rep.ReadBy}
	if out == nil {
		cp := *rep
		cp.Partitions = []PartitionSpan{span}
		cp.StreamProblems = prefixed(rep.Stream, rep.StreamProblems)
		cp.Records = maps.Clone(rep.Records)
		cp.RoomMessages = maps.Clone(rep.RoomMessages)
		cp.Totals.ByCode = maps.Clone(rep.Totals.ByCode)
		return &cp
	}
	out.Partitions = append(out.Partitions, span)
	out.StreamProblems = append(out.StreamProblems, prefixed(rep.Stream, rep.StreamProblems)...)
	out.Chains = append(out.Chains, rep.Chains...)
	if out.Records == nil {
		out.Records = map[string]int{}
	}
	maps.Copy(out.Records, rep.Records)
	out.Violations = append(out.Violations, rep.Violations...)
	out.Omitted += rep.Omitted
	t, u := &out.Totals, rep.Totals
	t.Messages += u.Messages
	t.Entries += u.Entries
	t.Records += u.Records
	t.SetAside += u.SetAside
	t.ChainsOK += u.ChainsOK
	t.ChainsBroken += u.ChainsBroken
	t.Checkpoints += u.Checkpoints
	t.Markers += u.Markers
	t.StreamIsSound = t.StreamIsSound && u.StreamIsSound
	for code, n := range u.ByCode {
		if t.ByCode == nil {
			t.ByCode = map[events.Code]int{}
		}
		t.ByCode[code] += n
	}
	out.Checkpoints = append(out.Checkpoints, rep.Checkpoints...)
	out.Attestation.StateIgnored += rep.Attestation.StateIgnored // each partition's rooms only
	out.Attestation.StateIgnoredRooms = append(out.Attestation.StateIgnoredRooms, rep.Attestation.StateIgnoredRooms...)
	slices.Sort(out.Attestation.StateIgnoredRooms)
	if out.Witness == nil {
		out.Witness = rep.Witness
	}
	if out.RoomMessages == nil {
		out.RoomMessages = map[string]uint64{}
	}
	maps.Copy(out.RoomMessages, rep.RoomMessages)
	out.Notices = append(out.Notices, rep.Notices...)
	if out.ReadWhy == "" {
		out.ReadWhy = rep.ReadWhy
	}
	return out
}

// finishJoined sorts a joined report as Audit sorts its own, and says
// again what was read of rooms.
func finishJoined(out *AuditReport, rooms []string) {
	if out == nil {
		return
	}
	sortChains(out.Chains)
	slices.SortStableFunc(out.Checkpoints, func(a, b RoomCheckpoints) int {
		switch {
		case a.RoomID < b.RoomID:
			return -1
		case a.RoomID > b.RoomID:
			return 1
		}
		return 0
	})
	out.EmptyRooms = nil
	for _, id := range rooms {
		if out.RoomMessages[id] == 0 {
			out.EmptyRooms = append(out.EmptyRooms, id)
		}
	}
	out.Empty = out.Totals.Messages == 0 || len(out.EmptyRooms) > 0
}

func prefixed(stream string, problems []string) []string {
	out := make([]string, len(problems))
	for i, p := range problems {
		out[i] = stream + ": " + p
	}
	return out
}
