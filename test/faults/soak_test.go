package faults

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// The soak (make soak; docs/reliability.md, "Soak"): ROOMPUB_SOAK is its
// duration (30m for the record); without it the test is skipped.
const (
	soakShippers    = 3   // journal shippers at once, each its own room
	soakMinEntries  = 100 // entries per capsule: 100 to 399
	soakPause       = 5 * time.Second
	soakRecordBatch = 20 // records per `publisher execution` run
	soakRecordPause = 5 * time.Second
	soakSampleEvery = 10 * time.Second
)

// soakCap is one shipped capsule: the sha-256 of each journal line, in
// order (the lines themselves are on disk; a 30-minute soak ships
// hundreds of thousands), and what the shipper reported.
type soakCap struct {
	roomID string
	key    events.ChainKey
	sums   [][32]byte
	acked  int
}

// soakSample is one reading of one serve process.
type soakSample struct {
	at         time.Duration
	serve      int
	rssKB      uint64
	goroutines int
	heapKB     int // go_memstats_heap_inuse_bytes / 1024
}

type soakRun struct {
	t     *testing.T
	start time.Time
	dir   string
	cl    *cluster
	key   *events.HostKey
	url   string

	serveMu sync.Mutex // held while a serve restarts (the sampler waits)
	serves  [2]*serve  // serves[0] never restarts; serves[1] does
	http    [2]string

	mu          sync.Mutex
	caps        []*soakCap
	recs        []*recordSet
	recAcked    int
	dupsRep     int
	reruns      int
	samples     []soakSample
	restarts    map[string]int
	audits      int
	auditsSkip  int
	shipErrs    []string
	followFiles []string
	followExits []string
}

func (s *soakRun) fail(format string, args ...any) {
	s.mu.Lock()
	s.shipErrs = append(s.shipErrs, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

// runQuiet runs bin to its end (within limit) without failing the test.
func runQuiet(limit time.Duration, bin string, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = root
	cmd.Env = childEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String(), took: time.Since(start)}
	if ctx.Err() != nil {
		return r, fmt.Errorf("%s %s: still running after %s", filepath.Base(bin), args[0], limit)
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return r, err
	}
	r.status = cmd.ProcessState.ExitCode()
	return r, nil
}

// shipCapsule runs `publisher journal --json` until it exits 0 (exit 2:
// run again), and returns the lines the last run reported in the stream.
func (s *soakRun) shipCapsule(roomID string, c *capsule) (int, error) {
	for run := 1; run <= 30; run++ {
		r, err := runQuiet(3*time.Minute, publisherBin, "journal", "--json", "--server", s.url, "--room", roomID, c.dir)
		if err != nil {
			return 0, err
		}
		var l shipLine
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &l); err != nil {
			return 0, fmt.Errorf("publisher journal: exit %d, not one JSON line: %v\n%s%s", r.status, err, r.stdout, tail(r.stderr, 2000))
		}
		if l.Refused != nil {
			return 0, fmt.Errorf("oracle (no valid line refused): %s line %d refused: %s: %s", c.dir, l.Refused.At.Line, l.Refused.Code, l.Refused.Reason)
		}
		s.mu.Lock()
		s.dupsRep += l.Duplicates
		s.mu.Unlock()
		switch r.status {
		case 0:
			if l.acked() != len(c.lines) {
				return 0, fmt.Errorf("publisher journal %s: exit 0 with %d of %d lines in the stream", c.dir, l.acked(), len(c.lines))
			}
			return l.acked(), nil
		case 2:
			s.mu.Lock()
			s.reruns++
			s.mu.Unlock()
			time.Sleep(time.Second)
		default:
			return 0, fmt.Errorf("publisher journal %s: exit %d\n%s", c.dir, r.status, tail(r.stderr, 2000))
		}
	}
	return 0, fmt.Errorf("oracle (shipper resumes without help): %s not shipped in 30 runs", c.dir)
}

// shipper ships capsules of 100 to 399 entries into roomID, one after
// another, until stop closes.
func (s *soakRun) shipper(w int, roomID string, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		runID := fmt.Sprintf("run-soak-%d-%05d", w, i)
		c := newCapsule(s.t, filepath.Join(s.dir, "caps", runID), runID, soakMinEntries+mrand.IntN(300))
		sc := &soakCap{roomID: roomID, key: c.key()}
		for _, l := range c.lines {
			sc.sums = append(sc.sums, sha256.Sum256(l))
		}
		acked, err := s.shipCapsule(roomID, c)
		if err != nil {
			s.fail("shipper %d: %v", w, err)
			return
		}
		sc.acked = acked
		s.mu.Lock()
		s.caps = append(s.caps, sc)
		s.mu.Unlock()
		_ = os.RemoveAll(c.dir)
		time.Sleep(soakPause)
	}
}

// recorder ships sets of signed execution records until stop closes.
func (s *soakRun) recorder(stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		name := fmt.Sprintf("soak-%05d", i)
		rs := newRecords(s.t, filepath.Join(s.dir, "recs", name), s.key, "room:soak-records", name, soakRecordBatch)
		acked := map[string]bool{}
		for run := 1; ; run++ {
			r, err := runQuiet(3*time.Minute, publisherBin, append([]string{"execution", "--json", "--server", s.url}, rs.files...)...)
			if err != nil {
				s.fail("recorder: %v", err)
				return
			}
			for _, ln := range strings.Split(r.stdout, "\n") {
				if strings.TrimSpace(ln) == "" {
					continue
				}
				var l recordLine
				if err := json.Unmarshal([]byte(ln), &l); err != nil {
					s.fail("recorder: not a JSON line: %s", ln)
					return
				}
				switch l.Item.Outcome {
				case room.OutcomeStored, room.OutcomeDuplicate:
					acked[l.File] = true
					if l.Item.Outcome == room.OutcomeDuplicate {
						s.mu.Lock()
						s.dupsRep++
						s.mu.Unlock()
					}
				case room.OutcomeFailed, room.OutcomeSkipped:
				default:
					s.fail("oracle (no valid record refused): %s: %s %s: %s", l.File, l.Item.Outcome, l.Item.Code, l.Item.Reason)
					return
				}
			}
			if r.status == 0 {
				break
			}
			if r.status != 2 || run == 30 {
				s.fail("recorder: publisher execution exit %d (run %d)\n%s", r.status, run, tail(r.stderr, 2000))
				return
			}
			s.mu.Lock()
			s.reruns++
			s.mu.Unlock()
			time.Sleep(time.Second)
		}
		if len(acked) != len(rs.files) {
			s.fail("recorder: exit 0 with %d of %d records acknowledged", len(acked), len(rs.files))
			return
		}
		s.mu.Lock()
		s.recs = append(s.recs, rs)
		s.recAcked += len(acked)
		s.mu.Unlock()
		time.Sleep(soakRecordPause)
	}
}

// sampler reads each serve's VmRSS (/proc) and go_goroutines (/metrics)
// every soakSampleEvery until stop closes; a serve that is restarting is
// skipped.
func (s *soakRun) sampler(stop <-chan struct{}) {
	tick := time.NewTicker(soakSampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		s.serveMu.Lock()
		for i, sv := range s.serves {
			if !sv.running() {
				continue
			}
			rss, err := vmRSS(sv.cmd.Process.Pid)
			if err != nil {
				continue
			}
			g, heap, err := goMetrics(s.http[i])
			if err != nil {
				continue
			}
			s.mu.Lock()
			s.samples = append(s.samples, soakSample{at: time.Since(s.start), serve: i, rssKB: rss, goroutines: g, heapKB: heap})
			s.mu.Unlock()
		}
		s.serveMu.Unlock()
	}
}

// vmRSS is a process's resident set size in kB.
func vmRSS(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// goMetrics is serve's go_goroutines and go_memstats_heap_inuse_bytes
// (in kB): the heap tells live data from memory the runtime keeps.
func goMetrics(addr string) (goroutines, heapKB int, err error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		return 0, 0, err
	}
	g, h := metric(b.String(), "go_goroutines"), metric(b.String(), "go_memstats_heap_inuse_bytes")
	if g == "" || h == "" {
		return 0, 0, errors.New("no go_goroutines or go_memstats_heap_inuse_bytes")
	}
	if goroutines, err = strconv.Atoi(g); err != nil {
		return 0, 0, err
	}
	heap, err := strconv.ParseFloat(h, 64)
	return goroutines, int(heap / 1024), err
}

// audit runs `subscriber audit --json` mid-soak: it must be clean (no
// message set aside, no fork, no chain broken, the stream append-only);
// exit 2 (it could not run: a server restarting) counts as skipped.
func (s *soakRun) audit() {
	t := s.t
	r := run(t, 5*time.Minute, subscriberBin, "audit", "--json", "--server", s.url, "--state-dir", auditStateDir(t),
		"--trusted-publisher", publisherID, "--trusted-host", s.key.NodeID())
	if r.status == 2 {
		s.auditsSkip++
		t.Logf("soak: audit could not run (%s)", firstLine(r.stderr))
		return
	}
	var rep auditReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Errorf("soak audit: exit %d, %v\n%s", r.status, err, tail(r.stderr, 2000))
		return
	}
	s.audits++
	tot := rep.Totals
	if r.status != 0 || tot.SetAside != 0 || tot.ChainsBroken != 0 || !tot.Sound || tot.ByCode["fork"] != 0 || tot.Messages != rep.LastSeq {
		t.Errorf("oracle (audit clean, mid-soak): exit %d: %d messages, last seq %d, %d set aside %v, chains %d ok %d broken, append-only %v\n%s",
			r.status, tot.Messages, rep.LastSeq, tot.SetAside, tot.ByCode, tot.ChainsOK, tot.ChainsBroken, tot.Sound, tail(r.stderr, 2000))
		return
	}
	t.Logf("soak %s: audit clean: %d messages (%d entries, %d records, %d checkpoints), %d chains, took %s",
		time.Since(s.start).Round(time.Second), tot.Messages, tot.Entries, tot.Records, tot.Checkpoints, tot.ChainsOK, r.took.Round(100*time.Millisecond))
}

// restartServe stops serves[1] (SIGTERM or SIGKILL) and starts it again.
func (s *soakRun) restartServe(kill bool) {
	s.serveMu.Lock()
	defer s.serveMu.Unlock()
	sv := s.serves[1]
	kind := "serve SIGTERM"
	if kill {
		kind = "serve SIGKILL"
		sv.kill()
	} else if st := sv.term(); st != 0 {
		s.t.Errorf("publisher serve: exit %d after SIGTERM:\n%s", st, tail(sv.stderr.String(), 3000))
	}
	time.Sleep(time.Second)
	sv.restart(s.t)
	s.mu.Lock()
	s.restarts[kind]++
	s.mu.Unlock()
}

// restartServer SIGKILLs one nats-server, waits 2s, starts it again and
// waits until it is current.
func (s *soakRun) restartServer(n *natsNode) {
	s.cl.kill(n)
	time.Sleep(2 * time.Second)
	s.cl.restart(n)
	s.mu.Lock()
	s.restarts["nats-server SIGKILL"]++
	s.mu.Unlock()
}

// TestSoak runs the 3-server cluster for ROOMPUB_SOAK (e.g. 30m): three
// shippers send capsules of 100-399 entries one after another, each to
// its room; a recorder sends 20 signed execution records at a time; two
// `subscriber follow` processes follow every room; `subscriber audit`
// runs every few minutes; and every interval (ROOMPUB_SOAK/12, at least
// 30s) one restart, in turn: the restartable serve of the two (SIGTERM,
// then SIGKILL the next time) or a nats-server (SIGKILL, each server in
// turn). serves[0] is never restarted: its figures show a leak across
// the whole run. Every 10s it samples both serves' VmRSS and
// go_goroutines.
//
// Oracles at the end: every acknowledged entry and record stored exactly
// once (each chain's subject holds its journal's lines, byte for byte, in
// order; each record once; nothing else but checkpoints), no fork, the
// final audit clean with exact totals, each follower printed every entry
// and record of its rooms, every mid-run audit clean, and both serves'
// memory and goroutines bounded: the largest sample of the last third of
// the run is at most 1.5 times the largest of the first third (see
// docs/reliability.md, "Soak", for why).
func TestSoak(t *testing.T) {
	v := os.Getenv("ROOMPUB_SOAK")
	if v == "" {
		t.Skip("a soak: set ROOMPUB_SOAK to its duration (make soak runs 30m)")
	}
	dur, err := time.ParseDuration(v)
	if err != nil || dur < time.Minute {
		t.Fatalf("ROOMPUB_SOAK=%q: want a duration of at least 1m", v)
	}
	tl := count(t)
	s := &soakRun{t: t, start: time.Now(), dir: t.TempDir(), key: hostKey(t), restarts: map[string]int{}}
	s.cl = startCluster(t, 3)
	s.url = s.cl.urls()
	for i := range s.serves {
		s.http[i] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		s.serves[i] = startServe(t, "--server", s.url, "--replicas", "3", "--trusted-host", s.key.NodeID(), "--log-level", "warn", "--http", s.http[i])
	}
	s.cl.waitService(t, "")
	rooms := []string{"room:soak-records"}
	for w := range soakShippers {
		rooms = append(rooms, fmt.Sprintf("room:soak-%d", w))
	}
	stopFollow := make(chan struct{})
	var fw sync.WaitGroup
	for i := range 2 {
		f := filepath.Join(s.dir, fmt.Sprintf("follow-%d.ndjson", i))
		args := []string{"follow", "--server", s.url, "--durable", fmt.Sprintf("soak-%d", i), "--state-dir", filepath.Join(s.dir, fmt.Sprintf("follow-state-%d", i)),
			"--trusted-host", s.key.NodeID()}
		for _, r := range rooms {
			args = append(args, "--room", r)
		}
		s.followFiles = append(s.followFiles, f)
		fw.Go(func() { s.follower(i, f, args, stopFollow) })
	}
	t.Logf("soak: cluster, 2 publisher serve, 2 subscriber follow up in %s; running %s", time.Since(s.start).Round(time.Millisecond), dur)

	stop, stopSampler := make(chan struct{}), make(chan struct{})
	var wg, sw sync.WaitGroup
	for w := range soakShippers {
		wg.Go(func() { s.shipper(w, rooms[1+w], stop) })
	}
	wg.Go(func() { s.recorder(stop) })
	sw.Go(func() { s.sampler(stopSampler) })

	every := max(30*time.Second, dur/12)
	auditEvery := max(45*time.Second, dur/10)
	end := s.start.Add(dur)
	nextFault, nextAudit := time.Now().Add(every), time.Now().Add(auditEvery)
	for fault := 0; time.Now().Before(end) && !t.Failed(); {
		time.Sleep(time.Second)
		s.mu.Lock()
		errs := len(s.shipErrs)
		s.mu.Unlock()
		if errs != 0 {
			break
		}
		if time.Now().After(nextAudit) {
			s.audit()
			nextAudit = time.Now().Add(auditEvery)
		}
		if time.Now().After(nextFault) && time.Now().Add(every/2).Before(end) {
			switch fault % 4 {
			case 0:
				s.restartServe(false)
			case 2:
				s.restartServe(true)
			default:
				s.restartServer(s.cl.nodes[(fault/2)%3])
			}
			tl.Faults++
			fault++
			t.Logf("soak %s: restarts so far %v", time.Since(s.start).Round(time.Second), s.restarts)
			nextFault = time.Now().Add(every)
		}
	}
	ran := time.Since(s.start)
	close(stop)
	wg.Wait()
	close(stopSampler)
	sw.Wait()
	for _, e := range s.shipErrs {
		t.Error(e)
	}
	if t.Failed() {
		return
	}
	s.cl.waitSettled(60 * time.Second)

	// The final checkpoints: both serves stopped (each writes one on
	// SIGTERM), so the audit sees every message attested and covered.
	for i, sv := range s.serves {
		if st := sv.term(); st != 0 {
			t.Errorf("publisher serve %d: exit %d after SIGTERM", i, st)
		}
	}
	sum := s.check(tl)
	auditClean(t, tl, s.url, []string{s.key.NodeID()}, sum.entries, sum.records, len(s.caps))
	s.checkFollowers(sum)
	close(stopFollow)
	fw.Wait()
	s.report(ran, sum, tl)
}

// soakSum is what the final read found.
type soakSum struct {
	entries, records          uint64 // acknowledged
	foundE, foundR            int
	dupsE, dupsR, forks, lost int
	checkpoints               int
	seqs                      map[string]map[uint64]bool // room → stream seqs of its entries and records
	followed, followLines     []int
}

// check reads the whole stream once and checks every capsule and record
// set against it: exactly one stored copy of each, in journal order, no
// fork, nothing else but checkpoints.
func (s *soakRun) check(tl *tally) *soakSum {
	t := s.t
	in := inspect(t, s.url)
	sum := &soakSum{seqs: map[string]map[uint64]bool{}}
	type msg struct {
		seq uint64
		sum [32]byte
		pos int64
	}
	chains := map[string][]msg{}  // journal subject → messages
	recs := map[string][]uint64{} // canonical record sha → stream seqs
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	info, err := in.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := info.State.LastSeq
	if info.State.NumDeleted != 0 || info.State.Msgs != last {
		t.Fatalf("the stream: %d messages, last seq %d, %d deleted", info.State.Msgs, info.State.LastSeq, info.State.NumDeleted)
	}
	cons, err := in.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for seq, empty := uint64(0), 0; seq < last; {
		batch, err := cons.Fetch(2000, jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			seq = meta.Sequence.Stream
			n++
			p, err := in.subj.Parse(m.Subject())
			if err != nil {
				t.Errorf("stream seq %d on %s: not a room subject", seq, m.Subject())
				continue
			}
			if sum.seqs[p.RoomID] == nil {
				sum.seqs[p.RoomID] = map[uint64]bool{}
			}
			switch p.Kind {
			case room.KindJournal:
				e, err := events.ParseEntry(m.Data())
				if err != nil {
					t.Errorf("stream seq %d: %v", seq, err)
					continue
				}
				pos, _ := e.Seq()
				chains[m.Subject()] = append(chains[m.Subject()], msg{seq: seq, sum: sha256.Sum256(m.Data()), pos: pos})
				sum.seqs[p.RoomID][seq] = true
			case room.KindExecution:
				h := sha256.Sum256(m.Data())
				recs[string(h[:])] = append(recs[string(h[:])], seq)
				sum.seqs[p.RoomID][seq] = true
			case room.KindCheckpoint:
				sum.checkpoints++
			default:
				t.Errorf("stream seq %d on %s: %v", seq, m.Subject(), p.Kind)
			}
		}
		if n == 0 {
			// An ordered consumer that missed heartbeats is recreated
			// at the next seq; the fetch that noticed returns nothing.
			if empty++; empty == 5 {
				t.Fatalf("the read stops after stream seq %d of %d: %v", seq, last, batch.Error())
			}
			t.Logf("read: an empty fetch after stream seq %d (%v); again", seq, batch.Error())
			continue
		}
		empty = 0
	}
	for _, c := range s.caps {
		subj := in.subj.Journal(c.roomID, c.key)
		msgs := chains[subj]
		delete(chains, subj)
		sum.entries += uint64(c.acked)
		byPos := map[int64]map[[32]byte]int{}
		for _, m := range msgs {
			if byPos[m.pos] == nil {
				byPos[m.pos] = map[[32]byte]int{}
			}
			byPos[m.pos][m.sum]++
		}
		for p := range c.sums {
			got := byPos[int64(p)]
			switch {
			case got[c.sums[p]] == 0:
				sum.lost++
			default:
				sum.foundE++
				sum.dupsE += got[c.sums[p]] - 1
			}
			if len(got) > 1 {
				sum.forks++
			}
		}
		ok := len(msgs) == len(c.sums)
		for i := 0; ok && i < len(msgs); i++ {
			ok = msgs[i].sum == c.sums[i]
		}
		if !ok {
			t.Errorf("oracle (exactly one stored copy, in order): %s holds %d messages, the journal %d lines", subj, len(msgs), len(c.sums))
		}
	}
	for subj, msgs := range chains {
		t.Errorf("oracle (nothing but what was shipped): %d messages on %s, a chain no shipper finished", len(msgs), subj)
	}
	for _, rs := range s.recs {
		for _, r := range rs.recs {
			h := sha256.Sum256(r.Canonical())
			seqs := recs[string(h[:])]
			delete(recs, string(h[:]))
			sum.records++
			switch len(seqs) {
			case 0:
				sum.lost++
			default:
				sum.foundR++
				sum.dupsR += len(seqs) - 1
			}
		}
	}
	if len(recs) != 0 {
		t.Errorf("oracle (nothing but what was shipped): %d records stored that no run acknowledged", len(recs))
	}
	tl.Acked += int(sum.entries) + int(sum.records)
	tl.Found += sum.foundE + sum.foundR
	tl.DupsStored += sum.dupsE + sum.dupsR
	tl.Forks += sum.forks
	tl.DupsReported += s.dupsRep
	tl.Reruns += s.reruns
	if sum.lost != 0 || sum.dupsE+sum.dupsR != 0 || sum.forks != 0 {
		t.Errorf("oracles: %d acknowledged items lost, %d stored twice, %d forks", sum.lost, sum.dupsE+sum.dupsR, sum.forks)
	}
	return sum
}

// follower runs `subscriber follow` with args, its stdout appended to
// file, until stop closes; when it exits on its own it is started again
// (as a supervisor would: its durable consumer resumes where it acked),
// and the exit is counted.
func (s *soakRun) follower(i int, file string, args []string, stop <-chan struct{}) {
	for {
		out, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			s.fail("follower %d: %v", i, err)
			return
		}
		cmd := exec.Command(subscriberBin, args...)
		cmd.Dir, cmd.Env = root, childEnv()
		var stderr syncBuffer
		cmd.Stdout, cmd.Stderr = out, &stderr
		if err := cmd.Start(); err != nil {
			out.Close()
			s.fail("follower %d: %v", i, err)
			return
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-stop:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-exited
			out.Close()
			return
		case <-exited:
		}
		out.Close()
		why := strings.TrimSpace(stderr.String())
		if k := strings.LastIndexByte(why, '\n'); k >= 0 {
			why = why[k+1:]
		}
		s.mu.Lock()
		s.restarts["subscriber follow exited"]++
		s.followExits = append(s.followExits, fmt.Sprintf("%s: follower %d exit %d: %s", time.Since(s.start).Round(time.Second), i, cmd.ProcessState.ExitCode(), why))
		s.mu.Unlock()
		time.Sleep(time.Second)
	}
}

// checkFollowers waits until each follower has printed every entry and
// record (by stream seq) of the rooms it follows.
func (s *soakRun) checkFollowers(sum *soakSum) {
	t := s.t
	want := map[uint64]bool{}
	for _, seqs := range sum.seqs {
		for q := range seqs {
			want[q] = true
		}
	}
	for i, f := range s.followFiles {
		var got map[uint64]bool
		var lines int
		deadline := time.Now().Add(3 * time.Minute)
		for {
			got, lines = followedSeqs(t, f)
			missing := 0
			for q := range want {
				if !got[q] {
					missing++
				}
			}
			if missing == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("oracle (followers see everything): follower %d printed %d of %d entries and records", i, len(want)-missing, len(want))
				break
			}
			time.Sleep(time.Second)
		}
		sum.followed = append(sum.followed, len(got))
		sum.followLines = append(sum.followLines, lines)
	}
}

// followedSeqs is the stream seqs of the events a follower printed.
func followedSeqs(t *testing.T, file string) (map[uint64]bool, int) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, lines := map[uint64]bool{}, 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l struct {
			StreamSeq uint64 `json:"stream_seq"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.StreamSeq != 0 {
			out[l.StreamSeq] = true
			lines++
		}
	}
	return out, lines
}

// report prints the summary table and checks the bound on memory and
// goroutines: per serve, the largest sample of the last third is at most
// 1.5 times the largest of the first third.
func (s *soakRun) report(ran time.Duration, sum *soakSum, tl *tally) {
	t := s.t
	var b strings.Builder
	fmt.Fprintf(&b, "soak summary\n")
	fmt.Fprintf(&b, "  duration                 %s\n", ran.Round(time.Second))
	kinds := slices.Sorted(func(yield func(string) bool) {
		for k := range s.restarts {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range kinds {
		fmt.Fprintf(&b, "  restarts: %-22s %d\n", k, s.restarts[k])
	}
	fmt.Fprintf(&b, "  capsules (chains)        %d\n", len(s.caps))
	fmt.Fprintf(&b, "  entries acknowledged     %d, found %d, duplicates stored %d\n", sum.entries, sum.foundE, sum.dupsE)
	fmt.Fprintf(&b, "  records acknowledged     %d, found %d, duplicates stored %d\n", sum.records, sum.foundR, sum.dupsR)
	fmt.Fprintf(&b, "  forks %d, lost %d, duplicates reported (resent) %d, shipper reruns %d\n", sum.forks, sum.lost, s.dupsRep, s.reruns)
	fmt.Fprintf(&b, "  checkpoints in the stream %d\n", sum.checkpoints)
	fmt.Fprintf(&b, "  audits mid-run clean     %d (%d could not run)\n", s.audits, s.auditsSkip)
	fmt.Fprintf(&b, "  followers printed        %v distinct stream seqs (of %d) in %v event lines\n", sum.followed, int(sum.entries+sum.records), sum.followLines)
	for _, e := range s.followExits {
		fmt.Fprintf(&b, "    %s\n", e)
	}
	third := ran / 3
	for i := range s.serves {
		what := "never restarted"
		if i == 1 {
			what = "restarted"
		}
		fmt.Fprintf(&b, "  serve %d (%s): per third      RSS MB min-max        heap in use MB min-max   goroutines min-max   samples\n", i, what)
		var firstRSS, lastRSS, firstG, lastG int
		for k := range 3 {
			var rs, gs, hs []int
			for _, x := range s.samples {
				if x.serve == i && x.at >= time.Duration(k)*third && (x.at < time.Duration(k+1)*third || k == 2) {
					rs, gs, hs = append(rs, int(x.rssKB)), append(gs, x.goroutines), append(hs, x.heapKB)
				}
			}
			if len(rs) == 0 {
				fmt.Fprintf(&b, "    third %d: no samples\n", k+1)
				t.Errorf("serve %d: no samples in third %d", i, k+1)
				continue
			}
			fmt.Fprintf(&b, "    third %d                      %6.1f - %6.1f         %6.1f - %6.1f            %5d - %5d       %d\n", k+1,
				float64(slices.Min(rs))/1024, float64(slices.Max(rs))/1024, float64(slices.Min(hs))/1024, float64(slices.Max(hs))/1024, slices.Min(gs), slices.Max(gs), len(rs))
			switch k {
			case 0:
				firstRSS, firstG = slices.Max(rs), slices.Max(gs)
			case 2:
				lastRSS, lastG = slices.Max(rs), slices.Max(gs)
			}
		}
		if firstRSS > 0 && lastRSS*2 > firstRSS*3 {
			t.Errorf("serve %d: RSS grows: last third's max %d kB > 1.5 × first third's max %d kB", i, lastRSS, firstRSS)
		}
		if firstG > 0 && lastG*2 > firstG*3 {
			t.Errorf("serve %d: goroutines grow: last third's max %d > 1.5 × first third's max %d", i, lastG, firstG)
		}
	}
	fmt.Fprintf(&b, "  %s\n", tl)
	t.Log(b.String())
	fmt.Print(b.String())
}
