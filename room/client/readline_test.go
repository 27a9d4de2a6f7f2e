package client

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

// TestReadFullLine: readFullLine returns each line whole (short ones as the
// reader's bytes, long ones copied), and a caller that copies a line
// before its next read (as pass does) gets every line intact, including a
// partial tail at EOF. A line longer than max is consumed and reported by
// its length, not returned (a breaker's 200 MB line took 426 MB before),
// and the lines after it are read as before.
func TestReadFullLine(t *testing.T) {
	lines := []string{"a\n", strings.Repeat("b", 15) + "\n", strings.Repeat("c", 40) + "\n", "\n", strings.Repeat("d", 16) + "\n",
		strings.Repeat("e", 100) + "\n", strings.Repeat("f", 30) + "\n", "tail"}
	br := bufio.NewReaderSize(strings.NewReader(strings.Join(lines, "")), 16)
	var got []string
	var long []byte
	for {
		ln, n, err := readFullLine(br, 64)
		if n > 0 {
			if ln != nil || n != 101 {
				t.Fatalf("a line longer than max: %q and length %d, want nil and 101", ln, n)
			}
			got = append(got, fmt.Sprintf("<%d bytes>", n))
			continue
		}
		if err == io.EOF {
			got = append(got, string(ln))
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(ln)) // copied before the next read
		if len(ln) > 16 && long == nil {
			long = ln // a copy: must survive later reads
		}
	}
	want := append(append(append([]string{}, lines[:5]...), "<101 bytes>"), lines[6:]...)
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("lines %q, want %q", got, want)
	}
	if !bytes.Equal(long, []byte(strings.Repeat("c", 40)+"\n")) {
		t.Fatalf("a long line changed after later reads: %q", long)
	}
	// A partial tail longer than max: its length, and io.EOF.
	br = bufio.NewReaderSize(strings.NewReader(strings.Repeat("g", 100)), 16)
	if ln, n, err := readFullLine(br, 64); ln != nil || n != 100 || err != io.EOF {
		t.Fatalf("long partial tail: %q, %d, %v; want nil, 100, EOF", ln, n, err)
	}
}

// TestBodySize: a pass's next request buffer starts at the last body's
// length, or at what is left of the journal if that is less (the last
// request of a pass no larger than the rest of the file); once the file
// is read to the size it had at the pass's start, or when that size is
// not known, at the last body's length again (the requests of a journal
// that grows during the pass do not start empty and grow by doubling).
func TestBodySize(t *testing.T) {
	for _, c := range []struct{ last, left, want int64 }{
		{640 << 10, 5 << 20, 640 << 10},   // the journal holds more than a body
		{640 << 10, 100 << 10, 100 << 10}, // the rest of the file is smaller
		{640 << 10, 0, 640 << 10},         // read to its starting size: it may grow
		{640 << 10, -1, 640 << 10},        // size not known
		{0, 1 << 20, 0},
	} {
		if got := bodySize(c.last, c.left); got != c.want {
			t.Errorf("bodySize(%d, %d) = %d, want %d", c.last, c.left, got, c.want)
		}
	}
}
