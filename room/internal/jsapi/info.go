package jsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SubjectCounts returns how many messages the stream holds on each
// subject that filter matches (wildcards allowed), as the stream leader
// counts them ($JS.API.STREAM.INFO with subjects_filter, read page by page:
// the server lists at most 100,000 subjects a reply). Subjects with no
// message are absent. Each page waits at most timeout. Errors: ctx's, the
// request's (nats.ErrTimeout, nats.ErrNoResponders), the API's (a
// *jetstream.APIError, wrapped), or a reply the server did not form.
//
// Unlike jetstream.Stream.Info it leaves the caller's cached stream info
// alone, which other goroutines read.
func SubjectCounts(ctx context.Context, nc *nats.Conn, stream, filter string, timeout time.Duration) (map[string]uint64, error) {
	out := map[string]uint64{}
	for offset := 0; ; {
		body, err := json.Marshal(map[string]any{"subjects_filter": filter, "offset": offset})
		if err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		m, err := nc.RequestWithContext(rctx, "$JS.API.STREAM.INFO."+stream, body)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("subject counts of %s in stream %s: %w", filter, stream, err)
		}
		var resp struct {
			Error *jetstream.APIError `json:"error"`
			Total int                 `json:"total"`
			State struct {
				Subjects map[string]uint64 `json:"subjects"`
			} `json:"state"`
		}
		if err := json.Unmarshal(m.Data, &resp); err != nil {
			return nil, fmt.Errorf("subject counts of %s in stream %s: %w", filter, stream, err)
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("subject counts of %s in stream %s: %w", filter, stream, resp.Error)
		}
		for subj, n := range resp.State.Subjects {
			out[subj] = n
		}
		offset += len(resp.State.Subjects)
		if len(resp.State.Subjects) == 0 || offset >= resp.Total {
			return out, nil
		}
	}
}

// Deletions is what a stream's state says of the messages deleted from
// inside it: its first and last sequence, how many are deleted, and which
// (Deleted, as the server lists them with deleted_details).
type Deletions struct {
	FirstSeq   uint64   `json:"first_seq"`
	LastSeq    uint64   `json:"last_seq"`
	NumDeleted uint64   `json:"num_deleted"`
	Deleted    []uint64 `json:"deleted"`
}

// Span is the lowest and highest deleted stream seq (both 0 when none;
// the whole stream when the server counts deletions it does not list).
func (d Deletions) Span() (lo, hi uint64) {
	switch {
	case len(d.Deleted) > 0:
		lo, hi = d.Deleted[0], d.Deleted[0]
		for _, s := range d.Deleted {
			lo, hi = min(lo, s), max(hi, s)
		}
	case d.NumDeleted > 0:
		lo, hi = max(d.FirstSeq, 1), d.LastSeq
	}
	return lo, hi
}

// StreamDeletions reads the stream's Deletions from the stream leader
// ($JS.API.STREAM.INFO with deleted_details, waiting at most timeout).
// Errors as SubjectCounts'; like it, it leaves the caller's cached stream
// info alone.
func StreamDeletions(ctx context.Context, nc *nats.Conn, stream string, timeout time.Duration) (Deletions, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, "$JS.API.STREAM.INFO."+stream, []byte(`{"deleted_details":true}`))
	if err != nil {
		return Deletions{}, fmt.Errorf("deleted messages of stream %s: %w", stream, err)
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		State Deletions           `json:"state"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return Deletions{}, fmt.Errorf("deleted messages of stream %s: %w", stream, err)
	}
	if resp.Error != nil {
		return Deletions{}, fmt.Errorf("deleted messages of stream %s: %w", stream, resp.Error)
	}
	return resp.State, nil
}

// LeaseWindow is how recently a stream leader must have heard from a
// quorum of the stream's replicas for a read it answered to be final
// (LeaderFresh): twice NATS's Raft heartbeat interval (1 s), half its
// shortest election timeout (4 s). A leader cut off from its replicas
// stops hearing from them at the cut, and no other leader can be elected
// and commit until an election timeout after it, so a read the leader
// answered before a check that finds a quorum within the window misses
// nothing the stream acknowledged.
const LeaseWindow = 2 * time.Second

// ErrStaleLeader is wrapped by LeaderFresh when the stream leader has not
// heard from a quorum of its replicas within LeaseWindow: it may be cut
// off, answering from a copy another leader has moved past.
var ErrStaleLeader = errors.New("the stream leader has not heard from a quorum of its replicas lately")

// LeaderFresh asks the stream leader ($JS.API.STREAM.INFO, waiting at most
// timeout) whether it heard from a quorum of the stream's replicas within
// LeaseWindow: nil when it did, or the stream has one replica; an error
// wrapping ErrStaleLeader (naming each replica's last contact) when it did
// not; the request's or the API's error otherwise. NATS gives clients no
// read confirmed by a quorum; this is the leader lease a Raft leader's
// read rests on, from the replicas' activity the leader reports.
func LeaderFresh(ctx context.Context, nc *nats.Conn, stream string, timeout time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, "$JS.API.STREAM.INFO."+stream, nil)
	if err != nil {
		return fmt.Errorf("stream info %s: %w", stream, err)
	}
	var resp struct {
		Error  *jetstream.APIError `json:"error"`
		Config struct {
			Replicas int `json:"num_replicas"`
		} `json:"config"`
		Cluster *struct {
			Leader   string `json:"leader"`
			Replicas []struct {
				Name    string        `json:"name"`
				Offline bool          `json:"offline"`
				Active  time.Duration `json:"active"`
			} `json:"replicas"`
		} `json:"cluster"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("stream info %s: %w", stream, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("stream info %s: %w", stream, resp.Error)
	}
	if resp.Config.Replicas <= 1 || resp.Cluster == nil {
		return nil
	}
	need := resp.Config.Replicas/2 + 1 - 1 // a quorum, less the leader
	var seen []string
	for _, r := range resp.Cluster.Replicas {
		// Contact, not lag: a replica that lags still answers the leader,
		// and a busy stream's replicas often lag by a few messages.
		if !r.Offline && r.Active <= LeaseWindow {
			need--
		}
		seen = append(seen, fmt.Sprintf("%s %s ago", r.Name, r.Active.Round(time.Millisecond)))
	}
	if need > 0 {
		return fmt.Errorf("%w: leader %s of stream %s last heard from its replicas %s; a quorum must be within %s",
			ErrStaleLeader, resp.Cluster.Leader, stream, strings.Join(seen, ", "), LeaseWindow)
	}
	return nil
}

// Unread counts what a read of a stream in stream order skipped: its
// first and last sequence when the read began, the messages read, the
// skipped sequences a list of deletions names (Deleted), and the others
// (Unreadable, the first ten in UnreadableSeqs, their span Lo to Hi):
// messages the server counts but did not return. Make it with NewUnread,
// feed it with Saw and End.
type Unread struct {
	FirstSeq, LastSeq uint64
	Read, Deleted     uint64
	Unreadable        uint64
	UnreadableSeqs    []uint64
	Lo, Hi            uint64
	next              uint64 // the seq the read expects next
}

// NewUnread starts the count of a read of stream seqs first (at least 1)
// to last.
func NewUnread(first, last uint64) Unread {
	first = max(first, 1)
	return Unread{FirstSeq: first, LastSeq: last, next: first}
}

// Saw takes the next message the read got, at seq: the sequences skipped
// since the one before count as Deleted when deleted lists them, else as
// Unreadable. With no deletions listed, a run of any length costs no
// more than ten sequences.
func (u *Unread) Saw(seq uint64, deleted map[uint64]bool) {
	u.skip(seq, deleted)
	u.Read++
	u.next = seq + 1
}

// End ends the read at LastSeq: what follows the last message got is
// counted as Saw counts a skip.
func (u *Unread) End(deleted map[uint64]bool) {
	if u.LastSeq > 0 {
		u.skip(u.LastSeq+1, deleted)
		u.next = u.LastSeq + 1
	}
}

func (u *Unread) skip(to uint64, deleted map[uint64]bool) {
	for s := u.next; s < to; s++ {
		if deleted[s] {
			u.Deleted++
			continue
		}
		if len(deleted) == 0 && len(u.UnreadableSeqs) == 10 {
			u.Unreadable += to - s // only the count from here on
			u.Hi = to - 1
			return
		}
		u.Unreadable++
		if len(u.UnreadableSeqs) < 10 {
			u.UnreadableSeqs = append(u.UnreadableSeqs, s)
		}
		if u.Lo == 0 {
			u.Lo = s
		}
		u.Hi = s
	}
}

// ReadAll reads every message of stream on filter's subjects ("" or ">"
// for all, read with no filter: WholeStream) from its first sequence to
// its last when called, in stream order, by batched direct gets of batch
// messages (each reply waiting at most timeout), holding none of them,
// and returns what it found (Unread, with the stream's listed
// deletions). A whole-stream read names the messages the server counts
// but cannot return, as from a damaged block whose state file it kept.
// Errors: StreamDeletions' and DirectBatch's.
func ReadAll(ctx context.Context, nc *nats.Conn, stream, filter string, batch int, timeout time.Duration) (Unread, error) {
	if filter == ">" {
		filter = WholeStream
	}
	del, err := StreamDeletions(ctx, nc, stream, timeout)
	if err != nil {
		return Unread{}, err
	}
	u := NewUnread(del.FirstSeq, del.LastSeq)
	deleted := make(map[uint64]bool, len(del.Deleted))
	for _, s := range del.Deleted {
		deleted[s] = true
	}
	for u.LastSeq > 0 && u.next <= u.LastSeq {
		msgs, err := DirectBatch(ctx, nc, stream, BatchRequest{Seq: u.next, NextBySubj: filter, Batch: batch, UpToSeq: u.LastSeq}, timeout)
		if err != nil {
			return u, fmt.Errorf("read stream %s from stream seq %d: %w", stream, u.next, err)
		}
		if len(msgs) == 0 {
			break
		}
		past := false
		for _, m := range msgs {
			if past = m.Seq > u.LastSeq; past {
				break
			}
			u.Saw(m.Seq, deleted)
		}
		if past {
			// Appended since the read began, past seqs that are gone:
			// nothing more of the span to read (End counts them).
			break
		}
	}
	u.End(deleted)
	return u, nil
}
