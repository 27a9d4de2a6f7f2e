package main

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/roompub/roompub/validate"
)

// verify: `publisher verify DIR` of one capsule against the floor of any
// verifier, a Go pass that reads its journal and hashes each line with
// crypto/sha256 (hashLines) and nothing else; and, in a row of its own
// (verify_sha256sum), against `sha256sum` of the journal, the yardstick
// of before (Debian's hashes without the CPU's SHA instructions, so it is
// slower than the floor). The three run --repeat times, alternating, on a
// warm page cache; the medians count.
func (b *bench) verify() (*result, error) {
	n := b.sz.verifyEntries
	meta := chainMeta("run-bench-verify", "cap-bench-verify")
	dir := filepath.Join(b.tmp, "verify", meta.CapsuleID)
	b.logf("verify: writing a %d-entry capsule", n)
	g := newChainGen(meta, 7)
	var head string
	if err := writeCapsule(dir, meta, n, func(int) []byte {
		line, hash := g.next()
		head = hash
		return line
	}); err != nil {
		return nil, err
	}
	journal := filepath.Join(dir, validate.JournalFile)
	// Warm the page cache, and hash the file to check sha256sum's answer.
	f, err := os.Open(journal)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	size, err := io.Copy(h, f)
	f.Close()
	if err != nil {
		return nil, err
	}
	sum := hex.EncodeToString(h.Sum(nil))

	// Against hashLines the ratio must stay above 0.1: verify may take at
	// most 10 times as long as reading and hashing alone (4 to 7 times on
	// the shared 2-core machine; the goal is 2).
	r := &result{key: "verify", name: fmt.Sprintf("verify (%d)", n), unit: "entries", items: n, floor: 0.5,
		rawHow: fmt.Sprintf("a Go pass: bufio reads %s, crypto/sha256 of each line (the floor), median of %d", validate.JournalFile, b.c.Repeat),
		pubHow: fmt.Sprintf("`%s verify --json DIR`, median of %d", b.c.Publisher, b.c.Repeat)}
	bySum := &result{key: "verify_sha256sum", name: fmt.Sprintf("verify, sha256sum (%d)", n), unit: "entries", items: n, floor: 0.2,
		rawHow: fmt.Sprintf("`sha256sum %s`, median of %d", validate.JournalFile, b.c.Repeat),
		pubHow: "the same runs of verify"}

	floor := func() error {
		lines, err := hashLines(journal)
		if err != nil {
			return err
		}
		if lines != n {
			return fmt.Errorf("the floor hashed %d lines, want %d", lines, n)
		}
		return nil
	}
	sha := func() error {
		out, err := exec.CommandContext(b.ctx, "sha256sum", journal).Output()
		if err != nil {
			return fmt.Errorf("sha256sum: %w", err)
		}
		if got, _, _ := strings.Cut(string(out), " "); got != sum {
			return fmt.Errorf("sha256sum says %s, want %s", got, sum)
		}
		return nil
	}
	exit := -1
	verify := func() error {
		cmd := exec.CommandContext(b.ctx, b.c.Publisher, "verify", "--json", dir)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		exit = cmd.ProcessState.ExitCode()
		if err != nil {
			return fmt.Errorf("%s verify: %v\n%s%s", b.c.Publisher, err, out.Bytes(), errOut.Bytes())
		}
		var rep validate.Report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			return fmt.Errorf("verify report: %w", err)
		}
		if !rep.OK || rep.Entries == nil || *rep.Entries != n || rep.Head != head {
			return fmt.Errorf("verify report: ok %v, entries %v (want %d), head %s (want %s)", rep.OK, rep.Entries, n, rep.Head, head)
		}
		return nil
	}
	// Alternating, so that load from elsewhere falls on all three alike.
	var floorTook, shaTook, verifyTook []side
	for i := range b.c.Repeat {
		b.logf("verify: run %d of %d: the floor, sha256sum, then %s verify", i+1, b.c.Repeat, b.c.Publisher)
		for _, run := range []struct {
			fn   func() error
			took *[]side
		}{{floor, &floorTook}, {sha, &shaTook}, {verify, &verifyTook}} {
			t := timer{wall: time.Now(), cpu: cpuTime()}
			if err := run.fn(); err != nil {
				return nil, err
			}
			s := side{n: n, bytes: size}
			t.stop(&s)
			*run.took = append(*run.took, s)
		}
	}
	r.raw, r.pub = median(floorTook), median(verifyTook)
	bySum.raw, bySum.pub = median(shaTook), r.pub
	r.extra = map[string]any{"exit_code": exit, "file_bytes": size}
	r.also = []*result{bySum}
	r.notes = []string{fmt.Sprintf("verify takes %.2f× the floor's time, %.2f× sha256sum's", r.pub.dur.Seconds()/r.raw.dur.Seconds(), r.pub.dur.Seconds()/bySum.raw.dur.Seconds())}
	return r, nil
}

// hashLines reads the journal at path and hashes each line (without its
// newline) with crypto/sha256: the least work any verifier must do, and
// no more. It returns the lines hashed.
func hashLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	h := sha256.New()
	var sum [sha256.Size]byte
	lines := 0
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			h.Write(chunk[:len(chunk)-1])
			h.Sum(sum[:0])
			h.Reset()
			lines++
		case errors.Is(err, bufio.ErrBufferFull): // a line longer than the buffer
			h.Write(chunk)
		case errors.Is(err, io.EOF):
			if len(chunk) > 0 {
				h.Write(chunk)
				h.Sum(sum[:0])
				lines++
			}
			return lines, nil
		default:
			return lines, err
		}
	}
}

// median returns the run of median duration (the upper one of an even
// count), with its CPU time.
func median(took []side) side {
	took = slices.Clone(took)
	slices.SortFunc(took, func(a, b side) int { return cmp.Compare(a.dur, b.dur) })
	return took[len(took)/2]
}
