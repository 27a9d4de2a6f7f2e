package events

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// ParseEntryGeneral is the general path alone (jcs, encoding/json, the
// preimage re-serialised from the map): the oracle of the fast path.
func ParseEntryGeneral(line []byte) (*Entry, error) {
	if !utf8.Valid(line) {
		_, err := Canonicalize(line)
		return nil, err
	}
	return parseGeneral(line)
}

// ParseEntryFast is the fast path alone: nil when it does not apply
// (to any line that is not valid UTF-8, among others).
func ParseEntryFast(line []byte) *Entry {
	return parseCanonical(line, string(line), false, nil)
}

// CanonicalNumber is the fast path's number rule.
var CanonicalNumber = canonicalNumber

// VerifyJournalWith is VerifyJournal with workers goroutines and batches
// of batchLines lines, so that tests run the pipeline on small journals.
func VerifyJournalWith(r io.Reader, file string, meta *CapsuleMeta, check EntryCheck, workers, batchLines int) (JournalResult, error) {
	return verifyJournal(r, file, journalOf{meta: meta, capsule: meta != nil}, check, workers, batchLines)
}

// VerifyJournalSequential is VerifyJournal as it was before the pipeline:
// one line after the other through ChainVerifier.Check. It is the oracle
// of the parallel verification, in the upstream's order: the file's UTF-8,
// its final newline, the lines, then metadata.
func VerifyJournalSequential(r io.Reader, file string, meta *CapsuleMeta, check EntryCheck) (JournalResult, error) {
	v := NewChainVerifier(meta, check)
	br := bufio.NewReaderSize(r, 64<<10)
	var truncated, fileProblems, lineProblems, metaProblems Problems
	res := JournalResult{Head: ZeroHash}
	broken := false
	for lineNo := 1; ; lineNo++ {
		_, line, complete, tooLong, n, err := readLine(br, nil)
		if err != nil {
			return res, err
		}
		if line == nil && !tooLong {
			break
		}
		at := Location{File: file, Line: lineNo}
		if !complete {
			if !validUTF8ExceptCut(line) {
				fileProblems.Add(Problem{Code: NonCanonical, At: at, Reason: "the journal is not valid UTF-8: the partial last line holds an invalid byte before its end"})
			}
			truncated.Add(Problem{Code: TruncatedTail, At: at,
				Reason: fmt.Sprintf("the journal does not end in a newline: %d trailing bytes are a partial entry", n)})
			break
		}
		res.Entries++
		if tooLong {
			lineProblems.Add(Problem{Code: CorruptEntry, At: at, Reason: fmt.Sprintf("line longer than %d bytes", MaxLineBytes)})
			v.skip(nil)
			broken = true
			continue
		}
		if !utf8.Valid(line) {
			fileProblems.Add(Problem{Code: NonCanonical, At: at, Reason: "the journal is not valid UTF-8: this line holds an invalid byte"})
			v.skip(nil)
			broken = true
			continue
		}
		e, problems := v.Check(line, at)
		if len(problems) > 0 {
			for _, p := range problems {
				if p.Code == MetadataMismatch {
					metaProblems.Add(p)
				} else {
					lineProblems.Add(p)
				}
			}
			v.skip(e)
			broken = true
			continue
		}
		if !broken {
			res.Valid++
			res.Head = v.Head()
		}
	}
	if res.Entries == 0 && truncated.Len() == 0 && meta == nil {
		fileProblems.Add(Problem{Code: EmptyInput, At: Location{File: file}, Reason: "the journal holds no entries"})
	}
	var all Problems
	for _, ps := range [...]Problems{fileProblems, truncated, lineProblems, metaProblems} {
		for _, p := range ps.list {
			all.Add(p)
		}
		all.omitted += ps.omitted
	}
	if ref := all.Refusal(); ref != nil {
		return res, ref
	}
	return res, nil
}

// ParseRecordGeneral is ParseRecord as it was: jcs, encoding/json, and the
// preimages re-serialised from the map. The oracle of the one-pass path.
func ParseRecordGeneral(raw []byte) (*Record, error) {
	obj, canon, err := DecodeObject(raw)
	if err != nil {
		return nil, err
	}
	return newRecord(obj, canon)
}

// RecordTakesOnePass reports whether ParseRecord decodes raw without jcs.
func RecordTakesOnePass(raw []byte) bool {
	src := string(bytes.Trim(raw, jsonSpace))
	if !utf8.ValidString(src) {
		return false
	}
	_, _, ok := scanCanonicalTree(src)
	return ok
}

// Stringify is the parser and writer of lines with surrogate escapes
// alone, on any JSON value: its canonical text as the upstream's
// JSON.stringify writes it, and whether it holds a lone surrogate.
func Stringify(raw []byte) (canon []byte, lone bool, err error) {
	root, lone, err := parseStringified(raw)
	if err != nil {
		return nil, false, err
	}
	return appendStringified(nil, &root, ""), lone, nil
}

// ParseEntrySurrogates parses any line as a line with surrogate escapes.
func ParseEntrySurrogates(line []byte) (*Entry, error) { return parseSurrogates(line) }

// ParseEntryJCS is the general path by jcs alone, whatever the line holds.
func ParseEntryJCS(line []byte) (*Entry, error) {
	obj, canon, err := DecodeObject(line)
	if err != nil {
		return nil, err
	}
	return newEntry(obj, canon)
}

// MayHoldSurrogateEscape is the test that sends a line to ParseEntrySurrogates.
func MayHoldSurrogateEscape(line []byte) bool { return mayHoldSurrogateEscape(line) }

// KnownKeys and KnownIndex are the members Entry indexes at parse.
var (
	KnownKeys  = knownKeys
	KnownIndex = knownIndex
)

// Arena is a journal worker's arena; ParseInArena parses a line as a
// journal batch does (its bytes also as text, the members from a).
type Arena = entryArena

// Reset is what linking a batch does to its arena: every chunk is reused.
func (a *Arena) Reset() { a.reset() }

func ParseInArena(line []byte, a *Arena) (*Entry, error) {
	e, valid, err := parseText(line, string(line), true, a)
	if !valid {
		_, err = Canonicalize(line) // ParseEntry's error
	}
	return e, err
}

// HashIs reports whether claimed is e's ComputedHash, as the entry_hash
// rule compares them.
func (e *Entry) HashIs(claimed string) bool { return e.hashIs(claimed) }

// HexWord8 is how the entry_hash comparison writes four bytes of a digest.
var HexWord8 = hexWord8

// TokenAt reports whether src starts with t, compared as the fast path
// compares the envelope's names.
func TokenAt(t, src string) bool {
	k := newToken(t)
	return k.at(src)
}

// readLine returns the next line without its "\n", appended to dst with
// its newline: data is dst and what was appended, line the line in it.
// complete is false for a final line with no newline; line is nil at the
// end of input. A line over MaxLineBytes is consumed to its end, not
// appended, and returned empty with tooLong set; n is the line's length
// in bytes in every case.
func readLine(br *bufio.Reader, dst []byte) (data, line []byte, complete, tooLong bool, n int, err error) {
	start := len(dst)
	buf := dst
	for {
		chunk, err := br.ReadSlice('\n')
		n += len(chunk)
		if len(buf)-start+len(chunk) > MaxLineBytes {
			tooLong = true
			buf = buf[:start]
		} else if !tooLong {
			buf = append(buf, chunk...)
		}
		switch {
		case err == nil:
			n-- // the newline
			if tooLong {
				return buf, []byte{}, true, true, n, nil
			}
			return buf, buf[start : len(buf)-1], true, false, n, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(buf) == start && !tooLong {
				return buf, nil, false, false, n, nil
			}
			if tooLong {
				return buf, []byte{}, false, true, n, nil
			}
			return buf, buf[start:], false, false, n, nil
		default:
			return buf, nil, false, false, n, err
		}
	}
}
