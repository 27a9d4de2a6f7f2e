package faults

// The 3-node cluster configuration operators copy (deploy/nats), run as
// it is: three nats-server processes of those files with the users and
// permissions `publisher authconf` renders, `publisher serve` in secure
// mode against them, a harness shipping, a reader auditing, and the
// servers refusing what a reader may not do.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room"
)

// deployDir holds the cluster configuration operators copy.
const deployDir = "deploy/nats"

// deployIdentities is a secure config with one user per role, made with
// the publisher binary: passwords for publisher, harness, auditor and
// admin, an nkey for the solver.
type deployIdentities struct {
	config string
	files  map[string]string // user → password file; "solver" → nkey seed
}

func newDeployIdentities(t *testing.T, dir string) *deployIdentities {
	t.Helper()
	id := &deployIdentities{config: filepath.Join(dir, "secure.yaml"), files: map[string]string{}}
	hashes := map[string]string{}
	for _, user := range []string{"publisher", "harness", "auditor", "admin"} {
		f := filepath.Join(dir, user+".pw")
		r := run(t, time.Minute, publisherBin, "passwd", "--cost", "10", "--out", f)
		if r.status != 0 || !strings.HasPrefix(r.stdout, "$2") {
			t.Fatalf("publisher passwd --out %s: exit %d\n%s%s", f, r.status, r.stdout, r.stderr)
		}
		hashes[user], id.files[user] = strings.TrimSpace(r.stdout), f
	}
	nk := filepath.Join(dir, "solver.nk")
	r := run(t, time.Minute, publisherBin, "nkeygen", "--out", nk)
	if r.status != 0 || !strings.HasPrefix(r.stdout, "U") {
		t.Fatalf("publisher nkeygen: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	id.files["solver"] = nk
	yaml := fmt.Sprintf(`users:
  - {role: publisher, user: publisher, password: %q}
  - {role: harness, user: harness, password: %q}
  - {role: auditor, user: auditor, password: %q}
  - {role: solver, nkey: %s, durables: [solver-follow]}
  - {role: admin, user: admin, password: %q}
`, hashes["publisher"], hashes["harness"], hashes["auditor"], strings.TrimSpace(r.stdout), hashes["admin"])
	if err := os.WriteFile(id.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return id
}

// creds are the command-line credentials of user.
func (id *deployIdentities) creds(user string) []string {
	if user == "solver" {
		return []string{"--nkey", id.files[user]}
	}
	return []string{"--user", user, "--password-file", id.files[user]}
}

// option is user's credentials for nats.go.
func (id *deployIdentities) option(t *testing.T, user string) nats.Option {
	t.Helper()
	if user == "solver" {
		o, err := nats.NkeyOptionFromSeed(id.files[user])
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	pw, err := os.ReadFile(id.files[user])
	if err != nil {
		t.Fatal(err)
	}
	return nats.UserInfo(user, strings.TrimSpace(string(pw)))
}

// dial connects as user with nats.go; its asynchronous errors (the
// server's permission violations) go to errs.
func (id *deployIdentities) dial(t *testing.T, url, user string) (*nats.Conn, *asyncErrors) {
	t.Helper()
	errs := &asyncErrors{}
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ErrorHandler(errs.add), id.option(t, user))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// asyncErrors collects a connection's asynchronous errors.
type asyncErrors struct{ buf syncBuffer }

func (a *asyncErrors) add(_ *nats.Conn, _ *nats.Subscription, err error) {
	_, _ = a.buf.Write([]byte(err.Error() + "\n"))
}

// expect waits up to 5 s for an error containing want and returns it.
func (a *asyncErrors) expect(t *testing.T, want string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range strings.Split(a.buf.String(), "\n") {
			if strings.Contains(l, want) {
				return l
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no error containing %q; got %q", want, a.buf.String())
	return ""
}

// replaceOnce replaces old by new in s, and fails the test unless old
// occurs exactly once: a change to the deploy files that the templating
// no longer matches must fail here, not run something else.
func replaceOnce(t *testing.T, file, s, old, new string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("%s: %q occurs %d times, want once (the test's templating no longer matches the file)", file, old, n)
	}
	return strings.Replace(s, old, new, 1)
}

// startDeployedCluster writes each node's directory from deploy/nats and
// authConf, and starts a nats-server of it. Only what must differ between
// three servers on one host is templated: the client, monitoring and
// route listen addresses, the route URLs (loopback ports for the
// nodes' host names) and the store directory; every other line is the
// file's own.
func startDeployedCluster(t *testing.T, authConf string) *cluster {
	t.Helper()
	shared, err := os.ReadFile(filepath.Join(root, deployDir, "roompub-cluster.conf"))
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, root: t}
	dir := t.TempDir()
	for i := range 3 {
		c.nodes = append(c.nodes, &natsNode{idx: i, name: fmt.Sprintf("n%d", i+1), clientPort: freePort(t), routePort: freePort(t), httpPort: freePort(t)})
	}
	for _, n := range c.nodes {
		nodeDir := filepath.Join(dir, n.name)
		n.storeDir = filepath.Join(nodeDir, "jetstream")
		file := filepath.Join(deployDir, n.name+".conf")
		raw, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		conf := replaceOnce(t, file, string(raw), `listen: "0.0.0.0:4222"`, fmt.Sprintf(`listen: "127.0.0.1:%d"`, n.clientPort))
		conf = replaceOnce(t, file, conf, `http: "127.0.0.1:8222"`, fmt.Sprintf(`http: "127.0.0.1:%d"`, n.httpPort))
		conf = replaceOnce(t, file, conf, `listen: "0.0.0.0:6222"`, fmt.Sprintf(`listen: "127.0.0.1:%d"`, n.routePort))
		for _, m := range c.nodes {
			if m != n {
				conf = replaceOnce(t, file, conf, fmt.Sprintf("nats-route://%s.roompub.internal:6222", m.name), fmt.Sprintf("nats-route://127.0.0.1:%d", m.routePort))
			}
		}
		common := replaceOnce(t, "roompub-cluster.conf", string(shared), `store_dir: "/var/lib/nats/roompub"`, fmt.Sprintf("store_dir: %q", n.storeDir))
		if err := os.MkdirAll(nodeDir, 0o700); err != nil {
			t.Fatal(err)
		}
		n.conf = filepath.Join(nodeDir, "nats-server.conf")
		for name, text := range map[string]string{n.conf: conf, filepath.Join(nodeDir, "roompub-cluster.conf"): common, filepath.Join(nodeDir, "roompub-auth.conf"): authConf} {
			if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, n := range c.nodes {
		c.start(n)
	}
	for _, n := range c.nodes {
		c.waitHealthy(n, 60*time.Second)
	}
	return c
}

// TestDeployedClusterSecure runs the cluster configuration of deploy/nats
// with the users of `publisher authconf`: `publisher serve` connects as
// the publisher, creates the room stream with 3 replicas and attests and
// checkpoints; the harness ships a capsule and records; the auditor and
// the solver audit it clean with exact counts; the servers refuse a
// reader's publish on a room subject, a harness's, and an anonymous
// client, and the stream is unchanged by them.
func TestDeployedClusterSecure(t *testing.T) {
	start := time.Now()
	dir := t.TempDir()
	id := newDeployIdentities(t, dir)
	r := run(t, time.Minute, publisherBin, "authconf", id.config)
	if r.status != 0 || !strings.HasPrefix(r.stdout, "# roompub secure mode") || !strings.Contains(r.stdout, "authorization {") {
		t.Fatalf("publisher authconf: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	c := startDeployedCluster(t, r.stdout)
	urls := c.urls()
	t.Logf("cluster of deploy/nats up in %s", time.Since(start).Round(time.Millisecond))

	// An anonymous client is refused by every server.
	for _, n := range c.nodes {
		nc, err := nats.Connect(n.url(), nats.MaxReconnects(0))
		if err == nil {
			nc.Close()
			t.Fatalf("%s admitted an anonymous client", n.name)
		}
		if !strings.Contains(err.Error(), "Authorization Violation") {
			t.Fatalf("%s: anonymous connect: %v, want an authorization violation", n.name, err)
		}
	}

	hk := hostKey(t)
	const roomID = "room:deploy-cluster"
	s := startServe(t, append([]string{"--server", urls, "--trusted-host", hk.NodeID(), "--checkpoint-interval", "1s",
		"--stream-mark", filepath.Join(dir, "stream-mark.json"), "--log-level", "info"}, id.creds("publisher")...)...)
	c.waitService(t, "harness", id.option(t, "harness"))

	// The stream serve created: R3, one leader and two current replicas.
	adminNC, _ := id.dial(t, urls, "admin")
	adminJS, err := jetstream.New(adminNC)
	if err != nil {
		t.Fatal(err)
	}
	info := streamInfo(t, adminJS)
	if info.Config.Replicas != 3 || info.Cluster == nil || info.Cluster.Name != "roompub" || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("room stream: replicas %d, cluster %+v; want 3 replicas in cluster roompub with a leader", info.Config.Replicas, info.Cluster)
	}

	// The harness ships a capsule of 40 entries and 3 records.
	capsule := newCapsule(t, filepath.Join(dir, "capsule"), "run-deploy-1", 40)
	l, _ := shipJournal(t, urls, roomID, capsule, id.creds("harness")...)
	if l.Stored != 40 || l.Head.Next != 40 {
		t.Fatalf("harness journal: %d stored, next %d; want 40, 40", l.Stored, l.Head.Next)
	}
	recs := newRecords(t, filepath.Join(dir, "records"), hk, roomID, "deploy", 3)
	r = run(t, time.Minute, publisherBin, append(append([]string{"execution", "--json", "--server", urls}, id.creds("harness")...), recs.files...)...)
	stored := 0
	for _, rl := range parseRecordLines(t, r.stdout) {
		if rl.OK && rl.Item.Outcome == room.OutcomeStored {
			stored++
		}
	}
	if r.status != 0 || stored != 3 {
		t.Fatalf("harness execution: exit %d, %d stored; want 0, 3\n%s%s", r.status, stored, r.stdout, r.stderr)
	}

	// SIGTERM: serve writes the room's final checkpoint and exits 0.
	if code := s.term(); code != 0 {
		t.Fatalf("publisher serve: exit %d\n%s", code, tail(s.stderr.String(), 3000))
	}
	if strings.Contains(s.stderr.String(), "Permissions Violation") {
		t.Errorf("publisher serve ran into a permission authconf does not give it:\n%s", tail(s.stderr.String(), 3000))
	}

	// Both readers audit clean: 40 entries, 3 records, the checkpoints,
	// every message admitted by the publisher key, through each server.
	var checkpoints, markers uint64
	for i, reader := range []string{"auditor", "solver"} {
		n := c.nodes[i+1]
		args := append([]string{"audit", "--json", "--server", n.url(), "--state-dir", filepath.Join(dir, "state-"+reader),
			"--trusted-publisher", publisherID, "--trusted-host", hk.NodeID()}, id.creds(reader)...)
		r := run(t, time.Minute, subscriberBin, args...)
		var rep auditReport
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("%s audit: exit %d: %v\n%s%s", reader, r.status, err, r.stdout, r.stderr)
		}
		tot := rep.Totals
		if r.status != 0 || tot.Entries != 40 || tot.Records != 3 || tot.Checkpoints < 1 || tot.Markers == 0 || tot.Messages != 43+tot.Markers+tot.Checkpoints ||
			tot.SetAside != 0 || tot.ChainsOK != 1 || tot.ChainsBroken != 0 || !tot.Sound || len(rep.Violations) != 0 ||
			len(rep.Checkpoints) != 1 || rep.Checkpoints[0].Admitted != 43 || rep.Checkpoints[0].Refused != 0 {
			t.Fatalf("%s audit through %s: exit %d, totals %+v, checkpoints %+v, violations %+v; want exit 0, 40 entries, 3 records, 43 admitted, nothing set aside\n%s",
				reader, n.name, r.status, tot, rep.Checkpoints, rep.Violations, tail(r.stderr, 2000))
		}
		if strings.Contains(r.stderr, "Violation") {
			t.Errorf("%s audit ran into a permission it lacks:\n%s", reader, r.stderr)
		}
		if checkpoints != 0 && tot.Checkpoints != checkpoints {
			t.Errorf("%s audit: %d checkpoints, the auditor's found %d", reader, tot.Checkpoints, checkpoints)
		}
		checkpoints, markers = tot.Checkpoints, tot.Markers
		t.Logf("%s audits through %s: exit 0, %d messages: 40 entries, 3 records, %d record markers, %d checkpoints, 43 admitted", reader, n.name, tot.Messages, tot.Markers, tot.Checkpoints)
	}

	// What the servers refuse: a reader's and the harness's publish on
	// a room subject, and a reader's delete of the stream.
	before := streamInfo(t, adminJS).State.Msgs
	subj := room.Subjects{}.Records(roomID)
	for _, who := range []string{"auditor", "solver", "harness"} {
		nc, errs := id.dial(t, c.nodes[0].url(), who)
		if err := nc.Publish(subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		t.Logf("%s publishes on %s: %s", who, subj, errs.expect(t, fmt.Sprintf("Permissions Violation for Publish to %q", subj)))
	}
	nc, errs := id.dial(t, c.nodes[0].url(), "auditor")
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	err = js.DeleteStream(ctx, room.DefaultStream)
	cancel()
	if err == nil {
		t.Fatal("the auditor deleted the room stream")
	}
	t.Logf("auditor deletes the stream: %s", errs.expect(t, `Permissions Violation for Publish to "$JS.API.STREAM.DELETE.ROOMS"`))
	if after := streamInfo(t, adminJS).State.Msgs; after != before || after != 43+markers+checkpoints {
		t.Fatalf("the room stream holds %d messages after the refused acts, %d before; want %d", after, before, 43+markers+checkpoints)
	}
	t.Logf("deployed cluster: %d messages in the R3 stream, refusals as configured (%s)", before, time.Since(start).Round(time.Millisecond))
}

// streamInfo is the room stream's info, read by js.
func streamInfo(t *testing.T, js jetstream.JetStream) *jetstream.StreamInfo {
	t.Helper()
	var last error
	for range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := js.Stream(ctx, room.DefaultStream)
		if err == nil {
			var info *jetstream.StreamInfo
			info, err = st.Info(ctx)
			if err == nil {
				cancel()
				return info
			}
		}
		cancel()
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("stream %s: %v", room.DefaultStream, last)
	return nil
}
