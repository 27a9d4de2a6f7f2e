// Package faults injects faults into real roompub deployments and checks
// that nothing acknowledged is lost.
//
// TestMain builds the real binaries: `publisher`, `subscriber` and the
// nats-server of the module's own dependency (github.com/nats-io/nats-server/v2,
// built from the module cache, nothing downloaded). The cluster tests run
// three nats-server processes on loopback, clustered with routes through
// proxies the tests own, JetStream on disk in temporary directories, with
// `publisher serve --server … --replicas 3` in front of them; the
// single-server tests run `publisher serve` on its embedded server. Every
// test names its oracles:
//
//   - no acknowledged entry lost: every journal line (or record) a shipper
//     reported stored or duplicate is in the stream afterwards;
//   - exactly one stored copy: each entry (record) is stored once, in
//     journal order, and the stream holds nothing else;
//   - no fork: no chain position holds two different entries;
//   - audit clean: `subscriber audit --json` exits 0 with nothing set aside,
//     no chain broken and the stream append-only.
//
// TestMain prints the counts every test adds (faults injected, entries
// acknowledged, entries found, duplicates stored, forks) at the end.
package faults

import (
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roompub/roompub/events"
)

// root is the repository root; binaries run there.
var root string

// The binaries TestMain builds.
var publisherBin, subscriberBin, natsServerBin string

// binDir holds them; it is world-readable so a child may run as another
// user (the read-only store test, when the tests run as root).
var binDir string

// publisherKeyFile is the publisher key every `publisher serve` of the
// suite attests and checkpoints with, and publisherID its node
// id, which every audit trusts: the oracles then also say that no fault
// leaves a message unattested or a checkpoint that contradicts the room.
var publisherKeyFile, publisherID string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	// Audit state and tallies are kept per test name: with -count above
	// 1 the second run would audit its new cluster against the first
	// run's checkpoints and refuse it as rolled back.
	if f := flag.Lookup("test.count"); f != nil && f.Value.String() != "1" {
		fmt.Fprintf(os.Stderr, "faults: -count %s: these tests keep audit state per test name across runs; run the command in a loop instead\n", f.Value)
		return 2
	}
	var err error
	if root, err = filepath.Abs("../.."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if binDir, err = os.MkdirTemp("", "roompub-faults-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(binDir)
	if err := os.Chmod(binDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	publisherBin = filepath.Join(binDir, "publisher")
	subscriberBin = filepath.Join(binDir, "subscriber")
	natsServerBin = filepath.Join(binDir, "nats-server")
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, b := range []struct{ out, pkg string }{
		{publisherBin, "./cmd/publisher"},
		{subscriberBin, "./cmd/subscriber"},
		// The module's own dependency, from the module cache: the server
		// the embedded one is, as a process of its own.
		{natsServerBin, "github.com/nats-io/nats-server/v2"},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "GOPROXY=off") // nothing is downloaded
			if msg, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, msg)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	pk, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	pem, err := pk.MarshalPEM()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	publisherKeyFile, publisherID = filepath.Join(binDir, "publisher-key.pem"), pk.NodeID()
	if err := os.WriteFile(publisherKeyFile, pem, 0o644); err != nil { // world-readable: a child may run as another user
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("faults: built publisher, subscriber and nats-server in %s\n", time.Since(start).Round(time.Millisecond))
	code := m.Run()
	printSummary()
	auditStates.Range(func(_, d any) bool { _ = os.RemoveAll(d.(string)); return true })
	return code
}

// tally is what one test did: the counts the closing summary quotes.
type tally struct {
	Faults       int    // faults injected (kills, step-downs, cuts, full store, …)
	Acked        int    // entries and records a shipper reported stored or duplicate
	Found        int    // entries and records found in the stream afterwards
	DupsReported int    // items the gate answered "duplicate" (resent, nothing stored)
	DupsStored   int    // items stored more than once (must be 0)
	Forks        int    // chain positions holding two different entries (must be 0)
	Reruns       int    // shipper runs that exited non-zero and were simply run again
	GateFailed   int    // items the gate answered "failed" (not decided; sent again)
	Checkpoints  uint64 // signed room checkpoints verified by the test's last audit
	// ShortReads counts chains the stream showed short at the oracle's
	// first read and whole within a minute (a leader still catching up).
	ShortReads int
	Took       time.Duration
}

var (
	talliesMu sync.Mutex
	tallies   = map[string]*tally{}
)

// count returns the tally of t (created on first use); it is logged when
// the test ends.
func count(t *testing.T) *tally {
	t.Helper()
	talliesMu.Lock()
	defer talliesMu.Unlock()
	if c, ok := tallies[t.Name()]; ok {
		return c
	}
	c := &tally{}
	tallies[t.Name()] = c
	start := time.Now()
	t.Cleanup(func() {
		talliesMu.Lock()
		c.Took = time.Since(start)
		talliesMu.Unlock()
		t.Logf("counts: %s", c)
	})
	return c
}

func (c *tally) String() string {
	short := ""
	if c.ShortReads > 0 {
		short = fmt.Sprintf(", chains read short first %d", c.ShortReads)
	}
	return fmt.Sprintf("faults injected %d, acknowledged %d, found %d, duplicates reported %d, duplicates stored %d, forks %d, reruns %d, gate failures %d, checkpoints verified %d%s (%s)",
		c.Faults, c.Acked, c.Found, c.DupsReported, c.DupsStored, c.Forks, c.Reruns, c.GateFailed, c.Checkpoints, short, c.Took.Round(100*time.Millisecond))
}

func printSummary() {
	talliesMu.Lock()
	defer talliesMu.Unlock()
	names := make([]string, 0, len(tallies))
	var sum tally
	for n, c := range tallies {
		names = append(names, n)
		sum.Faults += c.Faults
		sum.Acked += c.Acked
		sum.Found += c.Found
		sum.DupsReported += c.DupsReported
		sum.DupsStored += c.DupsStored
		sum.Forks += c.Forks
		sum.Reruns += c.Reruns
		sum.GateFailed += c.GateFailed
		sum.Checkpoints += c.Checkpoints
		sum.Took += c.Took
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("faults summary:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-44s %s\n", n, tallies[n])
	}
	fmt.Fprintf(&b, "  %-44s %s\n", "TOTAL", &sum)
	fmt.Print(b.String())
}
