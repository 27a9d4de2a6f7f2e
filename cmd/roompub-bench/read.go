package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/roompub/roompub/room"
)

// genVersion names the generator's output in the read stream's metadata:
// change it whenever the generator writes other bytes, so a stream filled
// by an older one is filled again.
const genVersion = "gen-v1"

// readRooms is how many rooms the read stream's chains are spread over.
const readRooms = 10

// peakCapMiB is the cap on audit's peak memory over 1,000,000
// entries.
const peakCapMiB = 256

// read: a raw ordered-consumer read of the whole read stream versus
// `subscriber audit` of it (a subprocess), with audit's peak RSS.
func (b *bench) read() (*result, error) {
	k, n := b.sz.readChains, b.sz.readLength
	want := k * n
	subjects := room.Subjects{Prefix: readPrefix}
	if _, err := b.fillRead(subjects); err != nil {
		return nil, err
	}
	if err := b.warmStream(); err != nil {
		return nil, err
	}
	r := &result{key: "read", name: fmt.Sprintf("read (%d × %d)", k, n), unit: "entries", items: want, floor: 0.4, peakCapMiB: peakCapMiB,
		rawHow: "one ordered consumer (jetstream.OrderedConsumer, Messages) in a subprocess, counting messages and bytes; mean of one read before and one after the audit",
		pubHow: "`subscriber audit --json` of the stream, a subprocess (connect, replay, verify every entry, report)"}

	// The raw read runs before and after the audit (and counts twice),
	// so that load from elsewhere falls on both sides alike.
	rawRead := func() error {
		b.logf("read: raw ordered consumer over %d entries (a subprocess)", want)
		s, err := b.rawReadProcess(rawReadJob{URL: b.emb.ClientURL(), Stream: readStream, Filter: subjects.All(), Want: want})
		if err != nil {
			return err
		}
		b.logf("read: raw ordered consumer: %d messages in %.3fs", s.n, s.dur.Seconds())
		r.raw.n += s.n
		r.raw.bytes += s.bytes
		r.raw.dur += s.dur
		return nil
	}
	if err := rawRead(); err != nil {
		return nil, err
	}
	b.logf("read: %s audit", b.c.Subscriber)
	cmd := exec.CommandContext(b.ctx, b.c.Subscriber, "audit", "--server", b.emb.ClientURL(),
		"--stream", readStream, "--subject-prefix", readPrefix, "--json")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	peakKiB, err := runSampled(cmd)
	r.pub.dur = time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("%s audit: %v\n%s", b.c.Subscriber, err, errOut.Bytes())
	}
	r.peakMiB = float64(peakKiB) / 1024
	var rep room.AuditReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return nil, fmt.Errorf("audit report: %w", err)
	}
	t := rep.Totals
	if t.Entries != uint64(want) || t.Messages != uint64(want) || t.SetAside != 0 || t.ChainsOK != k || t.ChainsBroken != 0 || !t.StreamIsSound {
		return nil, fmt.Errorf("audit verified %d entries of %d messages (want %d), %d set aside, %d chains ok (want %d), %d broken, stream append-only %v",
			t.Entries, t.Messages, want, t.SetAside, t.ChainsOK, k, t.ChainsBroken, t.StreamIsSound)
	}
	if err := rawRead(); err != nil {
		return nil, err
	}
	r.raw.n, r.raw.bytes = r.raw.n/2, r.raw.bytes/2
	r.raw.dur /= 2
	r.pub.n, r.pub.bytes = int(t.Entries), r.raw.bytes
	r.extra = map[string]any{"audit_exit_code": cmd.ProcessState.ExitCode(), "audit_chains_ok": t.ChainsOK}
	return r, nil
}

// fillRead returns the read stream, filling it first unless the store
// already holds one of the wanted size from this generator: readChains
// chains of readLength valid entries over readRooms rooms, appended with
// raw atomic batches with roompub's subjects and headers (publishBatch).
func (b *bench) fillRead(subjects room.Subjects) (jetstream.Stream, error) {
	k, n := b.sz.readChains, b.sz.readLength
	want := k * n
	// The first chain's subject stands for roompub's subject layout: a
	// stream filled under another layout is filled again.
	first := chainMeta(readRunID(0), readCapsuleID(0))
	sig := fmt.Sprintf("%d chains × %d entries, %s, %s", k, n, genVersion, subjects.Journal(readRoom(0), first.Key()))
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if st, err := b.js.Stream(ctx, readStream); err == nil {
		info, err := st.Info(ctx)
		if err != nil {
			return nil, err
		}
		if !b.c.Refill && info.Config.Metadata[fillKey] == sig && info.State.Msgs == uint64(want) {
			b.logf("read: reusing the read stream in the store (%s)", sig)
			return st, nil
		}
		if err := b.js.DeleteStream(ctx, readStream); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, err
	}
	cfg := room.StreamConfig(readStream, subjects, 1)
	cfg.Metadata[fillKey] = sig
	st, err := room.EnsureStream(ctx, b.js, cfg, subjects)
	if err != nil {
		return nil, err
	}

	b.logf("read: filling the read stream once (%s)", sig)
	var bar *progressbar.ProgressBar
	if f, ok := b.out.err.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar = progressbar.NewOptions(want, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription("filling"),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	var done atomic.Int64
	jobs := make(chan int)
	errs := make(chan error, b.c.Inflight)
	var wg sync.WaitGroup
	for range min(b.c.Inflight, k) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := b.fillChain(subjects, i, n, func(m int) {
					if bar != nil {
						_ = bar.Set64(done.Add(int64(m)))
					}
				}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	start := time.Now()
feed:
	for i := range k {
		select {
		case jobs <- i:
		case err := <-errs:
			close(jobs)
			wg.Wait()
			return nil, err
		case <-b.ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if bar != nil {
		_ = bar.Finish()
	}
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	if err := b.ctx.Err(); err != nil {
		return nil, err
	}
	got, err := b.storedOn(readStream, subjects.All())
	if err != nil {
		return nil, err
	}
	if got != want {
		return nil, fmt.Errorf("the read stream holds %d messages after the fill, want %d", got, want)
	}
	b.logf("read: filled %d entries in %.1fs", want, time.Since(start).Seconds())
	return st, nil
}

// fillChain appends chain i of the read stream, generating one batch at a
// time.
func (b *bench) fillChain(subjects room.Subjects, i, n int, progress func(int)) error {
	meta := chainMeta(readRunID(i), readCapsuleID(i))
	roomID := readRoom(i)
	subj, anyRoom := subjects.Journal(roomID, meta.Key()), subjects.ChainAnyRoom(meta.Key())
	g := newChainGen(meta, uint64(1000+i))
	lines, hashes := make([][]byte, 0, b.c.Batch), make([]string, 0, b.c.Batch)
	var last uint64
	for off := 0; off < n; off += b.c.Batch {
		lines, hashes = lines[:0], hashes[:0]
		for range min(b.c.Batch, n-off) {
			line, hash := g.next()
			lines, hashes = append(lines, bytes.Clone(line)), append(hashes, hash)
		}
		var err error
		if last, err = publishBatch(b.ctx, b.js, subj, anyRoom, lines, hashes, last); err != nil {
			return fmt.Errorf("fill %s at entry %d: %w", subj, off, err)
		}
		progress(len(lines))
	}
	return nil
}

// readRunID, readCapsuleID and readRoom name chain i of the read stream.
func readRunID(i int) string     { return fmt.Sprintf("run-bench-read-%04d", i) }
func readCapsuleID(i int) string { return fmt.Sprintf("cap-bench-read-%04d", i) }
func readRoom(i int) string      { return fmt.Sprintf("room:bench-read-%02d", i%readRooms) }

// warmStream reads the read stream's files once, so that neither the raw
// read nor the audit (which comes second) pays for the disk.
func (b *bench) warmStream() error {
	dir := filepath.Join(b.storeDir, "jetstream")
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(filepath.Dir(filepath.Dir(path))) != readStream {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return nil // the server may be replacing it
		}
		defer f.Close()
		_, err = io.Copy(io.Discard, f)
		return err
	})
}

// runSampled runs cmd and returns its peak resident set in KiB, read from
// /proc/<pid>/status (VmHWM) every 10 ms while it runs. Not ru_maxrss from
// wait4: Go starts a child with vfork (CLONE_VM), and at exec Linux
// records the parent's high-water RSS as the child's maxrss, so that
// figure would be this process's own peak (the embedded server's, with the
// read stream: over 1 GiB).
func runSampled(cmd *exec.Cmd) (int64, error) {
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var peak int64
	for {
		select {
		case err := <-done:
			return peak, err
		default:
		}
		peak = max(peak, vmHWM(status))
		select {
		case err := <-done:
			return peak, err
		case <-tick.C:
		}
	}
}

// vmHWM is the VmHWM line of a /proc/<pid>/status file in KiB, or 0.
func vmHWM(status string) int64 {
	b, err := os.ReadFile(status)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
