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
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// genVersion names the generator's output in the read stream's metadata:
// change it whenever the generator writes other bytes, so a stream filled
// by an older one is filled again.
const genVersion = "gen-v1"

// fillVersion names how the read stream is filled (through a gate, with
// or without attestations and checkpoints): change it whenever the fill
// stores other messages. "fill-v3": through the gate, with a checkpointer
// that takes the gate's batches from memory and so keeps up (more
// checkpoints); fill-v2 was through the gate with one that read them back
// and fell behind; fill-v1 raw batches, unattested. (Filling through
// node.Serve's ingest service rather than its gate alone stores the same
// messages: still fill-v3.)
const fillVersion = "fill-v3"

// readRooms is how many rooms the read stream's chains are spread over.
const readRooms = 10

// peakCapMiB and liveCapMiB are the bench's caps on audit's peak RSS and
// peak live heap over 1,000,000 entries of 100 chains (the default size;
// --check). They hold for a read stream no larger in entries and chains,
// audited attested or keyless; a larger one (--read-chains,
// --read-length) and a witnessed audit, which keeps every room's full tree
// (64 bytes a leaf), report both, uncapped.
const (
	peakCapMiB = 128
	liveCapMiB = 64
)

// auditMemStatsEnv and auditMemStatsPrefix: with the variable set,
// `subscriber audit` prints its peak live heap on stderr as it exits, on a
// line that starts with the prefix and ends in JSON (cmd/subscriber's
// memstats.go).
const (
	auditMemStatsEnv    = "ROOMPUB_SUBSCRIBER_MEMSTATS"
	auditMemStatsPrefix = "subscriber memstats: "
)

// auditMemStats is what the subscriber prints after auditMemStatsPrefix.
type auditMemStats struct {
	PeakLiveHeap uint64 `json:"peak_live_heap_bytes"`
	GCCycles     uint64 `json:"gc_cycles"`
	GOGC         int    `json:"gogc"`
	MemoryLimit  int64  `json:"memory_limit_bytes"`
}

// parseAuditMemStats finds the subscriber's memstats line in its stderr.
func parseAuditMemStats(stderr []byte) (auditMemStats, error) {
	var s auditMemStats
	for _, l := range strings.Split(string(stderr), "\n") {
		if j, ok := strings.CutPrefix(l, auditMemStatsPrefix); ok {
			err := json.Unmarshal([]byte(j), &s)
			return s, err
		}
	}
	return s, fmt.Errorf("no %q line on the subscriber's stderr (a subscriber older than the bench?)", strings.TrimSpace(auditMemStatsPrefix))
}

// readFill is what the read stream holds besides its entries.
type readFill struct {
	// nodeID names the publisher key that attested the entries and
	// signed the checkpoints; "" when unattested (--no-attest).
	nodeID      string
	checkpoints int // checkpoint messages
}

// read: a raw ordered-consumer read of the whole read stream versus
// `subscriber audit` of it (a subprocess), with audit's peak RSS. With
// attestation (not --no-attest), the stream was written as `publisher
// serve --publisher-key` writes it (attested, with checkpoints) and audit
// trusts its publisher key (--trusted-publisher).
func (b *bench) read() (*result, error) {
	k, n := b.sz.readChains, b.sz.readLength
	want := k * n
	subjects := room.Subjects{Prefix: readPrefix}
	fill, err := b.fillRead(subjects)
	if err != nil {
		return nil, err
	}
	if err := b.warmStream(); err != nil {
		return nil, err
	}
	total := want + fill.checkpoints
	r := &result{key: "read", name: fmt.Sprintf("read (%d × %d)", k, n), unit: "entries", items: want, floor: 0.4, memory: true,
		rawHow: "one ordered consumer (jetstream.OrderedConsumer, Messages) in a subprocess, counting messages and bytes; mean of one read before and one after the audit",
		pubHow: "`subscriber audit --json` of the stream, a subprocess (connect, replay, verify every entry, report)"}
	args := []string{"audit", "--server", b.emb.ClientURL(), "--stream", readStream, "--subject-prefix", readPrefix, "--json",
		// A state directory of this run's own: a first read, and the
		// user's state is left alone.
		"--state-dir", filepath.Join(b.tmp, "subscriber-state")}
	trust := fill.nodeID != "" && b.attested()
	switch {
	case trust && b.witnessing():
		if err := b.buildReadDeployment(subjects, fill); err != nil {
			return nil, err
		}
		args = append(append(args, "--trusted-publisher", fill.nodeID), b.readWitnessArgs()...)
		r.pubHow = fmt.Sprintf("`subscriber audit --json --trusted-publisher <the fill's key> --trusted-publisher <the deployment's key> --origin %s --witness <vkey> ×%d --witness-quorum %d` of the stream, a subprocess (as attested, then it reads the deployment log, %s, and checks its checkpoints, their cosignatures and every room checkpoint it holds against the room as read)",
			readOrigin, len(b.wit.ws), b.c.quorum(), room.DeploymentLog{}.StreamName())
	case trust:
		args = append(args, "--trusted-publisher", fill.nodeID)
		r.pubHow = "`subscriber audit --json --trusted-publisher <the publisher's key>` of the stream, a subprocess (connect, replay, verify every entry, every attestation (optimistically: a verified checkpoint covering a message admits it) and every checkpoint, report)"
	case fill.nodeID != "":
		r.pubHow += "; keyless: no --trusted-publisher, so the attestations and checkpoints the stream holds are not checked"
	}
	if fill.checkpoints > 0 {
		r.rawHow += fmt.Sprintf("; it reads the checkpoints too (%d messages), as audit does", fill.checkpoints)
	}

	// The raw read runs before and after the audit (and counts twice),
	// so that load from elsewhere falls on both sides alike. Both sides
	// read every message; each counts the entries.
	rawRead := func() error {
		b.logf("read: raw ordered consumer over %d messages (a subprocess)", total)
		s, err := b.rawReadProcess(rawReadJob{URL: b.emb.ClientURL(), Stream: readStream, Filter: subjects.All(), Want: total})
		if err != nil {
			return err
		}
		b.logf("read: raw ordered consumer: %d messages in %.3fs", s.n, s.dur.Seconds())
		r.raw.n += s.n - fill.checkpoints
		r.raw.bytes += s.bytes
		r.raw.dur += s.dur
		r.raw.cpu += s.cpu
		return nil
	}
	if err := rawRead(); err != nil {
		return nil, err
	}
	b.logf("read: %s %s", b.c.Subscriber, strings.Join(args, " "))
	cmd := exec.CommandContext(b.ctx, b.c.Subscriber, args...)
	// The collector settings as shipped: GOGC and GOMEMLIMIT are not
	// passed on (the subscriber's own defaults apply).
	cmd.Env = append(withoutGCEnv(os.Environ()), auditMemStatsEnv+"=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	auditTimer := timer{wall: time.Now(), cpu: cpuTime()}
	peakKiB, err := runSampled(cmd)
	auditTimer.stop(&r.pub)
	if err != nil {
		return nil, fmt.Errorf("%s audit: %v\n%s", b.c.Subscriber, err, errOut.Bytes())
	}
	r.peakMiB = float64(peakKiB) / 1024
	ms, err := parseAuditMemStats(errOut.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%s audit: %w", b.c.Subscriber, err)
	}
	r.liveMiB = float64(ms.PeakLiveHeap) / (1 << 20)
	if want <= 1000000 && k <= 100 && !b.witnessing() {
		r.peakCapMiB, r.liveCapMiB = peakCapMiB, liveCapMiB
	}
	var rep reader.AuditReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return nil, fmt.Errorf("audit report: %w", err)
	}
	t := rep.Totals
	if t.Entries != uint64(want) || t.Messages != uint64(total) || t.SetAside != 0 || t.ChainsOK != k || t.ChainsBroken != 0 || !t.StreamIsSound {
		return nil, fmt.Errorf("audit verified %d entries of %d messages (want %d of %d), %d set aside %v, %d chains ok (want %d), %d broken, stream append-only %v",
			t.Entries, t.Messages, want, total, t.SetAside, firstViolations(&rep), t.ChainsOK, k, t.ChainsBroken, t.StreamIsSound)
	}
	r.extra = map[string]any{"audit_exit_code": cmd.ProcessState.ExitCode(), "audit_chains_ok": t.ChainsOK,
		"audit_gc_cycles": ms.GCCycles, "audit_gogc": ms.GOGC, "audit_memory_limit_mib": float64(ms.MemoryLimit) / (1 << 20),
		"audit_attestation_checked": rep.Attestation.Checked, "checkpoints": fill.checkpoints}
	if trust {
		ck, err := checkCovered(&rep, uint64(want))
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		if ck.checkpoints != uint64(fill.checkpoints) {
			return nil, fmt.Errorf("audit verified %d checkpoints, the stream holds %d", ck.checkpoints, fill.checkpoints)
		}
		r.extra["audit_admitted"], r.extra["audit_checkpoints_verified"] = ck.admitted, ck.checkpoints
		r.extra["audit_admitted_by_checkpoint"], r.extra["audit_attestations_verified"] = ck.byCheckpoint, ck.verified
		r.extra["audit_leaves_spilled"], r.extra["audit_leaves_reread"] = ck.spilled, ck.reread
		b.logf("read: audit admitted %d entries (%d by a covering checkpoint, %d attestations verified one by one) and verified %d checkpoints, none after the last; %d leaves spilled, %d read back",
			ck.admitted, ck.byCheckpoint, ck.verified, ck.checkpoints, ck.spilled, ck.reread)
		if b.witnessing() {
			wf, err := b.checkWitnessed(&rep)
			if err != nil {
				return nil, fmt.Errorf("audit: %w", err)
			}
			for k, v := range wf {
				r.extra["audit_"+k] = v
			}
		}
	} else if rep.Attestation.Checked {
		return nil, fmt.Errorf("audit checked attestations without --trusted-publisher")
	}
	if err := rawRead(); err != nil {
		return nil, err
	}
	r.raw.n, r.raw.bytes = r.raw.n/2, r.raw.bytes/2
	r.raw.dur, r.raw.cpu = r.raw.dur/2, r.raw.cpu/2
	r.pub.n, r.pub.bytes = int(t.Entries), r.raw.bytes
	return r, nil
}

// fillRead fills the read stream unless the store already holds one of
// the wanted size, generator and fill: readChains chains of readLength
// valid entries over readRooms rooms, sent to `publisher serve`
// (startPublisher: node.Serve) one request of --batch entries at a time,
// which its gate appends as one atomic batch; with attestation, with a
// publisher key made for the fill, and its checkpointer's final
// checkpoints are written before the fill counts as done. The stream's
// metadata names the fill only once it is complete, and the publisher
// key's node id (not the key, which is dropped).
func (b *bench) fillRead(subjects room.Subjects) (readFill, error) {
	k, n := b.sz.readChains, b.sz.readLength
	want := k * n
	// The first chain's subject stands for roompub's subject layout: a
	// stream filled under another layout is filled again.
	first := chainMeta(readRunID(0), readCapsuleID(0))
	how := "unattested"
	if b.fillAttested() {
		every, interval := checkpointer.DefaultCheckpointEvery, checkpointer.DefaultCheckpointInterval
		if b.c.ReadCheckpointEvery > 0 {
			every = b.c.ReadCheckpointEvery
		}
		if b.c.ReadCheckpointInterval > 0 {
			interval = b.c.ReadCheckpointInterval
		}
		how = fmt.Sprintf("attested, checkpoints every %d entries or %s", every, interval)
	}
	// As many requests at once as serve's ingest service decides
	// (ServiceOptions.Concurrency's default): the stream interleaves the
	// chains' batches, and the checkpointer keeps pace, as under serve.
	workers := min(4*runtime.GOMAXPROCS(0), k)
	sig := fmt.Sprintf("%d chains × %d entries, %s, %s: gate batches of %d, %d at once, %s, %s",
		k, n, genVersion, fillVersion, b.c.Batch, workers, how, subjects.Journal(readRoom(0), first.Key()))
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if st, err := b.js.Stream(ctx, readStream); err == nil {
		info, err := st.Info(ctx)
		if err != nil {
			return readFill{}, err
		}
		md := info.Config.Metadata
		if !b.c.Refill && md[fillKey] == sig && (md[fillPublisherKey] != "") == b.fillAttested() {
			fill := readFill{nodeID: md[fillPublisherKey]}
			var entries int
			if entries, fill.checkpoints, err = b.storedOn(readStream, subjects, subjects.All()); err != nil {
				return readFill{}, err
			}
			if entries == want && (fill.checkpoints > 0) == b.fillAttested() {
				b.logf("read: reusing the read stream in the store (%s; %d checkpoints)", sig, fill.checkpoints)
				return fill, nil
			}
		}
		if err := b.dropStream(ctx, readStream); err != nil {
			return readFill{}, err
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return readFill{}, err
	}
	cfg := room.StreamConfig(readStream, subjects, 1)
	cfg.Metadata[fillKey] = "filling: " + sig
	if _, err := room.EnsureStream(ctx, b.js, cfg, subjects); err != nil {
		return readFill{}, err
	}

	b.logf("read: filling the read stream once (%s)", sig)
	// No records are filled; the host key is trusted all the same, as
	// serve wants a trusted host.
	v, err := validate.New(validate.WithTrustedHosts(b.key.NodeID()))
	if err != nil {
		return readFill{}, err
	}
	p, err := b.startPublisher(readStream, subjects, fillService, v, publisherOptions{attest: b.fillAttested(),
		every: b.c.ReadCheckpointEvery, interval: b.c.ReadCheckpointInterval})
	if err != nil {
		return readFill{}, err
	}
	defer func() { _ = p.stop() }()
	nc, err := nats.Connect(b.emb.ClientURL(), nats.Name("roompub-bench-fill"))
	if err != nil {
		return readFill{}, err
	}
	defer nc.Close()
	cl := client.New(nc, client.Options{Prefix: fillService, Timeout: b.c.Timeout})
	var bar *progressbar.ProgressBar
	if f, ok := b.out.err.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar = progressbar.NewOptions(want, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription("filling"),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	var done atomic.Int64
	jobs := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := b.fillChain(cl, i, n, func(m int) {
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
			return readFill{}, err
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
		return readFill{}, err
	default:
	}
	if err := b.ctx.Err(); err != nil {
		return readFill{}, err
	}
	fill := readFill{nodeID: p.nodeID}
	if err := p.stop(); err != nil {
		return readFill{}, err
	}
	got, ckpts, err := b.storedOn(readStream, subjects, subjects.All())
	if err != nil {
		return readFill{}, err
	}
	if got != want || (ckpts > 0) != b.fillAttested() {
		return readFill{}, fmt.Errorf("the read stream holds %d entries and %d checkpoints after the fill, want %d entries (attested: %v)", got, ckpts, want, b.fillAttested())
	}
	fill.checkpoints = ckpts
	// Complete: name the fill in the stream's metadata.
	uctx, ucancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer ucancel()
	st, err := b.js.Stream(uctx, readStream)
	if err != nil {
		return readFill{}, err
	}
	ucfg := st.CachedInfo().Config
	ucfg.Metadata[fillKey] = sig
	if fill.nodeID != "" {
		ucfg.Metadata[fillPublisherKey] = fill.nodeID
	}
	if _, err := b.js.UpdateStream(uctx, ucfg); err != nil {
		return readFill{}, fmt.Errorf("name the filled read stream: %w", err)
	}
	b.logf("read: filled %d entries and %d checkpoints in %.1fs", want, ckpts, time.Since(start).Seconds())
	return fill, nil
}

// fillChain sends chain i of the read stream through cl, generating one
// request of --batch entries at a time (one atomic batch each, as serve
// appends one request of a shipped capsule).
func (b *bench) fillChain(cl *client.Client, i, n int, progress func(int)) error {
	meta := chainMeta(readRunID(i), readCapsuleID(i))
	roomID := readRoom(i)
	g := newChainGen(meta, uint64(1000+i))
	var body []byte
	for off := 0; off < n; off += b.c.Batch {
		body = body[:0]
		m := min(b.c.Batch, n-off)
		for range m {
			line, _ := g.next()
			body = append(append(body, line...), '\n')
		}
		reply, err := cl.AppendJournal(b.ctx, roomID, &meta, body)
		if err != nil {
			return fmt.Errorf("fill chain %d in %s at entry %d: %w", i, roomID, off, err)
		}
		if reply.Stored != m {
			return fmt.Errorf("fill chain %d in %s at entry %d: %d of %d stored (%d duplicates, %d refused, %d failed)%s",
				i, roomID, off, reply.Stored, m, reply.Dupes, reply.Refused, reply.Failures, firstRefusal(reply.Items))
		}
		progress(m)
	}
	return nil
}

// firstRefusal is ": " and the first item that was not stored or a
// duplicate, or "".
func firstRefusal(items []room.ItemResult) string {
	for _, it := range items {
		if it.Outcome != room.OutcomeStored && it.Outcome != room.OutcomeDuplicate {
			return fmt.Sprintf(": line %d: %s %s %s", it.Index, it.Outcome, it.Code, it.Reason)
		}
	}
	return ""
}

// readRunID, readCapsuleID and readRoom name chain i of the read stream.
func readRunID(i int) string     { return fmt.Sprintf("run-bench-read-%04d", i) }
func readCapsuleID(i int) string { return fmt.Sprintf("cap-bench-read-%04d", i) }
func readRoom(i int) string      { return fmt.Sprintf("room:bench-read-%02d", i%readRooms) }

// withoutGCEnv is env without GOGC and GOMEMLIMIT.
func withoutGCEnv(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "GOGC=") && !strings.HasPrefix(e, "GOMEMLIMIT=") {
			out = append(out, e)
		}
	}
	return out
}

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
