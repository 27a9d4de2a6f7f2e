package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// markOf is the mark of the stream info describes.
func markOf(info *jetstream.StreamInfo) room.StreamMark {
	return room.StreamMark{Stream: info.Config.Name, Created: info.Created, FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq}
}

// streamMemory keeps a room.StreamMark where a restart finds it.
type streamMemory interface {
	// load returns the mark, or nil when there is none.
	load(ctx context.Context) (*room.StreamMark, error)
	// save records m. Unless force is set it never lowers the last
	// sequence recorded for the same stream (same creation time).
	save(ctx context.Context, m room.StreamMark, force bool) error
	// where names the place in messages.
	where() string
}

// fileMemory is a mark file; only the process that holds the store's
// lock writes it.
type fileMemory struct{ path string }

func (f fileMemory) where() string { return f.path }

func (f fileMemory) load(context.Context) (*room.StreamMark, error) {
	return room.ReadStreamMarkFile(f.path)
}

// save writes the mark atomically (writeAtomic).
func (f fileMemory) save(_ context.Context, m room.StreamMark, _ bool) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := writeAtomic(f.path, ".roompub-stream-*.tmp", append(data, '\n')); err != nil {
		return fmt.Errorf("stream mark %s: %w", f.path, err)
	}
	return nil
}

// writeAtomic writes data to path atomically: a temporary file (named by
// pattern) in the same directory, fsynced, renamed over path, and the
// directory fsynced, so a crash leaves the old file or the new one, whole.
func writeAtomic(path, pattern string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(dir); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	return err
}

// kvMemory is a key of the streams bucket, which every publisher of the
// account shares: updates are compare-and-set.
type kvMemory struct {
	kv  jetstream.KeyValue
	key string
}

func (k kvMemory) where() string { return "key " + k.key + " of bucket " + k.kv.Bucket() }

func (k kvMemory) load(ctx context.Context) (*room.StreamMark, error) {
	m, _, err := k.get(ctx)
	return m, err
}

func (k kvMemory) get(ctx context.Context) (*room.StreamMark, uint64, error) {
	e, err := k.kv.Get(ctx, k.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("stream mark (%s): %w", k.where(), err)
	}
	var m room.StreamMark
	if err := json.Unmarshal(e.Value(), &m); err != nil {
		return nil, 0, fmt.Errorf("stream mark (%s): %w", k.where(), err)
	}
	return &m, e.Revision(), nil
}

func (k kvMemory) save(ctx context.Context, m room.StreamMark, force bool) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return updateKey(ctx, k.kv, k.key, "stream mark ("+k.where()+")", func() ([]byte, uint64, bool, error) {
		old, rev, err := k.get(ctx)
		if err != nil {
			return nil, 0, false, err
		}
		if old != nil && !force && old.Created.Equal(m.Created) && old.LastSeq >= m.LastSeq {
			return nil, 0, false, nil // another publisher recorded as much or more
		}
		return data, rev, true, nil
	})
}

// updateKey writes key of the streams bucket kv by compare-and-set, which
// every publisher of the account shares: each turn, read gives the value
// to write and the revision it was read at (0: the key is missing,
// created), or write false to leave the key as it is. A write another
// publisher got in before is read again, five turns at most. what names
// the key in errors; read's own errors are returned as they are.
func updateKey(ctx context.Context, kv jetstream.KeyValue, key, what string, read func() (data []byte, rev uint64, write bool, err error)) error {
	for range 5 {
		data, rev, write, err := read()
		if err != nil || !write {
			return err
		}
		if rev == 0 {
			_, err = kv.Create(ctx, key, data)
		} else {
			_, err = kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !jsapi.IsWrongLastSequence(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		// Another publisher wrote in between: read again.
	}
	return fmt.Errorf("%s: updated by others five times in a row", what)
}

// pairMemory keeps the mark in two places: serve's own file and the
// streams bucket. Load takes the one further along (the later stream
// creation, then the higher last sequence), so the stream is remembered
// as long as either place is.
type pairMemory struct{ a, b streamMemory }

func (p pairMemory) where() string { return p.a.where() + " and " + p.b.where() }

func (p pairMemory) load(ctx context.Context) (*room.StreamMark, error) {
	ma, err := p.a.load(ctx)
	if err != nil {
		return nil, err
	}
	mb, err := p.b.load(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case ma == nil:
		return mb, nil
	case mb == nil:
		return ma, nil
	case ma.Stream != mb.Stream:
		return nil, fmt.Errorf("%w: the stream marks disagree: %s is of stream %s, %s of stream %s: give each stream its own mark file",
			room.ErrStreamReplaced, p.a.where(), ma.Stream, p.b.where(), mb.Stream)
	case mb.Created.After(ma.Created) || (mb.Created.Equal(ma.Created) && mb.LastSeq > ma.LastSeq):
		return mb, nil
	}
	return ma, nil
}

func (p pairMemory) save(ctx context.Context, m room.StreamMark, force bool) error {
	return errors.Join(p.a.save(ctx, m, force), p.b.save(ctx, m, force))
}

// streamsBucket binds the streams bucket, creating it (file storage,
// history 1, replicas as the room stream's) when it does not exist.
func streamsBucket(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, room.DefaultStreamsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      room.DefaultStreamsBucket,
			Description: "roompub: each room stream a publisher served, its creation time and last sequence",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    max(replicas, 1),
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, room.DefaultStreamsBucket) // another publisher made it first
		}
	}
	if err != nil {
		return nil, fmt.Errorf("streams bucket %s: %w", room.DefaultStreamsBucket, err)
	}
	return kv, nil
}

// compareStream reports, wrapping room.ErrStreamReplaced, how the stream now
// (nil: there is none) differs from the remembered mark m; nil when it is
// the same stream, grown or not.
func compareStream(m room.StreamMark, info *jetstream.StreamInfo, where string) error {
	const howTo = "if that is expected (the stream was restored from a backup or deliberately made anew), " +
		"start serve once with --accept-stream (accept-stream: true; ServeOptions.AcceptStream); " +
		"otherwise find out who removed it, or whether the server dropped it from a damaged block file " +
		"(docs/reliability.md, \"When the store loses what it acknowledged\"), and restore it before serve starts"
	if info == nil {
		return fmt.Errorf("%w: stream %s is gone: serve remembers it %s (%s); serve creates no new stream on its own: %s",
			room.ErrStreamReplaced, m.Stream, m, where, howTo)
	}
	found := markOf(info)
	switch {
	case !info.Created.Equal(m.Created):
		return fmt.Errorf("%w: stream %s is another stream: found it %s, serve remembers it %s (%s): %s",
			room.ErrStreamReplaced, m.Stream, found, m, where, howTo)
	case found.LastSeq < m.LastSeq:
		return fmt.Errorf("%w: stream %s lost messages: found it %s, serve remembers it %s (%s): %s",
			room.ErrStreamReplaced, m.Stream, found, m, where, howTo)
	case m.LastSeq > 0 && found.FirstSeq > max(m.FirstSeq, 1):
		return fmt.Errorf("%w: stream %s lost messages: its first sequence is %d, serve remembers %d (%s, %s): %s",
			room.ErrStreamReplaced, m.Stream, found.FirstSeq, m.FirstSeq, m, where, howTo)
	}
	return nil
}

// writersIntoRooms lists the account's streams and reports, each wrapping
// events.WeakStream, every other stream than the room stream that can
// write a message onto a room subject, which the room stream would store
// without it passing the gate (docs/secure-mode.md, "Writers into room
// subjects"): a RePublish whose destination can overlap the room subjects,
// or a push consumer whose deliver subject can. It returns the names of
// those streams too (nil with a listing error alone).
//
// Those are the two ways JetStream itself publishes onto subjects. A
// stream's sources, mirror and subject transform write into that stream
// itself, never onto a subject another stream listens on, and the room
// stream has none of its own (room.CheckStreamConfig); the room stream's own
// consumers cannot deliver onto its subjects (the server refuses the
// cycle). Streams the server lists as missing (an offline replica set)
// cannot write while offline and are not seen.
func writersIntoRooms(ctx context.Context, js jetstream.JetStream, roomStream string, subjects room.Subjects) ([]string, error) {
	ctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	defer cancel()
	l := js.ListStreams(ctx)
	var others []*jetstream.StreamInfo
	for info := range l.Info() {
		if info != nil && info.Config.Name != roomStream {
			others = append(others, info)
		}
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("list the account's streams: %w", err)
	}
	var names []string
	var errs []error
	for _, info := range others {
		name, found := info.Config.Name, false
		if rp := info.Config.RePublish; rp != nil && server.SubjectsCollide(republishReach(rp.Destination), subjects.All()) {
			found = true
			src := rp.Source
			if src == "" {
				src = ">"
			}
			errs = append(errs, fmt.Errorf("%w: stream %s republishes %s to %s, which can write into the room subjects %s without passing the gate",
				events.WeakStream, name, src, rp.Destination, subjects.All()))
		}
		if info.State.Consumers > 0 {
			pushers, err := pushConsumers(ctx, js.Conn(), name)
			if err != nil {
				return nil, err
			}
			for _, c := range pushers {
				if server.SubjectsCollide(c.deliver, subjects.All()) {
					found = true
					errs = append(errs, fmt.Errorf("%w: consumer %s of stream %s delivers to %s, which can write into the room subjects %s without passing the gate",
						events.WeakStream, c.name, name, c.deliver, subjects.All()))
				}
			}
		}
		if found {
			names = append(names, name)
		}
	}
	return names, errors.Join(errs...)
}

// pushConsumer is a consumer's name and deliver subject.
type pushConsumer struct{ name, deliver string }

// pushConsumers lists the push consumers of stream
// ($JS.API.CONSUMER.LIST.<stream>, paged).
func pushConsumers(ctx context.Context, nc *nats.Conn, stream string) ([]pushConsumer, error) {
	var out []pushConsumer
	for offset := 0; ; {
		req, _ := json.Marshal(map[string]int{"offset": offset})
		msg, err := nc.RequestWithContext(ctx, "$JS.API.CONSUMER.LIST."+stream, req)
		if err != nil {
			return nil, fmt.Errorf("list the consumers of stream %s: %w", stream, err)
		}
		var page struct {
			Total     int `json:"total"`
			Consumers []struct {
				Name   string `json:"name"`
				Config struct {
					DeliverSubject string `json:"deliver_subject"`
				} `json:"config"`
			} `json:"consumers"`
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &page); err != nil {
			return nil, fmt.Errorf("list the consumers of stream %s: %w", stream, err)
		}
		if page.Error != nil {
			if page.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound {
				return out, nil // deleted since the stream list
			}
			return nil, fmt.Errorf("list the consumers of stream %s: %w", stream, page.Error)
		}
		for _, c := range page.Consumers {
			if c.Config.DeliverSubject != "" {
				out = append(out, pushConsumer{name: c.Name, deliver: c.Config.DeliverSubject})
			}
		}
		offset += len(page.Consumers)
		if len(page.Consumers) == 0 || offset >= page.Total {
			return out, nil
		}
	}
}

// republishReach widens a RePublish destination into a subject filter
// covering every subject it can produce: a mapping function token
// ({{wildcard(1)}}, $1, ...) can be any token, so it becomes "*", and a
// split function can be any number of tokens, so it and everything after
// become ">". Literal tokens and wildcards stay.
func republishReach(dest string) string {
	toks := strings.Split(dest, ".")
	for i, tok := range toks {
		if !strings.Contains(tok, "{{") && !(strings.HasPrefix(tok, "$") && len(tok) > 1) {
			continue
		}
		if strings.Contains(strings.ToLower(tok), "split") {
			return strings.Join(append(toks[:i:i], ">"), ".")
		}
		toks[i] = "*"
	}
	return strings.Join(toks, ".")
}

// streamGuard is Serve's watch over its room stream: that it is still the
// stream Serve remembers (mark), still append-only, and that no other
// stream of the account writes into its subjects.
type streamGuard struct {
	js       jetstream.JetStream
	name     string
	subjects room.Subjects
	memory   streamMemory
	// contradicted keeps the rooms found contradicting their checkpoint
	// across starts.
	contradicted contradictedMemory
	mark         room.StreamMark
	log          *zap.Logger
	metrics      *ingest.Metrics // nil: none
	// writers is the last verdict on writers into room subjects; it
	// stands while the account's streams cannot be listed.
	writers error
	// lost is the last verdict on what the store lost (wraps
	// room.ErrStoreLost), nil when the stream shows nothing missing.
	lost error
	// fresh reports whether the stream's leader heard from a quorum of
	// its replicas lately (nil: jsapi.LeaderFresh; tests set their own).
	fresh func(ctx context.Context) error
}

// leaderFresh is g.fresh, by default jsapi.LeaderFresh on the stream.
func (g *streamGuard) leaderFresh(ctx context.Context) error {
	if g.fresh != nil {
		return g.fresh(ctx)
	}
	return jsapi.LeaderFresh(ctx, g.js.Conn(), g.name, room.DefaultTimeout)
}

// checkLoss updates g.lost from s's state: messages deleted from inside
// an append-only stream are messages the store lost
// (room.CheckStoreLoss). A new verdict is logged at error level; the
// metric follows every check.
func (g *streamGuard) checkLoss(ctx context.Context, s jetstream.Stream) {
	info := s.CachedInfo()
	if info == nil {
		return
	}
	st := info.State
	if st.NumDeleted > 0 {
		if full, err := s.Info(ctx, jetstream.WithDeletedDetails(true)); err == nil {
			st = full.State
		}
	}
	lost := room.CheckStoreLoss(st)
	n := uint64(st.NumDeleted)
	if st.FirstSeq > 1 {
		n += st.FirstSeq - 1
	}
	if lost != nil && (g.lost == nil || g.lost.Error() != lost.Error()) {
		g.log.Error("room stream: the store lost acknowledged messages; /healthz reports it", zap.String("stream", g.name),
			zap.Uint64("lost", n), zap.Uint64("first_seq", st.FirstSeq), zap.Uint64("last_seq", st.LastSeq), zap.Error(lost))
	}
	if g.metrics != nil {
		g.metrics.StoreLost(g.name, n)
	}
	g.lost = lost
}

// check returns the verdict on the stream now, nil when it is sound;
// known is false when the stream could not be read (no leader, a
// partition), which says nothing about it: the last verdict stands. On a
// sound stream it records the last sequence seen.
func (g *streamGuard) check(ctx context.Context) (verdict error, known bool) {
	ctx, cancel := context.WithTimeout(ctx, room.DefaultTimeout)
	defer cancel()
	// Another publisher of the account may have accepted a new stream
	// or seen more of it (the streams bucket); the mark file is this
	// process's own.
	if m, err := g.memory.load(ctx); err != nil {
		g.log.Warn("room stream check: cannot read the stream mark now; the last one read stands", zap.Error(err))
	} else if m != nil && !(m.Created.Equal(g.mark.Created) && m.LastSeq < g.mark.LastSeq) {
		g.mark = *m
	}
	var info *jetstream.StreamInfo
	s, err := g.js.Stream(ctx, g.name)
	switch {
	case err == nil:
		info = s.CachedInfo()
		g.checkLoss(ctx, s)
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		g.log.Warn("room stream check: cannot read the stream now; the last verdict stands", zap.Error(err))
		return nil, false
	}
	replaced := compareStream(g.mark, info, g.memory.where())
	if replaced != nil && info != nil {
		// A verdict resting on what the stream does not hold stands only
		// on a leader that heard from a quorum of its replicas after the
		// read: one cut off from them answers from a copy the others have
		// moved past, and would pause appends for a check interval.
		if err := g.leaderFresh(ctx); err != nil {
			g.log.Warn("room stream check: the stream looks short or replaced, but its leader may answer from a stale copy; the last verdict stands",
				zap.String("stream", g.name), zap.NamedError("seen", replaced), zap.Error(err))
			return nil, false
		}
	}
	var weak error
	if info != nil {
		weak = room.CheckStreamConfig(info.Config, g.subjects)
	}
	g.checkWriters(ctx)
	if replaced == nil && weak == nil {
		g.remember(ctx, markOf(info))
	}
	return errors.Join(replaced, weak, g.writers), true
}

// checkWriters updates g.writers, unless the streams cannot be listed.
func (g *streamGuard) checkWriters(ctx context.Context) {
	names, err := writersIntoRooms(ctx, g.js, g.name, g.subjects)
	if err != nil && names == nil {
		g.log.Warn("room stream check: cannot list the account's streams now; the last verdict on writers into room subjects stands", zap.Error(err))
		return
	}
	if err != nil && (g.writers == nil || g.writers.Error() != err.Error()) {
		g.log.Error("another stream can write into the room subjects: appends paused", zap.Strings("streams", names), zap.Error(err))
	}
	if g.metrics != nil {
		g.metrics.ForeignWriters(len(names))
	}
	g.writers = err
}

// remember records m when it is further along than the mark.
func (g *streamGuard) remember(ctx context.Context, m room.StreamMark) {
	if m.Created.Equal(g.mark.Created) && m.LastSeq <= g.mark.LastSeq && m.FirstSeq == g.mark.FirstSeq {
		return
	}
	if err := g.memory.save(ctx, m, false); err != nil {
		g.log.Warn("room stream: cannot record its last sequence now", zap.Error(err))
		return
	}
	g.mark = m
}

// record reads the stream and records its last sequence when it is the
// stream Serve remembers (Serve's end).
func (g *streamGuard) record(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, room.DefaultTimeout)
	defer cancel()
	s, err := g.js.Stream(ctx, g.name)
	if err != nil {
		g.log.Warn("room stream: cannot record its last sequence", zap.Error(err))
		return
	}
	if info := s.CachedInfo(); compareStream(g.mark, info, g.memory.where()) == nil {
		g.remember(ctx, markOf(info))
	}
}

// openStream is Serve's start on the room stream: it compares the stream
// (or its absence) with the mark Serve remembers (a file in the embedded
// server's store directory, or the streams bucket), refuses a stream that
// is not the remembered one unless o.AcceptStream, creates the stream when
// it is missing and may be (room.EnsureStream), and records the new mark.
// Errors wrap room.ErrStreamReplaced or room.ErrStreamConfig where they apply.
func openStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, o ServeOptions, emb *embedded.Server, log *zap.Logger) (*streamGuard, jetstream.Stream, error) {
	var now *jetstream.StreamInfo // the stream before anything is created
	var s jetstream.Stream
	err := setupRetry(ctx, func() (err error) {
		s, err = js.Stream(ctx, cfg.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil // the answer, not a failure; s is nil
		}
		return err
	})
	if err == nil && s == nil {
		err = jetstream.ErrStreamNotFound
	}
	switch {
	case err == nil:
		now = s.CachedInfo()
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, nil, fmt.Errorf("look up stream %s: %w", cfg.Name, err)
	}
	if o.StreamMark != "" {
		// Before anything is created: a mark that cannot be written would
		// stop serve only after the stream and the bucket key exist.
		if fi, err := os.Stat(filepath.Dir(o.StreamMark)); err != nil || !fi.IsDir() {
			return nil, nil, fmt.Errorf("stream mark %s: its directory %s does not exist", o.StreamMark, filepath.Dir(o.StreamMark))
		}
	}
	var mem streamMemory
	var contra contradictedMemory
	if emb != nil {
		mem = fileMemory{path: room.StreamMarkFile(emb.StoreDir(), cfg.Name)}
		contra = contradictedFileOf(emb.StoreDir(), cfg.Name)
		if o.StreamMark != "" {
			// A backup of the store restores its mark too; this one,
			// outside the store, remembers further.
			mem = pairMemory{mem, fileMemory{path: o.StreamMark}}
		}
	} else {
		replicas := cfg.Replicas
		if now != nil {
			replicas = now.Config.Replicas
		}
		var kv jetstream.KeyValue
		if err := setupRetry(ctx, func() (err error) {
			actx, cancel := context.WithTimeout(ctx, setupTry)
			defer cancel()
			kv, err = streamsBucket(actx, js, replicas)
			return err
		}); err != nil {
			return nil, nil, err
		}
		mem = kvMemory{kv: kv, key: cfg.Name}
		contra = contradictedKey{kv: kv, key: cfg.Name + ".contradicted", stream: cfg.Name}
		if o.StreamMark != "" {
			// The bucket lives on the cluster it remembers; a cluster that
			// lost the stream may have lost the bucket with it.
			mem = pairMemory{fileMemory{path: o.StreamMark}, mem}
		}
	}
	var mark *room.StreamMark
	if err := setupRetry(ctx, func() (err error) {
		actx, cancel := context.WithTimeout(ctx, setupTry)
		defer cancel()
		mark, err = mem.load(actx)
		return err
	}); err != nil {
		return nil, nil, err
	}
	if mark != nil && mark.Stream != cfg.Name {
		return nil, nil, fmt.Errorf("%w: the stream mark (%s) is of stream %s, and serve's stream is %s: give each stream its own mark file",
			room.ErrStreamReplaced, mem.where(), mark.Stream, cfg.Name)
	}
	accepted := false
	switch {
	case mark == nil:
		log.Info("room stream: no mark yet; serve remembers the stream from now on", zap.String("stream", cfg.Name), zap.String("mark", mem.where()))
	case compareStream(*mark, now, mem.where()) != nil:
		diff := compareStream(*mark, now, mem.where())
		if now != nil {
			// As in check: a leader cut off from its replicas may answer
			// from a stale copy, and neither a refusal nor an accepted
			// (lower) mark may rest on it.
			if err := jsapi.LeaderFresh(ctx, js.Conn(), cfg.Name, room.DefaultTimeout); err != nil {
				return nil, nil, fmt.Errorf("room stream %s looks other than serve remembers (%v), but its leader may answer from a stale copy: start serve again once the cluster is whole: %w", cfg.Name, diff, err)
			}
		}
		if !o.AcceptStream {
			return nil, nil, diff
		}
		accepted = true
		log.Warn("room stream: accepting a stream other than the one serve remembers (accept-stream)", zap.String("stream", cfg.Name),
			zap.Time("remembered_created", mark.Created), zap.Uint64("remembered_first_seq", mark.FirstSeq), zap.Uint64("remembered_last_seq", mark.LastSeq),
			zap.String("mark", mem.where()), zap.Bool("stream_exists", now != nil), zap.NamedError("difference", diff))
	case o.AcceptStream:
		log.Warn("room stream: accept-stream is set, but the stream is the one serve remembers: nothing to accept; remove the setting",
			zap.String("stream", cfg.Name), zap.String("mark", mem.where()))
	}
	var st jetstream.Stream
	err = setupRetry(ctx, func() (err error) {
		// One try may not take the whole budget: a request lost while
		// the cluster forms is asked again.
		actx, cancel := context.WithTimeout(ctx, setupTry)
		defer cancel()
		st, err = room.EnsureStream(actx, js, cfg, o.Subjects)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	// An existing stream keeps its duplicate window: setting it is the
	// administrator's act, as every change of an existing stream is.
	if advice := room.DuplicateWindowAdvice(st.CachedInfo().Config); advice != "" {
		log.Warn("room stream: "+advice, zap.String("stream", cfg.Name), zap.Duration("duplicate_window", st.CachedInfo().Config.Duplicates))
	}
	// So does a stream made before record markers: turning them on is the
	// administrator's act once no older serve or reader uses the stream.
	if advice := room.RecordMarkersAdvice(st.CachedInfo().Config); advice != "" {
		log.Warn("room stream: "+advice, zap.String("stream", cfg.Name), zap.Bool("record_markers", false))
	}
	// And one made before the attestations' compact form, which readers
	// of earlier releases refuse.
	if advice := room.CompactAttestationsAdvice(st.CachedInfo().Config); advice != "" {
		log.Warn("room stream: "+advice, zap.String("stream", cfg.Name), zap.Bool("compact_attestations", false))
	}
	m := markOf(st.CachedInfo())
	if err := setupRetry(ctx, func() error { return mem.save(ctx, m, accepted) }); err != nil {
		return nil, nil, err
	}
	return &streamGuard{js: js, name: cfg.Name, subjects: o.Subjects, memory: mem, contradicted: contra, mark: m, log: log}, st, nil
}

// setupRetry runs f until it succeeds, fails for good, or ctx ends: a
// server or cluster that has just started answers the JetStream API with
// no responders (or a 503) until its meta leader is elected, which serve's
// start waits out (jsapi.IsRetryable) rather than failing on.
func setupRetry(ctx context.Context, f func() error) error {
	for attempt := 0; ; attempt++ {
		err := f()
		again := jsapi.IsRetryable(err) || noPeersYet(err) || (errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil)
		if err == nil || !again || !jsapi.Sleep(ctx, jsapi.Backoff(attempt)) {
			return err
		}
	}
}

// setupTry bounds one try of a setup step (setupRetry), within the
// start's budget (streamSetupTimeout).
const setupTry = 10 * time.Second

// noPeersYet reports whether err is the meta leader's "no suitable peers
// for placement" (a 400, JSClusterNoPeersErr, 10005): on a cluster that
// has just formed, the meta leader may not know every server yet, so
// serve's start waits it out like an election.
func noPeersYet(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10005
}
