package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
)

// replicaState is what one server's /jsz says of its own copy of the room
// stream: every server reports the state of its local store, leader or
// not (stream info through the API is the leader's alone).
type replicaState struct {
	Leader     string `json:"-"`
	Messages   uint64 `json:"messages"`
	Bytes      uint64 `json:"bytes"`
	FirstSeq   uint64 `json:"first_seq"`
	LastSeq    uint64 `json:"last_seq"`
	NumDeleted int    `json:"num_deleted"`
	Lost       *struct {
		Msgs  []uint64 `json:"msgs"`
		Bytes uint64   `json:"bytes"`
	} `json:"lost"`
}

func (r replicaState) String() string {
	lost := "none"
	if r.Lost != nil {
		lost = fmt.Sprintf("%d msgs (%d bytes)", len(r.Lost.Msgs), r.Lost.Bytes)
	}
	return fmt.Sprintf("leader %q, %d messages, %d bytes, seqs %d-%d, %d deleted, lost %s", r.Leader, r.Messages, r.Bytes, r.FirstSeq, r.LastSeq, r.NumDeleted, lost)
}

// replica returns server n's view of its copy of the room stream.
func (c *cluster) replica(n *natsNode) (replicaState, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz?streams=true", n.httpPort))
	if err != nil {
		return replicaState{}, err
	}
	defer resp.Body.Close()
	var j struct {
		AccountDetails []struct {
			Streams []struct {
				Name    string       `json:"name"`
				State   replicaState `json:"state"`
				Cluster struct {
					Leader string `json:"leader"`
				} `json:"cluster"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return replicaState{}, err
	}
	for _, a := range j.AccountDetails {
		for _, st := range a.Streams {
			if st.Name == "ROOMS" {
				st.State.Leader = st.Cluster.Leader
				return st.State, nil
			}
		}
	}
	return replicaState{}, fmt.Errorf("%s has no stream ROOMS", n.name)
}

// paddedCapsule writes a capsule whose n entries each carry pad bytes of
// tool output, so that a few thousand of them fill a block file.
func paddedCapsule(t *testing.T, dir, runID string, n, pad int) *capsule {
	t.Helper()
	c := newCapsule(t, dir, runID, 1)
	out := make([][]byte, 0, n)
	parent := events.ZeroHash
	for i := range n {
		e, err := events.NewEntry(map[string]any{
			"schema": events.EntrySchema, "run_id": c.meta.RunID, "capsule_id": c.meta.CapsuleID, "seq": json.Number(strconv.Itoa(i)),
			"ts":      time.Date(2026, 9, 5, 8, 0, 0, 0, time.UTC).Add(time.Duration(i) * 37 * time.Millisecond).Format("2006-01-02T15:04:05.000Z07:00"),
			"lineage": "attempt", "kind": "tool.call", "effect_class": "SE0",
			"harness_version": c.meta.HarnessVersion, "task_family": c.meta.TaskFamily, "parent_hash": parent,
			"payload": map[string]any{"tool": "bash", "duration_ms": json.Number(strconv.Itoa(5 + i%97)), "status": "ok", "task_id": fmt.Sprintf("t%04d", i/20),
				"note": strings.Repeat(string(rune('a'+i%26)), pad)},
		})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e.Canonical())
		parent = e.EntryHash()
	}
	c.lines = out
	if err := os.WriteFile(filepath.Join(dir, "journal.ndjson"), joinLines(out), 0o644); err != nil {
		t.Fatal(err)
	}
	c.written = n
	return c
}

// serveHTTP reads path from serve's --http address: status and body.
func serveHTTP(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// metric is the value of one metric line of serve's /metrics, "" if none.
func metric(body, name string) string {
	for _, l := range strings.Split(body, "\n") {
		if n, v, ok := strings.Cut(l, " "); ok && n == name {
			return v
		}
	}
	return ""
}

// replicas returns every server's view of its copy, as one line.
func (c *cluster) replicas() (map[string]replicaState, string) {
	out := map[string]replicaState{}
	var views []string
	for _, n := range c.nodes {
		st, err := c.replica(n)
		if err != nil {
			views = append(views, fmt.Sprintf("%s: %v", n.name, err))
			continue
		}
		out[n.name] = st
		views = append(views, fmt.Sprintf("%s: %s", n.name, st))
	}
	return out, strings.Join(views, "; ")
}

// stepDownTo makes server name the stream leader (a step-down that names
// it as preferred) and waits until every server says so.
func (in *inspector) stepDownTo(cl *cluster, name string) {
	in.t.Helper()
	for try := 0; try < 10; try++ {
		if in.streamLeader(30*time.Second) == name {
			break
		}
		m, err := in.nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.ROOMS", []byte(`{"placement":{"preferred":"`+name+`"}}`), 5*time.Second)
		if err != nil {
			in.t.Logf("step down to %s: %v", name, err)
		} else if !strings.Contains(string(m.Data), `"success":true`) {
			in.t.Logf("step down to %s: %s", name, m.Data)
		}
		time.Sleep(time.Second)
	}
	if l := cl.waitSettled(30 * time.Second); l != name {
		in.t.Fatalf("the stream leader is %s, not %s, after step-downs naming it", l, name)
	}
}

// TestReplicaDamage: what NATS and roompub do when one replica of the R3
// room stream loses messages on disk (docs/reliability.md, "A damaged
// replica on an R3 cluster"). Chain A's first 100 entries, chain F's
// 3,000 entries of 3.5 kB (10.5 MB: the stream's first 8 MB block file
// fills with A[:100] and F's first positions), then A's entries 100-149
// are shipped through serve. A follower is stopped, one byte of A[50] is
// flipped in its 1.blk and its index.db removed, and it is started again:
// it drops A[50:100] and F's positions in that block.
//
// What NATS does, asserted exactly: the damaged replica keeps the hole
// (its /jsz: N deleted) and the two others keep every message; nothing
// repairs it, and a step-down naming it makes it the leader. Readers'
// ordered consumers (R1) and direct gets land on any replica, so a read
// sees the whole copy, the hole, or part of each.
//
// What roompub does: nothing while the damaged replica follows (the
// leader's state is whole: /healthz 200). Once it leads, serve's stream
// guard reports exactly the N lost messages (metric, /healthz 503); the
// chains serve names are named with exactly their lost positions (it may
// name none: it judges a short chain with direct gets and believes a whole
// answer from a whole replica). Oracle: every acknowledged entry is read
// back or at a stream seq serve reports lost, and every audit says the
// stream lost N messages, whichever copy it read. Leadership moved back to
// a whole replica and the damaged copy removed (it catches up in full),
// the restarted serve is healthy and the audit clean.
func TestReplicaDamage(t *testing.T) {
	tl := count(t)
	dir := t.TempDir()
	cl := startCluster(t, 3)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	// No checkpoint while the test runs (interval 1h, every 10,000): the
	// stream holds only the two chains until serve stops. The stream
	// guard checks every second, so that it sees the damaged replica lead
	// at once and has checked often while it followed.
	serveArgs := []string{"--server", cl.urls(), "--replicas", "3", "--log-level", "warn", "--http", httpAddr, "--checkpoint-interval", "1h",
		"--stream-check-interval", "1s"}
	srv := startServe(t, serveArgs...)
	cl.waitService(t, "")
	in := inspect(t, cl.urls())
	const roomID = "room:replica-damage"
	a := newCapsule(t, filepath.Join(dir, "a"), "run-replica-a", 150)
	f := paddedCapsule(t, filepath.Join(dir, "f"), "run-replica-f", 3000, 3000)
	a.truncate(t, 100)
	acked := 0
	for _, c := range []struct {
		c    *capsule
		grow int
	}{{a, 0}, {f, 0}, {a, 150}} {
		if c.grow != 0 {
			c.c.grow(t, c.grow)
		}
		l, r := shipJournal(t, cl.urls(), roomID, c.c)
		if r.status != 0 || l.Stored != c.c.written-l.AlreadyStored {
			t.Fatalf("publisher journal %s: exit %d, %+v", c.c.dir, r.status, l)
		}
		acked += l.Stored
	}
	const total = 3150
	if acked != total {
		t.Fatalf("%d entries acknowledged, want %d", acked, total)
	}
	tl.Acked += acked

	// Every replica holds all 3,150 before the fault.
	deadline := time.Now().Add(30 * time.Second)
	for {
		views, line := cl.replicas()
		same := len(views) == 3
		for _, v := range views {
			same = same && v.Messages == total && v.LastSeq == total && v.NumDeleted == 0
		}
		if same {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replicas do not all hold %d messages: %s", total, line)
		}
		time.Sleep(100 * time.Millisecond)
	}
	leader := cl.node(in.streamLeader(10 * time.Second))
	var d *natsNode
	for _, n := range cl.nodes {
		if n != leader {
			d = n
			break
		}
	}

	// The fault: d stopped, a byte of A[50] flipped in its first block
	// file, its index.db removed, d started.
	if st := d.proc.term(); st != 0 {
		t.Fatalf("%s: exit %d after SIGTERM", d.name, st)
	}
	blk := filepath.Join(d.storeDir, "jetstream", "$G", "streams", "ROOMS", "msgs", "1.blk")
	data, err := os.ReadFile(blk)
	if err != nil {
		t.Fatal(err)
	}
	// The entry hashes the block file holds, gathered in one pass over
	// its 8 MB rather than one per line asked about.
	held := map[string]bool{}
	const tag = `"entry_hash":"`
	for rest := data; ; {
		i := bytes.Index(rest, []byte(tag))
		if i < 0 {
			break
		}
		rest = rest[i+len(tag):]
		j := bytes.IndexByte(rest, '"')
		if j < 0 {
			break
		}
		held[string(rest[:j])] = true
		rest = rest[j+1:]
	}
	holds := func(line []byte) bool { return held[entryHash(t, line)] }
	// F's positions in the first block: those the flip costs besides A's.
	k := 0
	for k < len(f.lines) && holds(f.lines[k]) {
		k++
	}
	if !holds(a.lines[99]) || holds(a.lines[100]) || k == 0 || k == len(f.lines) || holds(f.lines[k]) {
		t.Fatalf("the first block file (%d bytes) does not hold A[:100] and F[:%d] alone", len(data), k)
	}
	i := bytes.Index(data, []byte(`"entry_hash":"`+entryHash(t, a.lines[50])+`"`))
	data[i+20] ^= 0x01
	if err := os.WriteFile(blk, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(filepath.Dir(blk), "index.db")); err != nil {
		t.Fatal(err)
	}
	tl.Faults++
	lost := uint64(50 + k) // stream seqs 51 .. 100+k: A[50:100], F[:k]
	t.Logf("fault: %s (a follower; leader %s) stopped, one byte of A[50] flipped in its 1.blk (%d bytes: stream seqs 1-%d), index.db removed, started",
		d.name, leader.name, len(data), 100+k)
	cl.start(d)
	cl.waitHealthy(d, 90*time.Second)

	// What NATS does: d drops the rest of the block and keeps the hole;
	// the others keep everything. Looked at for 3s: nothing repairs it.
	wantViews := func(when string) {
		t.Helper()
		views, line := cl.replicas()
		for _, n := range cl.nodes {
			v := views[n.name]
			want := replicaState{Leader: v.Leader, Messages: total, FirstSeq: 1, LastSeq: total}
			if n == d {
				want.Messages, want.NumDeleted = total-lost, int(lost)
			}
			v.Bytes, v.Lost = 0, nil
			if v != want {
				t.Fatalf("%s: %s holds %s, want %s\nall: %s", when, n.name, v, want, line)
			}
		}
		t.Logf("%s: %s", when, line)
	}
	for range 2 {
		wantViews("the damaged replica follows")
		time.Sleep(time.Second)
	}
	// roompub sees nothing: the leader's copy is whole.
	if st, body := serveHTTP(t, httpAddr, "/healthz"); st != http.StatusOK {
		t.Errorf("/healthz while the damaged replica follows: %d %s, want 200", st, body)
	}
	if n := in.count(in.subj.All()); n != total {
		t.Errorf("the stream leader %s says %d messages, want %d", leader.name, n, total)
	}

	// d leads: its copy is the stream.
	in.stepDownTo(cl, d.name)
	wantViews("the damaged replica leads")
	// The stream guard (every 1s) sees the deletions.
	wantHealth := fmt.Sprintf("unhealthy: the store lost acknowledged messages: %d messages are gone, between stream seqs 51 and %d (stream seqs [51 52 53 54 55 56 57 58 59 60] …)", lost, 50+lost)
	var metrics string
	deadline = time.Now().Add(40 * time.Second)
	for {
		_, metrics = serveHTTP(t, httpAddr, "/metrics")
		if metric(metrics, "roompub_store_lost_messages") == strconv.FormatUint(lost, 10) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("roompub_store_lost_messages %q 40s after %s took the lead, want %d\n%s", metric(metrics, "roompub_store_lost_messages"), d.name, lost, tail(srv.stderr.String(), 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second) // the survey the new loss starts
	st, health := serveHTTP(t, httpAddr, "/healthz")
	if st != http.StatusServiceUnavailable || !strings.HasPrefix(health, wantHealth) {
		t.Errorf("/healthz with the damaged replica leading: %d %q\nwant 503 %q", st, health, wantHealth)
	}
	_, metrics = serveHTTP(t, httpAddr, "/metrics")
	t.Logf("serve with %s leading: /healthz %d %q; roompub_store_lost_messages %s, roompub_store_damaged_chains %s, roompub_store_damaged_rooms %s",
		d.name, st, health, metric(metrics, "roompub_store_lost_messages"), metric(metrics, "roompub_store_damaged_chains"), metric(metrics, "roompub_store_damaged_rooms"))
	// A chain serve names (it reads a chain that looks short with direct
	// gets, which any replica answers, and believes a whole answer) is
	// named with exactly the positions lost.
	named := 0
	for _, w := range []string{
		fmt.Sprintf("%s %s/%s: 50 lost (positions 50-99 (between stream seqs 50 and 3101))", roomID, a.meta.RunID, a.meta.CapsuleID),
		fmt.Sprintf("%s %s/%s: %d lost (positions 0-%d (before stream seq %d))", roomID, f.meta.RunID, f.meta.CapsuleID, k, k-1, 101+k),
	} {
		if strings.Contains(health, w) {
			named++
		}
	}
	if got := metric(metrics, "roompub_store_damaged_chains"); got != strconv.Itoa(named) || strings.Count(health, " lost (positions ") != named {
		t.Errorf("roompub_store_damaged_chains %s, %d chains named in /healthz with the right positions, %d named at all", got, named, strings.Count(health, " lost (positions "))
	}

	// No acknowledged entry gone without a word. A reader's ordered
	// consumer is R1, placed on a replica of the server's choosing (at
	// random), so each read sees one replica's copy: the whole one, or the
	// damaged one, whose hole is exactly the stream seqs serve reports.
	copies := map[string]int{}
	for range 4 {
		got := readThrough(in, total)
		var missing []uint64
		for s := uint64(1); s <= total; s++ {
			if _, ok := got[s]; !ok {
				missing = append(missing, s)
			}
		}
		for s, h := range got {
			if h != ackedHash(t, a, f, k, s) {
				t.Fatalf("stream seq %d holds another entry than the one acknowledged there", s)
			}
		}
		switch {
		case len(missing) == 0:
			copies["whole"]++
			tl.Found = max(tl.Found, len(got))
		case missing[0] < 51 || missing[len(missing)-1] > 100+uint64(k):
			t.Errorf("oracle (nothing lost without a word): a read through the cluster misses %d acknowledged entries (%v…), not all among the %d serve reports lost at stream seqs 51-%d", len(missing), missing[:min(10, len(missing))], lost, 100+k)
		case uint64(len(missing)) == lost:
			copies["the reported hole"]++
		default:
			// An ordered consumer recreated midway lands on another
			// replica: part of the read from each.
			copies["part of the reported hole"]++
		}
	}
	t.Logf("4 reads through ordered consumers with %s leading: %v", d.name, copies)
	// subscriber audit reads through an ordered consumer too: it sees the
	// whole stream, or the hole (a gap in each chain, exit 1).
	audits := map[string]int{}
	for range 2 {
		var rep struct {
			auditReport
			StreamProblems []string `json:"stream_problems"`
		}
		r := run(t, 2*time.Minute, subscriberBin, "audit", "--json", "--server", cl.urls(), "--trusted-publisher", publisherID, "--state-dir", t.TempDir())
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("subscriber audit: exit %d, %v\n%s", r.status, err, tail(r.stderr, 2000))
		}
		t.Logf("subscriber audit with %s leading: exit %d, %d messages read, %d entries, chains %d ok %d broken, by code %v, append-only %v %q",
			d.name, r.status, rep.Totals.Messages, rep.Totals.Entries, rep.Totals.ChainsOK, rep.Totals.ChainsBroken, rep.Totals.ByCode, rep.Totals.Sound, rep.StreamProblems)
		// Both copies come with the leader's word: its deletions.
		if len(rep.StreamProblems) != 1 || !strings.Contains(rep.StreamProblems[0], fmt.Sprintf(": %d message(s) deleted between stream seqs 1 and ", lost)) {
			t.Errorf("subscriber audit with the damaged replica leading: stream problems %q, want the %d deleted messages", rep.StreamProblems, lost)
		}
		switch {
		case r.status == 1 && rep.Totals.Entries == total && rep.Totals.ChainsOK == 2 && !rep.Totals.Sound:
			audits["whole"]++
		case r.status == 1 && rep.Totals.Messages == total-lost && rep.Totals.ByCode["gap"] == 2 && rep.Totals.ChainsBroken == 2:
			audits["the reported hole"]++
		case r.status == 1 && rep.Totals.Messages > total-lost && rep.Totals.Messages < total && rep.Totals.ChainsBroken > 0:
			// Its ordered consumer recreated midway on another replica.
			audits["part of the reported hole"]++
		default:
			t.Errorf("subscriber audit with the damaged replica leading: exit %d, %d messages, %d entries, %v; want exit 0 and %d entries (a whole copy) or exit 1, %d messages and a gap in both chains (the damaged one)",
				r.status, rep.Totals.Messages, rep.Totals.Entries, rep.Totals.ByCode, total, total-lost)
		}
	}
	t.Logf("2 audits with %s leading: %v", d.name, audits)

	// Leadership back to a whole replica: the stream's state is whole
	// again, but a reader's consumer may still land on the damaged copy.
	// Rebuilding it: d stopped, its copy of the stream removed, d started:
	// it catches up from the leader in full.
	in.stepDownTo(cl, leader.name)
	if st := d.proc.term(); st != 0 {
		t.Fatalf("%s: exit %d after SIGTERM", d.name, st)
	}
	if err := os.RemoveAll(filepath.Join(d.storeDir, "jetstream", "$G", "streams", "ROOMS")); err != nil {
		t.Fatal(err)
	}
	cl.start(d)
	cl.waitHealthy(d, 90*time.Second)
	deadline = time.Now().Add(30 * time.Second)
	for {
		views, line := cl.replicas()
		if v := views[d.name]; v.Messages == total && v.NumDeleted == 0 && v.LastSeq == total {
			t.Logf("%s rebuilt: %s", d.name, line)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not catch up after its copy was removed: %s", d.name, line)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// serve restarted (its stop writes the room's checkpoint): healthy,
	// nothing lost, and the audit clean whatever replica it reads.
	if st := srv.term(); st != 0 {
		t.Errorf("publisher serve: exit %d after SIGTERM", st)
	}
	srv.restart(t)
	// /healthz is not ok until the start's first scrub has read the
	// stream (docs/reliability.md, "Scrubbing").
	deadline = time.Now().Add(30 * time.Second)
	for {
		_, metrics = serveHTTP(t, httpAddr, "/metrics")
		st, body := serveHTTP(t, httpAddr, "/healthz")
		if st == http.StatusOK && metric(metrics, "roompub_store_lost_messages") == "0" && metric(metrics, "roompub_store_damaged_chains") == "0" {
			break
		}
		if time.Now().After(deadline) || (st != http.StatusOK && !strings.Contains(body, "the first scrub of the room stream has not ended")) {
			t.Errorf("serve restarted after the rebuild: /healthz %d %s, lost %s, damaged chains %s; want 200, 0, 0", st, body,
				metric(metrics, "roompub_store_lost_messages"), metric(metrics, "roompub_store_damaged_chains"))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	auditClean(t, tl, cl.urls(), nil, total, 0, 2)
}

// readThrough reads the whole stream (up to stream seq last) through one
// ordered consumer and returns the entry hash at each stream seq read.
func readThrough(in *inspector, last uint64) map[uint64]string {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cons, err := in.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		in.t.Fatal(err)
	}
	out := map[uint64]string{}
	empty := 0
	for seq := uint64(0); seq < last; {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			in.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				in.t.Fatal(err)
			}
			e, err := events.ParseEntry(m.Data())
			if err != nil {
				in.t.Fatalf("stream seq %d: %v", meta.Sequence.Stream, err)
			}
			seq = meta.Sequence.Stream
			out[seq] = e.EntryHash()
			n++
			if seq >= last {
				// The stream's last message: the batch would only wait
				// out FetchMaxWait for more.
				break
			}
		}
		// An ordered consumer on a damaged copy may stall while it
		// resets past the hole: three empty fetches in a row end it.
		if n == 0 {
			if empty++; empty == 3 {
				in.t.Fatalf("read stops after stream seq %d, want %d", seq, last)
			}
			continue
		}
		empty = 0
	}
	return out
}

// ackedHash is the entry hash of the entry acknowledged at stream seq s:
// A[:100] at 1-100, F at 101-3100, A[100:] at 3101-3150.
func ackedHash(t *testing.T, a, f *capsule, _ int, s uint64) string {
	switch {
	case s <= 100:
		return entryHash(t, a.lines[s-1])
	case s <= 3100:
		return entryHash(t, f.lines[s-101])
	default:
		return entryHash(t, a.lines[s-3001])
	}
}
