package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/test/crashfs"
)

// natsNode is one nats-server process of the test cluster.
type natsNode struct {
	idx        int
	name       string // server_name, as stream info names the leader
	clientPort int
	routePort  int
	httpPort   int
	storeDir   string
	conf       string
	proc       *proc
	proxy      *routeProxy // in front of routePort
	cfs        *crashfs.FS // the crash filesystem storeDir is, or nil (clusterOptions.Crash)
}

func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.clientPort) }

// cluster is three nats-server processes on loopback, clustered with
// routes through the test's proxies, JetStream on disk.
type cluster struct {
	t     *testing.T // reports failures (the running subtest)
	root  *testing.T // owns the processes: they live until it ends
	nodes []*natsNode
}

// clusterOptions are the cluster's settings beyond the fault suite's
// defaults.
type clusterOptions struct {
	// SyncInterval is each server's jetstream sync_interval: "" for
	// NATS's default (2 minutes), "always" for an fsync before every
	// acknowledgement, or a duration.
	SyncInterval string
	// Crash puts each server's store directory on a crash filesystem of
	// its own (test/crashfs, with Model), so that crash can drop what the
	// server did not make durable. The test skips without FUSE.
	Crash bool
	Model crashfs.Model
}

func startCluster(t *testing.T, size int) *cluster {
	t.Helper()
	return startClusterWith(t, size, clusterOptions{})
}

func startClusterWith(t *testing.T, size int, o clusterOptions) *cluster {
	t.Helper()
	c := &cluster{t: t, root: t}
	dir := t.TempDir()
	var peers []int
	for i := range size {
		peers = append(peers, i)
	}
	for i := range size {
		n := &natsNode{idx: i, name: fmt.Sprintf("n%d", i+1), clientPort: freePort(t), routePort: freePort(t), httpPort: freePort(t),
			storeDir: filepath.Join(dir, fmt.Sprintf("n%d", i+1))}
		if o.Crash {
			// The store directory is the mount's root, which exists
			// durably, as a volume mounted for the server would; the
			// server creates jetstream/ and everything under it.
			n.cfs = crashfs.MountForTest(t, crashfs.Options{Model: o.Model})
			n.storeDir = n.cfs.Dir()
		}
		var others []int
		for _, p := range peers {
			if p != i {
				others = append(others, p)
			}
		}
		n.proxy = newRouteProxy(t, i, fmt.Sprintf("127.0.0.1:%d", n.routePort), others)
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		var routes []string
		for _, m := range c.nodes {
			if m != n {
				routes = append(routes, fmt.Sprintf("%q", "nats-route://"+m.proxy.addr(n.idx)))
			}
		}
		sync := ""
		if o.SyncInterval != "" {
			sync = fmt.Sprintf("\n  sync_interval: %s", o.SyncInterval)
		}
		// advertise names a closed port: the cluster never learns a route
		// address that bypasses the proxies (every route is explicit).
		conf := fmt.Sprintf(`server_name: %s
host: 127.0.0.1
port: %d
http: "127.0.0.1:%d"
jetstream {
  store_dir: %q
  max_memory_store: 64MB
  max_file_store: 4GB%s
}
cluster {
  name: roompub-faults
  host: 127.0.0.1
  port: %d
  advertise: "127.0.0.1:1"
  routes: [%s]
}
`, n.name, n.clientPort, n.httpPort, n.storeDir, sync, n.routePort, strings.Join(routes, ", "))
		n.conf = filepath.Join(dir, n.name+".conf")
		if err := os.WriteFile(n.conf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.nodes {
		c.start(n)
	}
	for _, n := range c.nodes {
		c.waitHealthy(n, 60*time.Second)
	}
	c.waitMeta(60 * time.Second)
	return c
}

func (c *cluster) start(n *natsNode) {
	c.t.Helper()
	n.proc = startProc(c.root, "nats-server "+n.name, natsServerBin, "-c", n.conf)
}

// urls is every client URL, comma separated.
func (c *cluster) urls() string {
	var us []string
	for _, n := range c.nodes {
		us = append(us, n.url())
	}
	return strings.Join(us, ",")
}

func (c *cluster) node(name string) *natsNode {
	c.t.Helper()
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	c.t.Fatalf("no server named %q", name)
	return nil
}

// waitHealthy waits for the server's /healthz to say ok (JetStream
// current with the meta group and its streams).
func (c *cluster) waitHealthy(n *natsNode, within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		if !n.proc.running() {
			c.t.Fatalf("%s exited: %s", n.name, tail(n.proc.stderr.String(), 3000))
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", n.httpPort))
		if err == nil {
			var h struct {
				Status string `json:"status"`
				Error  string `json:"error"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if h.Status == "ok" {
				return
			}
			last = h.Status + " " + h.Error
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("%s not healthy within %s: %s\n%s", n.name, within, last, tail(n.proc.stderr.String(), 3000))
}

// streamView is what one server says of the room stream (its /jsz).
func (c *cluster) streamView(n *natsNode) (leader string, lastSeq uint64, ok bool) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz?streams=true", n.httpPort))
	if err != nil {
		return "", 0, false
	}
	defer resp.Body.Close()
	var j struct {
		AccountDetails []struct {
			Streams []struct {
				Name  string `json:"name"`
				State struct {
					LastSeq uint64 `json:"last_seq"`
				} `json:"state"`
				Cluster struct {
					Leader string `json:"leader"`
				} `json:"cluster"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if json.NewDecoder(resp.Body).Decode(&j) != nil {
		return "", 0, false
	}
	for _, a := range j.AccountDetails {
		for _, st := range a.Streams {
			if st.Name == "ROOMS" {
				return st.Cluster.Leader, st.State.LastSeq, true
			}
		}
	}
	return "", 0, false
}

// waitSettled waits until every server names the same stream leader. A
// server cut off while it led the stream goes on saying it leads (and
// answers reads from its own copy) until it hears of the new leader; the
// test reads the stream only once that is over.
func (c *cluster) waitSettled(within time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(within)
	var views []string
	for time.Now().Before(deadline) {
		views = views[:0]
		leaders := map[string]bool{}
		for _, n := range c.nodes {
			l, seq, ok := c.streamView(n)
			views = append(views, fmt.Sprintf("%s: leader %q last seq %d (%v)", n.name, l, seq, ok))
			if ok {
				leaders[l] = true
			} else {
				leaders["?"] = true
			}
		}
		if len(leaders) == 1 && !leaders[""] && !leaders["?"] {
			for l := range leaders {
				return l
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range c.nodes {
		var hz string
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", n.httpPort)); err != nil {
			hz = err.Error()
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			hz = string(b)
		}
		c.t.Logf("%s (running %v, healthz %s) stdout:\n%s\nstderr:\n%s", n.name, n.proc.running(), hz, tail(n.proc.stdout.String(), 3000), tail(n.proc.stderr.String(), 3000))
	}
	c.t.Fatalf("the servers do not agree on the stream leader within %s: %s", within, strings.Join(views, "; "))
	return ""
}

// waitMeta waits until JetStream answers account info (a meta leader).
func (c *cluster) waitMeta(within time.Duration) {
	c.t.Helper()
	nc, err := nats.Connect(c.urls())
	if err != nil {
		c.t.Fatal(err)
	}
	defer nc.Close()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		m, err := nc.Request("$JS.API.INFO", nil, 2*time.Second)
		if err == nil && !strings.Contains(string(m.Data), `"error"`) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("no JetStream meta leader within %s", within)
}

// kill SIGKILLs a server.
func (c *cluster) kill(n *natsNode) { n.proc.kill() }

// restart starts a killed server again on its store and waits until it is
// healthy (caught up).
func (c *cluster) restart(n *natsNode) {
	c.t.Helper()
	c.start(n)
	c.waitHealthy(n, 90*time.Second)
	c.waitSettled(60 * time.Second)
}

// cut cuts every route of server n (through the proxies); heal restores
// them.
func (c *cluster) cut(n *natsNode) {
	for _, m := range c.nodes {
		m.proxy.setCut(n.idx, true)
	}
}

func (c *cluster) heal(n *natsNode) {
	for _, m := range c.nodes {
		m.proxy.setCut(n.idx, false)
	}
}

// streamLeader returns the name of the room stream's leader, waiting for
// one to be elected.
func (in *inspector) streamLeader(within time.Duration) string {
	in.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err := in.stream.Info(ctx)
		cancel()
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
			return info.Cluster.Leader
		}
		time.Sleep(100 * time.Millisecond)
	}
	in.t.Fatalf("no leader for the room stream within %s", within)
	return ""
}

// stepDown asks the stream leader to step down (the JetStream API) and
// returns the new leader.
func (in *inspector) stepDown(old string) string {
	in.t.Helper()
	for i := 0; i < 20; i++ {
		m, err := in.nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+in.stream.CachedInfo().Config.Name, nil, 5*time.Second)
		if err == nil {
			var r struct {
				Success bool `json:"success"`
				Error   *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if json.Unmarshal(m.Data, &r) == nil && r.Success {
				break
			}
			in.t.Logf("step down: %s", m.Data)
		} else {
			in.t.Logf("step down: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if l := in.streamLeader(30 * time.Second); l != old {
			return l
		}
		time.Sleep(100 * time.Millisecond)
	}
	in.t.Fatalf("the stream leader is still %s after a step down", old)
	return ""
}

// connectedTo returns the server a client named name is connected to.
func (c *cluster) connectedTo(name string) *natsNode {
	c.t.Helper()
	for _, n := range c.nodes {
		if !n.proc.running() {
			continue
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/connz?limit=1024", n.httpPort))
		if err != nil {
			continue
		}
		var cz struct {
			Conns []struct {
				Name string `json:"name"`
			} `json:"connections"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&cz)
		resp.Body.Close()
		for _, cn := range cz.Conns {
			if cn.Name == name {
				return n
			}
		}
	}
	return nil
}

// cutBetween cuts (or heals) the routes between servers a and b only:
// each still reaches the third server.
func (c *cluster) cutBetween(a, b *natsNode, cut bool) {
	for _, pair := range [][2]*natsNode{{a, b}, {b, a}} {
		p := pair[1].proxy
		p.mu.Lock()
		l := p.links[pair[0].idx]
		l.cut = cut
		if cut {
			for cn := range l.conns {
				_ = cn.Close()
			}
			clear(l.conns)
		}
		p.mu.Unlock()
	}
}

// waitService waits until the ingest service answers a head request on
// every server of the cluster: serve's subscriptions reach the servers it
// is not connected to a moment after it says it serves, and a shipper
// connected to one of those meanwhile gets "no responders" (exit 2, run
// again), which a phase would take for the fault's doing. In secure mode,
// user names the identity that asks, with opts its credentials.
func (c *cluster) waitService(t *testing.T, user string, opts ...nats.Option) {
	t.Helper()
	identity := room.Anonymous
	if user != "" {
		identity = room.IdentityToken(user)
		opts = append(opts, nats.CustomInboxPrefix(room.InboxPrefix(identity)))
	}
	for _, n := range c.nodes {
		nc, err := nats.Connect(n.url(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		cl := client.New(nc, client.Options{Timeout: 2 * time.Second, Identity: identity})
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := cl.Head(context.Background(), events.ChainKey{RunID: "run-probe", CapsuleID: "cap-probe"})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the ingest service does not answer on %s after 30s: %v", n.name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		nc.Close()
	}
}
