package validate_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// TestUpstreamVerdictLoneSurrogate: the upstream writer's journal with a
// lone surrogate (JSON.stringify writes it \udxxx) verifies, as upstream
// (testdata/upstream-divergences).
func TestUpstreamVerdictLoneSurrogate(t *testing.T) {
	rep, err := newValidator(t).VerifyPath(filepath.Join("..", "testdata", "upstream-divergences", "lone_surrogate"))
	if err != nil {
		t.Fatal(err)
	}
	const head = "d8e5f46c78fbcf905d9ab4eee745d664d2852e1bcbb3048ac62cd343d6da1af7"
	if !rep.OK || rep.Kind != validate.KindJournal || rep.Entries == nil || *rep.Entries != 1 || rep.Head != head {
		t.Fatalf("report %+v, want ok with 1 entry and head %s", rep, head)
	}
}

// rehash returns lines with edit applied to each, chained again as the
// upstream writer chains them: each parent_hash is the entry_hash before
// it, each entry_hash the hash of its entry. It is how a test writes a
// journal NewEntry cannot (encoding/json writes no lone surrogate).
func rehash(tb testing.TB, lines [][]byte, edit func(i int, line []byte) []byte) [][]byte {
	tb.Helper()
	out := make([][]byte, len(lines))
	prev := events.ZeroHash
	for i, l := range lines {
		old, err := events.ParseEntry(l)
		if err != nil {
			tb.Fatal(err)
		}
		l = replaceOnce(tb, edit(i, bytes.Clone(l)), `"parent_hash":"`+old.ParentHash()+`"`, `"parent_hash":"`+prev+`"`)
		e, err := events.ParseEntry(l)
		if err != nil {
			tb.Fatal(err)
		}
		out[i] = replaceOnce(tb, l, `"entry_hash":"`+old.EntryHash()+`"`, `"entry_hash":"`+e.ComputedHash()+`"`)
		prev = e.ComputedHash()
	}
	return out
}

// TestJournalLoneSurrogates: a journal whose payloads hold lone surrogates
// (high, low, one cut from a pair, two in a row) verifies with the real
// rules, in the parallel pipeline (600 lines: several batches) as line by
// line; written with upper-case hex or an escaped pair, the same entry is
// non_canonical.
func TestJournalLoneSurrogates(t *testing.T) {
	spellings := []string{`Alpha \ud83d`, `\ude00 ok`, `\udbff\udbff`, "\U0001F600\\ud800", `\u001f\udfff`}
	lines := rehash(t, chainLines(t, 600, nil), func(i int, l []byte) []byte {
		return replaceOnce(t, l, `"Alpha ok"`, `"`+spellings[i%len(spellings)]+`"`)
	})
	v := newValidator(t)
	res, err := v.Journal(bytes.NewReader(journalBytes(lines...)), "journal.ndjson", nil)
	if err != nil || res.Valid != len(lines) || res.Head != hashOf(t, lines[len(lines)-1]) {
		t.Fatalf("%+v %v", res, err)
	}
	chain := v.NewChain(nil)
	for i, l := range lines {
		if _, ps := chain.Check(l, events.Location{Line: i + 1}); len(ps) > 0 {
			t.Fatalf("line %d %s: %v", i+1, l, ps)
		}
	}
	for _, alt := range []struct{ from, to string }{{`\ud83d`, `\uD83D`}, {"\U0001F600", `\ud83d\ude00`}} {
		i := 0
		if alt.from == "\U0001F600" {
			i = 3
		}
		edited := append([][]byte(nil), lines...)
		edited[i] = replaceOnce(t, lines[i], alt.from, alt.to)
		_, err := v.Journal(bytes.NewReader(journalBytes(edited...)), "journal.ndjson", nil)
		expectRefusal(t, err, want{events.NonCanonical, i + 1, ""})
	}
}
