package reader

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/roompub/roompub/events"
)

// ErrSetAsideList is wrapped by the errors about a set-aside list file
// that holds a line Follow did not write.
var ErrSetAsideList = errors.New("set-aside list")

// SetAsideList is a follower's list of the messages it set aside
// (`subscriber follow` keeps it as <durable>.set-aside.ndjson): a file of
// JSON lines, one SetAside per message, each appended and fsynced before
// the message is acknowledged, so every message acknowledged as set aside
// is listed. An acknowledged message is never delivered to the durable
// consumer again; the list is what remains of it.
//
// Follow reads the list at its start: the messages listed at or below the
// consumer's acknowledgement floor are what was set aside. Its rebuild keeps
// them set aside whatever they would be now (a trust given since), so that
// nothing it serves later skips them: a journal entry listed breaks its
// chain again. With FollowOptions.Reexamine it decides them again instead,
// in stream order, against the state of everything before them, serves
// what passes (Event.Reexamined) and marks it served in the list. Lines
// of messages above the floor (set aside but not acknowledged: they are
// delivered again and decided again), lines a later one about the same
// message replaces, served marks and a last line without its newline are
// dropped by rewriting the file (atomically: a temporary file renamed over
// it). Lines about a room rather than a message (stream seq 0) are kept.
//
// Memory: about 40 bytes per line while the file is read, and 24 per
// listed message until the rebuild is done. One list belongs to one
// durable consumer and one process at a time.
type SetAsideList struct {
	// Path is the list's file; Follow creates it (mode 0644) when missing.
	Path string

	f      *os.File
	listed []listedMsg // at or below the floor, by stream seq
	facts  ListFacts
}

// ListFacts is what a Follow made of its set-aside list: how many messages
// it found listed and what its rebuild decided of them.
type ListFacts struct {
	// Listed is how many messages were listed at the start, at or below
	// the acknowledgement floor.
	Listed int `json:"listed"`
	// Served and Aside count the listed messages re-examined
	// (FollowOptions.Reexamine): served now, or set aside again.
	Served int `json:"served"`
	Aside  int `json:"aside"`
	// PassNow counts the listed messages not re-examined that pass now
	// with every other listed message kept set aside: a re-examination
	// would serve them, and may serve more (a chain's entries listed
	// after one of them, as a gap, pass once it is served), so it is a
	// lower bound.
	PassNow int `json:"pass_now"`
	// ServedNowAside counts the messages at or below the floor not listed
	// (served before) that the rebuild sets aside now: under a trust
	// withdrawn since, or contradicted by a message re-examined and served
	// (an idempotency key used twice, say). They are not taken back;
	// `subscriber audit` names them.
	ServedNowAside int `json:"served_now_aside"`
}

// Facts returns what Follow made of the list so far; call it from
// FollowOptions.Ready or once Follow has returned.
func (l *SetAsideList) Facts() ListFacts { return l.facts }

// listedMsg is one listed message: its stream seq and the code it was set
// aside with.
type listedMsg struct {
	seq  uint64
	code events.Code
}

// listLine is what the list keeps of a line: a SetAside, or the mark that a
// re-examined message was served and is no longer set aside.
type listLine struct {
	Seq    uint64      `json:"stream_seq"`
	Code   events.Code `json:"code"`
	Served bool        `json:"served"`
}

// servedLine marks a listed message no longer set aside: re-examined and
// served (or, for a checkpoint message, verified).
type servedLine struct {
	Seq    uint64 `json:"stream_seq"`
	Served bool   `json:"served"`
}

// open reads the list, keeps the messages listed at or below floor,
// rewrites the file when it holds lines that are no longer true (see
// SetAsideList), and opens it for appending.
func (l *SetAsideList) open(floor uint64) error {
	if err := os.MkdirAll(filepath.Dir(l.Path), 0o755); err != nil {
		return err
	}
	if err := l.compact(floor); err != nil {
		return err
	}
	f, err := os.OpenFile(l.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	l.f = f
	l.facts = ListFacts{Listed: len(l.listed)}
	return nil
}

// close closes the file; the list is then read again by the next open.
func (l *SetAsideList) close() error {
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// reopen compacts the file again (after a re-examination: served marks
// and replaced lines) and goes on appending to it.
func (l *SetAsideList) reopen(floor uint64) error {
	facts := l.facts
	if err := l.close(); err != nil {
		return err
	}
	err := l.open(floor)
	l.facts, l.listed = facts, nil
	return err
}

// add appends a, fsynced when sync is set (a message about to be
// acknowledged must be listed first).
func (l *SetAsideList) add(a *SetAside, sync bool) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return l.write(append(b, '\n'), sync)
}

// served marks the listed message at seq no longer set aside, fsynced: a
// re-examined event is served once.
func (l *SetAsideList) served(seq uint64) error {
	b, _ := json.Marshal(servedLine{Seq: seq, Served: true})
	return l.write(append(b, '\n'), true)
}

func (l *SetAsideList) write(b []byte, sync bool) error {
	if _, err := l.f.Write(b); err != nil {
		return err
	}
	if sync {
		return l.f.Sync()
	}
	return nil
}

// lineFact is one line of the file as compact reads it.
type lineFact struct {
	seq    uint64
	code   events.Code
	served bool
}

// compact reads the file (missing: an empty list), sets l.listed to the
// messages listed at or below floor and, when some line is no longer true,
// rewrites the file with the others, in their order.
func (l *SetAsideList) compact(floor uint64) error {
	lines, partial, err := l.read()
	if err != nil {
		return err
	}
	// The last line about a message is what holds for it.
	order := make([]int, len(lines))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch sa, sb := lines[a].seq, lines[b].seq; {
		case sa < sb:
			return -1
		case sa > sb:
			return 1
		}
		return 0
	})
	keep := make([]bool, len(lines))
	l.listed = l.listed[:0]
	for k, i := range order {
		ln := lines[i]
		switch {
		case ln.seq == 0:
			keep[i] = true // about a room, not a message
		case k+1 < len(order) && lines[order[k+1]].seq == ln.seq:
			// Replaced by a later line.
		case !ln.served && ln.seq <= floor:
			keep[i] = true
			l.listed = append(l.listed, listedMsg{seq: ln.seq, code: ln.code})
		}
	}
	if !partial && !slices.Contains(keep, false) {
		return nil
	}
	return l.rewrite(keep)
}

// read returns the facts of every complete line of the file, and whether
// it ends with a line without its newline (a write cut short: the message
// was not acknowledged, so it is delivered again).
func (l *SetAsideList) read() (lines []lineFact, partial bool, err error) {
	f, err := os.Open(l.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	codes := map[events.Code]events.Code{} // one string per code, not per line
	br := bufio.NewReader(f)
	for n := 1; ; n++ {
		b, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return lines, len(b) > 0, nil
		}
		if err != nil {
			return nil, false, err
		}
		var ln listLine
		if err := json.Unmarshal(b, &ln); err != nil || (ln.Code == "" && !ln.Served && ln.Seq > 0) {
			if err == nil {
				err = errors.New("neither a set-aside message nor a served mark")
			}
			return nil, false, fmt.Errorf("%w: %s line %d: %v", ErrSetAsideList, l.Path, n, err)
		}
		c, ok := codes[ln.Code]
		if !ok {
			codes[ln.Code], c = ln.Code, ln.Code
		}
		lines = append(lines, lineFact{seq: ln.Seq, code: c, served: ln.Served})
	}
}

// rewrite replaces the file by its complete lines that keep holds true
// for, atomically (a temporary file, fsynced, renamed over it, and the
// directory fsynced).
func (l *SetAsideList) rewrite(keep []bool) error {
	in, err := os.Open(l.Path)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := l.Path + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // after the rename: nothing there
	bw := bufio.NewWriter(out)
	br := bufio.NewReader(in)
	for i := range keep {
		b, err := br.ReadBytes('\n')
		if err != nil {
			out.Close()
			return fmt.Errorf("%w: %s changed while read: %v", ErrSetAsideList, l.Path, err)
		}
		if keep[i] {
			_, _ = bw.Write(b)
		}
	}
	err = bw.Flush()
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, l.Path)
	}
	if err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(l.Path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// listCursor walks a list's messages in stream order.
type listCursor struct {
	ms []listedMsg
}

// at returns the code the message at seq is listed with, if it is; seqs
// must not decrease from one call to the next.
func (c *listCursor) at(seq uint64) (events.Code, bool) {
	for len(c.ms) > 0 && c.ms[0].seq < seq {
		c.ms = c.ms[1:]
	}
	if len(c.ms) > 0 && c.ms[0].seq == seq {
		return c.ms[0].code, true
	}
	return "", false
}
