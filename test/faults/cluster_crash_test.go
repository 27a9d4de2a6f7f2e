package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/test/crashfs"
)

// nodeStream is one server's own copy of the room stream, as its /jsz
// reports it.
type nodeStream struct {
	Created    time.Time
	Msgs       uint64
	Bytes      uint64
	FirstSeq   uint64
	LastSeq    uint64
	NumDeleted int
	Leader     string
}

func (s nodeStream) String() string {
	return fmt.Sprintf("%d messages, %d bytes, seqs %d-%d, %d deleted, leader %q", s.Msgs, s.Bytes, s.FirstSeq, s.LastSeq, s.NumDeleted, s.Leader)
}

// same is whether two copies hold the same stream state (the leader each
// names aside).
func (s nodeStream) same(o nodeStream) bool {
	return s.Created.Equal(o.Created) && s.Msgs == o.Msgs && s.Bytes == o.Bytes && s.FirstSeq == o.FirstSeq && s.LastSeq == o.LastSeq && s.NumDeleted == o.NumDeleted
}

// nodeStream returns server n's copy of the room stream; ok is false when
// the server does not answer or holds no copy.
func (c *cluster) nodeStream(n *natsNode) (nodeStream, bool) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz?streams=true", n.httpPort))
	if err != nil {
		return nodeStream{}, false
	}
	defer resp.Body.Close()
	var j struct {
		AccountDetails []struct {
			Streams []struct {
				Name    string    `json:"name"`
				Created time.Time `json:"created"`
				State   struct {
					Msgs       uint64 `json:"messages"`
					Bytes      uint64 `json:"bytes"`
					FirstSeq   uint64 `json:"first_seq"`
					LastSeq    uint64 `json:"last_seq"`
					NumDeleted int    `json:"num_deleted"`
				} `json:"state"`
				Cluster struct {
					Leader string `json:"leader"`
				} `json:"cluster"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if json.NewDecoder(resp.Body).Decode(&j) != nil {
		return nodeStream{}, false
	}
	for _, a := range j.AccountDetails {
		for _, st := range a.Streams {
			if st.Name == room.DefaultStream {
				return nodeStream{Created: st.Created, Msgs: st.State.Msgs, Bytes: st.State.Bytes, FirstSeq: st.State.FirstSeq,
					LastSeq: st.State.LastSeq, NumDeleted: st.State.NumDeleted, Leader: st.Cluster.Leader}, true
			}
		}
	}
	return nodeStream{}, false
}

// waitCopiesEqual waits until every server holds a copy of the room stream
// and the copies are the same, holding at least min messages, and returns
// them: a server that crashed has caught up with the others.
func (c *cluster) waitCopiesEqual(min uint64, within time.Duration) []nodeStream {
	c.t.Helper()
	deadline := time.Now().Add(within)
	var views []string
	for {
		views = views[:0]
		var copies []nodeStream
		for _, n := range c.nodes {
			s, ok := c.nodeStream(n)
			if !ok {
				views = append(views, n.name+": no copy")
				continue
			}
			views = append(views, n.name+": "+s.String())
			copies = append(copies, s)
		}
		if len(copies) == len(c.nodes) && copies[0].Msgs >= min && copies[1].same(copies[0]) && copies[2].same(copies[0]) {
			return copies
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the servers' copies of the room stream are not the same after %s: %s", within, strings.Join(views, "; "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// crash is a power loss of the machines of nodes, at once: every one's
// nats-server is SIGKILLed, then each one's crash filesystem drops what the
// server did not make durable and is mounted again (the servers stay down:
// start or restart them).
func (c *cluster) crash(nodes ...*natsNode) []crashfs.CrashStats {
	c.t.Helper()
	for _, n := range nodes {
		if n.cfs == nil {
			c.t.Fatalf("crash of %s: its store is not on a crash filesystem (clusterOptions.Crash)", n.name)
		}
		_ = n.proc.cmd.Process.Signal(syscall.SIGKILL)
	}
	for _, n := range nodes {
		<-n.proc.exited
	}
	var out []crashfs.CrashStats
	for _, n := range nodes {
		st, err := n.cfs.Crash()
		if err != nil {
			c.t.Fatalf("crash of %s's filesystem: %v", n.name, err)
		}
		out = append(out, st)
	}
	return out
}

// startAll starts every server again after a crash of all of them and
// waits until each is healthy and the meta group has a leader.
func (c *cluster) startAll(within time.Duration) {
	c.t.Helper()
	for _, n := range c.nodes {
		c.start(n)
	}
	for _, n := range c.nodes {
		c.waitHealthy(n, within)
	}
	c.waitMeta(within)
}

// streamExists says whether the cluster holds the room stream: found, or
// not found by every answer for 10s (the meta group may still be applying
// its log right after a start).
func (c *cluster) streamExists(within time.Duration) bool {
	c.t.Helper()
	nc, err := nats.Connect(c.urls())
	if err != nil {
		c.t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	start := time.Now()
	var notFoundSince time.Time
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := js.Stream(ctx, room.DefaultStream)
		cancel()
		switch {
		case err == nil:
			return true
		case errors.Is(err, jetstream.ErrStreamNotFound):
			if notFoundSince.IsZero() {
				notFoundSince = time.Now()
			}
			if time.Since(notFoundSince) >= 10*time.Second {
				return false
			}
		default:
			notFoundSince = time.Time{}
		}
		if time.Since(start) > within {
			c.t.Fatalf("stream %s: no answer within %s: %v", room.DefaultStream, within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestClusterCrashOne: the power loss of one machine of the 3-server
// cluster, the stream leader's, mid-shipment. Each server keeps its store
// on a crash filesystem of its own (crashfs.POSIX) and runs with the fault
// suite's sync interval, NATS's default (2 minutes: a server acknowledges
// before its store is on disk, and fsyncs nothing in its first minute).
// The real shippers ship a 3,000-entry journal and 60 records through
// `publisher serve --replicas 3`; at >= 1,300 entries the stream leader is
// SIGKILLed and its filesystem crashed, and it is started again on what
// is left 2s later. Oracles: the crash dropped acknowledged data on that
// server (the crash has teeth); every entry and record a shipper
// acknowledged is stored, exactly once, in order; no fork; audit clean;
// the gate never answered a valid item "failed"; the shippers finish when
// run again; the crashed server repairs: its copy of the stream ends the
// same as the other two.
func TestClusterCrashOne(t *testing.T) {
	cr := &clusterRun{t: t, tl: count(t), dir: t.TempDir(), key: hostKey(t)}
	start := time.Now()
	cr.cl = startClusterWith(t, 3, clusterOptions{Crash: true, Model: crashfs.POSIX})
	cr.srv = startServe(t, "--server", cr.cl.urls(), "--replicas", "3", "--trusted-host", cr.key.NodeID(), "--log-level", "warn",
		"--max-batch", strconv.Itoa(clusterBatch))
	cr.cl.waitService(t, "")
	cr.in = inspect(t, cr.cl.urls())
	t.Logf("cluster of 3 on crash filesystems and publisher serve up in %s", time.Since(start).Round(time.Millisecond))

	s := cr.startShipment("crash-one")
	at := cr.waitProgress(s, 1300)
	leader := cr.cl.node(cr.in.streamLeader(10 * time.Second))
	before, _ := cr.cl.nodeStream(leader)
	dropped := cr.cl.crash(leader)[0]
	cr.tl.Faults++
	t.Logf("fault: power loss of stream leader %s at >= %d entries (publisher serve on %s); its copy held %s; the crash dropped %d bytes and %d names (%s)",
		leader.name, at, cr.servedBy(), before, dropped.BytesDropped, len(dropped.NamesDropped), sample(dropped.NamesDropped, 6))
	// The teeth: under the 2-minute interval the server fsynced nothing
	// yet, so the crash takes its whole store (jetstream/ and everything
	// under it: the meta group's log, the stream, its Raft log).
	if uint64(dropped.BytesDropped) < before.Bytes || !containsName(dropped.NamesDropped, "jetstream") || !containsName(dropped.NamesDropped, "jetstream/$G/streams/ROOMS/msgs/1.blk") {
		t.Fatalf("oracle (the crash has teeth): the crash of %s dropped %d bytes (its copy held %d) and names %s; want its whole store gone",
			leader.name, dropped.BytesDropped, before.Bytes, sample(dropped.NamesDropped, 10))
	}
	time.Sleep(2 * time.Second)
	cr.cl.restart(leader)
	back, _ := cr.cl.nodeStream(leader)
	t.Logf("%s restarted on what the crash left and healthy (its copy: %s); stream leader now %s", leader.name, back, cr.in.streamLeader(30*time.Second))
	cr.finish(s)
	if t.Failed() {
		return
	}
	copies := cr.cl.waitCopiesEqual(cr.entries+cr.records, 60*time.Second)
	t.Logf("repaired: every server's copy of the stream is the same: %s", copies[0])
}

func containsName(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// TestClusterCrashAll: the power loss of every machine of the 3-server
// cluster at once, mid-shipment (a correlated crash: one rack, one power
// feed). It runs only in `make test-crash` (ROOMPUB_CLUSTER_CRASH=1), one
// case a cluster:
//
//   - journaled-always: crashfs.Journaled (ext4, xfs), sync_interval:
//     always on every server (an fsync before every acknowledgement).
//     Oracle: nothing acknowledged is lost.
//   - posix-always: crashfs.POSIX (a name is durable once its directory
//     is fsynced), sync_interval: always. nats-server fsyncs no directory
//     it creates (docs/reliability.md), and on a cluster roompub cannot
//     fsync them for it: the test pins what is lost and what detects it.
//   - journaled-2m: crashfs.Journaled, NATS's default interval (2
//     minutes), for the contrast: acknowledged writes are lost (the crash
//     has teeth).
//
// In each, the first 1,000 entries of a 5,000-entry journal are shipped
// and checkpointed and a reader's audit keeps the checkpoint (its state
// directory); the rest of the journal and 100 records are then shipped at
// once, and all three servers are SIGKILLed and their filesystems crashed
// at a random point between 1,500 and 3,500 entries. The servers start
// again on what is left; publisher serve, which ran through it, is
// watched, then restarted when something was lost; the reader audits with
// its state; the same shipper commands run again. Every case then ends as
// every fault test does: each item stored exactly once, in order, no fork,
// audit clean, the three copies the same.
func TestClusterCrashAll(t *testing.T) {
	if os.Getenv("ROOMPUB_CLUSTER_CRASH") == "" {
		t.Skip("the crash of the whole cluster runs in make test-crash (ROOMPUB_CLUSTER_CRASH=1)")
	}
	key := hostKey(t)
	for _, tc := range []clusterCrashCase{
		{name: "journaled-always", model: crashfs.Journaled, interval: "always", expect: noLoss},
		{name: "posix-always", model: crashfs.POSIX, interval: "always", expect: streamGone},
		{name: "posix-always-serve-runs", model: crashfs.POSIX, interval: "always", serveRuns: true, expect: streamGone},
		{name: "journaled-2m", model: crashfs.Journaled, expect: streamGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clusterCrashAll(t, count(t), key, tc)
		})
	}
}

type clusterCrashCase struct {
	name     string
	model    crashfs.Model
	interval string // sync_interval; "" for NATS's default
	// serveRuns: publisher serve runs through the crash (its machine keeps
	// power); else it is SIGKILLed with the servers and started again
	// after them.
	serveRuns bool
	expect    crashExpect
	drops     []crashfs.CrashStats // what the crash dropped on each server (set by the run)
}

// crashExpect is what a case's crash does to the stream.
type crashExpect int

const (
	noLoss     crashExpect = iota // every acknowledged item stays
	streamGone                    // the stream is gone on every server (pinned findings)
)

// clusterCrashAllFigures is what one correlated crash did.
type clusterCrashAllFigures struct {
	crashFigures
	perNode   []string   // what the crash dropped on each server
	committed nodeStream // the stream leader's copy a moment before the crash
	exists    bool       // the room stream, after the restart
	after     nodeStream // the copies after the restart (all the same), when it exists
	guardSaid string     // the log of the publisher serve that ran through the crash, after it
	// publisher serve's start after the crash
	serveRefused bool
	serveExit    int
	serveSaid    string
	// the audit holding the checkpoint from before the crash
	auditExit int
	audit     crashAudit
}

func (f clusterCrashAllFigures) String() string {
	after := "no stream"
	if f.exists {
		after = f.after.String()
	}
	return fmt.Sprintf("%s; the stream leader held %d messages (last seq %d) before, the copies %s after", f.crashFigures, f.committed.Msgs, f.committed.LastSeq, after)
}

func clusterCrashAll(t *testing.T, tl *tally, key *events.HostKey, tc clusterCrashCase) {
	ownAuditState(t)
	started := time.Now()
	cl := startClusterWith(t, 3, clusterOptions{SyncInterval: tc.interval, Crash: true, Model: tc.model})
	srv := &serve{bin: publisherBin, args: []string{"--server", cl.urls(), "--replicas", "3", "--trusted-host", key.NodeID(), "--log-level", "warn",
		"--max-batch", strconv.Itoa(clusterBatch), "--checkpoint-interval", "1s", "--publisher-key", publisherKeyFile, "--allow-open-key-file",
		// The stream mark on serve's own disk too: the streams bucket is
		// lost with the cluster's stores.
		"--stream-mark", filepath.Join(t.TempDir(), "rooms.mark")}}
	srv.proc = startProc(t, "publisher serve", publisherBin, append([]string{"serve"}, srv.args...)...)
	if refused, status := srv.upOrRetry(t); refused {
		t.Fatalf("publisher serve on the new cluster: exit %d\n%s", status, tail(srv.stderr.String(), 3000))
	}
	cl.waitService(t, "")
	in := inspect(t, cl.urls())
	roomID := "room:cluster-crash-" + tc.name
	dir := t.TempDir()
	c := newCapsule(t, filepath.Join(dir, "capsule"), "run-cluster-crash-"+tc.name, 5000)
	rs := newRecords(t, filepath.Join(dir, "records"), key, roomID, "ccrash-"+tc.name, 100)

	// A reader's view before the crash: 1,000 entries, checkpointed.
	const first = 1000
	c.truncate(t, first)
	if l, r := shipJournal(t, cl.urls(), roomID, c); r.status != 0 || l.acked() != first {
		t.Fatalf("the first %d entries: exit %d, %d acknowledged\n%s", first, r.status, l.acked(), tail(r.stderr, 3000))
	}
	c.grow(t, len(c.lines))
	time.Sleep(2 * time.Second) // the room's checkpoint (every 1s)
	state := t.TempDir()
	st, before, r := auditState(t, cl.urls(), state, key)
	if st != 0 || before.Totals.Entries != first || len(before.Checkpoints) != 1 || before.Checkpoints[0].Latest == nil {
		t.Fatalf("audit before the crash: exit %d, %d entries, checkpoints %+v; want exit 0, %d entries, a checkpoint\n%s", st, before.Totals.Entries, before.Checkpoints, first, tail(r.stderr, 2000))
	}
	kept := before.Checkpoints[0].Latest.Size

	// The shipment, and the crash of all three servers in the middle of it.
	ship := startProc(t, "publisher journal", publisherBin, "journal", "--json", "--server", cl.urls(), "--room", roomID, c.dir)
	exec := startProc(t, "publisher execution", publisherBin, append([]string{"execution", "--json", "--server", cl.urls()}, rs.files...)...)
	at := uint64(2200 + mrand.IntN(1300))
	seen := in.waitCount(in.subj.Journal(roomID, c.key()), at, 2*time.Minute)
	if !ship.running() {
		t.Fatalf("the shipment ended before the crash (%d entries stored):\n%s", seen, ship.stdout)
	}
	leader := cl.node(in.streamLeader(10 * time.Second))
	// What the stream leader had stored (committed by a quorum, and
	// acknowledged to serve or about to be) a moment before the crash: a
	// lower bound of what was acknowledged.
	committed, _ := cl.nodeStream(leader)
	// The power loss takes publisher serve's machine too, unless
	// serveRuns: a gate that rides the outage out stores its requests
	// once the servers are back, which blurs what was stored before.
	if !tc.serveRuns {
		srv.kill()
	}
	if tc.interval == "" && time.Since(started) > 55*time.Second {
		t.Fatalf("the crash would come %s after the servers started: they may have synced (the first background sync comes 60 to 120s after a store opens)", time.Since(started).Round(time.Second))
	}
	drops := cl.crash(cl.nodes...)
	tl.Faults++
	crashedAt := time.Now()
	tc.drops = drops
	serveLogAt := len(srv.stderr.String())
	in.nc.Close()
	var f clusterCrashAllFigures
	f.committed = committed
	for i, n := range cl.nodes {
		d := drops[i]
		f.dropped.BytesDropped += d.BytesDropped
		f.dropped.NamesDropped = append(f.dropped.NamesDropped, d.NamesDropped...)
		ops := n.cfs.Ops()
		f.perNode = append(f.perNode, fmt.Sprintf("%s: %d bytes, %d names (%s) [it made %d writes, %d synchronous, %d file fsyncs, %d directory fsyncs]",
			n.name, d.BytesDropped, len(d.NamesDropped), sample(d.NamesDropped, 4), ops.Writes, ops.SyncWrites, ops.Fsyncs, ops.DirFsyncs))
	}
	what := "all three servers and publisher serve"
	if tc.serveRuns {
		what = "all three servers (publisher serve runs on)"
	}
	t.Logf("fault: power loss of %s at >= %d entries (stream leader %s held %s); the crash dropped %s",
		what, seen, leader.name, committed, strings.Join(f.perNode, "; "))

	// What the shippers acknowledged before it.
	status := ship.wait(2 * time.Minute)
	lines := parseShipLines(t, ship.stdout.String())
	if status != 2 || len(lines) != 1 || lines[0].OK || lines[0].Refused != nil {
		t.Fatalf("publisher journal after the crash: exit %d, want 2 with one line saying what was stored\n%s%s", status, ship.stdout, tail(ship.stderr.String(), 3000))
	}
	rr := &recordRuns{acked: map[string]room.Outcome{}}
	rr.note(t, result{status: exec.wait(2 * time.Minute), stdout: exec.stdout.String()})
	f.ackedEntries, f.ackedRecords = lines[0].acked(), len(rr.acked)

	// The machines come back; serve is not started yet, so nothing
	// writes.
	cl.startAll(2 * time.Minute)
	f.exists = cl.streamExists(time.Minute)
	if f.exists {
		cl.waitSettled(time.Minute)
		in = inspect(t, cl.urls())
		f.foundEntries, f.foundRecords = in.found(c, roomID, f.ackedEntries, rs, rr)
		f.after = cl.waitCopiesEqual(0, time.Minute)[0]
	}
	t.Logf("%s: the servers are back %s after the crash; %s", tc.name, time.Since(crashedAt).Round(time.Millisecond), f)

	if tc.serveRuns {
		// Its stream check runs every 30s.
		mark := serveLogAt
		deadline := time.Now().Add(45 * time.Second)
		for time.Now().Before(deadline) && !strings.Contains(srv.stderr.String()[mark:], "room stream check failed") {
			time.Sleep(200 * time.Millisecond)
		}
		time.Sleep(time.Second)
		f.guardSaid = srv.stderr.String()[mark:]
		if st := srv.term(); st != 0 {
			t.Logf("publisher serve: exit %d after SIGTERM", st)
		}
	}
	// publisher serve starts again: its stream mark (in the streams
	// bucket, on the same cluster) against what is left.
	srv.proc = startProc(srv.proc.t, srv.proc.name, publisherBin, append([]string{"serve"}, srv.args...)...)
	f.serveRefused, f.serveExit = srv.upOrRetry(t)
	f.serveSaid = firstLine(srv.stderr.String())
	t.Logf("publisher serve restarted: refused %v, exit %d: %s", f.serveRefused, f.serveExit, f.serveSaid)
	if f.serveRefused {
		srv.args = append(srv.args, "--accept-stream")
		srv.proc = startProc(srv.proc.t, srv.proc.name, publisherBin, append([]string{"serve"}, srv.args...)...)
		if refused, status := srv.upOrRetry(t); refused {
			t.Fatalf("publisher serve --accept-stream: exit %d\n%s", status, tail(srv.stderr.String(), 3000))
		}
	}
	cl.waitService(t, "")

	// The reader holding the checkpoint from before the crash.
	f.auditExit, f.audit, r = auditState(t, cl.urls(), state, key)
	t.Logf("audit with the checkpoint of size %d: exit %d, by code %v, checkpoints %+v\n%s", kept, f.auditExit, f.audit.Totals.ByCode, f.audit.Checkpoints, tail(r.stderr, 1500))

	// The same commands again; then every oracle.
	jr := shipUntilDone(t, tl, cl.urls(), roomID, c, 4)
	more := shipRecordsUntilDone(t, tl, cl.urls(), rs, 4)
	tl.DupsReported += jr.dupes() + more.dupes
	t.Logf("shipped again: journal %d already stored, %d stored, %d duplicates; records %d acknowledged (%d duplicates)",
		jr.runs[0].AlreadyStored, jr.runs[0].Stored, jr.runs[0].Duplicates, len(more.acked), more.dupes)
	in = inspect(t, cl.urls())
	in.checkChain(tl, c, roomID, max(f.ackedEntries, jr.maxAcked()))
	in.checkRecords(tl, rs, len(more.acked))
	auditClean(t, tl, cl.urls(), []string{key.NodeID()}, uint64(len(c.lines)), uint64(len(rs.recs)), 1)
	cs := cl.waitCopiesEqual(uint64(len(c.lines)+len(rs.recs)), time.Minute)
	t.Logf("every server's copy of the stream is the same: %s", cs[0])
	tc.check(t, f, jr)
}

// check is the case's oracles on what the crash did.
func (tc clusterCrashCase) check(t *testing.T, f clusterCrashAllFigures, jr *journalRuns) {
	t.Helper()
	first := jr.runs[0]
	switch tc.expect {
	case noLoss:
		if f.lost() != 0 || !f.exists || f.after.LastSeq < f.committed.LastSeq || f.after.Msgs < f.committed.Msgs {
			t.Errorf("FINDING (oracle: with sync_interval always on a journaling filesystem no acknowledged item is lost): %s", f)
		}
		if f.serveRefused || f.auditExit != 0 || f.audit.Totals.ByCode["checkpoint_mismatch"] != 0 {
			t.Errorf("nothing was lost, yet publisher serve refused (%v: %s) or the audit with the earlier checkpoint exited %d (%v)", f.serveRefused, f.serveSaid, f.auditExit, f.audit.Totals.ByCode)
		}
		if first.AlreadyStored < f.ackedEntries {
			t.Errorf("the journal shipped again: %d already stored, fewer than the %d acknowledged", first.AlreadyStored, f.ackedEntries)
		}
	case streamGone:
		if f.dropped.BytesDropped == 0 || f.ackedEntries == 0 {
			t.Fatalf("oracle (the crash has teeth): the crash dropped %d bytes; %d entries acknowledged", f.dropped.BytesDropped, f.ackedEntries)
		}
		// What happens, pinned: the whole stream is gone on every server,
		// with the streams bucket that holds serve's stream mark.
		if f.exists || f.foundEntries != 0 || f.foundRecords != 0 {
			t.Errorf("%s: the stream survived the crash of all three servers: %s; the finding in docs/reliability.md (\"Crashes on the cluster\") has changed", tc.name, f)
		}
		if tc.model == crashfs.POSIX {
			for i, n := range tc.drops {
				if !containsName(n.NamesDropped, "jetstream") {
					t.Errorf("%s: the crash left jetstream/ on n%d (dropped %s): does nats-server fsync the directories it creates now? Then the finding in docs/reliability.md is gone", tc.name, i+1, sample(n.NamesDropped, 6))
				}
			}
		}
		// The streams bucket went with the stores; the mark file on
		// serve's own disk (--stream-mark) remembers the stream.
		if !f.serveRefused || f.serveExit != 2 || !strings.Contains(f.serveSaid, "stream_replaced") {
			t.Errorf("%s: publisher serve --stream-mark after the crash: refused %v, exit %d: %s; want exit 2, stream_replaced", tc.name, f.serveRefused, f.serveExit, f.serveSaid)
		} else {
			t.Logf("%s: the crash of all three servers lost the stream with its %d acknowledged entries and %d records, and the streams bucket; publisher serve refuses to start (its mark file remembers): %s",
				tc.name, f.ackedEntries, f.ackedRecords, f.serveSaid)
		}
		if tc.serveRuns {
			if !strings.Contains(f.guardSaid, "room stream check failed: appends paused") || !strings.Contains(f.guardSaid, "stream_replaced: stream ROOMS is gone") {
				t.Errorf("the publisher serve that ran through the crash: want its stream check to pause appends, the stream gone (stream_replaced); its log says:\n%s", f.guardSaid)
			} else {
				t.Logf("the publisher serve that ran through the crash detects it: %s", firstMatch(f.guardSaid, "room stream check failed"))
			}
		}
		if f.auditExit != 1 || f.audit.Totals.ByCode["checkpoint_mismatch"] == 0 || len(f.audit.Checkpoints) != 1 || !strings.Contains(f.audit.Checkpoints[0].Refused, "rolled back") {
			t.Errorf("the audit holding the earlier checkpoint: exit %d, by code %v, checkpoints %+v; want exit 1 refusing the room as rolled back (checkpoint_mismatch)", f.auditExit, f.audit.Totals.ByCode, f.audit.Checkpoints)
		} else {
			t.Logf("the reader detects it: audit exit 1, checkpoint_mismatch: %s", f.audit.Checkpoints[0].Refused)
		}
		if first.AlreadyStored != 0 || first.Stored != 5000 {
			t.Errorf("the journal shipped again after the crash: %d already stored, %d stored; want 0, 5000", first.AlreadyStored, first.Stored)
		}
	}
}

// upOrRetry waits until publisher serve (started) says it serves. While
// it stops with exit 2 for another reason than stream_replaced (a cluster
// that has just started: no leader yet for a stream, a timeout), it starts
// it again, 5 starts at most. It returns refused with the exit status of
// the last start that stopped.
func (s *serve) upOrRetry(t *testing.T) (refused bool, status int) {
	t.Helper()
	for try := 1; ; try++ {
		if try > 1 {
			s.proc = startProc(s.proc.t, s.proc.name, publisherBin, append([]string{"serve"}, s.args...)...)
		}
		deadline := time.After(serveStartLimit)
	wait:
		for {
			if m := servingRE.FindStringSubmatch(s.stderr.String()); m != nil {
				s.url = m[1]
				return false, 0
			}
			select {
			case <-s.exited:
				status = s.cmd.ProcessState.ExitCode()
				break wait
			case <-deadline:
				t.Fatalf("publisher serve did not say it serves within %s:\n%s", serveStartLimit, tail(s.stderr.String(), 4000))
			case <-time.After(20 * time.Millisecond):
			}
		}
		if status != 2 || strings.Contains(s.stderr.String(), "stream_replaced") || try == 5 {
			return true, status
		}
		t.Logf("publisher serve: exit %d (%s); starting it again", status, firstLine(s.stderr.String()))
		time.Sleep(2 * time.Second)
	}
}

// firstMatch is the first line of s that contains sub.
func firstMatch(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
