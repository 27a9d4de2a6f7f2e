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
	cr.cl.waitService(t)
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
		{name: "journaled-always", model: crashfs.Journaled, interval: "always"},
		{name: "posix-always", model: crashfs.POSIX, interval: "always"},
		{name: "journaled-2m", model: crashfs.Journaled},
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
}

// clusterCrashAllFigures is what one correlated crash did.
type clusterCrashAllFigures struct {
	crashFigures
	perNode []string // what the crash dropped on each server
}

func clusterCrashAll(t *testing.T, tl *tally, key *events.HostKey, tc clusterCrashCase) {
	ownAuditState(t)
	cl := startClusterWith(t, 3, clusterOptions{SyncInterval: tc.interval, Crash: true, Model: tc.model})
	srv := startServe(t, "--server", cl.urls(), "--replicas", "3", "--trusted-host", key.NodeID(), "--log-level", "warn",
		"--max-batch", strconv.Itoa(clusterBatch), "--checkpoint-interval", "1s")
	cl.waitService(t)
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
	at := uint64(1500 + mrand.IntN(2000))
	seen := in.waitCount(in.subj.Journal(roomID, c.key()), at, 2*time.Minute)
	if !ship.running() {
		t.Fatalf("the shipment ended before the crash (%d entries stored):\n%s", seen, ship.stdout)
	}
	leader := in.streamLeader(10 * time.Second)
	var copies []string
	for _, n := range cl.nodes {
		s, _ := cl.nodeStream(n)
		copies = append(copies, n.name+": "+s.String())
	}
	drops := cl.crash(cl.nodes...)
	tl.Faults++
	crashedAt := time.Now()
	in.nc.Close()
	var f clusterCrashAllFigures
	for i, n := range cl.nodes {
		d := drops[i]
		f.dropped.BytesDropped += d.BytesDropped
		f.dropped.NamesDropped = append(f.dropped.NamesDropped, d.NamesDropped...)
		f.perNode = append(f.perNode, fmt.Sprintf("%s: %d bytes, %d names (%s)", n.name, d.BytesDropped, len(d.NamesDropped), sample(d.NamesDropped, 4)))
	}
	t.Logf("fault: power loss of all three servers at >= %d entries (stream leader %s; copies %s); the crash dropped %s",
		seen, leader, strings.Join(copies, "; "), strings.Join(f.perNode, "; "))

	// What the shippers acknowledged before it.
	status := ship.wait(2 * time.Minute)
	lines := parseShipLines(t, ship.stdout.String())
	if status != 2 || len(lines) != 1 || lines[0].OK || lines[0].Refused != nil {
		t.Fatalf("publisher journal after the crash: exit %d, want 2 with one line saying what was stored\n%s%s", status, ship.stdout, tail(ship.stderr.String(), 3000))
	}
	rr := &recordRuns{acked: map[string]room.Outcome{}}
	rr.note(t, result{status: exec.wait(2 * time.Minute), stdout: exec.stdout.String()})
	f.ackedEntries, f.ackedRecords = lines[0].acked(), len(rr.acked)
	t.Logf("the shippers stopped %s after the crash: %d entries and %d records acknowledged", time.Since(crashedAt).Round(time.Millisecond), f.ackedEntries, f.ackedRecords)

	// The machines come back.
	cl.startAll(2 * time.Minute)
	exists := cl.streamExists(time.Minute)
	if exists {
		cl.waitSettled(time.Minute)
		in = inspect(t, cl.urls())
		f.foundEntries, f.foundRecords = in.found(c, roomID, f.ackedEntries, rs, rr)
	}
	t.Logf("%s: the servers are back %s after the crash; the stream exists: %v; %s", tc.name, time.Since(crashedAt).Round(time.Millisecond), exists, f.crashFigures)

	// What publisher serve, which ran through the crash, makes of it.
	lost := f.lost() > 0
	if lost {
		deadline := time.Now().Add(45 * time.Second)
		for time.Now().Before(deadline) && !strings.Contains(srv.stderr.String(), "room stream check failed") {
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("publisher serve's log since the crash (tail):\n%s", tail(srv.stderr.String(), 3000))
		if st := srv.term(); st != 0 {
			t.Logf("publisher serve: exit %d after SIGTERM", st)
		}
		refused, status := srv.tryRestart(t)
		t.Logf("publisher serve restarted: refused %v, exit %d: %s", refused, status, firstLine(srv.stderr.String()))
		if refused {
			srv.args = append(srv.args, "--accept-stream")
			if refused, status := srv.tryRestart(t); refused {
				t.Fatalf("publisher serve --accept-stream: exit %d\n%s", status, tail(srv.stderr.String(), 3000))
			}
		}
	}
	cl.waitService(t)

	// The reader holding the checkpoint from before the crash.
	st, after, r := auditState(t, cl.urls(), state, key)
	t.Logf("audit with the checkpoint of size %d: exit %d, by code %v, checkpoints %+v\n%s", kept, st, after.Totals.ByCode, after.Checkpoints, tail(r.stderr, 1500))

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
}
