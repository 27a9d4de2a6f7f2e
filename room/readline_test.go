package room

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestReadFullLine: readFullLine returns each line whole (short ones as the
// reader's bytes, long ones copied), and a caller that copies a line
// before its next read (as pass does with batch.Write) gets every line
// intact, including a partial tail at EOF.
func TestReadFullLine(t *testing.T) {
	lines := []string{"a\n", strings.Repeat("b", 15) + "\n", strings.Repeat("c", 40) + "\n", "\n", strings.Repeat("d", 16) + "\n", "tail"}
	br := bufio.NewReaderSize(strings.NewReader(strings.Join(lines, "")), 16)
	var got []string
	var long []byte
	for {
		ln, err := readFullLine(br)
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
	if strings.Join(got, "|") != strings.Join(lines, "|") {
		t.Fatalf("lines %q, want %q", got, lines)
	}
	if !bytes.Equal(long, []byte(strings.Repeat("c", 40)+"\n")) {
		t.Fatalf("a long line changed after later reads: %q", long)
	}
}
