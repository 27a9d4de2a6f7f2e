package events

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// EntryCheck applies the entry-level rules (schema, payload allowlist and
// types, secret canaries) that package validate owns. It returns
// InvalidEntry problems located at at, or none. Passing it in keeps this
// package free of JSON Schema while the offline verifier, the gate and the
// subscriber all run the same chain code (docs/design.md, "Package map and
// import rules").
type EntryCheck func(e *Entry, at Location) []Problem

// ChainVerifier checks the entries of one chain in order, one line at a
// time, with the upstream harness's per-line order: corrupt_entry,
// invalid_entry, reordered, broken_link, non_canonical, metadata_mismatch.
// It advances only past an entry that passed every check. It is not safe
// for concurrent use.
type ChainVerifier struct {
	check EntryCheck
	meta  *CapsuleMeta
	// metaOwned says meta refers to no entry's bytes: journal
	// verification reads into a batch's buffer again once it is linked.
	metaOwned bool
	next      int64
	// head is the last entry's entry_hash ("" once unknown), in bytes of
	// the verifier's own, reused: not a part of the entry's line, which a
	// verifier that outlives the entry (a reader keeps one per chain)
	// would keep alive, and no allocation per entry.
	head []byte
}

// NewChainVerifier returns a verifier for a chain starting at seq 0. meta is
// the capsule.json metadata every entry must repeat; with nil, the first
// entry's metadata is taken as the reference (seed 000). check may be nil
// only in tests of the chain rules alone.
func NewChainVerifier(meta *CapsuleMeta, check EntryCheck) *ChainVerifier {
	v := &ChainVerifier{check: check, head: []byte(ZeroHash)}
	if meta != nil {
		m := *meta
		v.meta = &m
	}
	return v
}

// Resume positions the verifier after next verified entries whose last
// entry_hash is head and whose metadata is meta: how the gate and a
// subscriber continue a chain already stored in the stream.
func (v *ChainVerifier) Resume(next int64, head string, meta CapsuleMeta) {
	v.next, v.head, v.meta, v.metaOwned = next, append(v.head[:0], head...), &meta, false
}

// Next is the chain position the next entry must have.
func (v *ChainVerifier) Next() int64 { return v.next }

// Head is the entry_hash of the last accepted entry (ZeroHash before any).
func (v *ChainVerifier) Head() string { return string(v.head) }

// Check verifies line (one journal line without its newline) as the next
// entry of the chain. It returns the parsed entry (nil when the line is not
// JSON) and every problem found, in check order. With no problems the
// verifier advances past the entry.
func (v *ChainVerifier) Check(line []byte, at Location) (*Entry, []Problem) {
	e, problems := ParseLine(line, at)
	if e == nil {
		return nil, problems
	}
	problems = v.CheckLine(e, line, at)
	if len(problems) == 0 {
		v.accept(e)
	}
	return e, problems
}

// ParseLine parses one journal line (without its newline). A line that is
// not UTF-8 is non_canonical (upstream checks UTF-8 over the whole file
// before parsing lines); one that is not strict JSON is corrupt_entry; one
// that is JSON but not an object is invalid_entry (the upstream: "envelope
// must be a plain data object"). Either way the entry is nil and the one
// problem says why.
func ParseLine(line []byte, at Location) (*Entry, []Problem) {
	return parseLine(line, at, false)
}

// ParseLineOwned is ParseLine for a line the caller hands over: an entry
// of a canonical line keeps line itself as its canonical bytes instead of
// a copy (Canonical returns it, capped at its length), so no one may
// change line while the entry is in use; other lines are parsed as
// ParseLine parses them. The gate parses its requests' lines this way
// (one copy of every entry less).
func ParseLineOwned(line []byte, at Location) (*Entry, []Problem) {
	return parseLine(line, at, true)
}

// LineSeq parses one journal line (without its newline) as ParseLineOwned
// does, so the entry may keep line, and returns the entry and its seq
// (Entry.Seq: the number in its canonical form); nil and -1 when the line
// does not parse or its seq is missing or not an int64. It checks nothing
// else. The gate orders a chain's requests by their first line's seq; a
// shipper tells the gate the last one of the request ahead in flight.
func LineSeq(line []byte) (*Entry, int64) {
	e, _ := ParseLineOwned(line, Location{})
	if e == nil {
		return nil, -1
	}
	seq, ok := e.Seq()
	if !ok {
		return nil, -1
	}
	return e, seq
}

func parseLine(line []byte, at Location, owned bool) (*Entry, []Problem) {
	e, valid, err := parseText(line, string(line), owned, nil)
	if !valid {
		return nil, []Problem{{Code: NonCanonical, At: at, Reason: "line is not valid UTF-8"}}
	}
	if err != nil {
		return nil, []Problem{parseProblem(err, line, at)}
	}
	return e, nil
}

// parseProblem is the problem of a UTF-8 line that did not parse:
// invalid_entry for JSON that is not an object, else corrupt_entry. A
// line that starts with a byte order mark says so: a file saved "UTF-8
// with BOM" fails on its first line only, on bytes no one sees.
func parseProblem(err error, line []byte, at Location) Problem {
	code := CorruptEntry
	if errors.Is(err, ErrNotObject) {
		code = InvalidEntry
	}
	reason := err.Error()
	if HasBOM(line) {
		reason = BOMReason("line", "a journal") + " (" + reason + ")"
	}
	return Problem{Code: code, At: at, Reason: reason}
}

// CheckLine applies every rule to e, parsed from line, without advancing:
// CheckEntry's, and that line is byte-equal to e's canonical form, each
// problem in the upstream's per-line order.
func (v *ChainVerifier) CheckLine(e *Entry, line []byte, at Location) []Problem {
	problems := v.CheckEntry(e, at)
	if p, ok := nonCanonical(e, line, at); ok {
		problems = insertBefore(problems, MetadataMismatch, p)
	}
	return problems
}

// CheckLineChecked is CheckLine for an entry whose EntryCheck problems,
// rules, were computed beforehand (on another goroutine, say: the check is
// the costly, chain-independent part). The verifier's own check is not
// called; everything else, and the order, is CheckLine's, so with rules =
// check(e, at) the result is CheckLine's. It does not advance.
func (v *ChainVerifier) CheckLineChecked(e *Entry, line []byte, at Location, rules []Problem) []Problem {
	problems := v.chainProblems(e, at, hashProblem(slices.Clip(rules), e, at))
	if p, ok := nonCanonical(e, line, at); ok {
		problems = insertBefore(problems, MetadataMismatch, p)
	}
	return problems
}

// nonCanonical is the non_canonical problem of a line whose bytes are not
// e's canonical form.
func nonCanonical(e *Entry, line []byte, at Location) (Problem, bool) {
	if bytes.Equal(line, e.canonical) {
		return Problem{}, false
	}
	if n := len(e.canonical); len(line) == n+1 && line[n] == '\r' && bytes.Equal(line[:n], e.canonical) {
		// JSON allows the CR as whitespace; a CRLF file is canonical but
		// for it.
		return Problem{Code: NonCanonical, At: at,
			Reason: "line ends with a carriage return (CRLF line endings): a journal line is its RFC 8785 canonical form ended by a line feed alone"}, true
	}
	return Problem{Code: NonCanonical, At: at,
		Reason: "line is not byte-equal to its RFC 8785 canonical form" + firstDiff(line, e.canonical)}, true
}

// CheckEntry applies every rule but the byte-level canonical one to an
// already parsed entry, without advancing.
func (v *ChainVerifier) CheckEntry(e *Entry, at Location) []Problem {
	return v.chainProblems(e, at, entryProblems(v.check, e, at))
}

// entryProblems applies the rules that depend on the entry alone: check's,
// then entry_hash. Journal verification runs it on several lines at once.
func entryProblems(check EntryCheck, e *Entry, at Location) []Problem {
	var problems []Problem
	if check != nil {
		problems = append(problems, check(e, at)...)
	}
	return hashProblem(problems, e, at)
}

// hashProblem appends the entry_hash problem of e, if it has one.
func hashProblem(problems []Problem, e *Entry, at Location) []Problem {
	if claimed, ok := e.strOK(knownEntryHash); ok && !e.HashMatches() {
		problems = append(problems, Problem{Code: InvalidEntry, At: withPointer(at, "/entry_hash"),
			Reason: "entry_hash is not the SHA-256 of the canonical entry without entry_hash", Expected: e.ComputedHash(), Actual: claimed})
	}
	return problems
}

// chainProblems appends to problems those of the rules that depend on the
// chain so far (seq, parent_hash, metadata), in check order.
func (v *ChainVerifier) chainProblems(e *Entry, at Location, problems []Problem) []Problem {
	if seq, ok := e.Seq(); !ok || seq != v.next {
		actual := "not an integer"
		if ok {
			actual = strconv.FormatInt(seq, 10)
		}
		problems = append(problems, Problem{Code: Reordered, At: withPointer(at, "/seq"),
			Reason: "seq is not the entry's position in the chain", Expected: strconv.FormatInt(v.next, 10), Actual: actual})
	}
	if len(v.head) > 0 && e.ParentHash() != string(v.head) {
		problems = append(problems, Problem{Code: BrokenLink, At: withPointer(at, "/parent_hash"),
			Reason: "parent_hash is not the previous entry's entry_hash", Expected: string(v.head), Actual: e.ParentHash()})
	}
	got := e.Metadata()
	if v.meta == nil || got == *v.meta {
		return problems // the first entry's is the reference, or it agrees
	}
	for _, f := range v.meta.Differences(got) {
		problems = append(problems, Problem{Code: MetadataMismatch, At: withPointer(at, "/"+f.Key),
			Reason: f.Key + " differs from the capsule's", Expected: f.Want, Actual: f.Have})
	}
	return problems
}

// Accept advances the verifier past e, which the caller has verified with
// CheckEntry.
func (v *ChainVerifier) Accept(e *Entry) { v.accept(e) }

func (v *ChainVerifier) accept(e *Entry) {
	if v.meta == nil {
		v.meta, v.metaOwned = detachedMeta(e), true
	}
	v.next++
	v.head = append(v.head[:0], e.EntryHash()...)
}

// detachedMeta is e's metadata in strings of their own: e's strings are
// parts of its whole line, which a verifier that outlives e (a reader
// keeps one per chain) would otherwise keep alive.
func detachedMeta(e *Entry) *CapsuleMeta {
	m := e.Metadata()
	m.RunID, m.CapsuleID = strings.Clone(m.RunID), strings.Clone(m.CapsuleID)
	m.HarnessVersion, m.TaskFamily = strings.Clone(m.HarnessVersion), strings.Clone(m.TaskFamily)
	return &m
}

// own copies the metadata taken from entries, so that the verifier no
// longer refers to their bytes: journal verification reads into a
// batch's buffer again once it is linked. The head is always the
// verifier's own bytes.
func (v *ChainVerifier) own() {
	if v.meta != nil && !v.metaOwned {
		m := CapsuleMeta{RunID: strings.Clone(v.meta.RunID), CapsuleID: strings.Clone(v.meta.CapsuleID),
			HarnessVersion: strings.Clone(v.meta.HarnessVersion), TaskFamily: strings.Clone(v.meta.TaskFamily)}
		v.meta, v.metaOwned = &m, true
	}
}

// skip moves past a failed line so later lines are checked against what is
// really there; e is nil for a line that was not JSON, whose hash is unknown.
func (v *ChainVerifier) skip(e *Entry) {
	if e == nil {
		v.next++
		v.head = v.head[:0]
		return
	}
	if v.meta == nil {
		v.meta, v.metaOwned = detachedMeta(e), true
	}
	v.next++
	v.head = append(v.head[:0], e.EntryHash()...)
}

func insertBefore(ps []Problem, before Code, p Problem) []Problem {
	for i, q := range ps {
		if q.Code == before {
			return append(ps[:i], append([]Problem{p}, ps[i:]...)...)
		}
	}
	return append(ps, p)
}

func withPointer(at Location, ptr string) Location {
	at.Pointer = ptr
	return at
}

// firstDiff describes where line first departs from canonical.
func firstDiff(line, canonical []byte) string {
	n := min(len(line), len(canonical))
	for i := 0; i < n; i++ {
		if line[i] != canonical[i] {
			return fmt.Sprintf(" (first difference at byte %d)", i)
		}
	}
	return fmt.Sprintf(" (lengths %d and %d)", len(line), len(canonical))
}

// JournalResult describes a journal that was read.
type JournalResult struct {
	Entries int    // complete lines read
	Head    string // entry_hash of the last valid entry in an unbroken prefix, ZeroHash for none
	Valid   int    // entries in the valid prefix
}

// MaxLineBytes bounds one journal line. A longer line is refused as
// corrupt_entry without being held in memory whole.
const MaxLineBytes = 8 << 20

// VerifyJournal reads a whole journal from r and verifies it as one chain.
// file names the journal in locations. meta is capsule.json's metadata, or
// nil for a bare journal, which must hold at least one entry (empty_input:
// nothing says an empty file is a journal); a capsule's journal may be
// empty, as Capsule.create makes it. It returns a *Refusal listing every
// problem in the upstream verifier's order, so that its code is the
// upstream's first failure (docs/upstream.md, "Check order"): invalid
// UTF-8 anywhere in the file (non_canonical), then truncated_tail, then
// the lines' problems in line order, then metadata_mismatch; or an I/O
// error.
//
// Lines are parsed, hashed and checked with check on up to GOMAXPROCS
// goroutines at once, so check must be safe for concurrent use; the chain
// rules (seq, parent_hash, metadata) link the lines in order on one. The
// result is the one checking line after line gives, and memory stays
// bounded: a few batches of lines (each at most journalBatchLines lines or
// journalBatchBytes bytes and one line) are in flight at any time.
func VerifyJournal(r io.Reader, file string, meta *CapsuleMeta, check EntryCheck) (JournalResult, error) {
	return verifyJournal(r, file, journalOf{meta: meta, capsule: meta != nil}, check, runtime.GOMAXPROCS(0), journalBatchLines)
}

// VerifyCapsule verifies a capsule directory's journal, read from r and
// named file, with c, what CheckCapsule found in its capsule.json. It is
// VerifyJournal with c's problems placed as the upstream places them:
// after every problem of the chain and before metadata_mismatch, which is
// checked against c.Meta when c has no problems, and otherwise among the
// entries alone (the first entry's metadata is the reference).
func VerifyCapsule(r io.Reader, file string, c CapsuleFile, check EntryCheck) (JournalResult, error) {
	jo := journalOf{capsule: true, problems: c.Problems}
	if len(c.Problems) == 0 {
		jo.meta = &c.Meta
	}
	return verifyJournal(r, file, jo, check, runtime.GOMAXPROCS(0), journalBatchLines)
}

// journalOf says what a journal belongs to: a capsule (which may be empty)
// with its metadata and capsule.json problems, or nothing (a bare file).
type journalOf struct {
	meta     *CapsuleMeta
	capsule  bool
	problems []Problem
}

// verifyJournal is VerifyJournal with workers goroutines and batches of at
// most batchLines lines.
func verifyJournal(r io.Reader, file string, of journalOf, check EntryCheck, workers, batchLines int) (JournalResult, error) {
	j := &journalLinker{v: NewChainVerifier(of.meta, check), res: JournalResult{Head: ZeroHash}, of: of}
	rd := &journalReader{r: r, file: file, next: 1, maxLines: batchLines,
		free: make(chan *journalBatch, journalFreeBatches)}
	first := rd.batch()
	if first.last || workers < 2 {
		// Small or single-core: no goroutines, one batch reused.
		for b := first; ; b = rd.batch() {
			b.prepare(check)
			err := j.link(b)
			if err != nil || b.last {
				return j.finish(file, err)
			}
			rd.recycle(b)
		}
	}
	work := make(chan *journalBatch, workers)
	ordered := make(chan *journalBatch, 2*workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				b.prepare(check)
				close(b.done)
			}
		}()
	}
	go func() {
		defer close(work)
		defer close(ordered)
		for b := first; ; b = rd.batch() {
			b.done = make(chan struct{})
			last := b.last // once sent, b is the linker's, then read into again
			work <- b
			ordered <- b
			if last {
				return
			}
		}
	}()
	var err error
	for b := range ordered {
		<-b.done
		if lerr := j.link(b); lerr != nil && err == nil {
			err = lerr
		}
		rd.recycle(b)
	}
	wg.Wait()
	return j.finish(file, err)
}

// Batches of journal lines handed to a worker: at most this many lines, and
// a batch is closed once its lines reach this many bytes.
const (
	journalBatchLines = 256
	journalBatchBytes = 1 << 20
)

// journalLine is one line read from a journal and, once prepared, what the
// checks that depend on it alone found.
type journalLine struct {
	line      []byte // without its newline, in its batch's data
	off       int    // where line starts in its batch's data
	lineNo    int    // its line number in the batch's file (journalBatch.at)
	n         int    // the line's length in bytes (a truncated tail's)
	truncated bool   // the last line, without a newline
	tooLong   bool

	notUTF8  bool
	e        *Entry    // nil when not parsed
	problems []Problem // parseProblem's for a line that did not parse; else entryProblems
	nonCanon *Problem  // the line's non_canonical problem, if it has one
}

// prepare runs the checks of the lines of b that do not depend on the
// chain, the fast path's entries and members taken from b's arena.
func (b *journalBatch) prepare(check EntryCheck) {
	// The lines' text, without a copy: b.data is not written again until
	// the batch is recycled, which link allows only when nothing made from
	// it outlives the batch (see kept).
	text := unsafe.String(unsafe.SliceData(b.data), len(b.data))
	for i := range b.lines {
		l := &b.lines[i]
		l.prepare(check, b.at(l), text[l.off:l.off+len(l.line)], &b.arena)
	}
}

// at is where line l of b is.
func (b *journalBatch) at(l *journalLine) Location {
	return Location{File: b.file, Line: l.lineNo}
}

// prepare runs the checks of one line that do not depend on the chain;
// at is where it is, text the line as a string.
func (l *journalLine) prepare(check EntryCheck, at Location, text string, arena *entryArena) {
	if l.truncated || l.tooLong {
		return
	}
	e, valid, err := parseText(l.line, text, true, arena)
	if !valid {
		l.notUTF8 = true
		return
	}
	if err != nil {
		l.problems = []Problem{parseProblem(err, l.line, at)}
		return
	}
	l.e = e
	l.problems = entryProblems(check, e, at)
	if p, ok := nonCanonical(e, l.line, at); ok {
		l.nonCanon = new(Problem) // only here: a line that is canonical allocates none
		*l.nonCanon = p
	}
	l.line = nil // e holds what it needs
}

// journalBatch is a run of consecutive lines; last is set on the batch
// that ends the journal (end of input, truncated tail or read error err).
// Once linked, a batch is read into again (journalReader.recycle) unless
// kept.
type journalBatch struct {
	file  string // the journal's name, in the lines' locations
	data  []byte // the lines' bytes, read into one buffer
	lines []journalLine
	arena entryArena // the lines' entries and their members
	last  bool
	err   error
	done  chan struct{} // closed when every line is prepared
	// kept: something made from the batch outlives it (a problem's
	// evidence, an entry of the general path), so it is never reused.
	kept bool
}

// journalReader cuts a journal into batches of lines. It reads into the
// batches' buffers themselves, so that a line is not copied there from
// a reader's buffer: only the bytes read past a batch's last line (part
// of a line, or lines beyond its limit) are copied, to start the next.
type journalReader struct {
	r        io.Reader
	file     string
	next     int // the next line's number
	maxLines int
	size     int // the data of the last batch, in bytes
	// pending: bytes read past the last batch's last line, the start of
	// the next batch's data.
	pending []byte
	// rerr ended the input (io.EOF, or the read error), once met; the
	// bytes read before it are taken first.
	rerr error
	// free holds linked batches to read into again: with it a long
	// journal is read into the same few buffers, arenas included, and
	// leaves the collector next to nothing to do.
	free chan *journalBatch
}

// journalReadBytes bounds one read into a batch's buffer, as the reader
// buffer of before did (64 KiB); near the end of a batch a read asks for
// about what its remaining lines take, so that little is read past it.
const (
	journalReadBytes    = 64 << 10
	journalReadMinBytes = 4 << 10
)

// journalFreeBatches bounds the linked batches kept for reuse: as many as
// can be in flight (the workers' queue, the linker's and one being read)
// come back.
const journalFreeBatches = 8

// recycle hands a linked batch back to be read into again, unless it is
// kept (or enough are waiting already).
func (rd *journalReader) recycle(b *journalBatch) {
	if b.kept || b.data == nil {
		return
	}
	b.arena.reset()
	b.lines, b.data = b.lines[:0], b.data[:0]
	b.last, b.err, b.done = false, nil, nil
	select {
	case rd.free <- b:
	default:
	}
}

// batch reads the next batch: its lines are read into one buffer (sized
// after the last batch's, or a linked batch's again), not one
// allocation each, and are parts of it.
func (rd *journalReader) batch() *journalBatch {
	var b *journalBatch
	select {
	case b = <-rd.free:
	default:
		b = &journalBatch{
			data:  make([]byte, 0, min(rd.size+rd.size/8+4<<10, journalBatchBytes+journalReadBytes)),
			lines: make([]journalLine, 0, min(rd.maxLines, journalBatchLines)),
		}
	}
	b.file = rd.file
	b.data = append(b.data[:0], rd.pending...)
	rd.pending = rd.pending[:0]
	pos, scan := 0, 0 // the next line's start; where its newline is looked for from
	for len(b.lines) < rd.maxLines && pos < journalBatchBytes {
		if k := bytes.IndexByte(b.data[scan:], '\n'); k >= 0 {
			end := scan + k
			if end-pos+1 > MaxLineBytes {
				// Over the bound, its newline read already (a line read
				// on past the bound is dropped as it is read, by
				// discardLine): what follows it takes its place.
				rd.addLine(b, pos, []byte{}, end-pos, true, true)
				b.data = append(b.data[:pos], b.data[end+1:]...)
				scan = pos
				continue
			}
			rd.addLine(b, pos, b.data[pos:end], end-pos, true, false)
			pos, scan = end+1, end+1
			continue
		}
		scan = len(b.data)
		if len(b.data)-pos > MaxLineBytes {
			if !rd.discardLine(b, pos) {
				break
			}
			scan = pos
			continue
		}
		if rd.rerr != nil {
			pos = rd.end(b, pos)
			break
		}
		rd.fill(b, pos)
	}
	if !b.last {
		rd.pending = append(rd.pending, b.data[pos:]...)
	}
	b.data = b.data[:pos]
	rd.size = pos
	return b
}

// addLine appends a line that starts at off in b's data.
func (rd *journalReader) addLine(b *journalBatch, off int, line []byte, n int, complete, tooLong bool) {
	b.lines = append(b.lines, journalLine{line: line, off: off, lineNo: rd.next, n: n, truncated: !complete, tooLong: tooLong})
	rd.next++
	if !complete {
		b.last = true
	}
}

// end ends the batch at the end of the input: the line from pos, if any,
// is its truncated tail, or, after a read error, dropped with it. It
// returns where the batch's data ends.
func (rd *journalReader) end(b *journalBatch, pos int) int {
	b.last = true
	if rd.rerr != io.EOF {
		b.err = rd.rerr
		return pos
	}
	if pos < len(b.data) {
		rd.addLine(b, pos, b.data[pos:], len(b.data)-pos, false, false)
	}
	return len(b.data)
}

// fill reads more of the input into b's data, growing it when the line
// from pos leaves too little room (the lines before are moved with it).
func (rd *journalReader) fill(b *journalBatch, pos int) {
	want := journalReadBytes
	if n := len(b.lines); n > 0 {
		// About what the remaining lines take, at the batch's mean.
		want = min(max((rd.maxLines-n)*(pos/n)+1, journalReadMinBytes), journalReadBytes)
	}
	if cap(b.data)-len(b.data) < want {
		grown := make([]byte, len(b.data), max(2*cap(b.data), len(b.data)+journalReadBytes))
		copy(grown, b.data)
		for i := range b.lines {
			l := &b.lines[i]
			if !l.tooLong {
				l.line = grown[l.off : l.off+len(l.line)]
			}
		}
		b.data = grown
	}
	for tries := 0; ; tries++ {
		n, err := rd.r.Read(b.data[len(b.data):min(cap(b.data), len(b.data)+want)])
		b.data = b.data[:len(b.data)+n]
		if err != nil {
			rd.rerr = err
			return
		}
		if n > 0 {
			return
		}
		if tries == 100 { // as bufio.Reader gives up on a reader that returns nothing
			rd.rerr = io.ErrNoProgress
			return
		}
	}
}

// discardLine drops the line from pos, longer than MaxLineBytes, reading
// on to its end without holding it: b's data ends at pos again, followed
// by what was read past the line. It adds the line (tooLong) and reports
// whether the batch goes on.
func (rd *journalReader) discardLine(b *journalBatch, pos int) bool {
	n := len(b.data) - pos
	b.data = b.data[:pos]
	for {
		if rd.rerr != nil {
			if rd.rerr != io.EOF {
				b.last, b.err = true, rd.rerr
				return false
			}
			rd.addLine(b, pos, []byte{}, n, false, true)
			return false
		}
		rd.fill(b, pos)
		chunk := b.data[pos:]
		if k := bytes.IndexByte(chunk, '\n'); k >= 0 {
			rd.addLine(b, pos, []byte{}, n+k, true, true)
			b.data = b.data[:pos+copy(b.data[pos:], chunk[k+1:])]
			return true
		}
		n += len(chunk)
		b.data = b.data[:pos]
	}
}

// journalLinker applies the chain rules to prepared lines in order and
// collects the problems, as checking line after line does, each kind in
// its own list so that finish can put them in the upstream's order.
type journalLinker struct {
	v  *ChainVerifier
	of journalOf
	// The upstream checks the whole file's UTF-8, then its final newline,
	// then the lines one by one, then capsule.json and every entry's
	// metadata against it: found in line order, reported in that one.
	utf8, truncated, lineProblems, metaProblems Problems
	res                                         JournalResult
	broken                                      bool
	// headPending: res.Head is the verifier's head, not yet read out
	// (Head makes a string): read once, where the valid prefix ends.
	headPending bool
}

// settleHead reads the valid prefix's head out of the verifier, before
// it moves past a line that is not valid or at the end.
func (j *journalLinker) settleHead() {
	if j.headPending {
		j.res.Head, j.headPending = j.v.Head(), false
	}
}

// link takes the lines of b in order; it returns b's read error, if any.
func (j *journalLinker) link(b *journalBatch) error {
	for i := range b.lines {
		l := &b.lines[i]
		switch {
		case l.truncated:
			if !validUTF8ExceptCut(l.line) {
				j.utf8.Add(Problem{Code: NonCanonical, At: b.at(l), Reason: "the journal is not valid UTF-8: the partial last line holds an invalid byte before its end"})
			}
			j.truncated.Add(Problem{Code: TruncatedTail, At: b.at(l),
				Reason: fmt.Sprintf("the journal does not end in a newline: %d trailing bytes are a partial entry", l.n)})
			continue
		case l.tooLong:
			j.res.Entries++
			j.lineProblems.Add(Problem{Code: CorruptEntry, At: b.at(l), Reason: fmt.Sprintf("line longer than %d bytes", MaxLineBytes)})
		case l.notUTF8:
			j.res.Entries++
			j.utf8.Add(Problem{Code: NonCanonical, At: b.at(l), Reason: "the journal is not valid UTF-8: this line holds an invalid byte"})
		case l.e == nil:
			j.res.Entries++
			for _, p := range l.problems {
				j.lineProblems.Add(p)
			}
		default:
			j.res.Entries++
			problems := j.v.chainProblems(l.e, b.at(l), l.problems)
			if l.nonCanon != nil {
				problems = insertBefore(problems, MetadataMismatch, *l.nonCanon)
			}
			if len(problems) == 0 {
				if !l.e.fast {
					b.kept = true // not from the arena: left to the collector
				}
				j.v.accept(l.e)
				if !j.broken {
					j.res.Valid++
					j.headPending = true
				}
				continue
			}
			for _, p := range problems {
				if p.Code == MetadataMismatch {
					j.metaProblems.Add(p)
				} else {
					j.lineProblems.Add(p)
				}
			}
		}
		// The problems hold the batch's strings: it is not reused.
		b.kept = true
		j.settleHead()
		j.v.skip(l.e)
		j.broken = true
	}
	if !b.kept {
		// The batch is read into again: what the chain keeps of its last
		// entry becomes the linker's own (its head always is).
		j.v.own()
	}
	return b.err
}

// finish returns the result, the I/O error if reading failed, or else the
// refusal of every problem found.
func (j *journalLinker) finish(file string, ioErr error) (JournalResult, error) {
	j.settleHead()
	if ioErr != nil {
		return j.res, ioErr
	}
	if j.res.Entries == 0 && j.truncated.Len() == 0 && !j.of.capsule {
		j.utf8.Add(Problem{Code: EmptyInput, At: Location{File: file}, Reason: "the journal holds no entries"})
	}
	var capsule Problems
	for _, p := range j.of.problems {
		capsule.Add(p)
	}
	var all Problems
	for _, ps := range [...]Problems{j.utf8, j.truncated, j.lineProblems, capsule, j.metaProblems} {
		for _, p := range ps.list {
			all.Add(p)
		}
		all.omitted += ps.omitted
	}
	if ref := all.Refusal(); ref != nil {
		return j.res, ref
	}
	return j.res, nil
}

// validUTF8ExceptCut reports whether b is valid UTF-8 but for an
// incomplete character at its very end: how a write cut inside a
// character leaves a journal's last line (a truncation, not an encoding
// error; docs/upstream.md, "Deliberate divergences").
func validUTF8ExceptCut(b []byte) bool {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	return utf8.Valid(b)
}
