package main

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// verify: `publisher verify DIR` of one capsule versus `sha256sum` of its
// journal (the floor of any verifier: it must read and hash every byte),
// each run --repeat times on a warm page cache; the medians count.
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

	r := &result{key: "verify", name: fmt.Sprintf("verify (%d)", n), unit: "entries", items: n, floor: 0.2,
		rawHow: fmt.Sprintf("`sha256sum %s`, median of %d", validate.JournalFile, b.c.Repeat),
		pubHow: fmt.Sprintf("`%s verify --json DIR`, median of %d", b.c.Publisher, b.c.Repeat)}

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
	// Alternating, so that load from elsewhere falls on both alike.
	var shaTook, verifyTook []side
	for i := range b.c.Repeat {
		b.logf("verify: run %d of %d: sha256sum, then %s verify", i+1, b.c.Repeat, b.c.Publisher)
		for _, run := range []struct {
			fn   func() error
			took *[]side
		}{{sha, &shaTook}, {verify, &verifyTook}} {
			t := timer{wall: time.Now(), cpu: cpuTime()}
			if err := run.fn(); err != nil {
				return nil, err
			}
			s := side{n: n, bytes: size}
			t.stop(&s)
			*run.took = append(*run.took, s)
		}
	}
	r.raw, r.pub = median(shaTook), median(verifyTook)
	r.extra = map[string]any{"exit_code": exit, "file_bytes": size}
	return r, nil
}

// median returns the run of median duration (the upper one of an even
// count), with its CPU time.
func median(took []side) side {
	took = slices.Clone(took)
	slices.SortFunc(took, func(a, b side) int { return cmp.Compare(a.dur, b.dur) })
	return took[len(took)/2]
}
