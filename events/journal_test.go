package events_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"unsafe"

	"github.com/roompub/roompub/events"
)

type problemAt struct {
	code events.Code
	line int
	ptr  string
}

func checkProblems(t *testing.T, got []events.Problem, want []problemAt) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d problems, want %d:\n%s", len(got), len(want), list(got))
	}
	for i, w := range want {
		if g := got[i]; g.Code != w.code || g.At.Line != w.line || g.At.Pointer != w.ptr {
			t.Errorf("problem %d = %s at line %d pointer %q, want %s at line %d pointer %q",
				i, g.Code, g.At.Line, g.At.Pointer, w.code, w.line, w.ptr)
		}
	}
}

func list(ps []events.Problem) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	return b.String()
}

func TestVerifyJournalReference(t *testing.T) {
	raw := readRef(t, "capsule-journals", "canonical", "journal.ndjson")
	meta, err := events.ParseCapsule(readRef(t, "capsule-journals", "canonical", "capsule.json"))
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]*events.CapsuleMeta{"with capsule.json": &meta, "bare": nil} {
		t.Run(name, func(t *testing.T) {
			res, err := events.VerifyJournal(bytes.NewReader(raw), "journal.ndjson", m, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := events.JournalResult{Entries: 2, Head: refEntry1Hash, Valid: 2}
			if res != want {
				t.Errorf("result %+v, want %+v", res, want)
			}
		})
	}
}

func TestVerifyJournalValidPrefix(t *testing.T) {
	lines := chainLines(t, 5, func(i int, m map[string]any) {
		if i == 2 {
			m["seq"] = 9
		}
	})
	res, err := events.VerifyJournal(bytes.NewReader(journal(lines...)), "j", nil, nil)
	ref := asRefusal(t, err)
	checkProblems(t, ref.Problems, []problemAt{{events.Reordered, 3, "/seq"}})
	want := events.JournalResult{Entries: 5, Valid: 2, Head: hashOf(t, lines[1])}
	if res != want {
		t.Errorf("result %+v, want %+v", res, want)
	}
}

// The file-level checks come first, the whole file's UTF-8 before its
// final newline, then line problems in line order (docs/upstream.md,
// "Check order").
func TestVerifyJournalFileProblemsFirst(t *testing.T) {
	lines := chainLines(t, 3, func(i int, m map[string]any) {
		if i == 0 {
			m["seq"] = 5
		}
	})
	lines[2] = bytes.Replace(lines[2], []byte("Alpha"), []byte("Al\xffpha"), 1)
	data := append(journal(lines...), `{"schema":"capsule-envelope/v1"`...)
	res, err := events.VerifyJournal(bytes.NewReader(data), "j", nil, nil)
	ref := asRefusal(t, err)
	checkProblems(t, ref.Problems, []problemAt{
		{events.NonCanonical, 3, ""},
		{events.TruncatedTail, 4, ""},
		{events.Reordered, 1, "/seq"},
	})
	if ref.Code != events.NonCanonical || !errors.Is(err, events.NonCanonical) {
		t.Errorf("code %s, want non_canonical", ref.Code)
	}
	if res.Entries != 3 || res.Valid != 0 || res.Head != events.ZeroHash {
		t.Errorf("result %+v, want 3 entries, 0 valid, zero head", res)
	}
}

// A write cut inside a character leaves invalid UTF-8 only at the very end
// of the unterminated last line: that is a truncation, reported as one (a
// deliberate divergence, docs/upstream.md); an invalid byte earlier in the
// partial line is an encoding error first.
func TestVerifyJournalTailCutInsideCharacter(t *testing.T) {
	lines := chainLines(t, 2, nil)
	partial := []byte(`{"message":"caf\xc3\xa9 cr\xc3`) // é whole, then the first byte of another é
	res, err := events.VerifyJournal(bytes.NewReader(append(journal(lines...), partial...)), "j", nil, nil)
	checkProblems(t, asRefusal(t, err).Problems, []problemAt{{events.TruncatedTail, 3, ""}})
	if res.Valid != 2 {
		t.Errorf("result %+v, want the 2 complete entries valid", res)
	}
	for _, cut := range [][]byte{{0xf0, 0x9f}, {0xf0, 0x9f, 0x98}, {0xe2, 0x82}} {
		_, err := events.VerifyJournal(bytes.NewReader(append(journal(lines...), append([]byte(`{"m":"`), cut...)...)), "j", nil, nil)
		checkProblems(t, asRefusal(t, err).Problems, []problemAt{{events.TruncatedTail, 3, ""}})
	}
	bad := []byte("{\"m\":\"\xff\",\"n\":\"x") // an invalid byte, then more
	_, err = events.VerifyJournal(bytes.NewReader(append(journal(lines...), bad...)), "j", nil, nil)
	checkProblems(t, asRefusal(t, err).Problems, []problemAt{{events.NonCanonical, 3, ""}, {events.TruncatedTail, 3, ""}})
}

// The upstream checks every entry's metadata only after the whole chain
// has verified, so a broken link after a differing harness_version is the
// first failure.
func TestVerifyJournalMetadataAfterChain(t *testing.T) {
	lines := chainLines(t, 3, func(i int, m map[string]any) {
		switch i {
		case 1:
			m["harness_version"] = "other"
		case 2:
			m["parent_hash"] = strings.Repeat("a", 64)
		}
	})
	_, err := events.VerifyJournal(bytes.NewReader(journal(lines...)), "j", nil, nil)
	checkProblems(t, asRefusal(t, err).Problems, []problemAt{
		{events.BrokenLink, 3, "/parent_hash"},
		{events.MetadataMismatch, 2, "/harness_version"},
	})
}

// A capsule's journal may be empty (Capsule.create makes it so); a bare
// empty file is not a journal.
func TestVerifyJournalEmptyCapsule(t *testing.T) {
	meta := events.CapsuleMeta{RunID: "r", CapsuleID: "c", HarnessVersion: "h", TaskFamily: "f"}
	res, err := events.VerifyJournal(bytes.NewReader(nil), "j", &meta, nil)
	if err != nil || res != (events.JournalResult{Head: events.ZeroHash}) {
		t.Errorf("capsule journal: %+v, %v; want ok with 0 entries", res, err)
	}
	res, err = events.VerifyCapsule(bytes.NewReader(nil), "j", events.CapsuleFile{Meta: meta}, nil)
	if err != nil || res.Entries != 0 {
		t.Errorf("VerifyCapsule: %+v, %v; want ok with 0 entries", res, err)
	}
	_, err = events.VerifyJournal(bytes.NewReader(nil), "j", nil, nil)
	checkProblems(t, asRefusal(t, err).Problems, []problemAt{{events.EmptyInput, 0, ""}})
	_, err = events.VerifyJournal(strings.NewReader("\n"), "j", &meta, nil)
	checkProblems(t, asRefusal(t, err).Problems, []problemAt{{events.CorruptEntry, 1, ""}})
}

// capsule.json's problems come after the chain's and before any
// metadata_mismatch; with them, entries are compared among themselves.
func TestVerifyCapsuleOrder(t *testing.T) {
	lines := chainLines(t, 2, func(i int, m map[string]any) {
		if i == 1 {
			m["task_family"] = "other"
		}
	})
	swapped := journal(lines[1], lines[0])
	bad := events.CheckCapsule([]byte(`{"run_id":"r"}`), "capsule.json")
	_, err := events.VerifyCapsule(bytes.NewReader(swapped), "j", bad, nil)
	ref := asRefusal(t, err)
	if ref.Code != events.Reordered || ref.At.Line != 1 {
		t.Fatalf("first problem %v, want reordered at line 1", ref.Problem)
	}
	var codes []events.Code
	for _, p := range ref.Problems {
		codes = append(codes, p.Code)
	}
	firstCapsule, lastChain, firstMeta := -1, -1, -1
	for i, c := range codes {
		switch c {
		case events.InvalidCapsule:
			if firstCapsule < 0 {
				firstCapsule = i
			}
		case events.MetadataMismatch:
			if firstMeta < 0 {
				firstMeta = i
			}
		default:
			lastChain = i
		}
	}
	if firstCapsule < 0 || firstMeta < 0 || lastChain > firstCapsule || firstCapsule > firstMeta {
		t.Errorf("codes %v: want the chain's, then invalid_capsule, then metadata_mismatch", codes)
	}
}

func TestVerifyJournalEmpty(t *testing.T) {
	res, err := events.VerifyJournal(strings.NewReader(""), "empty.ndjson", nil, nil)
	ref := asRefusal(t, err)
	if ref.Code != events.EmptyInput || ref.At != (events.Location{File: "empty.ndjson"}) || len(ref.Problems) != 1 {
		t.Errorf("refusal %+v, want one empty_input at the file", ref)
	}
	if res != (events.JournalResult{Head: events.ZeroHash}) {
		t.Errorf("result %+v", res)
	}
}

func TestVerifyJournalLongLines(t *testing.T) {
	t.Run("a valid line longer than the read buffer", func(t *testing.T) {
		lines := chainLines(t, 2, func(i int, m map[string]any) {
			m["payload"].(map[string]any)["message"] = strings.Repeat("long line ", 30_000)
		})
		res, err := events.VerifyJournal(bytes.NewReader(journal(lines...)), "j", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Valid != 2 || res.Head != hashOf(t, lines[1]) {
			t.Errorf("result %+v", res)
		}
	})
	t.Run("a line over MaxLineBytes", func(t *testing.T) {
		lines := chainLines(t, 2, nil)
		huge := bytes.Repeat([]byte("x"), events.MaxLineBytes+1)
		res, err := events.VerifyJournal(bytes.NewReader(journal(huge, lines[1])), "j", nil, nil)
		ref := asRefusal(t, err)
		// The next line is still checked: at position 1, link unknown.
		checkProblems(t, ref.Problems, []problemAt{{events.CorruptEntry, 1, ""}})
		if !strings.Contains(ref.Reason, "longer than") {
			t.Errorf("reason %q", ref.Reason)
		}
		if res.Entries != 2 || res.Valid != 0 {
			t.Errorf("result %+v", res)
		}
	})
}

func TestVerifyJournalBoundsProblems(t *testing.T) {
	data := strings.Repeat("not json\n", events.MaxProblems+50)
	_, err := events.VerifyJournal(strings.NewReader(data), "j", nil, nil)
	ref := asRefusal(t, err)
	if len(ref.Problems) != events.MaxProblems || ref.Omitted != 50 {
		t.Fatalf("%d problems, %d omitted; want %d, 50", len(ref.Problems), ref.Omitted, events.MaxProblems)
	}
	if last := ref.Problems[len(ref.Problems)-1]; last.At.Line != events.MaxProblems {
		t.Errorf("last listed problem at line %d, want %d", last.At.Line, events.MaxProblems)
	}
	if want := fmt.Sprintf("(and %d more problem(s))", events.MaxProblems+49); !strings.Contains(err.Error(), want) {
		t.Errorf("Error() = %q, want it to say %q", err.Error(), want)
	}
}

func TestVerifyJournalReadError(t *testing.T) {
	boom := errors.New("disk on fire")
	r := io.MultiReader(bytes.NewReader(journal(chainLines(t, 1, nil)...)), iotest.ErrReader(boom))
	_, err := events.VerifyJournal(r, "j", nil, nil)
	if !errors.Is(err, boom) {
		t.Fatalf("error = %v, want the reader's error", err)
	}
	var ref *events.Refusal
	if errors.As(err, &ref) {
		t.Fatal("an I/O error was reported as a refusal")
	}
}

func TestChainVerifierCheck(t *testing.T) {
	lines := chainLines(t, 3, nil)
	v := events.NewChainVerifier(nil, nil)
	if v.Next() != 0 || v.Head() != events.ZeroHash {
		t.Fatalf("new verifier at %d %s", v.Next(), v.Head())
	}
	for i, line := range lines {
		e, ps := v.Check(line, events.Location{Line: i + 1})
		if len(ps) != 0 {
			t.Fatalf("line %d: %s", i+1, list(ps))
		}
		if e == nil || e.EntryHash() != hashOf(t, line) {
			t.Fatalf("line %d: entry %v", i+1, e)
		}
		if v.Next() != int64(i+1) || v.Head() != e.EntryHash() {
			t.Fatalf("after line %d: next %d head %s", i+1, v.Next(), v.Head())
		}
	}
	// A failing line does not advance the verifier.
	bad := chainLines(t, 4, nil)[3]
	_, ps := v.Check(append([]byte(" "), bad...), events.Location{Line: 4})
	checkProblems(t, ps, []problemAt{{events.NonCanonical, 4, ""}})
	if v.Next() != 3 || v.Head() != hashOf(t, lines[2]) {
		t.Errorf("verifier advanced past a refused line: next %d", v.Next())
	}
	if _, ps := v.Check(bad, events.Location{Line: 4}); len(ps) != 0 {
		t.Errorf("the same entry in canonical form: %s", list(ps))
	}
}

// TestChainVerifierKeepsNoLine: a verifier's head is a string of its own,
// not a part of the last entry's line: a reader keeps a verifier per chain
// for the whole read, and a part would keep that line alive with it.
func TestChainVerifierKeepsNoLine(t *testing.T) {
	lines := chainLines(t, 2, nil)
	v := events.NewChainVerifier(nil, nil)
	for i, line := range lines {
		e, ps := v.Check(line, events.Location{Line: i + 1})
		if len(ps) != 0 {
			t.Fatalf("line %d: %s", i+1, list(ps))
		}
		h := e.EntryHash()
		if v.Head() != h {
			t.Fatalf("line %d: head %s, want %s", i+1, v.Head(), h)
		}
		if unsafe.StringData(v.Head()) == unsafe.StringData(h) {
			t.Errorf("line %d: the head shares the entry's bytes", i+1)
		}
	}
}

func TestChainVerifierCorruptLine(t *testing.T) {
	v := events.NewChainVerifier(nil, nil)
	at := events.Location{File: "j", Line: 7}
	e, ps := v.Check([]byte(`{"seq":0,`), at)
	if e != nil {
		t.Errorf("entry %v for a line that is not JSON", e)
	}
	if len(ps) != 1 || ps[0].Code != events.CorruptEntry || ps[0].At != at {
		t.Fatalf("problems %s, want one corrupt_entry at %v", list(ps), at)
	}
	if !strings.Contains(ps[0].Reason, events.ErrNotJSON.Error()) {
		t.Errorf("reason %q does not say why", ps[0].Reason)
	}
}

// The entry check runs first and its problems keep their place in the order:
// invalid_entry, reordered, broken_link, non_canonical, metadata_mismatch.
func TestChainVerifierOrder(t *testing.T) {
	var gotAt events.Location
	check := func(e *events.Entry, at events.Location) []events.Problem {
		gotAt = at
		at.Pointer = "/kind"
		return []events.Problem{{Code: events.InvalidEntry, At: at, Reason: "stub"}}
	}
	line := chainLines(t, 1, func(_ int, m map[string]any) {
		m["seq"] = 3
		m["parent_hash"] = strings.Repeat("e", 64)
		m["task_family"] = "other"
	})[0]
	line = bytes.Replace(line, []byte(`"seq":3`), []byte(`"seq":3.0`), 1)
	meta := events.CapsuleMeta{RunID: "run-7", CapsuleID: "cap-7", HarnessVersion: "test/1", TaskFamily: "slugify"}
	v := events.NewChainVerifier(&meta, check)
	at := events.Location{File: "j", Line: 1}
	_, ps := v.Check(line, at)
	if gotAt != at {
		t.Errorf("entry check got location %+v, want %+v", gotAt, at)
	}
	checkProblems(t, ps, []problemAt{
		{events.InvalidEntry, 1, "/kind"},
		{events.Reordered, 1, "/seq"},
		{events.BrokenLink, 1, "/parent_hash"},
		{events.NonCanonical, 1, ""},
		{events.MetadataMismatch, 1, "/task_family"},
	})
	if p := ps[1]; p.Expected != "0" || p.Actual != "3" {
		t.Errorf("reordered expected %q actual %q", p.Expected, p.Actual)
	}
	if p := ps[2]; p.Expected != events.ZeroHash || p.Actual != strings.Repeat("e", 64) {
		t.Errorf("broken_link expected %q actual %q", p.Expected, p.Actual)
	}
	if p := ps[4]; p.Expected != "slugify" || p.Actual != "other" {
		t.Errorf("metadata_mismatch expected %q actual %q", p.Expected, p.Actual)
	}
	if ref := events.NewRefusal(ps); ref.Code != events.InvalidEntry {
		t.Errorf("refusal code %s, want invalid_entry", ref.Code)
	}
}

func TestChainVerifierCheckEntryAndAccept(t *testing.T) {
	lines := chainLines(t, 2, nil)
	v := events.NewChainVerifier(nil, nil)
	e0, err := events.ParseEntry(lines[0])
	if err != nil {
		t.Fatal(err)
	}
	if ps := v.CheckEntry(e0, events.Location{}); len(ps) != 0 {
		t.Fatal(list(ps))
	}
	if v.Next() != 0 {
		t.Fatal("CheckEntry advanced the verifier")
	}
	v.Accept(e0)
	if v.Next() != 1 || v.Head() != e0.EntryHash() {
		t.Fatalf("after Accept: next %d head %s", v.Next(), v.Head())
	}
	// The first accepted entry is now the metadata reference.
	m := entryMembers(1, e0.EntryHash())
	m["harness_version"] = "test/2"
	e1, err := events.NewEntry(m)
	if err != nil {
		t.Fatal(err)
	}
	ps := v.CheckEntry(e1, events.Location{Line: 2})
	checkProblems(t, ps, []problemAt{{events.MetadataMismatch, 2, "/harness_version"}})
	if ps[0].Expected != "test/1" || ps[0].Actual != "test/2" {
		t.Errorf("expected %q actual %q", ps[0].Expected, ps[0].Actual)
	}
}

func TestChainVerifierResume(t *testing.T) {
	lines := chainLines(t, 4, nil)
	meta := events.CapsuleMeta{RunID: "run-7", CapsuleID: "cap-7", HarnessVersion: "test/1", TaskFamily: "slugify"}
	v := events.NewChainVerifier(nil, nil)
	v.Resume(2, hashOf(t, lines[1]), meta)
	if v.Next() != 2 || v.Head() != hashOf(t, lines[1]) {
		t.Fatalf("Resume: next %d head %s", v.Next(), v.Head())
	}
	for i, line := range lines[2:] {
		if _, ps := v.Check(line, events.Location{Line: i + 3}); len(ps) != 0 {
			t.Fatalf("line %d after Resume: %s", i+3, list(ps))
		}
	}
	// Resuming with other metadata refuses the same entries.
	meta.TaskFamily = "other"
	v.Resume(2, hashOf(t, lines[1]), meta)
	_, ps := v.Check(lines[2], events.Location{Line: 3})
	checkProblems(t, ps, []problemAt{{events.MetadataMismatch, 3, "/task_family"}})
	// Resuming at the wrong position refuses them as reordered.
	meta.TaskFamily = "slugify"
	v.Resume(1, hashOf(t, lines[1]), meta)
	_, ps = v.Check(lines[2], events.Location{Line: 3})
	checkProblems(t, ps, []problemAt{{events.Reordered, 3, "/seq"}})
}

// TestTruncatedTailCountsEveryByte: a partial last line longer than
// MaxLineBytes is reported with its real length.
func TestTruncatedTailCountsEveryByte(t *testing.T) {
	tail := bytes.Repeat([]byte("x"), events.MaxLineBytes+(1<<20))
	_, err := events.VerifyJournal(bytes.NewReader(tail), "j", nil, nil)
	var ref *events.Refusal
	if !errors.As(err, &ref) || ref.Code != events.TruncatedTail {
		t.Fatalf("got %v", err)
	}
	if want := fmt.Sprintf("%d trailing bytes", len(tail)); !strings.Contains(ref.Reason, want) {
		t.Fatalf("reason %q does not say %q", ref.Reason, want)
	}
}

// TestParseLineOwned: ParseLineOwned gives ParseLine's entry, keeping the
// line itself (not a copy) as its canonical bytes on the fast path; lines
// that are not canonical, not JSON or not UTF-8 get ParseLine's answer.
func TestParseLineOwned(t *testing.T) {
	lines := refJournalLines(t)
	spaced := bytes.Replace(lines[0], []byte(`":`), []byte(`": `), 1)
	for i, line := range append(lines, spaced, []byte("{not json"), []byte{0xff, '{', '}'}) {
		at := events.Location{Line: i + 1}
		want, wantProblems := events.ParseLine(line, at)
		got, gotProblems := events.ParseLineOwned(line, at)
		if fmt.Sprint(gotProblems) != fmt.Sprint(wantProblems) || (got == nil) != (want == nil) {
			t.Fatalf("line %d: %v %v, ParseLine %v %v", i+1, got, gotProblems, want, wantProblems)
		}
		if got == nil {
			continue
		}
		if !bytes.Equal(got.Canonical(), want.Canonical()) || got.EntryHash() != want.EntryHash() || got.ComputedHash() != want.ComputedHash() {
			t.Fatalf("line %d: entries differ", i+1)
		}
		if aliased := &got.Canonical()[0] == &line[0]; aliased != bytes.Equal(line, want.Canonical()) {
			t.Errorf("line %d: canonical bytes aliased %v; the line is canonical: %v", i+1, aliased, bytes.Equal(line, want.Canonical()))
		}
		if i < len(lines) && &want.Canonical()[0] == &line[0] {
			t.Errorf("line %d: ParseLine kept the caller's bytes", i+1)
		}
	}
}

// TestWrongEntryHashRefused: an entry whose entry_hash is not the hash of
// the rest (one hex digit changed, the line still canonical) is refused
// invalid_entry at /entry_hash with the computed hash as expected, on the
// fast path and the general path alike; the unchanged line is not.
func TestWrongEntryHashRefused(t *testing.T) {
	line := refJournalLines(t)[0]
	good, err := events.ParseEntry(line)
	if err != nil {
		t.Fatal(err)
	}
	claimed := good.EntryHash()
	flip := "0"
	if claimed[0] == '0' {
		flip = "1"
	}
	bad := bytes.Replace(line, []byte(`"entry_hash":"`+claimed), []byte(`"entry_hash":"`+flip+claimed[1:]), 1)
	for name, parse := range map[string]func([]byte) (*events.Entry, error){"fast": events.ParseEntry, "general": events.ParseEntryGeneral} {
		e, err := parse(bad)
		if err != nil {
			t.Fatal(err)
		}
		if e.ComputedHash() != claimed {
			t.Fatalf("%s: computed %s, want the unchanged entry's %s", name, e.ComputedHash(), claimed)
		}
		ps := events.NewChainVerifier(nil, nil).CheckLine(e, bad, events.Location{Line: 1})
		if len(ps) == 0 || ps[0].Code != events.InvalidEntry || ps[0].At.Pointer != "/entry_hash" || ps[0].Expected != claimed || ps[0].Actual != flip+claimed[1:] {
			t.Errorf("%s: problems %+v, want invalid_entry at /entry_hash, expected %s", name, ps, claimed)
		}
		e, _ = parse(line)
		for _, p := range events.NewChainVerifier(nil, nil).CheckLine(e, line, events.Location{Line: 1}) {
			if p.At.Pointer == "/entry_hash" {
				t.Errorf("%s: the unchanged line is refused: %+v", name, p)
			}
		}
	}
}

// TestLineSeq: LineSeq reads a journal line's seq as Entry.Seq does, the
// number in its canonical form, and the entry with it; from a line that
// does not parse, or whose seq is missing or not an int64, nothing.
func TestLineSeq(t *testing.T) {
	lines := refJournalLines(t)
	for i, line := range lines {
		e, seq := events.LineSeq(line)
		if e == nil || seq != int64(i) || !bytes.Equal(e.Canonical(), line) {
			t.Fatalf("reference line %d: %v, %d", i+1, e, seq)
		}
	}
	for _, tc := range []struct {
		line string
		seq  int64 // -1: no entry
	}{
		{`{"seq":0}`, 0},
		{`{ "run_id" : "r", "seq" : 7 }`, 7},
		{`{"\u0073eq":4}`, 4},
		{`{"seq":1.0}`, 1},
		{`{"seq":1e3}`, 1000},
		{`{"seq":-0}`, 0},
		{`{"seq":4611686018427387904}`, 4611686018427388000}, // 2^62, as RFC 8785 writes it
		{`{"a":1}`, -1},
		{`{"seq":"7"}`, -1},
		{`{"seq":null}`, -1},
		{`{"seq":1.5}`, -1},
		{`{"seq":9223372036854775807}`, -1}, // 2^63 once canonical
		{`{"seq":-9223372036854775808}`, -1},
		{`{"seq":1e21}`, -1},
		{`{"seq":1,"seq":2}`, -1},
		{`[{"seq":1}]`, -1},
		{`{"seq":1`, -1},
		{"{\"seq\":1,\"a\":\"\xff\"}", -1},
		{``, -1},
	} {
		e, seq := events.LineSeq([]byte(tc.line))
		if seq != tc.seq || (e != nil) != (tc.seq != -1) {
			t.Errorf("LineSeq(%q) = %v, %d; want seq %d", tc.line, e, seq, tc.seq)
		}
	}
	// A seq of -1 is read as such, with its entry (no envelope rule is
	// checked): the entry tells it from no seq.
	if e, seq := events.LineSeq([]byte(`{"seq":-1}`)); e == nil || seq != -1 {
		t.Errorf(`LineSeq({"seq":-1}) = %v, %d`, e, seq)
	}
}

// TestVerifyJournalBOMAndCRLF: a journal saved with a byte order mark, or
// with CRLF line endings, is refused with a reason that names it, by the
// parallel verification and by the sequential oracle alike; the codes are
// the upstream's (corrupt_entry for the mark, which is no JSON;
// non_canonical for the carriage return, which JSON reads as white
// space).
func TestVerifyJournalBOMAndCRLF(t *testing.T) {
	raw := readRef(t, "capsule-journals", "canonical", "journal.ndjson")
	bom := append([]byte{0xef, 0xbb, 0xbf}, raw...)
	crlf := bytes.ReplaceAll(raw, []byte("\n"), []byte("\r\n"))
	for _, tc := range []struct {
		name   string
		raw    []byte
		want   []problemAt
		reason string
	}{
		{"bom", bom, []problemAt{{events.CorruptEntry, 1, ""}}, "line starts with a UTF-8 byte order mark (bytes EF BB BF): a journal is UTF-8 without one (not strict JSON"},
		{"crlf", crlf, []problemAt{{events.NonCanonical, 1, ""}, {events.NonCanonical, 2, ""}}, "line ends with a carriage return (CRLF line endings): a journal line is its RFC 8785 canonical form ended by a line feed alone"},
	} {
		for name, verify := range map[string]func() (events.JournalResult, error){
			"parallel": func() (events.JournalResult, error) {
				return events.VerifyJournalWith(bytes.NewReader(tc.raw), "j", nil, nil, 2, 1)
			},
			"sequential": func() (events.JournalResult, error) {
				return events.VerifyJournalSequential(bytes.NewReader(tc.raw), "j", nil, nil)
			},
		} {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				_, err := verify()
				ps := asRefusal(t, err).Problems
				checkProblems(t, ps, tc.want)
				if !strings.HasPrefix(ps[0].Reason, tc.reason) {
					t.Errorf("reason %q, want it to start %q", ps[0].Reason, tc.reason)
				}
			})
		}
	}
}
