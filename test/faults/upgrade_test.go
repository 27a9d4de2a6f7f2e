package faults

// A rolling upgrade from v0.1.0: `publisher serve` of the tag v0.1.0
// (commit b87d61d, built from git in a temporary directory) and of this
// build side by side on one room stream of a real nats-server, each
// replacing the other in turn, then audited by both builds' `subscriber
// audit` (docs/operations.md, "Upgrades").

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roompub/roompub/room"
)

// v010Commit is the commit the tag v0.1.0 names
// (testdata/store-v0.1.0/README.md).
const v010Commit = "b87d61dcfb90fe0dd358187edab4dc7648248a76"

var (
	v010Once                  sync.Once
	v010Publisher, v010Sub    string
	v010Skip, v010BuildFailed string
)

// v010Bins builds the publisher and subscriber of v0.1.0 once per test
// binary: `go build` in the commit's source tree (v010Source; the module
// cache holds its dependencies, which this build shares). It skips the
// test when git or the commit is not there.
func v010Bins(t *testing.T) (publisher, subscriber string) {
	t.Helper()
	v010Once.Do(func() {
		if _, err := exec.LookPath("git"); err != nil {
			v010Skip = "git is not installed: v0.1.0 cannot be built from the repository"
			return
		}
		if out, err := exec.Command("git", "-C", root, "cat-file", "-e", v010Commit+"^{commit}").CombinedOutput(); err != nil {
			v010Skip = fmt.Sprintf("commit %s (v0.1.0) is not in this clone (a shallow clone?): %v %s", v010Commit[:7], err, out)
			return
		}
		src, err := v010Source()
		if err != nil {
			v010BuildFailed = err.Error()
			return
		}
		// Its dependencies first, from the module cache or, where the
		// cache lacks a version v0.1.0 pins (a fresh machine), the
		// module proxy, as any build of this repository fetches its own;
		// the build itself then runs offline.
		dl := exec.Command("go", "mod", "download")
		dl.Dir = src
		if msg, err := dl.CombinedOutput(); err != nil {
			v010BuildFailed = fmt.Sprintf("go mod download of v0.1.0's dependencies: %v\n%s", err, msg)
			return
		}
		out := filepath.Join(binDir, "v0.1.0")
		build := exec.Command("go", "build", "-ldflags", "-X main.version=v0.1.0", "-o", out+"/", "./cmd/publisher", "./cmd/subscriber")
		build.Dir = src
		build.Env = append(os.Environ(), "GOPROXY=off")
		if msg, err := build.CombinedOutput(); err != nil {
			v010BuildFailed = fmt.Sprintf("go build of v0.1.0: %v\n%s", err, msg)
			return
		}
		v010Publisher, v010Sub = filepath.Join(out, "publisher"), filepath.Join(out, "subscriber")
	})
	if v010Skip != "" {
		t.Skip(v010Skip)
	}
	if v010BuildFailed != "" {
		t.Fatal(v010BuildFailed)
	}
	return v010Publisher, v010Sub
}

// v010Source returns the source tree of v0.1.0, written by `git archive`
// once into the user's cache directory and kept there: the build cache
// knows a package by its directory too, so building in the same
// directory each time compiles v0.1.0's packages only the first time
// (about 20 s on the shared 2-core machine; 5 s after). The tree is
// written under another name and renamed into place, so test runs at the
// same time never see half of it.
func v010Source() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "roompub", "src-"+v010Commit[:12])
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "src-tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // gone after the rename, or a loser's copy
	archive := exec.Command("bash", "-c", fmt.Sprintf("git -C %q archive %s | tar -x -C %q", root, v010Commit, tmp))
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %v\n%s", v010Commit, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "go.mod")); serr != nil {
			return "", err
		}
	}
	return dir, nil
}

// startNATSServer starts one nats-server process with JetStream on disk
// (an fsync before every acknowledgement) and waits until it is healthy.
func startNATSServer(t *testing.T) *natsNode {
	t.Helper()
	dir := t.TempDir()
	n := &natsNode{name: "up1", clientPort: freePort(t), httpPort: freePort(t), storeDir: filepath.Join(dir, "js"), conf: filepath.Join(dir, "nats-server.conf")}
	conf := fmt.Sprintf("server_name: %s\nlisten: \"127.0.0.1:%d\"\nhttp: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n  sync_interval: always\n}\n",
		n.name, n.clientPort, n.httpPort, n.storeDir)
	if err := os.WriteFile(n.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, root: t, nodes: []*natsNode{n}}
	c.start(n)
	c.waitHealthy(n, 30*time.Second)
	return n
}

// publisherKeyPEM writes a new publisher key of mode 0600 into dir and
// returns the file and its node id.
func publisherKeyPEM(t *testing.T, dir, name string) (file, id string) {
	t.Helper()
	k := hostKey(t)
	pem, err := k.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(dir, name+".pem")
	if err := os.WriteFile(file, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return file, k.NodeID()
}

// metrics scrapes serve's /metrics: every sample whose name starts with
// roompub_, keyed by name and labels as exposed.
func metrics(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "roompub_") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", l, err)
		}
		out[l[:i]] = v
	}
	return out
}

// sumPrefix adds the samples whose key starts with prefix.
func sumPrefix(m map[string]float64, prefix string) float64 {
	s := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			s += v
		}
	}
	return s
}

// noteFacts reads a checkpoint note in either form: its origin line, tree
// size and the names of its signature lines.
func noteFacts(data []byte) (origin string, size uint64, signers []string) {
	body, sigs, _ := strings.Cut(string(data), "\n\n")
	lines := strings.Split(body, "\n")
	if len(lines) >= 2 {
		origin = lines[0]
		size, _ = strconv.ParseUint(lines[1], 10, 64)
	}
	for _, l := range strings.Split(sigs, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "—" {
			signers = append(signers, f[1])
		}
	}
	return origin, size, signers
}

// upgradeAudit is one `subscriber audit --json` of a build.
type upgradeAudit struct {
	result
	rep auditReport
}

// TestRollingUpgradeV010: serve of v0.1.0 and serve of this build on one
// room stream of one nats-server, each with its publisher key and
// trusting the other's, the way an operator replaces publishers one by
// one (docs/operations.md, "Upgrades"):
//
//  1. v0.1.0 alone (the deployment before the upgrade) stores what
//     v0.1.0's shipper sends, and checkpoints it;
//  2. this build starts beside it; the two share the ingest service and
//     the checkpoint leases (this build's shipper);
//  3. v0.1.0 stops: this build alone stores what v0.1.0's shipper sends
//     and checkpoints over v0.1.0's checkpoints;
//  4. v0.1.0 starts again and this build stops (a roll back): v0.1.0
//     alone stores what this build's shipper sends and checkpoints over
//     this build's checkpoints;
//  5. this build replaces it for good.
//
// Each phase ships a capsule of 20 entries and a record, and waits for a
// checkpoint covering all of them by the phase's writer. Then both
// builds' audits are clean with the same exact counts, and neither serve
// blocked a room or set a checkpoint aside.
//
// 6. --origin, turned on while v0.1.0 readers remain: this build's audit
// stays clean; v0.1.0's refuses every origin checkpoint
// (checkpoint_mismatch, "untrusted publisher: checkpoint signed only by
// <origin>/room/<room>", exit 1) while it still verifies every entry and
// record by its attestation; a v0.1.0 serve sets them aside (other_room)
// and, once the room grows, writes its own checkpoints after them, which
// this build's audit accepts.
func TestRollingUpgradeV010(t *testing.T) {
	built := time.Now()
	oldPub, oldSub := v010Bins(t)
	t.Logf("v0.1.0 built from %s in %s", v010Commit[:7], time.Since(built).Round(time.Millisecond))
	started := time.Now()
	if r := run(t, time.Minute, oldPub, "--version"); r.status != 0 || strings.TrimSpace(r.stdout) != "v0.1.0" {
		t.Fatalf("old publisher --version: exit %d %q", r.status, r.stdout)
	}
	ns := startNATSServer(t)
	url := ns.url()
	dir := t.TempDir()
	oldKey, oldID := publisherKeyPEM(t, dir, "old")
	newKey, newID := publisherKeyPEM(t, dir, "new")
	hk := hostKey(t)
	const roomID = "room:upgrade"
	const origin = "upgrade.example/roompub"
	var in *inspector // once the first serve has made the room stream
	ckSubj := room.Subjects{}.Checkpoint(roomID)

	type srv struct {
		*serve
		http string
		name string
	}
	start := func(name string, extra ...string) *srv {
		bin, key, other := publisherBin, newKey, oldID
		if name == "v0.1.0" {
			bin, key, other = oldPub, oldKey, newID
		}
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		args := append([]string{"--server", url, "--replicas", "1", "--publisher-key", key, "--trusted-publisher", other,
			"--trusted-host", hk.NodeID(), "--checkpoint-interval", "1s", "--http", addr, "--log-level", "info"}, extra...)
		s := startServeBin(t, bin, args...)
		return &srv{serve: s, http: addr, name: name}
	}
	// stop checks that s neither blocked the room nor set a checkpoint
	// aside (unless setAside says how many, all other_room), then SIGTERMs it:
	// exit 0, its final checkpoints written.
	stop := func(s *srv, setAside float64) {
		t.Helper()
		m := metrics(t, s.http)
		if b := m["roompub_checkpoint_rooms_blocked"]; b != 0 {
			t.Errorf("%s serve blocked %v rooms (a checkpoint it could not accept)\n%s", s.name, b, tail(s.stderr.String(), 3000))
		}
		a, other := sumPrefix(m, "roompub_checkpoint_set_aside_total"), m[`roompub_checkpoint_set_aside_total{reason="other_room"}`]
		if a != setAside || other != setAside {
			t.Errorf("%s serve set %v checkpoints aside (%v other_room), want %v other_room\n%s", s.name, a, other, setAside, tail(s.stderr.String(), 3000))
		}
		if code := s.term(); code != 0 {
			t.Fatalf("%s serve: exit %d\n%s", s.name, code, tail(s.stderr.String(), 3000))
		}
	}
	leaves := 0
	phase := 0
	// ship stores the next capsule (20 entries) and record with the
	// publisher binary bin.
	ship := func(bin string) {
		t.Helper()
		phase++
		c := newCapsule(t, filepath.Join(dir, fmt.Sprintf("capsule-%d", phase)), fmt.Sprintf("run-upgrade-%d", phase), 20)
		r := run(t, time.Minute, bin, "journal", "--json", "--server", url, "--room", roomID, c.dir)
		ls := parseShipLines(t, r.stdout)
		if r.status != 0 || len(ls) != 1 || ls[0].Stored != 20 {
			t.Fatalf("phase %d: %s journal: exit %d\n%s%s", phase, filepath.Base(filepath.Dir(bin)), r.status, r.stdout, r.stderr)
		}
		rs := newRecords(t, filepath.Join(dir, fmt.Sprintf("records-%d", phase)), hk, roomID, fmt.Sprintf("upgrade-%d", phase), 1)
		r = run(t, time.Minute, bin, "execution", "--json", "--server", url, rs.files[0])
		rl := parseRecordLines(t, r.stdout)
		if r.status != 0 || len(rl) != 1 || rl[0].Item.Outcome != room.OutcomeStored {
			t.Fatalf("phase %d: execution: exit %d\n%s%s", phase, r.status, r.stdout, r.stderr)
		}
		leaves += 21
	}
	// checkpointBy waits until the room's newest checkpoint covers every
	// leaf and is signed by signer.
	checkpointBy := func(signer string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		var last string
		for time.Now().Before(deadline) {
			if in.count(ckSubj) > 0 {
				msgs := in.read(ckSubj)
				_, size, signers := noteFacts(msgs[len(msgs)-1].data)
				last = fmt.Sprintf("size %d by %v", size, signers)
				if size == uint64(leaves) && len(signers) == 1 && signers[0] == signer {
					return
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("phase %d: no checkpoint of size %d by %s within 20s; the newest: %s", phase, leaves, signer, last)
	}

	// 1. v0.1.0 alone, shipped with v0.1.0's publisher.
	old := start("v0.1.0")
	in = inspect(t, url)
	ship(oldPub)
	checkpointBy(oldID)
	// 2. This build beside it: either may take a request or a lease.
	cur := start("this build")
	ship(publisherBin)
	// The stream v0.1.0 made has no record markers, and this build keeps
	// it so (a v0.1.0 gate beside it writes records without markers): it
	// says once how to turn them on, for when no v0.1.0 is left.
	if n := strings.Count(cur.stderr.String(), "has no record markers"); n != 1 {
		t.Fatalf("this build's serve on v0.1.0's stream logged the record markers advice %d times, want once\n%s", n, tail(cur.stderr.String(), 3000))
	}
	// Nor the attestations' compact form, which v0.1.0's checkpointer
	// and readers refuse: the same advice, once.
	if n := strings.Count(cur.stderr.String(), "has no compact attestations"); n != 1 {
		t.Fatalf("this build's serve on v0.1.0's stream logged the compact attestations advice %d times, want once\n%s", n, tail(cur.stderr.String(), 3000))
	}
	// 3. v0.1.0 stops; this build alone takes v0.1.0's shipper and
	// checkpoints over v0.1.0's checkpoints.
	stop(old, 0)
	ship(oldPub)
	checkpointBy(newID)
	// 4. Roll back: v0.1.0 again beside this build, which then stops;
	// v0.1.0 alone takes this build's shipper and checkpoints over this
	// build's checkpoints.
	old = start("v0.1.0")
	stop(cur, 0)
	ship(publisherBin)
	checkpointBy(oldID)
	// 5. This build replaces v0.1.0 for good.
	cur = start("this build")
	stop(old, 0)
	ship(publisherBin)
	checkpointBy(newID)
	stop(cur, 0)

	if info, err := in.stream.Info(context.Background()); err != nil {
		t.Fatal(err)
	} else if room.RecordMarkers(info.Config) {
		t.Fatalf("v0.1.0's stream after this build served it: metadata %v; want no record markers", info.Config.Metadata)
	}
	// Who wrote the checkpoints: both keys, and nothing else.
	by := map[string]int{}
	cks := in.read(ckSubj)
	for _, m := range cks {
		origin, size, signers := noteFacts(m.data)
		if origin != roomID || len(signers) != 1 || size == 0 {
			t.Fatalf("checkpoint at stream seq %d: origin %q, size %d, signers %v", m.seq, origin, size, signers)
		}
		by[signers[0]]++
	}
	if by[oldID] == 0 || by[newID] == 0 || by[oldID]+by[newID] != len(cks) {
		t.Fatalf("checkpoints by v0.1.0 %d, by this build %d, of %d", by[oldID], by[newID], len(cks))
	}
	t.Logf("phases 1-5: %d entries and %d records; %d checkpoints, %d by v0.1.0 and %d by this build (%s)",
		leaves/21*20, leaves/21, len(cks), by[oldID], by[newID], time.Since(started).Round(time.Millisecond))

	audit := func(bin string) upgradeAudit {
		t.Helper()
		r := run(t, time.Minute, bin, "audit", "--json", "--server", url, "--state-dir", t.TempDir(),
			"--trusted-publisher", oldID, "--trusted-publisher", newID, "--trusted-host", hk.NodeID())
		a := upgradeAudit{result: r}
		if err := json.Unmarshal([]byte(r.stdout), &a.rep); err != nil {
			t.Fatalf("%s audit --json: exit %d: %v\n%s%s", bin, r.status, err, r.stdout, r.stderr)
		}
		return a
	}
	// clean checks an audit's verdict: exit 0, every leaf verified and
	// admitted, every checkpoint verified.
	clean := func(who string, a upgradeAudit, checkpoints int) {
		t.Helper()
		tot := a.rep.Totals
		if a.status != 0 || tot.Entries != uint64(leaves/21*20) || tot.Records != uint64(leaves/21) || tot.Checkpoints != uint64(checkpoints) ||
			tot.Messages != uint64(leaves+checkpoints) || tot.SetAside != 0 || tot.ChainsOK != leaves/21 || tot.ChainsBroken != 0 || !tot.Sound ||
			len(a.rep.Violations) != 0 || len(a.rep.Checkpoints) != 1 || a.rep.Checkpoints[0].Admitted != uint64(leaves) ||
			a.rep.Checkpoints[0].Verified != checkpoints || a.rep.Checkpoints[0].Refused != 0 {
			t.Fatalf("%s audit: exit %d, totals %+v, checkpoints %+v, violations %+v; want exit 0, %d leaves and %d checkpoints verified\n%s",
				who, a.status, tot, a.rep.Checkpoints, a.rep.Violations, leaves, checkpoints, tail(a.stderr, 2000))
		}
		t.Logf("%s audit: exit 0, %d messages: %d entries, %d records, %d checkpoints verified, %d admitted", who, tot.Messages, tot.Entries, tot.Records, checkpoints, leaves)
	}
	clean("this build's", audit(subscriberBin), len(cks))
	clean("v0.1.0's", audit(oldSub), len(cks))

	// 6. --origin while v0.1.0 readers remain.
	plain := len(cks)
	cur = start("this build", "--origin", origin)
	ship(publisherBin)
	checkpointBy(origin + "/room/" + strings.TrimPrefix(roomID, "room:"))
	stop(cur, 0)
	withOrigin := len(in.read(ckSubj)) - plain
	clean("this build's (origin checkpoints)", audit(subscriberBin), plain+withOrigin)
	a := audit(oldSub)
	tot := a.rep.Totals
	refusal := "untrusted publisher: checkpoint signed only by " + origin + "/room/upgrade"
	if a.status != 1 || tot.SetAside != uint64(withOrigin) || len(a.rep.Violations) != withOrigin || tot.Entries != uint64(leaves/21*20) ||
		tot.Records != uint64(leaves/21) || tot.ChainsBroken != 0 || a.rep.Checkpoints[0].Admitted != uint64(leaves) {
		t.Fatalf("v0.1.0's audit of origin checkpoints: exit %d, totals %+v, checkpoints %+v, violations %+v; want exit 1, the %d origin checkpoints set aside, every leaf admitted",
			a.status, tot, a.rep.Checkpoints, a.rep.Violations, withOrigin)
	}
	for _, v := range a.rep.Violations {
		if v.Code != "checkpoint_mismatch" || !strings.Contains(v.Reason, refusal) {
			t.Fatalf("v0.1.0's audit: violation %+v; want checkpoint_mismatch: …%s", v, refusal)
		}
	}
	t.Logf("v0.1.0's audit of %d origin checkpoints: exit 1, each checkpoint_mismatch (%s); %d entries and %d records still verified", withOrigin, refusal, tot.Entries, tot.Records)
	// A v0.1.0 serve on that stream sets them aside and checkpoints after
	// them in its own form once the room grows (a checkpoint of the size
	// and root of an origin checkpoint has the same Nats-Msg-Id: the server
	// answers duplicate, and v0.1.0 takes it for its own); this build's
	// audit accepts the mix.
	old = start("v0.1.0")
	ship(oldPub)
	checkpointBy(oldID)
	stop(old, float64(withOrigin))
	all := len(in.read(ckSubj))
	clean("this build's (both forms)", audit(subscriberBin), all)
	t.Logf("rolling upgrade: %d messages, %d checkpoints (%d with origin) in %s", leaves+all, all, withOrigin, time.Since(started).Round(time.Millisecond))
}
