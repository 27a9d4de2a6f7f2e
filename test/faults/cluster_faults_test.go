package faults

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
)

// clusterRun is the state shared by the cluster's fault phases: one
// cluster, one `publisher serve --replicas 3`, and what the stream should
// hold so far.
type clusterRun struct {
	t       *testing.T
	tl      *tally
	cl      *cluster
	srv     *serve
	in      *inspector
	key     *events.HostKey
	dir     string
	entries uint64 // journal entries the stream should hold
	records uint64
	chains  int
}

// shipment is one phase's journal and records, shipped in the background
// by the real binaries while a fault is injected.
type shipment struct {
	name    string
	roomID  string
	cap     *capsule
	recs    *recordSet
	journal *proc // one-shot `publisher journal --json`
	exec    *proc // one-shot `publisher execution --json`
	started time.Time
	stream  string // the room's partition: the stream the phase's fault hits
}

const (
	clusterEntries = 3000 // journal lines per phase
	clusterRecords = 60   // execution records per phase
	clusterBatch   = 25   // publisher serve --max-batch in the cluster phases
)

func (cr *clusterRun) startShipment(name string) *shipment {
	t := cr.t
	t.Helper()
	s := &shipment{name: name, roomID: "room:fault-" + name, started: time.Now()}
	s.cap = newCapsule(t, filepath.Join(cr.dir, name, "capsule"), "run-fault-"+name, clusterEntries)
	s.recs = newRecords(t, filepath.Join(cr.dir, name, "records"), cr.key, s.roomID, name, clusterRecords)
	s.journal = startProc(t, "publisher journal", publisherBin, "journal", "--json", "--server", cr.cl.urls(), "--room", s.roomID, s.cap.dir)
	s.exec = startProc(t, "publisher execution", publisherBin, append([]string{"execution", "--json", "--server", cr.cl.urls()}, s.recs.files...)...)
	s.stream = cr.in.useRoom(s.roomID)
	t.Logf("%s is placed on %s", s.roomID, s.stream)
	return s
}

// waitProgress waits until the phase's chain holds at least n entries and
// the shipper is still at it. A shipment that ends first (the count read
// slowly while the cluster recovered from the phase before) is checked
// as a phase without a fault and replaced by a new one, in another room,
// twice at most: the fault must land mid-shipment.
func (cr *clusterRun) waitProgress(s *shipment, n uint64) uint64 {
	cr.t.Helper()
	defer func() {
		if cr.t.Failed() {
			cr.t.Logf("publisher journal so far:\n%s%s\npublisher serve's log (tail):\n%s",
				s.journal.stdout, tail(s.journal.stderr.String(), 3000), tail(cr.srv.stderr.String(), 6000))
		}
	}()
	for again := 0; ; again++ {
		got := cr.in.waitCount(cr.in.subj.Journal(s.roomID, s.cap.key()), n, 60*time.Second)
		if s.journal.running() {
			return got
		}
		if again == 2 {
			cr.t.Fatalf("the shipment ended before the fault, three times (%d entries stored):\n%s", got, s.journal.stdout)
		}
		cr.t.Logf("the shipment into %s ended before the fault (%d entries stored): checked without one, shipping again", s.roomID, got)
		cr.finish(s)
		*s = *cr.startShipment(s.name + "-" + strconv.Itoa(again+2))
	}
}

// finish collects the background runs, re-runs each shipper until it exits
// 0, and checks every oracle for the phase.
func (cr *clusterRun) finish(s *shipment) {
	t := cr.t
	t.Helper()
	// The first, interrupted runs: what they acknowledged must be there.
	status := s.journal.wait(3 * time.Minute)
	first := parseShipLines(t, s.journal.stdout.String())
	if len(first) != 1 {
		t.Fatalf("publisher journal printed %d JSON lines (exit %d):\n%s%s", len(first), status, s.journal.stdout, tail(s.journal.stderr.String(), 3000))
	}
	if first[0].Refused != nil {
		t.Fatalf("oracle (no valid line refused): publisher journal refused line %d: %s: %s", first[0].Refused.At.Line, first[0].Refused.Code, first[0].Refused.Reason)
	}
	t.Logf("first publisher journal run: exit %d after %s: %d stored, %d duplicates%s", status, time.Since(s.started).Round(time.Millisecond),
		first[0].Stored, first[0].Duplicates, ifErr(first[0].Error))
	acked := first[0].acked()
	cr.in.checkAckedPrefix(cr.tl, s.cap, s.roomID, acked, "after the fault")
	rr := &recordRuns{acked: map[string]room.Outcome{}}
	estatus := s.exec.wait(3 * time.Minute)
	rr.note(t, result{status: estatus, stdout: s.exec.stdout.String()})
	t.Logf("first publisher execution run: exit %d, %d of %d records acknowledged%s", estatus, len(rr.acked), len(s.recs.files), ifErr(firstLine(s.exec.stderr.String())))
	firstRecs := len(rr.acked)

	jr := &journalRuns{runs: first, outs: []result{{status: status, stderr: s.journal.stderr.String()}}}
	cr.tl.GateFailed += jr.failed() + rr.failed
	if status != 0 {
		cr.tl.Reruns++
		more := shipUntilDone(t, cr.tl, cr.cl.urls(), s.roomID, s.cap, 8)
		jr.runs = append(jr.runs, more.runs...)
		jr.outs = append(jr.outs, more.outs...)
	}
	if estatus != 0 {
		cr.tl.Reruns++
		more := shipRecordsUntilDone(t, cr.tl, cr.cl.urls(), s.recs, 8)
		for f, o := range more.acked {
			rr.acked[f] = o
		}
		rr.dupes += more.dupes
		rr.failed += more.failed
	}
	cr.tl.DupsReported += jr.dupes() + rr.dupes
	cr.entries += uint64(len(s.cap.lines))
	cr.records += uint64(len(s.recs.recs))
	cr.chains++
	cr.in.checkChain(cr.tl, s.cap, s.roomID, jr.maxAcked())
	cr.in.checkRecords(cr.tl, s.recs, len(rr.acked))
	auditClean(t, cr.tl, cr.cl.urls(), []string{cr.key.NodeID()}, cr.entries, cr.records, cr.chains)
	if d := os.Getenv("FAULTS_DEBUG"); d != "" {
		_ = os.WriteFile(filepath.Join(d, "serve-"+s.roomID[len("room:"):]+".log"), []byte(cr.srv.stderr.String()), 0o644)
	}
	// The gate rides out a failover: it never answers "failed" (not
	// decided) for a valid item while the cluster elects a leader or heals.
	if n := jr.failed() + rr.failed; n != 0 {
		t.Errorf("oracle (the gate rides out the fault): %d items answered failed (not decided) by the gate:\n%s", n, gateFailureLines(jr))
	}
	t.Logf("phase done in %s: journal %d run(s) (the first acknowledged %d of %d), records %d run(s) (the first acknowledged %d of %d); %d duplicates reported",
		time.Since(s.started).Round(time.Millisecond), len(jr.runs), acked, len(s.cap.lines), 1+boolInt(estatus != 0), firstRecs, len(s.recs.recs), jr.dupes()+rr.dupes)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// gateFailureLines are the shipper's "not decided" lines.
func gateFailureLines(jr *journalRuns) string {
	var out []string
	for _, r := range jr.outs {
		for _, l := range strings.Split(r.stderr, "\n") {
			if strings.Contains(l, " not decided: ") {
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, "\n")
}

func ifErr(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// TestCluster injects faults into a three-server cluster while the real
// shipper binaries ship a 3,000-entry journal and 60 records per phase
// through `publisher serve --replicas 3 --partitions 3`, the fault hitting
// the stream of the partition the phase's room is placed on. Each phase names its fault; the
// oracles, after every phase: no acknowledged entry or record lost (what
// the interrupted run reported is in the stream), exactly one stored copy
// of each (byte-equal, in journal order), no fork, audit clean
// (`subscriber audit --json`, exact totals over everything shipped so
// far), the shipper resumed without help (the same command, run again,
// exits 0), and the gate never answered a valid item "failed" (it waits
// out an election or a partition of a few seconds).
func TestCluster(t *testing.T) {
	cr := &clusterRun{t: t, dir: t.TempDir(), key: hostKey(t)}
	start := time.Now()
	cr.cl = startCluster(t, 3)
	// Small atomic batches (the default is 1,000): a phase's 3,000 entries
	// then take 120 batches, so each fault lands while the shipment is still
	// running, between and during batches, as in a long shipment. With
	// 1,000 a phase was three batches and could end before its second fault.
	// Three partitions: each phase's room lands on one of them
	// (placement), and its fault hits that room's stream, while the rooms
	// of the phases before stay on theirs.
	cr.srv = startServe(t, "--server", cr.cl.urls(), "--replicas", "3", "--partitions", "3", "--trusted-host", cr.key.NodeID(), "--log-level", "warn",
		"--max-batch", strconv.Itoa(clusterBatch))
	cr.cl.waitService(t, "")
	cr.in = inspect(t, cr.cl.urls())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	info, err := cr.in.stream.Info(ctx)
	cancel()
	if err != nil || info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("room stream: %v %+v", err, info)
	}
	t.Logf("cluster of 3 and publisher serve up in %s; stream leader %s", time.Since(start).Round(time.Millisecond), info.Cluster.Leader)

	phase := func(name string, f func(t *testing.T)) {
		if t.Failed() {
			return // the totals the audits expect would be off
		}
		t.Run(name, func(t *testing.T) {
			cr.t, cr.tl, cr.cl.t, cr.in.t = t, count(t), t, t
			f(t)
		})
		cr.t, cr.cl.t, cr.in.t = t, t, t
	}
	// (a) SIGKILL of the stream leader, restarted 2s later.
	phase("KillStreamLeader", func(t *testing.T) {
		s := cr.startShipment("kill-leader")
		at := cr.waitProgress(s, 1300)
		leader := cr.cl.node(cr.in.streamLeader(10 * time.Second))
		cr.cl.kill(leader)
		cr.tl.Faults++
		t.Logf("fault: SIGKILL of stream leader %s at >= %d entries (publisher serve on %s)", leader.name, at, cr.servedBy())
		time.Sleep(2 * time.Second)
		cr.cl.restart(leader)
		t.Logf("%s restarted and current; stream leader now %s", leader.name, cr.in.streamLeader(30*time.Second))
		cr.finish(s)
	})
	// (a') SIGKILL of the server publisher serve is connected to.
	phase("KillServeServer", func(t *testing.T) {
		s := cr.startShipment("kill-serve-server")
		at := cr.waitProgress(s, 1300)
		n := cr.cl.connectedTo("roompub-publisher")
		if n == nil {
			t.Fatal("publisher serve is connected to no server")
		}
		leader := cr.in.streamLeader(10 * time.Second)
		cr.cl.kill(n)
		cr.tl.Faults++
		t.Logf("fault: SIGKILL of %s, the server publisher serve is connected to, at >= %d entries (stream leader %s)", n.name, at, leader)
		time.Sleep(2 * time.Second)
		cr.cl.restart(n)
		t.Logf("%s restarted and current; stream leader now %s; publisher serve on %s", n.name, cr.in.streamLeader(30*time.Second), cr.servedBy())
		cr.finish(s)
	})
	// (b) the stream leader steps down, twice during one shipment. The
	// journal grows while it ships (publisher journal --follow, as a harness
	// appends): with one-shot runs the gate shipped all 3,000 lines while
	// the first step-down settled, and the second had nothing to land on.
	// Each step-down comes with hundreds of written lines not yet stored.
	phase("StepDown", func(t *testing.T) {
		s := cr.startFollowShipment("step-down", 1900)
		subj := cr.in.subj.Journal(s.roomID, s.cap.key())
		for i, at := range []uint64{700, 2200} {
			if i == 1 {
				s.cap.grow(t, len(s.cap.lines))
			}
			got := cr.in.waitCount(subj, at, 60*time.Second)
			old := cr.in.streamLeader(10 * time.Second)
			now := cr.in.stepDown(old)
			stored := cr.in.count(subj)
			cr.cl.waitSettled(30 * time.Second)
			cr.tl.Faults++
			t.Logf("fault: stream leader %s stepped down at >= %d entries (%d of the %d written stored when %s took over)", old, got, stored, s.cap.written, now)
		}
		cr.finishFollow(s)
	})
	// (c) the stream leader is cut off from the others (its routes, both
	// ways) for 6s, then healed.
	phase("CutLeaderRoutes", func(t *testing.T) {
		s := cr.startShipment("cut-leader")
		at := cr.waitProgress(s, 1300)
		leader := cr.cl.node(cr.in.streamLeader(10 * time.Second))
		cr.cl.cut(leader)
		cr.tl.Faults++
		t.Logf("fault: routes of stream leader %s cut at >= %d entries (publisher serve on %s)", leader.name, at, cr.servedBy())
		time.Sleep(6 * time.Second)
		cr.cl.heal(leader)
		cr.cl.waitHealthy(leader, 60*time.Second)
		cr.cl.waitSettled(60 * time.Second)
		t.Logf("%s healed and current; stream leader now %s", leader.name, cr.in.streamLeader(30*time.Second))
		cr.finish(s)
	})
	// (c') the server publisher serve is connected to is cut off for 6s.
	phase("CutServeServerRoutes", func(t *testing.T) {
		s := cr.startShipment("cut-serve-server")
		at := cr.waitProgress(s, 1300)
		n := cr.cl.connectedTo("roompub-publisher")
		if n == nil {
			t.Fatal("publisher serve is connected to no server")
		}
		leader := cr.in.streamLeader(10 * time.Second)
		cr.cl.cut(n)
		cr.tl.Faults++
		t.Logf("fault: routes of %s, the server publisher serve is connected to, cut at >= %d entries (stream leader %s)", n.name, at, leader)
		time.Sleep(6 * time.Second)
		cr.cl.heal(n)
		cr.cl.waitHealthy(n, 60*time.Second)
		cr.cl.waitSettled(60 * time.Second)
		t.Logf("%s healed and current; stream leader now %s", n.name, cr.in.streamLeader(30*time.Second))
		cr.finish(s)
	})
	// (c'') only the routes between publisher serve's server (a follower)
	// and the stream leader are cut, for 8s: that follower's copy lags
	// while the other two go on.
	phase("CutServeServerFromLeader", func(t *testing.T) {
		n := cr.cl.connectedTo("roompub-publisher")
		if n == nil {
			t.Fatal("publisher serve is connected to no server")
		}
		// The phase's room is placed by its first line: its stream's
		// leader is known once the shipment starts (a step-down then, if
		// serve's server leads it, is an election the gate rides out).
		s := cr.startShipment("lagging-replica")
		leader := cr.in.streamLeader(10 * time.Second)
		for leader == n.name {
			leader = cr.in.stepDown(leader)
		}
		at := cr.waitProgress(s, 1300)
		l := cr.cl.node(leader)
		cr.cl.cutBetween(n, l, true)
		cr.tl.Faults++
		t.Logf("fault: routes between %s (publisher serve's server, a follower) and stream leader %s cut at >= %d entries", n.name, l.name, at)
		time.Sleep(8 * time.Second)
		cr.cl.cutBetween(n, l, false)
		// An audit through the lagging server, at once: its ordered
		// consumer may sit on that replica, which reports nothing pending
		// before it has caught up (an audit of 13950c4 stopped 25 short).
		auditReadsAll(t, n.url())
		cr.cl.waitHealthy(n, 60*time.Second)
		cr.cl.waitSettled(60 * time.Second)
		t.Logf("healed; stream leader now %s", cr.in.streamLeader(30*time.Second))
		cr.finish(s)
	})
	// (d) SIGKILL of publisher serve mid-shipment, restarted; the journal
	// is shipped with --follow, which rides it out.
	phase("KillServe", func(t *testing.T) { cr.killServePhase() })
}

// servedBy names the server publisher serve is connected to.
func (cr *clusterRun) servedBy() string {
	if n := cr.cl.connectedTo("roompub-publisher"); n != nil {
		return n.name
	}
	return "(none)"
}

// killServePhase: `publisher journal --follow` ships while `publisher
// serve` is SIGKILLed and restarted; the follower rides it out and ships
// the rest, each entry once. Records are shipped one-shot and re-run.
func (cr *clusterRun) killServePhase() {
	t := cr.t
	t.Helper()
	// The records' run loses the replies serve took with it and waits
	// them out (exit 2, run again): 10s rather than the default 30s.
	s := cr.startFollowShipment("kill-serve", clusterEntries, "--timeout", "10s")
	f := s.journal
	subj := cr.in.subj.Journal(s.roomID, s.cap.key())
	at := cr.in.waitCount(subj, 800, 60*time.Second)
	cr.srv.kill()
	cr.tl.Faults++
	after := cr.in.count(subj)
	t.Logf("fault: SIGKILL of publisher serve at >= %d entries (%d stored when it was dead)", at, after)
	time.Sleep(time.Second)
	if !f.running() {
		t.Fatalf("oracle (shipper resumes without help): the follower exited when publisher serve died: %d\n%s", f.cmd.ProcessState.ExitCode(), f.stderr)
	}
	cr.srv.restart(t)
	t.Logf("publisher serve restarted after %s", time.Since(s.started).Round(time.Millisecond))
	cr.finishFollow(s)
}

// startFollowShipment writes a phase's capsule with only its first written
// lines (grow adds the rest) and ships it with `publisher journal --follow`,
// and its records one-shot with execFlags. --timeout 10s: a batch whose
// reply is lost (serve killed, leader gone) is asked again after that
// long.
func (cr *clusterRun) startFollowShipment(name string, written int, execFlags ...string) *shipment {
	t := cr.t
	t.Helper()
	s := &shipment{name: name, roomID: "room:fault-" + name, started: time.Now()}
	s.cap = newCapsule(t, filepath.Join(cr.dir, name, "capsule"), "run-fault-"+name, clusterEntries)
	if written < len(s.cap.lines) {
		s.cap.truncate(t, written)
	}
	s.recs = newRecords(t, filepath.Join(cr.dir, name, "records"), cr.key, s.roomID, name, clusterRecords)
	s.journal = startProc(t, "publisher journal --follow", publisherBin, "journal", "--follow", "--json", "--timeout", "10s", "--server", cr.cl.urls(), "--room", s.roomID, s.cap.dir)
	s.exec = startProc(t, "publisher execution", publisherBin, append(append([]string{"execution", "--json", "--server", cr.cl.urls()}, execFlags...), s.recs.files...)...)
	s.stream = cr.in.useRoom(s.roomID)
	return s
}

// finishFollow waits until the follower has shipped the whole capsule (it
// must ride out the phase's faults on its own), stops it with SIGTERM,
// re-runs the records until done and checks every oracle for the phase.
func (cr *clusterRun) finishFollow(s *shipment) {
	t := cr.t
	t.Helper()
	f := s.journal
	if s.cap.written != len(s.cap.lines) {
		t.Fatalf("finishFollow: the journal holds %d of %d lines", s.cap.written, len(s.cap.lines))
	}
	subj := cr.in.subj.Journal(s.roomID, s.cap.key())
	cr.in.waitCount(subj, uint64(len(s.cap.lines)), 90*time.Second)
	t.Logf("the follower shipped the rest by %s", time.Since(s.started).Round(time.Millisecond))
	time.Sleep(600 * time.Millisecond) // more polls: nothing is sent twice
	if st := f.term(); st != 0 {
		t.Errorf("oracle (shipper resumes without help): follower exit %d after SIGTERM, want 0\n%s", st, tail(f.stderr.String(), 3000))
	}
	lines := parseShipLines(t, f.stdout.String())
	if len(lines) == 0 {
		t.Fatalf("the follower reported nothing:\n%s", f.stderr)
	}
	last := lines[len(lines)-1]
	if last.Refused != nil || !last.OK || last.Head.Next != int64(len(s.cap.lines)) || last.acked() != len(s.cap.lines) {
		t.Fatalf("follower's last report: %d already stored + %d stored + %d duplicates, head next %d; want them to add up to %d: %+v",
			last.AlreadyStored, last.Stored, last.Duplicates, last.Head.Next, len(s.cap.lines), last)
	}
	maxAcked := 0
	for _, l := range lines {
		maxAcked = max(maxAcked, l.acked())
		if l.Refused != nil {
			t.Fatalf("oracle (no valid line refused): follower: %+v", l)
		}
	}
	rr := &recordRuns{acked: map[string]room.Outcome{}}
	estatus := s.exec.wait(3 * time.Minute)
	rr.note(t, result{status: estatus, stdout: s.exec.stdout.String()})
	t.Logf("follower reported %d lines in the stream (%d duplicates); first publisher execution run: exit %d, %d of %d acknowledged",
		maxAcked, last.Duplicates, estatus, len(rr.acked), len(s.recs.files))
	if estatus != 0 {
		cr.tl.Reruns++
		more := shipRecordsUntilDone(t, cr.tl, cr.cl.urls(), s.recs, 8)
		for f, o := range more.acked {
			rr.acked[f] = o
		}
		rr.dupes += more.dupes
	}
	cr.tl.DupsReported += last.Duplicates + rr.dupes
	// The gate rides out the fault: no valid item answered "failed".
	if n := gateFailures(f.stderr.String()) + rr.failed; n != 0 {
		cr.tl.GateFailed += n
		t.Errorf("oracle (the gate rides out the fault): %d items answered failed (not decided) by the gate:\n%s", n, tail(f.stderr.String(), 3000))
	}
	cr.entries += uint64(len(s.cap.lines))
	cr.records += uint64(len(s.recs.recs))
	cr.chains++
	cr.in.checkChain(cr.tl, s.cap, s.roomID, maxAcked)
	cr.in.checkRecords(cr.tl, s.recs, len(rr.acked))
	auditClean(t, cr.tl, cr.cl.urls(), []string{cr.key.NodeID()}, cr.entries, cr.records, cr.chains)
}

// TestClusterStaleReplica: two `publisher serve` processes on one stream
// (several gates may serve it: docs/design.md, "Appends and races"), one
// connected only to a
// follower X, the other only to the stream leader L. X is cut off (its
// routes, both ways), so its copy stops at what it had while L and the
// third server go on storing through the other gate. A client on X then
// sends the chain's next lines, which follow what the other gate stored:
// they are valid, so the gate on X must not refuse them, however stale its
// server's copy is (a refusal is final; direct gets are answered by X from
// that copy). It waits while X is cut off and stores them once the cut
// heals, 3s later. Oracles: no valid line refused, nothing failed, no
// acknowledged entry lost, exactly one stored copy, no fork, audit clean.
func TestClusterStaleReplica(t *testing.T) {
	tl := count(t)
	key := hostKey(t)
	cl := startCluster(t, 3)
	// The stream, created by a serve on every server, then stopped.
	first := startServe(t, "--server", cl.urls(), "--replicas", "3", "--trusted-host", key.NodeID(), "--log-level", "warn")
	if st := first.term(); st != 0 {
		t.Fatalf("publisher serve: exit %d after SIGTERM", st)
	}
	in := inspect(t, cl.urls())
	l := cl.node(in.streamLeader(30 * time.Second))
	var x *natsNode
	for _, n := range cl.nodes {
		if n != l {
			x = n
			break
		}
	}
	serveX := startServe(t, "--server", x.url(), "--trusted-host", key.NodeID(), "--log-level", "warn")
	serveL := startServe(t, "--server", l.url(), "--trusted-host", key.NodeID(), "--log-level", "warn")
	_, _ = serveX, serveL
	c := newCapsule(t, filepath.Join(t.TempDir(), "stale"), "run-stale-replica", 210)
	const roomID = "room:stale-replica"
	onX, onL := ingestClient(t, x.url()), ingestClient(t, l.url())

	send := func(cli *client.Client, from, to int) room.JournalReply {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		meta := c.meta
		rep, err := cli.AppendJournal(ctx, roomID, &meta, joinLines(c.lines[from:to]))
		if err != nil {
			t.Fatalf("lines %d-%d: %v\npublisher serve on %s (tail):\n%s\npublisher serve on %s (tail):\n%s", from+1, to, err,
				x.name, tail(serveX.stderr.String(), 4000), l.name, tail(serveL.stderr.String(), 4000))
		}
		return rep
	}
	if rep := send(onX, 0, 100); rep.Stored != 100 {
		t.Fatalf("lines 1-100 through the gate on %s: %+v\n%s\n%s", x.name, rep.Items[0], serveX.stderr, serveL.stderr)
	}
	// A follower answers direct gets once it is current; the server looks
	// every 2s.
	time.Sleep(5 * time.Second)
	cl.cut(x)
	tl.Faults++
	t.Logf("fault: routes of %s (a follower; a gate on it) cut; stream leader %s", x.name, l.name)
	// Lines 101-200 only set the scene; a client whose request got no
	// answer sends it again, as publisher journal does (the gate decides a
	// resend by content). One run in five of this test got no answer here
	// within 60s (before atomic batches too); the cause is not found.
	var rep101 room.JournalReply
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		meta := c.meta
		r, err := onL.AppendJournal(ctx, roomID, &meta, joinLines(c.lines[100:200]))
		cancel()
		if err == nil {
			rep101 = r
			break
		}
		if try == 3 {
			t.Fatalf("lines 101-200: %v (3 tries)\npublisher serve on %s (tail):\n%s\npublisher serve on %s (tail):\n%s", err,
				x.name, tail(serveX.stderr.String(), 4000), l.name, tail(serveL.stderr.String(), 4000))
		}
		t.Logf("lines 101-200 through the gate on %s, try %d: %v; sending again", l.name, try, err)
	}
	if rep101.Stored+rep101.Dupes != 100 {
		t.Fatalf("lines 101-200 through the gate on %s: %+v", l.name, rep101)
	}
	// Lines 201-210 through the gate on X while the cut lasts; it heals
	// 3s later. The gate waits out the cut (no leader to ask) and stores
	// them.
	healed := make(chan struct{})
	go func() {
		time.Sleep(3 * time.Second)
		cl.heal(x)
		close(healed)
	}()
	start := time.Now()
	rep := send(onX, 200, 210)
	<-healed
	t.Logf("lines 201-210 through the gate on %s, sent while cut, answered after %s: %d stored, %d duplicates, %d refused, %d failed, %d skipped; first item %s %s %s",
		x.name, time.Since(start).Round(time.Millisecond), rep.Stored, rep.Dupes, rep.Refused, rep.Failures, rep.Skipped, rep.Items[0].Outcome, rep.Items[0].Code, rep.Items[0].Reason)
	if rep.Refused != 0 {
		t.Errorf("oracle (no valid line refused): the gate on %s refused line 201 (%s: %s): it decided on its replica's stale view of the chain",
			x.name, rep.Items[0].Code, rep.Items[0].Reason)
	}
	if rep.Stored != 10 || rep.Failures != 0 {
		t.Errorf("the gate on %s did not wait out a 3s cut: %d stored, %d failed (%s), want 10 stored", x.name, rep.Stored, rep.Failures, rep.Items[0].Reason)
	}
	cl.waitHealthy(x, 60*time.Second)
	cl.waitSettled(60 * time.Second)
	in.checkChain(tl, c, roomID, 210)
	auditClean(t, tl, cl.urls(), []string{key.NodeID()}, 210, 0, 1)
}

// ingestClient is a client.Client on a connection to url only.
func ingestClient(t *testing.T, url string) *client.Client {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return client.New(nc, client.Options{Timeout: 60 * time.Second})
}
