// Package backup backs up and restores roompub's streams (the room stream,
// the deployment log ROOMPUB_DEPLOYMENT) with JetStream's stream snapshot
// API, through github.com/nats-io/jsm.go: a backup directory holds the
// server's snapshot archive and backup.json (the stream's configuration
// and state at the snapshot), the layout `nats stream backup` writes and
// `nats stream restore` reads (docs/operations.md, "Backup and restore").
//
// A restore never replaces a stream: the server has none of that name, or
// Restore refuses. The restored stream keeps the configuration it was
// backed up with, and Restore holds it to roompub's append-only rules
// (room.CheckStreamConfig) and to the backup's own state before it calls
// it restored.
package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/jsm.go"
	"github.com/nats-io/jsm.go/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// ErrStreamExists is wrapped by Restore when the server already has a
// stream of the backup's name: a restore never replaces a stream, which
// on an append-only room stream would drop whatever was appended since
// the backup.
var ErrStreamExists = errors.New("the stream exists: a restore never replaces a stream")

// ErrBackup is wrapped by Backup and Restore when a directory cannot hold
// a new backup or does not hold a readable one.
var ErrBackup = errors.New("backup")

// ErrRestoreMismatch is wrapped by Restore when the restored stream is not
// what the backup says it held (its messages, first or last sequence).
var ErrRestoreMismatch = errors.New("the restored stream does not hold what the backup says")

// apiTimeout bounds each JetStream API request of a backup or restore (not
// the transfer, which ctx bounds).
const apiTimeout = 10 * time.Second

// Result describes one backup or restore: the stream and what it held at
// the snapshot, from the backup's own record (backup.json).
type Result struct {
	Dir      string `json:"dir"`
	Stream   string `json:"stream"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// Subjects are the stream's subject filters.
	Subjects []string `json:"subjects"`
	// Taken is the time of the stream's last message when the snapshot
	// began (zero for an empty stream).
	Taken time.Time `json:"last_message_time"`
	// Beyond counts, after a restore, the messages the restored stream
	// holds past the backup's recorded state: appended while a backup of
	// a stream in use was taken (nats-server reads the stream's blocks
	// one by one while appends go on).
	Beyond uint64 `json:"beyond_recorded,omitempty"`
}

// Backup writes a snapshot of stream into dir, which must not hold a
// backup already (an unfinished one, without backup.json, is
// overwritten); the directory is created (mode 0700) when missing. The
// server checks every message's checksum as it reads them (jsm.go's
// SnapshotHealthCheck), so a damaged store fails the backup instead of
// making a damaged copy. The Result is the stream's state when the
// snapshot began, which the backup holds whole. A stream nobody appends
// to meanwhile (serve stopped) is backed up exactly; with serve running,
// messages appended during the snapshot may be in it too, an atomic batch
// possibly only in part (docs/operations.md, "Backup and restore").
func Backup(ctx context.Context, nc *nats.Conn, stream, dir string) (Result, error) {
	if stream == "" || dir == "" {
		return Result{}, fmt.Errorf("%w: a stream name and a directory are required", ErrBackup)
	}
	mgr, err := jsm.New(nc, jsm.WithTimeout(apiTimeout))
	if err != nil {
		return Result{}, err
	}
	st, err := mgr.LoadStream(stream)
	if err != nil {
		return Result{}, fmt.Errorf("stream %s: %w", stream, err)
	}
	if _, err := st.SnapshotToDirectory(ctx, dir, jsm.SnapshotHealthCheck()); err != nil {
		return Result{}, fmt.Errorf("%w: snapshot of %s into %s: %w", ErrBackup, stream, dir, err)
	}
	_ = os.Chmod(filepath.Join(dir, jsm.SnapshotMetaFile), 0o600)
	return Read(dir)
}

// Read returns what the backup in dir holds, from its backup.json, and
// checks that its archive is there. Errors wrap ErrBackup.
func Read(dir string) (Result, error) {
	req, err := readMeta(dir)
	if err != nil {
		return Result{}, err
	}
	if _, err := jsm.SnapshotDataPath(dir); err != nil {
		return Result{}, fmt.Errorf("%w: %s holds no snapshot archive: %w", ErrBackup, dir, err)
	}
	s := req.State
	return Result{Dir: dir, Stream: req.Config.Name, Messages: s.Msgs, Bytes: s.Bytes, FirstSeq: s.FirstSeq, LastSeq: s.LastSeq,
		Subjects: req.Config.Subjects, Taken: s.LastTime}, nil
}

// readMeta reads dir's backup.json.
func readMeta(dir string) (*api.JSApiStreamRestoreRequest, error) {
	b, err := os.ReadFile(filepath.Join(dir, jsm.SnapshotMetaFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %s holds no finished backup: %w", ErrBackup, dir, err)
	}
	var req api.JSApiStreamRestoreRequest
	if err := json.Unmarshal(b, &req); err != nil || req.Config.Name == "" {
		return nil, fmt.Errorf("%w: %s: %s is not a stream backup's record: %v", ErrBackup, dir, jsm.SnapshotMetaFile, err)
	}
	return &req, nil
}

// partitionPrefix is the layout of partition i > 0 of subjects' deployment
// when filters are exactly that partition's ("<prefix>-<i>.>").
func partitionPrefix(subjects room.Subjects, filters []string) (room.Subjects, bool) {
	if len(filters) != 1 {
		return room.Subjects{}, false
	}
	for i := 1; i < room.MaxPartitions; i++ {
		q := room.Layout{Subjects: subjects, Partitions: i + 1}.Partition(i)
		if filters[0] == q.Subjects.All() {
			return q.Subjects, true
		}
	}
	return room.Subjects{}, false
}

// RestoreOptions say which roompub stream a restored stream is held to.
// The zero value is the defaults: room stream subjects under "rooms", the
// deployment log ROOMPUB_DEPLOYMENT.
type RestoreOptions struct {
	// Subjects is the room stream's subject layout (--subject-prefix): the
	// first partition's; a backup of another partition's stream
	// (<prefix>-<i>.>) is held to its own, and one of the placement bucket
	// (KV_ROOMPUB_PLACEMENT) to none.
	Subjects room.Subjects
	// Deployment names the deployment log: a backup of that stream is
	// held to its subjects instead.
	Deployment room.DeploymentLog
}

// Restore restores the backup in dir under the stream name it was taken
// from, with the configuration it was taken with. It refuses, before
// sending anything, when the server has a stream of that name
// (ErrStreamExists). Once restored, the stream must hold every message of
// the backup's recorded state, from its first sequence with none missing,
// and nothing but messages after them (Result.Beyond;
// ErrRestoreMismatch otherwise), and be an append-only roompub stream (an
// error wrapping room.ErrStreamConfig, as serve's own check; the stream
// then stays, for an administrator to fix or delete, and serve refuses it
// meanwhile).
func Restore(ctx context.Context, nc *nats.Conn, dir string, o RestoreOptions) (Result, error) {
	want, err := Read(dir)
	if err != nil {
		return Result{}, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return Result{}, err
	}
	lctx, cancel := context.WithTimeout(ctx, apiTimeout)
	_, err = js.Stream(lctx, want.Stream)
	cancel()
	switch {
	case err == nil:
		return Result{}, fmt.Errorf("%w: %s (delete it first, or restore into a server without it)", ErrStreamExists, want.Stream)
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return Result{}, fmt.Errorf("stream %s: %w", want.Stream, err)
	}
	mgr, err := jsm.New(nc, jsm.WithTimeout(apiTimeout))
	if err != nil {
		return Result{}, err
	}
	if _, _, err := mgr.RestoreSnapshotFromDirectory(ctx, want.Stream, dir); err != nil {
		return Result{}, fmt.Errorf("restore %s from %s: %w", want.Stream, dir, err)
	}
	ictx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	st, err := js.Stream(ictx, want.Stream)
	if err != nil {
		return Result{}, fmt.Errorf("the restored stream %s: %w", want.Stream, err)
	}
	info := st.CachedInfo()
	got := want
	got.Messages, got.Bytes, got.FirstSeq, got.LastSeq = info.State.Msgs, info.State.Bytes, info.State.FirstSeq, info.State.LastSeq
	// Messages appended during the snapshot follow the recorded ones;
	// nothing recorded may be missing.
	if got.LastSeq < want.LastSeq || got.Messages < want.Messages || got.Messages-want.Messages != got.LastSeq-want.LastSeq ||
		(want.Messages > 0 && got.FirstSeq != want.FirstSeq) {
		return got, fmt.Errorf("%w: %s holds %d messages, seqs %d to %d; the backup recorded %d, seqs %d to %d",
			ErrRestoreMismatch, want.Stream, got.Messages, got.FirstSeq, got.LastSeq, want.Messages, want.FirstSeq, want.LastSeq)
	}
	got.Beyond = got.LastSeq - want.LastSeq
	if want.Stream == "KV_"+room.DefaultPlacementBucket {
		// The placement bucket is a key-value stream, not append-only:
		// each key is written once, and a placement or claim it lacks is
		// recorded again from the room streams (docs/operations.md).
		return got, nil
	}
	subjects := o.Subjects
	if want.Stream == o.Deployment.StreamName() {
		subjects = o.Deployment.Subjects()
	} else if p, ok := partitionPrefix(o.Subjects, want.Subjects); ok {
		subjects = p // another partition's room stream (docs/design.md, "Partitions")
	}
	if err := room.CheckStreamConfig(info.Config, subjects); err != nil {
		return got, fmt.Errorf("the restored stream %s: %w", want.Stream, err)
	}
	if err := room.CheckStoreLoss(info.State); err != nil {
		return got, fmt.Errorf("the restored stream %s: %w", want.Stream, err)
	}
	return got, nil
}

// Loss is what a stream lacks that it once held, found after a backup:
// the backup holds the stream as the server has it, without these.
type Loss struct {
	// Inside counts the messages gone from inside the stream, between its
	// first and last sequence: on a stream that denies deletes and purges
	// (the room streams, the deployment log), only a damaged store removes
	// them. InsideSeqs are their stream seqs, as the server lists them.
	Inside     uint64   `json:"inside"`
	InsideSeqs []uint64 `json:"inside_seqs,omitempty"`
	// Mark is the stream mark (room.StreamMark) the stream was compared
	// with; nil without one.
	Mark *room.StreamMark `json:"mark,omitempty"`
	// Front counts the sequences the mark remembers before the stream's
	// first (Mark.FirstSeq to FirstSeq-1); Tail those after its last
	// (LastSeq+1 to Mark.LastSeq).
	Front uint64 `json:"front,omitempty"`
	Tail  uint64 `json:"tail,omitempty"`
	// Unreadable counts the messages the server counts but did not
	// return to a read of the whole stream (a damaged block whose state
	// file it kept): the snapshot lacks them too. UnreadableSeqs are the
	// first ten.
	Unreadable     uint64   `json:"unreadable,omitempty"`
	UnreadableSeqs []uint64 `json:"unreadable_seqs,omitempty"`
	// FirstSeq and LastSeq are the stream's, as the server has it.
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
}

// Messages counts every message the loss names.
func (l *Loss) Messages() uint64 { return l.Inside + l.Front + l.Tail + l.Unreadable }

// Lines say what is missing, one line each: the sequences the mark
// remembers past either end of the stream, and the messages gone from
// inside it (the first 20 of their seqs).
func (l *Loss) Lines() []string {
	var out []string
	if l.Front > 0 {
		out = append(out, fmt.Sprintf("%d messages missing before the stream's first, stream seqs %d to %d: the stream starts at seq %d, its mark remembers seq %d",
			l.Front, l.Mark.FirstSeq, l.FirstSeq-1, l.FirstSeq, l.Mark.FirstSeq))
	}
	if l.Inside > 0 {
		seqs := ""
		if n := len(l.InsideSeqs); n > 0 {
			more := ""
			if n > 20 {
				n, more = 20, " …"
			}
			seqs = fmt.Sprintf(" (stream seqs %v%s)", l.InsideSeqs[:n], more)
		}
		out = append(out, fmt.Sprintf("%d messages missing from inside the stream, between stream seqs %d and %d%s",
			l.Inside, l.FirstSeq, l.LastSeq, seqs))
	}
	if l.Unreadable > 0 {
		more := ""
		if l.Unreadable > uint64(len(l.UnreadableSeqs)) {
			more = " …"
		}
		out = append(out, fmt.Sprintf("%d messages the server counts but cannot read (stream seqs %v%s): the backup lacks them, and a restore of it holds fewer messages than it records",
			l.Unreadable, l.UnreadableSeqs, more))
	}
	if l.Tail > 0 {
		out = append(out, fmt.Sprintf("%d messages missing after the stream's last, stream seqs %d to %d: the stream ends at seq %d, its mark remembers seq %d",
			l.Tail, l.LastSeq+1, l.Mark.LastSeq, l.LastSeq, l.Mark.LastSeq))
	}
	return out
}

// CheckLoss compares stream, as the server on nc has it, with what it
// once held: mark (nil without one; a mark of another stream, by creation
// time, is not compared) for its ends, and, on a stream that denies
// deletes and purges, its interior deletes; and it reads every message,
// for those the server counts but cannot return. Nil when nothing is
// missing.
// Call it after Backup with nothing appending (serve stopped): the backup
// holds the stream as CheckLoss saw it.
func CheckLoss(ctx context.Context, nc *nats.Conn, stream string, mark *room.StreamMark) (*Loss, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	st, err := js.Stream(ictx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := st.Info(ictx, jetstream.WithDeletedDetails(true))
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	s := info.State
	l := &Loss{FirstSeq: s.FirstSeq, LastSeq: s.LastSeq}
	if info.Config.DenyDelete && info.Config.DenyPurge {
		l.Inside, l.InsideSeqs = uint64(s.NumDeleted), s.Deleted
	}
	// The server counts a message it can no longer read (its state file
	// kept across the damage) and the snapshot skips it: only a read of
	// every message finds it.
	u, err := jsapi.ReadAll(ctx, nc, stream, ">", 1000, apiTimeout)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	l.Unreadable, l.UnreadableSeqs = u.Unreadable, u.UnreadableSeqs
	if mark != nil && mark.Stream == stream && mark.Created.Equal(info.Created) && mark.LastSeq > 0 {
		l.Mark = mark
		if s.LastSeq < mark.LastSeq {
			l.Tail = mark.LastSeq - s.LastSeq
		}
		if first := max(mark.FirstSeq, 1); s.Msgs > 0 && s.FirstSeq > first {
			l.Front = s.FirstSeq - first
		}
	}
	if l.Messages() == 0 {
		return nil, nil
	}
	return l, nil
}
