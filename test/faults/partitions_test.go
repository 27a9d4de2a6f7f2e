package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
)

// partitionShipper appends one capsule's lines to one room, a few lines
// per request, and keeps when each line was acknowledged.
type partitionShipper struct {
	roomID string
	stream string
	cap    *capsule

	mu     sync.Mutex
	acked  int         // lines acknowledged (stored or duplicate), in order
	times  []time.Time // times[i]: when line i was acknowledged
	failed int         // requests that came back with an error or a failed item
	why    []string    // the first failures' errors or reasons
}

// ackedBetween counts the lines acknowledged in (from, to].
func (p *partitionShipper) ackedBetween(from, to time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, at := range p.times {
		if at.After(from) && !at.After(to) {
			n++
		}
	}
	return n
}

func (p *partitionShipper) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked
}

// run ships until ctx ends or the capsule is shipped, resending a request
// whose answer was lost (its lines come back duplicate).
func (p *partitionShipper) run(ctx context.Context, cl *client.Client) {
	const per = 5
	for p.count() < len(p.cap.lines) && ctx.Err() == nil {
		from := p.count()
		to := min(from+per, len(p.cap.lines))
		r, err := cl.AppendJournal(ctx, p.roomID, &p.cap.meta, joinLines(p.cap.lines[from:to]))
		now := time.Now()
		if ctx.Err() != nil {
			return // the test's own stop, not a failure
		}
		p.mu.Lock()
		if err != nil || r.Failures > 0 || r.Refused > 0 {
			p.failed++
			if len(p.why) < 3 {
				why := fmt.Sprint(err)
				for _, it := range r.Items {
					if it.Outcome == room.OutcomeFailed || it.Outcome == room.OutcomeRefused {
						why = fmt.Sprintf("%s %s: %s", it.Outcome, it.Code, it.Reason)
						break
					}
				}
				p.why = append(p.why, now.Format("15:04:05.000")+" "+why)
			}
			p.mu.Unlock()
			continue
		}
		for range r.Stored + r.Dupes {
			p.times = append(p.times, now)
		}
		p.acked += r.Stored + r.Dupes
		p.mu.Unlock()
	}
}

// placedOn reads the placement bucket's partition of roomID ("" when none).
func placedOn(t *testing.T, js jetstream.JetStream, roomID string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, room.DefaultPlacementBucket)
	if err != nil {
		return ""
	}
	e, err := kv.Get(ctx, room.RoomPlacementKey(roomID))
	if err != nil {
		return ""
	}
	var p room.Partition
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		t.Fatal(err)
	}
	return p.Stream
}

// leaders returns each stream's leader ("" while it has none).
func leaders(js jetstream.JetStream, streams []string) map[string]string {
	out := map[string]string{}
	for _, name := range streams {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := js.Stream(ctx, name)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = st.Info(ctx); err == nil && info.Cluster != nil {
				out[name] = info.Cluster.Leader
			}
		}
		cancel()
	}
	return out
}

// TestClusterPartitions runs `publisher serve --partitions 3 --replicas 3`
// on the three-server cluster: serve spreads the partitions' leaders over
// the servers, and a SIGKILL of one partition's leader stalls only that
// partition's room while the rooms of the other two keep being
// acknowledged, counted line by line; afterwards no acknowledged line is
// lost and the audit of all three partitions is clean.
func TestClusterPartitions(t *testing.T) {
	tl := count(t)
	key := hostKey(t)
	cl := startCluster(t, 3)
	srv := startServe(t, "--server", cl.urls(), "--replicas", "3", "--partitions", "3", "--trusted-host", key.NodeID(), "--log-level", "warn")
	cl.waitService(t, "")
	streams := []string{"ROOMS", "ROOMS-1", "ROOMS-2"}
	served := cl.connectedTo("roompub-publisher")
	if served == nil {
		t.Fatal("publisher serve is connected to no server")
	}
	nc, err := nats.Connect(served.url(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	deadline := time.Now().Add(30 * time.Second)
	var lead map[string]string
	for {
		lead = leaders(js, streams)
		spread := map[string]bool{}
		for _, l := range lead {
			spread[l] = l != ""
		}
		if len(spread) == 3 && !spread[""] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition leaders not spread over the 3 servers after 30s: %v\n%s", lead, tail(srv.stderr.String(), 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("partition leaders spread: %v; publisher serve on %s", lead, served.name)

	// One room per partition, placed by a first line each.
	cl1 := client.New(nc, client.Options{Timeout: 60 * time.Second})
	ctx := context.Background()
	dir := t.TempDir()
	ships := map[string]*partitionShipper{}
	placing := 0 // rooms placed by a first line, some on a partition taken already
	for i := 0; len(ships) < 3; i++ {
		placing++
		id := fmt.Sprintf("room:partition-%d", i)
		c := newCapsule(t, filepath.Join(dir, id[len("room:"):]), fmt.Sprintf("run-partition-%d", i), 30000)
		p := &partitionShipper{roomID: id, cap: c}
		r, err := cl1.AppendJournal(ctx, id, &c.meta, joinLines(c.lines[:1]))
		if err != nil || r.Stored != 1 {
			t.Fatalf("%s: %+v %v", id, r, err)
		}
		p.acked, p.times = 1, []time.Time{time.Now()}
		p.stream = placedOn(t, js, id)
		if ships[p.stream] == nil {
			ships[p.stream] = p
		}
	}
	// The victim: a partition led by a server serve and the shippers are
	// not connected to, so its kill cuts no connection.
	var victim *partitionShipper
	var victimNode *natsNode
	for _, name := range streams {
		if lead[name] != served.name {
			victim, victimNode = ships[name], cl.node(lead[name])
			break
		}
	}
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, p := range ships {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.run(sctx, cl1)
		}()
	}
	for _, p := range ships {
		for p.count() < 200 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	atKill := victim.count()
	killed := time.Now()
	cl.kill(victimNode)
	tl.Faults++
	t.Logf("fault: SIGKILL of %s, leader of %s (room %s only), at %d lines acknowledged there", victimNode.name, victim.stream, victim.roomID, atKill)
	// The stall ends when the victim's room is acknowledged again past
	// the one request that may have been in flight at the kill (5
	// lines): the stream info a poll reads may lag the election itself.
	for victim.count() <= atKill+5 {
		if time.Since(killed) > time.Minute {
			t.Fatalf("%s acknowledged nothing a minute after its leader's kill", victim.roomID)
		}
		time.Sleep(20 * time.Millisecond)
	}
	victim.mu.Lock()
	resumed := victim.times[atKill+5]
	victim.mu.Unlock()
	t.Logf("%s acknowledged again %s after the kill (a new leader among the two left: %v)", victim.roomID, resumed.Sub(killed).Round(time.Millisecond),
		leaders(js, []string{victim.stream}))
	cl.restart(victimNode)
	stop()
	wg.Wait()

	// The stall is an election's: seconds, not a request's latency.
	if stall := resumed.Sub(killed); stall < time.Second {
		t.Errorf("%s stalled %s after its leader's kill: no election happened", victim.roomID, stall)
	}
	for name, p := range ships {
		if p == victim {
			continue
		}
		// Throughout: in each third of the victim's stall.
		third := resumed.Sub(killed) / 3
		var during [3]int
		for k := range during {
			during[k] = p.ackedBetween(killed.Add(time.Duration(k)*third), killed.Add(time.Duration(k+1)*third))
		}
		t.Logf("%s (%s, leader %s): %v lines acknowledged in the thirds of %s's stall, %d requests failed", p.roomID, name, lead[name], during, victim.stream, p.failed)
		if min(during[0], during[1], during[2]) < 10 {
			t.Errorf("oracle (other partitions keep acknowledging): %s acknowledged %v lines in the thirds of %s's stall, want at least 10 in each", p.roomID, during, victim.stream)
		}
		if p.failed != 0 {
			t.Errorf("%s: %d requests failed while another partition's leader was killed (kill at %s): %v", p.roomID, p.failed, killed.Format("15:04:05.000"), p.why)
		}
	}
	// Nothing acknowledged is lost: each room holds exactly its lines as
	// acknowledged, once each, and the audit of all partitions is clean.
	// The rooms placed on a partition taken already hold their first line.
	// A request the shippers gave up on when stopped may still be
	// appended by serve: count once the streams stop growing.
	settle(t, js, streams)
	entries := uint64(placing - len(ships))
	for name, p := range ships {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		subjects := room.Subjects{Prefix: map[string]string{"ROOMS": "rooms", "ROOMS-1": "rooms-1", "ROOMS-2": "rooms-2"}[name]}
		var info *jetstream.StreamInfo
		for i := 0; i < 50; i++ {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			info, err = st.Info(cctx, jetstream.WithSubjectFilter(subjects.Journal(p.roomID, p.cap.key())))
			cancel()
			if err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		var stored uint64
		for _, n := range info.State.Subjects {
			stored += n
		}
		tl.Acked += p.count()
		tl.Found += int(stored)
		if int(stored) < p.count() {
			t.Errorf("oracle (nothing acknowledged lost): %s holds %d lines of %s, %d acknowledged", name, stored, p.roomID, p.count())
		}
		entries += stored
	}
	auditClean(t, tl, cl.urls(), []string{key.NodeID()}, entries, 0, placing)
	t.Logf("every line acknowledged is stored (%d lines in 3 rooms on 3 partitions); %s's room stalled %s",
		entries, victim.stream, resumed.Sub(killed).Round(time.Millisecond))
}

// settle waits (at most 30s) until none of the streams has grown for a
// second: appends of requests their clients gave up on are done.
func settle(t *testing.T, js jetstream.JetStream, streams []string) {
	t.Helper()
	last := map[string]uint64{}
	stable := time.Time{}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		grew := false
		for _, name := range streams {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			st, err := js.Stream(ctx, name)
			cancel()
			if err != nil {
				grew = true
				continue
			}
			if seq := st.CachedInfo().State.LastSeq; seq != last[name] {
				last[name], grew = seq, true
			}
		}
		switch {
		case grew:
			stable = time.Time{}
		case stable.IsZero():
			stable = time.Now()
		case time.Since(stable) >= time.Second:
			return
		}
	}
	t.Logf("the streams still grew after 30s: %v", last)
}
