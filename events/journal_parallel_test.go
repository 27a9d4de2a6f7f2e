package events_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/roompub/roompub/events"
)

// oddCheck is an entry check that refuses entries whose seq is 3 modulo 7;
// it is stateless, so safe for concurrent use as VerifyJournal requires.
func oddCheck(e *events.Entry, at events.Location) []events.Problem {
	if seq, ok := e.Seq(); ok && seq%7 == 3 {
		at.Pointer = "/seq"
		return []events.Problem{{Code: events.InvalidEntry, At: at, Reason: "test rule"}}
	}
	return nil
}

// compareJournal verifies data with the pipeline in several shapes and
// fails t unless each gives exactly what the sequential verifier gives:
// the same result and the same refusal (codes, locations, reasons, order,
// omitted count) or the same I/O error.
func compareJournal(t *testing.T, data func() io.Reader, meta *events.CapsuleMeta, check events.EntryCheck) {
	t.Helper()
	wantRes, wantErr := events.VerifyJournalSequential(data(), "j.ndjson", meta, check)
	type shape struct{ workers, batch int }
	for _, s := range []shape{{1, 256}, {2, 1}, {2, 3}, {3, 2}, {4, 256}} {
		gotRes, gotErr := events.VerifyJournalWith(data(), "j.ndjson", meta, check, s.workers, s.batch)
		if gotRes != wantRes || !sameError(gotErr, wantErr) {
			t.Fatalf("workers %d, batches of %d: %+v %v\nsequential: %+v %v", s.workers, s.batch, gotRes, gotErr, wantRes, wantErr)
		}
	}
	gotRes, gotErr := events.VerifyJournal(data(), "j.ndjson", meta, check)
	if gotRes != wantRes || !sameError(gotErr, wantErr) {
		t.Fatalf("VerifyJournal: %+v %v\nsequential: %+v %v", gotRes, gotErr, wantRes, wantErr)
	}
}

func sameError(a, b error) bool {
	var ra, rb *events.Refusal
	if errors.As(a, &ra) != errors.As(b, &rb) {
		return false
	}
	if ra != nil {
		return reflect.DeepEqual(ra, rb)
	}
	return a == b || a != nil && b != nil && a.Error() == b.Error()
}

func readerOf(data []byte) func() io.Reader {
	return func() io.Reader { return bytes.NewReader(data) }
}

// TestVerifyJournalParallelMatchesSequential: journals long enough for the
// pipeline, with every kind of problem at positions inside and across
// batch borders.
func TestVerifyJournalParallelMatchesSequential(t *testing.T) {
	lines := chainLines(t, 700, nil)
	meta := &events.CapsuleMeta{RunID: "run-7", CapsuleID: "cap-7", HarnessVersion: "test/1", TaskFamily: "slugify"}
	edit := func(edits map[int][]byte) []byte {
		out := make([][]byte, len(lines))
		copy(out, lines)
		for i, l := range edits {
			out[i] = l
		}
		return journal(out...)
	}
	spaced := bytes.Replace(lines[300], []byte(`"seq":`), []byte(`"seq": `), 1)
	cases := map[string][]byte{
		"valid":          journal(lines...),
		"corrupt":        edit(map[int][]byte{0: []byte("{"), 256: []byte("not json"), 699: []byte("")}),
		"not UTF-8":      edit(map[int][]byte{5: []byte("\xff{}"), 511: append(bytes.Clone(lines[511][:20]), 0xc3)}),
		"non-canonical":  edit(map[int][]byte{300: spaced}),
		"reordered":      edit(map[int][]byte{255: lines[256], 256: lines[255]}),
		"wrong metadata": edit(map[int][]byte{400: bytes.Replace(lines[400], []byte(`"cap-7"`), []byte(`"cap-8"`), 1)}),
		"truncated":      journal(lines...)[:len(journal(lines...))-5],
		"many problems":  bytes.Repeat([]byte("x\n"), 700),
		"empty":          nil,
		"newlines":       []byte("\n\n\n"),
		"general path":   edit(map[int][]byte{10: bytes.Replace(lines[10], []byte(`"Alpha ok"`), []byte(`"\u0041lpha ok"`), 1)}),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			compareJournal(t, readerOf(data), nil, nil)
			compareJournal(t, readerOf(data), meta, oddCheck)
		})
	}
	t.Run("read error", func(t *testing.T) {
		boom := errors.New("disk on fire")
		data := journal(lines...)
		for _, cut := range []int{len(data) / 3, len(data) - 1} {
			compareJournal(t, func() io.Reader {
				return io.MultiReader(bytes.NewReader(data[:cut]), iotest.ErrReader(boom))
			}, meta, oddCheck)
		}
	})
	t.Run("long line", func(t *testing.T) {
		huge := append([]byte(`{"a":"`), bytes.Repeat([]byte("y"), events.MaxLineBytes)...)
		huge = append(huge, `"}`...)
		compareJournal(t, readerOf(journal(append([][]byte{huge}, lines[:300]...)...)), nil, oddCheck)
	})
}

// FuzzJournalParallel: on any input, the pipeline (with small batches, so
// that short inputs span several) refuses or accepts exactly as the
// sequential verifier does.
func FuzzJournalParallel(f *testing.F) {
	lines := chainLines(f, 12, nil)
	f.Add(journal(lines...), uint8(2), uint8(1))
	f.Add(journal(lines[1:]...), uint8(3), uint8(2))
	f.Add(append(journal(lines[:4]...), []byte("{\"a\":1}\nx\n\xff\n")...), uint8(2), uint8(3))
	f.Add([]byte(strings.Repeat("\n", 5)), uint8(2), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, workers, batch uint8) {
		w, b := int(workers%4)+1, int(batch%5)+1
		wantRes, wantErr := events.VerifyJournalSequential(bytes.NewReader(data), "j", nil, oddCheck)
		gotRes, gotErr := events.VerifyJournalWith(bytes.NewReader(data), "j", nil, oddCheck, w, b)
		if gotRes != wantRes || !sameError(gotErr, wantErr) {
			t.Fatalf("%s: %+v %v\nsequential: %+v %v", fmt.Sprint(w, "x", b), gotRes, gotErr, wantRes, wantErr)
		}
	})
}

// TestCheckLineChecked: with the check's problems computed beforehand,
// CheckLineChecked gives CheckLine's problems, in CheckLine's order, and
// leaves the given slice alone.
func TestCheckLineChecked(t *testing.T) {
	lines := chainLines(t, 8, nil)
	lines[3] = bytes.Replace(lines[3], []byte(`"cap-7"`), []byte(`"cap-8"`), 1)  // metadata and hash
	lines[5] = bytes.Replace(lines[5], []byte(`"seq":5`), []byte(`"seq": 5`), 1) // non-canonical
	lines[6] = bytes.Replace(lines[6], []byte(`"run-7"`), []byte(`"run-9"`), 1)  // metadata
	meta := &events.CapsuleMeta{RunID: "run-7", CapsuleID: "cap-7", HarnessVersion: "test/1", TaskFamily: "slugify"}
	a, b := events.NewChainVerifier(meta, oddCheck), events.NewChainVerifier(meta, nil)
	for i, line := range lines {
		at := events.Location{Line: i + 1}
		e, err := events.ParseEntry(line)
		if err != nil {
			t.Fatal(err)
		}
		rules := oddCheck(e, at)
		before := fmt.Sprint(rules)
		want := a.CheckLine(e, line, at)
		got := b.CheckLineChecked(e, line, at, rules)
		if !reflect.DeepEqual(got, want) || fmt.Sprint(rules) != before {
			t.Fatalf("line %d: %v, want %v", i+1, got, want)
		}
		a.Accept(e)
		b.Accept(e)
	}
}

// TestJournalReaderEdges: the batches are read into directly, however the
// reader hands out its bytes, with lines around MaxLineBytes (their
// newline read with their last bytes, or after them) and read errors
// and readers that return nothing; each as the sequential verifier sees it.
func TestJournalReaderEdges(t *testing.T) {
	lines := chainLines(t, 40, nil)
	long := func(n int) []byte { return bytes.Repeat([]byte("z"), n) }
	all := journal(lines...)
	mixed := journal(append(append([][]byte{}, lines[:5]...), append([][]byte{long(events.MaxLineBytes - 1), long(events.MaxLineBytes),
		long(events.MaxLineBytes + 1), long(events.MaxLineBytes + 3<<20)}, lines[5:]...)...)...)
	boom := errors.New("disk on fire")
	for name, data := range map[string]func() io.Reader{
		"one byte a read":        func() io.Reader { return iotest.OneByteReader(bytes.NewReader(all)) },
		"half reads":             func() io.Reader { return iotest.HalfReader(bytes.NewReader(all)) },
		"data with EOF":          func() io.Reader { return iotest.DataErrReader(bytes.NewReader(all)) },
		"around the bound":       readerOf(mixed),
		"bound, data w/ EOF":     func() io.Reader { return iotest.DataErrReader(bytes.NewReader(mixed)) },
		"truncated at the bound": readerOf(append(journal(lines[:3]...), long(events.MaxLineBytes)...)),
		"truncated over it":      readerOf(append(journal(lines[:3]...), long(events.MaxLineBytes+1)...)),
		"error in a long line": func() io.Reader {
			return io.MultiReader(bytes.NewReader(mixed[:len(mixed)-len(all)/2-2<<20]), iotest.ErrReader(boom))
		},
		"error in a line": func() io.Reader {
			return io.MultiReader(bytes.NewReader(all[:len(all)/2+7]), iotest.ErrReader(boom))
		},
		"nothing read": func() io.Reader {
			return io.MultiReader(bytes.NewReader(all[:len(all)/2]), emptyReader{})
		},
	} {
		t.Run(name, func(t *testing.T) { compareJournal(t, data, nil, oddCheck) })
	}
}

// emptyReader returns no bytes and no error, for ever.
type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }

// TestRepeatedMembers: a member of the envelope that lines repeat is not
// scanned again where its bytes are the last line's; where they differ,
// by one byte, a prefix, an escape or a longer string, it is, so the
// verdicts (and the values they quote) are the sequential verifier's.
func TestRepeatedMembers(t *testing.T) {
	ids := []string{"cap-7", "cap-7", "cap-70", "cap-7", `cap-"7`, `cap-"7`, `cap-"8`, `cap-\7`, "cap-7\u00e9", "cap-7\u00e9", "cap-", "cap-7"}
	families := []string{"slugify", "slugify\n", "slugify\n", "slugify", "slug", "slugify", "slugify\u2028", "slugify"}
	lines := chainLines(t, 60, func(i int, m map[string]any) {
		m["capsule_id"] = ids[i%len(ids)]
		m["task_family"] = families[i%len(families)]
		if i%5 == 4 {
			m["schema"] = "capsule-envelope/v2"
		}
	})
	compareJournal(t, readerOf(journal(lines...)), nil, oddCheck)
	meta := &events.CapsuleMeta{RunID: "run-7", CapsuleID: "cap-7", HarnessVersion: "test/1", TaskFamily: "slugify"}
	compareJournal(t, readerOf(journal(lines...)), meta, oddCheck)

	// Lines without problems, so that their batches are read into again:
	// each line's schema (escaped, changing from line to line, not
	// checked here) as the entry holds it.
	schemas := []string{`capsule-envelope/"1`, `capsule-envelope/"2`, `capsule-envelope/"2`, "capsule-envelope/\\3", "capsule-envelope/é4"}
	lines = chainLines(t, 200, func(i int, m map[string]any) { m["schema"] = schemas[i%len(schemas)] })
	for _, batch := range []int{1, 2, 3, 256} {
		var mu sync.Mutex
		seen := map[int64]string{}
		record := func(e *events.Entry, _ events.Location) []events.Problem {
			fields, _ := e.Fields()
			seq, _ := e.Seq()
			for _, f := range fields {
				if f.Key == "schema" {
					mu.Lock()
					seen[seq] = strings.Clone(f.Text) // the batch is read into again
					mu.Unlock()
				}
			}
			return nil
		}
		if res, err := events.VerifyJournalWith(readerOf(journal(lines...))(), "j", nil, record, 2, batch); err != nil || res.Valid != len(lines) {
			t.Fatalf("batches of %d: %+v %v", batch, res, err)
		}
		for i := range lines {
			if got, want := seen[int64(i)], schemas[i%len(schemas)]; got != want {
				t.Fatalf("batches of %d: line %d's schema is %q, want %q", batch, i+1, got, want)
			}
		}
	}
}
