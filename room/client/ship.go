package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/internal/regularfile"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/validate"
)

// ShipOptions configures ShipCapsule and FollowCapsule; the zero value is
// the default.
type ShipOptions struct {
	// BatchLines bounds the lines of one request; default room.MaxBatchLines.
	BatchLines int
	// BatchBytes bounds the body of one request; default the max payload
	// of the server connected to when a pass begins, less 8 KiB for
	// headers.
	BatchBytes int
	// Pipeline bounds the requests of the capsule in flight at once;
	// default DefaultPipeline, 1 sends one after another. The gate decides
	// them in the order sent (order.go).
	Pipeline int
	// Progress, when set, is called after every request with the result
	// so far.
	Progress func(ShipResult)
	// Poll is how often FollowCapsule looks for appended lines; default
	// 250ms.
	Poll time.Duration
	// Retry is how long FollowCapsule waits after the service could not
	// be reached before it tries again; default 2s.
	Retry time.Duration

	stopWait time.Duration // stopTimeout when 0; shorter in tests
}

// ShipResult is what happened to one capsule directory.
type ShipResult struct {
	Dir    string          `json:"dir"`
	RoomID string          `json:"room"`
	Chain  events.ChainKey `json:"chain"`
	// Lines is how many complete lines the journal held when last read.
	Lines int `json:"lines"`
	// Skipped is how many lines were already stored before this run
	// (not sent again).
	Skipped    int `json:"already_stored"`
	Stored     int `json:"stored"`
	Duplicates int `json:"duplicates"`
	// Head is the chain's head in the stream after the run.
	Head room.ChainHead `json:"head"`
	// Refused is the first refused line (file line numbers), if any.
	Refused *LineRefusal `json:"refused,omitempty"`
	// PartialTail is set when the journal ends in a line without a
	// newline: the harness is still writing it; it was not sent.
	PartialTail bool `json:"partial_tail,omitempty"`
}

// LineRefusal is a refusal located in the journal file.
type LineRefusal struct {
	events.Problem
	Problems []events.Problem `json:"problems"`
	// Resent is set when the line repeats an entry of the chain out of its
	// place and the gate, which sees one line at a time, took it for a
	// resend: the lines after it that continue the chain may be stored
	// (Stored counts those its request stored; ShipResult.Head, asked
	// after the refusal, says how far the chain goes). Without it, no
	// line from the refused one on is stored.
	Resent bool `json:"resent,omitempty"`
}

// ErrShip is wrapped by ShipCapsule and FollowCapsule for a capsule
// directory that cannot be shipped at all (no journal, unreadable file).
var ErrShip = errors.New("cannot ship")

// ErrStopped is wrapped by ShipCapsule's error, with context.Cause(ctx),
// when ctx ended the shipment before every line was sent and answered
// (an interrupt, say). The result then counts what the stream holds of
// the chain (stopTimeout); running again resumes from there.
var ErrStopped = errors.New("stopped")

// stopTimeout bounds each step after ctx ended a shipment: the requests
// in flight answering (their lines may be stored, so the result waits
// for them), then asking the chain's head on a fresh context. The run is
// over; its report must be true, and come soon.
const stopTimeout = 5 * time.Second

// stopTimeout is stopTimeout, or the test's ShipOptions.stopWait.
func (s *shipper) stopTimeout() time.Duration {
	if s.o.stopWait > 0 {
		return s.o.stopWait
	}
	return stopTimeout
}

// shipper ships one capsule from a cursor into a room.
type shipper struct {
	c      *Client
	o      ShipOptions
	dir    string
	jpath  string
	meta   events.CapsuleMeta
	res    ShipResult
	offset int64 // bytes of the journal already shipped (whole lines)
	line   int   // lines already shipped or skipped
	sentTo int   // the file line after the last one sent by this run
	// cut: after a line taken for a resend, the bodies of the requests in
	// flight whose replies never came (cut off by the stop timeout, or the
	// service gone), and tallyFrom the chain's next seq when the tally
	// began. Their lines are counted from the head asked after
	// (countCut), as a stopped shipment counts its lines.
	cut       [][]byte
	tallyFrom int64
	// tallied: the seqs the tally's answered replies stored, which a cut
	// request repeating one of them must not count again.
	tallied map[int64]bool
}

func newShipper(ctx context.Context, c *Client, dir, roomID string, o ShipOptions) (*shipper, error) {
	if o.BatchLines <= 0 || o.BatchLines > room.MaxBatchLines {
		o.BatchLines = room.MaxBatchLines
	}
	if o.Pipeline <= 0 {
		o.Pipeline = DefaultPipeline
	}
	s := &shipper{c: c, o: o, dir: dir, jpath: filepath.Join(dir, validate.JournalFile)}
	s.res = ShipResult{Dir: dir, RoomID: roomID}
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		// A bare journal file, say, which verify takes: journal needs the
		// capsule.json beside it.
		return nil, fmt.Errorf("%w: %s is not a capsule directory but a file: give the directory that holds capsule.json and journal.ndjson", ErrShip, dir)
	}
	if fi, err := os.Stat(s.jpath); err != nil {
		return nil, fmt.Errorf("%w: %s is not a capsule directory: %v", ErrShip, dir, err)
	} else if !fi.Mode().IsRegular() {
		// A FIFO would block the pass's read in a system call no signal
		// ends; a device might never end.
		return nil, fmt.Errorf("%w: %s is not a capsule directory: %s is %s, not a regular file", ErrShip, dir, s.jpath, regularfile.Kind(fi.Mode()))
	}
	meta, err := validate.ReadCapsuleMeta(dir)
	if err != nil {
		var ref *events.Refusal
		if errors.As(err, &ref) {
			s.res.Refused = &LineRefusal{Problem: ref.Problem, Problems: ref.Problems}
			return s, nil
		}
		return nil, fmt.Errorf("%w: %v", ErrShip, err)
	}
	s.meta = meta
	s.res.Chain = meta.Key()
	if err := s.resume(ctx); err != nil {
		return s, err
	}
	s.res.Skipped = s.line
	s.res.Lines = s.line
	return s, nil
}

// resume asks where the chain stands and moves the cursor past the lines
// already stored. Unless the file's lines up to there are a chain of their
// own ending at the stored head (each canonical, at its position, hashing
// to its entry_hash, linked to the one before), it starts from the top so
// the gate reports where they differ: a line edited after it was shipped
// is refused as verify refuses it, not counted as stored (a breaker's
// tampered line was reported "already stored" from its claimed hash).
func (s *shipper) resume(ctx context.Context) error {
	var head room.ChainHead
	err := retryOverQuota(ctx, func() (err error) { head, err = s.c.Head(ctx, s.meta.Key()); return err })
	if err != nil {
		return err
	}
	s.res.Head = head
	s.offset, s.line = 0, 0
	if head.Lost != nil && head.RoomID == s.res.RoomID {
		s.res.Refused = storeLost(s.jpath, head)
		return nil
	}
	if head.Next > 0 && head.Owner != "" && head.Owner != room.IdentityName(s.c.Identity()) {
		// Another identity started the chain: what it stored is its own,
		// even line for line this journal, and only it may extend it.
		s.res.Refused = notChainOwner(s.jpath, head, s.c.Identity())
		return nil
	}
	if head.Next == 0 || (head.RoomID != "" && head.RoomID != s.res.RoomID) {
		return nil
	}
	f, err := regularfile.Open(s.jpath)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrShip, err)
	}
	defer f.Close()
	// Unless they match, the stream holds more of this chain than the
	// file, or the file is not the journal that was shipped: send it all;
	// the gate says what is wrong.
	if off, ok := matchStored(bufio.NewReaderSize(f, 256<<10), 0, head.Next, events.ZeroHash, head.Head); ok {
		s.offset, s.line = off, int(head.Next)
	}
	return nil
}

// notChainOwner is the refusal of a journal whose chain another identity
// than self started (head.Owner): the gate would refuse every line not
// stored, and the stored ones are the owner's, not this shipper's
// (docs/secure-mode.md, "Chains belong to the identity that starts
// them").
func notChainOwner(jpath string, head room.ChainHead, self string) *LineRefusal {
	p := events.Problem{Code: events.NotChainOwner, At: events.Location{File: jpath, Line: 1},
		Reason: fmt.Sprintf("the chain was started by identity %s in %s, which holds %d of its entries: only it may extend the chain or claim its id, and what it stored is not this identity's",
			head.Owner, head.RoomID, head.Next),
		Expected: head.Owner, Actual: room.IdentityName(self)}
	return &LineRefusal{Problem: p, Problems: []events.Problem{p}}
}

// storeLost is the refusal of a journal whose chain the store lost
// positions of (head.Lost): one problem per run of lost positions, at the
// file line of its first position. None of those lines is stored, so
// none is reported as already stored.
func storeLost(jpath string, head room.ChainHead) *LineRefusal {
	var ps []events.Problem
	for _, r := range head.Lost.Missing {
		what := fmt.Sprintf("position %d", r.From)
		if r.To > r.From {
			what = fmt.Sprintf("positions %d-%d (lines %d-%d)", r.From, r.To, r.From+1, r.To+1)
		}
		ps = append(ps, events.Problem{Code: events.StoreLost, At: events.Location{File: jpath, Line: int(r.From) + 1},
			Reason: fmt.Sprintf("the stream acknowledged %s of this chain and no longer holds it (it was between stream seqs %d and %d): the chain is closed (docs/reliability.md)",
				what, r.After, r.Before)})
	}
	if len(ps) == 0 { // a head from a service that named no run
		ps = append(ps, events.Problem{Code: events.StoreLost, At: events.Location{File: jpath}})
	}
	p := ps[0]
	p.Reason = fmt.Sprintf("the store lost %s, %s; the chain is closed, nothing more is stored on it (docs/reliability.md)",
		head.Lost.Tally(), head.Lost)
	return &LineRefusal{Problem: p, Problems: ps}
}

// matchStored reads the journal lines from..to-1 from br (at line from)
// and reports whether they are a chain's entries from..to-1 ending at
// head: each canonical, at its seq, hashing to its entry_hash, linked to
// the one before (the first to prev; "" leaves its link unchecked), the
// last hashing to head. Entries are hash-linked in the stream too, so
// lines that match are the entries stored there. off is the bytes read.
func matchStored(br *bufio.Reader, from, to int64, prev, head string) (off int64, ok bool) {
	for n := from; n < to; n++ {
		ln, long, err := readFullLine(br, events.MaxLineBytes)
		if err != nil || long > 0 {
			return 0, false
		}
		off += int64(len(ln))
		line := ln[:len(ln)-1]
		e, err := events.ParseEntry(line)
		if err != nil {
			return 0, false
		}
		if seq, ok := e.Seq(); !ok || seq != n || (prev != "" && e.ParentHash() != prev) || e.ComputedHash() != e.EntryHash() || !bytes.Equal(e.Canonical(), line) {
			return 0, false
		}
		prev = e.EntryHash()
	}
	return off, prev == head
}

// afterStop asks, once ctx has ended the shipment, where the chain
// stands, on a fresh context of stopTimeout, and moves the cursor past
// the lines of the file the stream holds beyond it: lines this run sent
// whose replies did not come back count as stored, any others as
// already stored. It asks nothing on a connection that is down.
func (s *shipper) afterStop(ctx context.Context) error {
	if !s.c.nc.IsConnected() {
		return fmt.Errorf("%w: not connected", ErrUnavailable)
	}
	head, err := s.headNow(ctx)
	if err != nil {
		return err
	}
	s.res.Head = head
	if head.RoomID != s.res.RoomID || head.Next <= int64(s.line) || head.Lost != nil {
		return nil
	}
	f, err := regularfile.Open(s.jpath)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrShip, err)
	}
	defer f.Close()
	if _, err := f.Seek(s.offset, io.SeekStart); err != nil {
		return fmt.Errorf("%w: %v", ErrShip, err)
	}
	off, ok := matchStored(bufio.NewReaderSize(f, 256<<10), int64(s.line), head.Next, "", head.Head)
	if !ok {
		return nil // the stream's lines are not the file's: nothing of them is this run's
	}
	sent := max(0, min(int(head.Next), s.sentTo)-s.line)
	s.res.Stored += sent
	s.res.Skipped += int(head.Next) - s.line - sent
	s.offset += off
	s.line = int(head.Next)
	s.res.Lines = max(s.res.Lines, s.line)
	return nil
}

// stopped is the error of a shipment ctx ended: ErrStopped with ctx's
// cause, and what the stream holds of the chain (afterStop).
func (s *shipper) stopped(ctx context.Context) error {
	err := fmt.Errorf("%w: %w", ErrStopped, context.Cause(ctx))
	switch herr := s.afterStop(ctx); {
	case herr == nil && (s.res.Head.RoomID == s.res.RoomID || s.res.Head.Next == 0):
		return fmt.Errorf("%w; the stream holds %d lines of the chain", err, s.res.Head.Next)
	case herr == nil, !s.c.nc.IsConnected():
		return err
	default:
		return fmt.Errorf("%w; what the stream holds could not be asked: %v", err, herr)
	}
}

// pass reads the journal from the cursor and ships every complete line,
// with up to ShipOptions.Pipeline requests in flight. It returns nil when
// it has shipped all complete lines (or recorded a refusal),
// ErrUnavailable-wrapping errors when the service went away.
func (s *shipper) pass(ctx context.Context) error {
	f, err := regularfile.Open(s.jpath)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrShip, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() < s.offset {
		return fmt.Errorf("%w: %s shrank from %d to %d bytes: a journal is append-only", ErrShip, s.jpath, s.offset, fi.Size())
	}
	if _, err := f.Seek(s.offset, io.SeekStart); err != nil {
		return fmt.Errorf("%w: %v", ErrShip, err)
	}
	// The server's max payload is known only once connected (a follower
	// may start before its server), and may differ after a reconnect.
	batchBytes := s.o.BatchBytes
	if batchBytes <= 0 {
		mp := s.c.MaxPayload()
		if mp <= 0 {
			return fmt.Errorf("%w: not connected", ErrUnavailable)
		}
		batchBytes = int(mp) - 8<<10
		if batchBytes <= 0 {
			return fmt.Errorf("%w: the server's max payload of %d bytes leaves no room for a journal request (8 KiB of a message are kept for headers)", ErrShip, mp)
		}
	}
	// left is what the journal held past the offset when the pass began,
	// less what was sent since (-1: not known). A request's buffer is made
	// when its first line is read, so a pass that has read its last
	// request makes none more, at bodySize (most requests are alike).
	// Each line is copied once, from the reader's buffer into its request,
	// and the body is handed to the pipeline as it is.
	left := int64(-1)
	if fi, err := f.Stat(); err == nil {
		left = fi.Size() - s.offset
	}
	br := bufio.NewReaderSize(f, 256<<10)
	// When ctx ends, nothing more is sent, but the requests in flight are
	// answered (within stopTimeout): the gate may store their lines, and
	// the result must count them.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &pipeline{s: s, ctx: pctx, cancel: cancel, depth: s.o.Pipeline}
	defer p.drain()
	stopAfter := context.AfterFunc(ctx, func() {
		t := time.NewTimer(s.stopTimeout())
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-pctx.Done():
		}
	})
	defer stopAfter()
	halted := false // ctx ended the pass before it sent every line
	var body []byte // nil until the request's first line
	size := max(0, left)
	batchLines, next := 0, s.line // next: the file line the reader is at
	s.res.PartialTail = false
	send := func() {
		if batchLines > 0 && ctx.Err() != nil {
			halted = true
		} else if batchLines > 0 {
			p.send(body, next-batchLines, batchLines)
			if left >= 0 {
				left = max(0, left-int64(len(body)))
			}
			size = bodySize(int64(len(body)), left)
		}
		body, batchLines = nil, 0
	}
	for !p.stop && !halted {
		ln, long, err := readFullLine(br, events.MaxLineBytes)
		if errors.Is(err, io.EOF) {
			if len(ln) > 0 || long > 0 {
				s.res.PartialTail = true
			}
			break
		}
		if err != nil {
			send()
			p.drain()
			if p.err != nil {
				return p.err
			}
			return fmt.Errorf("%w: %v", ErrShip, err)
		}
		if long > 0 || len(ln) > batchBytes {
			send()
			p.drain()
			if p.stop || halted {
				break
			}
			// Longer than any line may be: corrupt_entry, as verify says
			// (it comes before too_large in the table); too long for a
			// request only: too_large.
			pr := events.Problem{Code: events.TooLarge, At: events.Location{File: s.jpath, Line: next + 1},
				Reason: fmt.Sprintf("the line is %d bytes; a request carries at most %d", len(ln), batchBytes)}
			if long > 0 {
				pr.Code, pr.Reason = events.CorruptEntry, fmt.Sprintf("line longer than %d bytes", events.MaxLineBytes)
			}
			s.res.Refused = &LineRefusal{Problem: pr, Problems: []events.Problem{pr}}
			break
		}
		if batchLines == s.o.BatchLines || len(body)+len(ln) > batchBytes {
			send()
			if p.stop || halted {
				break
			}
		}
		if body == nil {
			body = make([]byte, 0, max(int64(len(ln)), min(size, int64(batchBytes))))
		}
		body = append(body, ln...)
		batchLines++
		next++
		s.res.Lines = max(s.res.Lines, next)
	}
	if !p.stop && !halted {
		send()
	}
	p.drain()
	if p.err == nil && halted {
		return fmt.Errorf("%w: %w", ErrStopped, context.Cause(ctx))
	}
	return p.err
}

// bodySize is the capacity a pass's next request buffer starts with, in
// bytes, given the last body's length and what is left of the journal
// since the pass began (see pass): the last body's length, or what is
// left if that is less; once nothing is left of the size the journal had
// (it grows while the harness writes) or that size is not known (-1), the
// last body's length.
func bodySize(last, left int64) int64 {
	if left > 0 {
		return min(last, left)
	}
	return last
}

// DefaultPipeline is ShipOptions.Pipeline's default: while the gate stores
// one request's lines it checks the next one's (docs/wire.md, "Pipelined
// requests").
const DefaultPipeline = 2

// pipeline is one pass's requests in flight, oldest first. Replies are
// taken in the order the requests were sent; the first one that did not
// ship all its lines (refused, failed, unanswered) stops the pass: nothing
// more is sent and the requests still in flight are abandoned (their
// lines follow one that is not stored, so none of them is stored, unless
// another shipper stored the lines before them; the next pass finds what
// is stored either way).
type pipeline struct {
	s      *shipper
	ctx    context.Context
	cancel context.CancelFunc // abandons the requests in flight
	depth  int
	queue  []*shipment
	stop   bool  // a reply ended the pass
	err    error // the error that ended it
	// tally, with stop, takes the replies of the requests in flight
	// without deciding anything on them: after a line the gate took for a
	// resend (LineRefusal.Resent) the gate goes on storing those requests'
	// lines, which continue the chain, and the result counts them.
	tally bool
}

// shipment is one request of a pass: its body, the file line of its first
// line, how many lines it holds, and, once done is closed, the reply.
type shipment struct {
	body  []byte
	first int
	lines int
	// after is the seq of the last line of the request ahead of it, in
	// flight when it was sent (room.HeaderPipelined); -1: none in flight, or
	// that line has no seq to read (it is refused: this one is abandoned).
	after   int64
	lastSeq int64 // the seq of its own last line, -1 if it cannot be read
	done    chan struct{}
	reply   room.JournalReply
	err     error
}

// send sends body, lines file lines from first, once fewer than depth
// requests are in flight (taking the oldest replies meanwhile).
func (p *pipeline) send(body []byte, first, lines int) {
	for len(p.queue) >= max(p.depth, 1) && !p.stop {
		p.settle()
	}
	if p.stop {
		return
	}
	p.s.sentTo = max(p.s.sentTo, first+lines)
	sh := &shipment{body: body, first: first, lines: lines, after: -1, lastSeq: lastSeq(body), done: make(chan struct{})}
	if len(p.queue) > 0 {
		sh.after = p.queue[len(p.queue)-1].lastSeq
	}
	go func() {
		defer close(sh.done)
		sh.reply, sh.err = p.s.request(p.ctx, sh.body, sh.after)
	}()
	p.queue = append(p.queue, sh)
}

// drain takes every reply still to come, or abandons the requests once
// the pass has stopped; it ends the pipeline's context.
func (p *pipeline) drain() {
	for len(p.queue) > 0 {
		p.settle()
	}
	p.cancel()
}

// settle takes the oldest request's reply.
func (p *pipeline) settle() {
	sh := p.queue[0]
	p.queue = p.queue[1:]
	<-sh.done
	if p.stop {
		if p.tally && sh.err != nil {
			p.s.cut = append(p.s.cut, sh.body)
		}
		// A reply that does not answer its request's lines one by one
		// counts nothing here either (replyMismatch).
		if p.tally && sh.err == nil && replyMismatch(sh.body, sh.reply.Items) == "" {
			p.s.res.Stored += sh.reply.Stored
			p.s.res.Duplicates += sh.reply.Dupes
			for _, it := range sh.reply.Items {
				if it.Outcome == room.OutcomeStored {
					ln := lineAt(sh.body, it.Index)
					if _, seq := events.LineSeq(ln); seq >= 0 {
						if p.s.tallied == nil {
							p.s.tallied = map[int64]bool{}
						}
						p.s.tallied[seq] = true
					}
				}
			}
			if sh.reply.Head.Chain.RunID != "" && sh.reply.Head.Next > p.s.res.Head.Next {
				p.s.res.Head = sh.reply.Head
			}
			if p.s.o.Progress != nil {
				p.s.o.Progress(p.s.res)
			}
		}
		return // abandoned, or only counted
	}
	s := p.s
	if sh.err == nil && sh.reply.Ahead > 0 {
		// Decided before the request ahead of it landed (on another gate
		// process, which took longer than the gate waits): now that the
		// one ahead is answered and moved the cursor to it, send it again.
		sh.reply, sh.err = s.request(p.ctx, sh.body, -1)
	}
	if err := s.settle(sh.body, sh.first, sh.reply, sh.err); err != nil {
		p.err = err
	}
	switch {
	case s.res.Refused != nil && s.res.Refused.Resent:
		p.stop, p.tally = true, true // nothing more is sent; what is in flight lands
		s.tallyFrom = s.res.Head.Next
	case s.res.Refused != nil || s.line != sh.first+sh.lines:
		p.stop = true
		p.cancel()
	}
}

// request sends one journal request of the capsule; after >= 0: the one
// ahead of it, whose last line has seq after, is in flight
// (room.HeaderPipelined).
func (s *shipper) request(ctx context.Context, body []byte, after int64) (room.JournalReply, error) {
	capsule := s.meta
	var r room.JournalReply
	// An over_quota answer decided nothing: send it again after a back-off
	// (retryOverQuota); it is never a refusal of the lines.
	err := retryOverQuota(ctx, func() (err error) {
		r, err = s.c.appendJournal(ctx, s.res.RoomID, &capsule, body, after, true)
		return err
	})
	return r, err
}

// lastSeq reads the seq of the last line of body (lines ending in "\n"),
// or -1 (events.LineSeq).
func lastSeq(body []byte) int64 {
	ln := bytes.TrimSuffix(body, []byte{'\n'})
	_, seq := events.LineSeq(ln[bytes.LastIndexByte(ln, '\n')+1:])
	return seq
}

// settle takes the reply to the request whose first line is file line
// first+1, and moves the cursor past what was stored or found stored.
func (s *shipper) settle(body []byte, first int, reply room.JournalReply, err error) error {
	if err != nil {
		s.line = first // not shipped: resend from here
		var se *ServiceError
		if errors.As(err, &se) && se.Status == "400" {
			p := events.Problem{Code: se.Code, At: events.Location{File: s.jpath, Line: first + 1}, Reason: se.Reason}
			s.res.Refused = &LineRefusal{Problem: p, Problems: []events.Problem{p}}
			return nil
		}
		return err
	}
	if bad := replyMismatch(body, reply.Items); bad != "" {
		// The cursor moves by the reply's items: one that does not answer
		// the request's lines one by one, in order, moves it nowhere.
		s.line = first
		return fmt.Errorf("%w: the reply to the request from line %d does not answer it: %s", ErrUnavailable, first+1, bad)
	}
	if reply.Head.Chain.RunID != "" {
		s.res.Head = reply.Head
	}
	s.res.Stored += reply.Stored
	s.res.Duplicates += reply.Dupes
	shipped := 0
	for _, it := range reply.Items {
		switch it.Outcome {
		case room.OutcomeDuplicate:
			if p, ok := misplaced(body, it.Index, first, s.jpath); ok {
				s.res.Refused = &LineRefusal{Problem: p, Problems: []events.Problem{p}, Resent: true}
				break
			}
			shipped++
			continue
		case room.OutcomeStored:
			shipped++
			continue
		case room.OutcomeRefused:
			// The item's first problem is its code's: it holds the values
			// the rule compared (room_conflict's rooms, say).
			p := events.Problem{Code: it.Code, Reason: it.Reason}
			if len(it.Problems) > 0 && it.Problems[0].Code == it.Code {
				p.Expected, p.Actual = it.Problems[0].Expected, it.Problems[0].Actual
			}
			if it.At != nil {
				p.At = *it.At
			}
			// The journal's file, also for a refusal without a place
			// (no "at" in the reply).
			p.At = relocate([]events.Problem{{At: p.At}}, s.jpath, first)[0].At
			s.res.Refused = &LineRefusal{Problem: p, Problems: relocate(it.Problems, s.jpath, first)}
		case room.OutcomeFailed:
			err = fmt.Errorf("%w: line %d not decided: %s", ErrUnavailable, first+it.Index+1, it.Reason)
		}
		break
	}
	// Advance the cursor by what is now in the stream.
	adv := lineStart(body, shipped)
	s.offset += int64(adv)
	s.line = first + shipped
	if s.o.Progress != nil {
		s.o.Progress(s.res)
	}
	return err
}

// replyMismatch says how items fail to be a journal reply to body (lines
// ending in "\n"): one item per line, item i with index i
// (room.JournalReply); "" when they are one.
func replyMismatch(body []byte, items []room.ItemResult) string {
	if n := bytes.Count(body, newline); len(items) != n {
		return fmt.Sprintf("%d items for %d lines", len(items), n)
	}
	for i, it := range items {
		if it.Index != i {
			return fmt.Sprintf("item %d has index %d", i, it.Index)
		}
	}
	return ""
}

// misplaced checks the line of a duplicate answer (item index of the
// request whose first line is file line first+1): a duplicate is the same
// entry at its position, and in a journal the entry at file line n has
// seq n-1. A line whose seq is another repeats an entry of the journal out
// of its place: the gate took it for a resend, but the file is not a
// chain, and publisher verify refuses it as reordered; so does the
// shipper (lines after it that continue the chain may be stored by then).
// Only duplicates are parsed: they are rare.
func misplaced(body []byte, index, first int, file string) (events.Problem, bool) {
	ln := body[lineStart(body, index):]
	if i := bytes.IndexByte(ln, '\n'); i >= 0 {
		ln = ln[:i]
	}
	_, seq := events.LineSeq(ln)
	want := int64(first + index)
	if seq < 0 || seq == want {
		return events.Problem{}, false
	}
	return events.Problem{Code: events.Reordered, At: events.Location{File: file, Line: first + index + 1, Pointer: "/seq"},
		Reason:   "seq is not the entry's position in the chain (the line repeats an entry stored at another position)",
		Expected: strconv.FormatInt(want, 10), Actual: strconv.FormatInt(seq, 10)}, true
}

// lineStart is the offset in body (lines ending in "\n") of line n, from
// 0; len(body) when body holds fewer lines.
func lineStart(body []byte, n int) int {
	at := 0
	for range n {
		i := bytes.IndexByte(body[at:], '\n')
		if i < 0 {
			return len(body)
		}
		at += i + 1
	}
	return at
}

// relocate turns request line numbers into file line numbers.
func relocate(ps []events.Problem, file string, first int) []events.Problem {
	out := make([]events.Problem, len(ps))
	for i, p := range ps {
		p.At.File = file
		if p.At.Line > 0 {
			p.At.Line += first
		}
		out[i] = p
	}
	return out
}

// readFullLine returns the next line including its "\n"; at the end of
// the file, what is left (a partial line) with io.EOF. A short line is the
// reader's own bytes, valid until its next read; a longer one is a copy. A
// line longer than max is read to its end but not kept: readFullLine
// returns nil and its length so far (long > 0), so a line of any length
// costs at most max bytes of memory (events.MaxLineBytes: verify refuses
// such a line as corrupt_entry, and so does the shipper).
func readFullLine(br *bufio.Reader, max int) (line []byte, long int, err error) {
	chunk, err := br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		if len(chunk) > max {
			return nil, len(chunk), err
		}
		return chunk, 0, err
	}
	buf := append([]byte(nil), chunk...)
	n := len(chunk)
	for {
		chunk, err := br.ReadSlice('\n')
		n += len(chunk)
		if n > max {
			buf = nil
		} else {
			buf = append(buf, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if n > max {
			return nil, n, err
		}
		return buf, 0, err
	}
}

// ShipCapsule ships a capsule directory (capsule.json + journal.ndjson)
// into roomID through the ingest service: it asks where the chain stands,
// sends only the lines not yet stored, in batches, and stops at the first
// refused line (the lines before it may have landed; it and every later
// one never do). A final line without a newline is not sent (PartialTail).
// A refusal is reported in the result, not as an error. Errors: ErrShip
// (no journal, unreadable file), ErrUnavailable (the service went away:
// the result says what was stored; run again to resume), *ServiceError,
// ErrStopped with context.Cause(ctx) when ctx ended the shipment: nothing
// more is sent, the requests in flight are answered, and the result
// counts what the stream then holds of the chain, asked on a fresh
// context (lines whose replies were cut off count as stored); each step
// takes at most 5s.
func ShipCapsule(ctx context.Context, c *Client, dir, roomID string, o ShipOptions) (ShipResult, error) {
	s, err := newShipper(ctx, c, dir, roomID, o)
	if err != nil {
		if s == nil {
			return ShipResult{Dir: dir, RoomID: roomID}, err
		}
		if ctx.Err() != nil && Retryable(err) { // ended while asking where the chain stands
			err = s.stopped(ctx)
		}
		return s.res, err
	}
	if s.res.Refused != nil {
		return s.res, nil
	}
	err = s.pass(ctx)
	resent := s.res.Refused != nil && s.res.Refused.Resent
	switch {
	case resent && (err == nil || errors.Is(err, ErrStopped)):
		err = s.afterResent(ctx)
	case err != nil && ctx.Err() != nil && (errors.Is(err, ErrStopped) || Retryable(err)):
		err = s.stopped(ctx)
	}
	return s.res, err
}

// afterResent asks the chain's head after a line the gate took for a
// resend, once the requests in flight behind it are answered. When some
// of their replies never came, their lines below that head count as
// stored (countCut). If ctx ended (an interrupt, whether or not it cut
// replies off), the shipment was stopped, and the error says so:
// ErrStopped with what the stream holds. Without the head cut lines
// cannot be counted, and the error says that.
func (s *shipper) afterResent(ctx context.Context) error {
	head, herr := s.headNow(ctx)
	if herr == nil {
		s.res.Head = head
	}
	if len(s.cut) == 0 && ctx.Err() == nil {
		return nil
	}
	switch {
	case len(s.cut) == 0:
	case herr == nil && head.RoomID == s.res.RoomID:
		s.res.Stored += countCut(s.cut, s.tallied, s.tallyFrom, head.Next)
	case herr == nil:
		herr = fmt.Errorf("the chain lives in %q", head.RoomID)
	}
	if ctx.Err() == nil {
		if herr != nil {
			return fmt.Errorf("%w: the replies to %d requests after the resent line never came, and the chain's head could not be asked: %v", ErrUnavailable, len(s.cut), herr)
		}
		return nil
	}
	err := fmt.Errorf("%w: %w", ErrStopped, context.Cause(ctx))
	if herr != nil {
		return fmt.Errorf("%w; what the stream holds could not be asked: %v", err, herr)
	}
	return fmt.Errorf("%w; the stream holds %d lines of the chain", err, head.Next)
}

// countCut counts the lines of bodies (requests whose replies never came)
// that the head now covers: those with a seq from from (the chain's next
// seq before them) up to next, each seq once and none an answered reply
// of the tally stored (tallied), as a stopped shipment counts the lines
// it sent (afterStop). A line repeating an earlier entry has a seq below
// from, or a tallied one, and counts nothing.
func countCut(bodies [][]byte, tallied map[int64]bool, from, next int64) int {
	seen := make(map[int64]bool)
	for _, body := range bodies {
		for ln := range bytes.Lines(body) {
			_, seq := events.LineSeq(bytes.TrimSuffix(ln, []byte{'\n'}))
			if seq >= from && seq < next && !tallied[seq] {
				seen[seq] = true
			}
		}
	}
	return len(seen)
}

// headNow asks the chain's head on a fresh context of stopTimeout: ctx
// may have ended the shipment, and what the stream holds is still asked.
func (s *shipper) headNow(ctx context.Context) (room.ChainHead, error) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.stopTimeout())
	defer cancel()
	return s.c.Head(hctx, s.meta.Key())
}

// capsuleMissing reports whether s was refused only because dir has no
// capsule.json yet (a harness may create journal.ndjson first): a
// follower waits for it as it waits for the journal.
func capsuleMissing(dir string, s *shipper) bool {
	if s == nil || s.res.Refused == nil || s.res.Refused.Code != events.InvalidCapsule {
		return false
	}
	_, err := os.Stat(filepath.Join(dir, validate.CapsuleFile))
	return errors.Is(err, os.ErrNotExist)
}

// FollowCapsule ships a capsule like ShipCapsule, then keeps shipping what
// the harness appends until ctx is done or a line is refused. It waits for
// capsule.json and journal.ndjson to appear, never sends a line before its
// newline is written, and rides out an unavailable service by retrying.
// report is called after every pass that shipped something, and once at
// the end. It returns nil when ctx ends it; the last report then counts
// what the stream holds of the chain, as ShipCapsule's does when ctx ends
// it.
func FollowCapsule(ctx context.Context, c *Client, dir, roomID string, o ShipOptions, report func(ShipResult)) (ShipResult, error) {
	if o.Poll <= 0 {
		o.Poll = 250 * time.Millisecond
	}
	if o.Retry <= 0 {
		o.Retry = 2 * time.Second
	}
	var s *shipper
	var last ShipResult
	finish := func() (ShipResult, error) {
		if s != nil {
			_ = s.afterStop(ctx) // the report says what was stored either way
			last = s.res
		}
		report(last)
		return last, nil
	}
	for {
		var err error
		if s == nil {
			s, err = newShipper(ctx, c, dir, roomID, o)
			if errors.Is(err, ErrShip) || (err == nil && capsuleMissing(dir, s)) {
				s, err = nil, nil // not there yet
			}
			if s != nil && s.res.Refused != nil {
				report(s.res)
				return s.res, nil
			}
		}
		if s != nil && err == nil {
			before := s.res.Stored + s.res.Duplicates
			err = s.pass(ctx)
			last = s.res
			if s.res.Refused != nil {
				var rerr error
				if s.res.Refused.Resent && (err == nil || errors.Is(err, ErrStopped)) {
					rerr = s.afterResent(ctx)
				}
				if ctx.Err() != nil {
					rerr = nil // ended by ctx: the report says what the stream holds
				}
				if rerr != nil {
					return s.res, rerr // the caller reports it, with the error
				}
				report(s.res)
				return s.res, nil
			}
			if err == nil && s.res.Stored+s.res.Duplicates != before {
				report(s.res)
			}
		}
		if ctx.Err() != nil {
			return finish()
		}
		wait := o.Poll
		switch {
		case err == nil:
		case errors.Is(err, ErrUnavailable) || IsOverQuota(err):
			wait = o.Retry
			if s != nil {
				// Ask again where the chain stands before resending. Lines
				// found stored meanwhile (a reply that never came back)
				// count as already stored, so the totals add up to the head.
				before := s.line
				if rerr := s.resume(ctx); rerr != nil {
					s.offset, s.line = 0, 0
					s = nil
				} else if s.line > before {
					s.res.Skipped += s.line - before
				}
			}
		default:
			return last, err
		}
		select {
		case <-ctx.Done():
			return finish()
		case <-time.After(wait):
		}
	}
}

// lineAt is line i of body (lines ending in "\n"), without its newline.
func lineAt(body []byte, i int) []byte {
	ln := body[lineStart(body, i):]
	if j := bytes.IndexByte(ln, '\n'); j >= 0 {
		ln = ln[:j]
	}
	return ln
}
