package reader

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
)

// TestSetAsideListOpen: open keeps, per message, the last line about it,
// drops served marks, messages above the floor (not acknowledged: they
// are delivered again) and a last line cut short, keeps the lines about a
// room (stream seq 0), rewrites the file only when a line is dropped, and
// refuses a line it did not write.
func TestSetAsideListOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d.set-aside.ndjson")
	l := &SetAsideList{Path: path}

	// Missing: created empty.
	if err := l.open(10); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || len(b) != 0 || len(l.listed) != 0 {
		t.Fatalf("new list: %q %v %v", b, err, l.listed)
	}
	for _, a := range []SetAside{
		{Seq: 3, Code: events.UntrustedHost, Reason: "r3"},
		{Seq: 0, Code: events.CheckpointMismatch, Reason: "room refused"},
		{Seq: 5, Code: events.InvalidEntry, Reason: "r5"},
		{Seq: 6, Code: events.ChainBroken, Reason: "r6"},
		{Seq: 3, Code: events.IdempotencyConflict, Reason: "r3 again", Reexamined: true},
		{Seq: 12, Code: events.Gap, Reason: "r12"},
	} {
		if err := l.add(&a, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.served(5); err != nil {
		t.Fatal(err)
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	_, _ = f.WriteString(`{"stream_seq":7,"code":"gap","rea`) // cut short
	f.Close()

	if err := l.open(10); err != nil {
		t.Fatal(err)
	}
	defer l.close()
	want := []listedMsg{{3, events.IdempotencyConflict}, {6, events.ChainBroken}}
	if !slices.Equal(l.listed, want) || l.Facts() != (ListFacts{Listed: 2}) {
		t.Errorf("listed %v, facts %+v; want %v", l.listed, l.Facts(), want)
	}
	b, _ := os.ReadFile(path)
	got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(got) != 3 || !strings.Contains(got[0], `"reason":"room refused"`) || !strings.Contains(got[1], `"stream_seq":6,`) ||
		!strings.Contains(got[2], `"reason":"r3 again"`) || !strings.Contains(got[2], `"reexamined":true`) {
		t.Errorf("rewritten list:\n%s", b)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left: %v", err)
	}

	// Nothing to drop: the file is left as it is.
	l.close()
	before, _ := os.Stat(path)
	if err := l.open(10); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(path); !os.SameFile(before, after) {
		t.Error("a list with nothing to drop was rewritten")
	}
	var c listCursor
	c.ms = l.listed
	for _, s := range []struct {
		seq  uint64
		code events.Code
	}{{1, ""}, {3, events.IdempotencyConflict}, {4, ""}, {6, events.ChainBroken}, {9, ""}} {
		if code, ok := c.at(s.seq); code != s.code || ok != (s.code != "") {
			t.Errorf("cursor at %d: %q %v", s.seq, code, ok)
		}
	}

	// A line the list did not write.
	l.close()
	f, _ = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	_, _ = f.WriteString("{\"stream_seq\":8}\n")
	f.Close()
	if err := l.open(10); !errors.Is(err, ErrSetAsideList) || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("a foreign line: %v", err)
	}
}
