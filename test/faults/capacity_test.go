package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room/client"
)

// cpuTime is a process's user and system CPU time so far (/proc/<pid>/stat
// fields 14 and 15, in clock ticks of 10 ms).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// TestCapacity measures what the capacity model in docs/operations.md
// ("Capacity") rests on: on the three-server loopback cluster, three
// shippers append 100-line requests to three rooms through one
// `publisher serve --replicas 3`, first with one partition (one stream
// leader takes every append) and then with three (one leader each). It
// reports entries per second and the CPU each process spent per 1,000
// entries, the stream leader apart from its followers. A measurement, not
// an oracle: it runs only with ROOMPUB_CAPACITY=1 (make capacity), on a
// quiet machine.
func TestCapacity(t *testing.T) {
	if os.Getenv("ROOMPUB_CAPACITY") == "" {
		t.Skip("a measurement: ROOMPUB_CAPACITY=1 (make capacity) runs it")
	}
	lines := 20000
	if v, err := strconv.Atoi(os.Getenv("ROOMPUB_CAPACITY_LINES")); err == nil && v > 0 {
		lines = v
	}
	for _, partitions := range []int{1, 3} {
		t.Run(fmt.Sprintf("partitions=%d", partitions), func(t *testing.T) {
			measureCapacity(t, partitions, lines)
		})
	}
}

func measureCapacity(t *testing.T, partitions, lines int) {
	key := hostKey(t)
	cl := startCluster(t, 3)
	srv := startServe(t, "--server", cl.urls(), "--replicas", "3", "--partitions", strconv.Itoa(partitions),
		"--trusted-host", key.NodeID(), "--log-level", "warn")
	cl.waitService(t, "")
	served := cl.connectedTo("roompub-publisher")
	nc, err := nats.Connect(served.url(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	streams := []string{"ROOMS", "ROOMS-1", "ROOMS-2"}[:partitions]
	cl1 := client.New(nc, client.Options{Timeout: time.Minute})
	ctx := context.Background()
	// Three rooms, one per partition when there are three, each placed by
	// its first line (not measured).
	var caps []*capsule
	var rooms []string
	taken := map[string]bool{}
	for i := 0; len(rooms) < 3; i++ {
		id := fmt.Sprintf("room:capacity-%d", i)
		c := newCapsule(t, filepath.Join(t.TempDir(), "c"), fmt.Sprintf("run-capacity-%d", i), lines+1)
		if r, err := cl1.AppendJournal(ctx, id, &c.meta, joinLines(c.lines[:1])); err != nil || r.Stored != 1 {
			t.Fatalf("%s: %+v %v", id, r, err)
		}
		p := placedOn(t, js, id)
		if partitions > 1 && taken[p] {
			continue
		}
		taken[p] = true
		caps, rooms = append(caps, c), append(rooms, id)
	}
	lead := map[string]int{}
	for {
		l := leaders(js, streams)
		if len(l) == len(streams) {
			for _, s := range l {
				lead[s]++
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	before := map[string]time.Duration{"serve": cpuTime(t, srv.cmd.Process.Pid)}
	for _, n := range cl.nodes {
		before[n.name] = cpuTime(t, n.proc.cmd.Process.Pid)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(rooms))
	for i := range rooms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := 1; from < len(caps[i].lines); from += 100 {
				to := min(from+100, len(caps[i].lines))
				r, err := cl1.AppendJournal(ctx, rooms[i], &caps[i].meta, joinLines(caps[i].lines[from:to]))
				if err == nil && r.Stored != to-from {
					err = fmt.Errorf("%d of %d stored: %+v", r.Stored, to-from, r.Items[0])
				}
				if err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", rooms[i], err)
		}
	}
	total := 3 * lines
	// µs per entry is ms per 1,000 entries.
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(total) }
	t.Logf("partitions %d: %d entries in %s: %.0f entries/s; leaders %v", partitions, total, took.Round(time.Millisecond), float64(total)/took.Seconds(), lead)
	cpu := cpuTime(t, srv.cmd.Process.Pid) - before["serve"]
	t.Logf("  publisher serve: %.1f ms CPU per 1,000 entries (%.0f%% of one core)", per(cpu), 100*cpu.Seconds()/took.Seconds())
	for _, n := range cl.nodes {
		d := cpuTime(t, n.proc.cmd.Process.Pid) - before[n.name]
		t.Logf("  nats-server %s (leads %d of %d partitions): %.1f ms CPU per 1,000 entries (%.0f%% of one core)",
			n.name, lead[n.name], partitions, per(d), 100*d.Seconds()/took.Seconds())
	}
}
