package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
)

// clusterRows are the rows --replicas 3 runs: the write rows whose cost
// the cluster changes most (every append replicated before its ack).
var clusterRows = []string{"long", "parallel"}

// cluster is size real nats-servers (embedded.Start, each with its own
// JetStream store on disk, an fsync before every acknowledgement) in this
// process, clustered by routes on loopback: a cluster as operators run
// one, in one process, so that the bench's CPU time (getrusage) holds
// every server's work. Every client of the bench connects to the first
// server, and the write streams' leaders are moved there (placeLeader), so
// that neither side has a hop the other has not.
type cluster struct {
	servers []*embedded.Server
}

// startCluster starts size servers named n1…n<size> with their stores
// under dir and waits until JetStream has a meta leader every server
// follows. On error it shuts down what it started.
func startCluster(dir string, size int) (*cluster, error) {
	routePorts := make([]int, size)
	for i := range routePorts {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		routePorts[i] = p
	}
	c := &cluster{}
	for i := range size {
		var routes []string
		for j, p := range routePorts {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
			}
		}
		name := fmt.Sprintf("n%d", i+1)
		srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(dir, name), ServerName: name,
			Configure: func(o *server.Options) {
				o.Cluster = server.ClusterOpts{Name: "roompub-bench", Host: "127.0.0.1", Port: routePorts[i]}
				o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
			}})
		if err != nil {
			c.shutdown()
			return nil, fmt.Errorf("server %s: %w", name, err)
		}
		c.servers = append(c.servers, srv)
	}
	if err := c.waitMeta(60 * time.Second); err != nil {
		c.shutdown()
		return nil, err
	}
	return c, nil
}

// waitMeta waits until every server has its routes to the others, one
// server leads JetStream's meta group, every server is current in it, and
// the leader counts every server as a peer a stream can be placed on (it
// has the peer's JetStream stats: before, an R3 stream is refused "no
// suitable peers for placement, peer offline", err_code 10005).
func (c *cluster) waitMeta(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		leaders, current, routed, placeable := 0, 0, 0, 0
		for _, s := range c.servers {
			ns := s.NATSServer()
			if ns.JetStreamIsLeader() {
				leaders++
				placeable = len(ns.JetStreamClusterPeers())
			}
			if ns.JetStreamIsCurrent() {
				current++
			}
			if ns.NumRoutes() >= len(c.servers)-1 {
				routed++
			}
		}
		if leaders == 1 && current == len(c.servers) && routed == len(c.servers) && placeable == len(c.servers) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster of %d not ready after %s: %d meta leaders, %d current, %d with every route, %d placeable", len(c.servers), within, leaders, current, routed, placeable)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shutdown stops every server, the last started first.
func (c *cluster) shutdown() {
	for i := len(c.servers) - 1; i >= 0; i-- {
		c.servers[i].Shutdown()
	}
	c.servers = nil
}

// freePort is a TCP port on loopback nothing listened on a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// placeLeader moves stream's leader to the server named want (a leader
// step-down with that server preferred, the JetStream API's
// $JS.API.STREAM.LEADER.STEPDOWN) and waits until stream info names it
// and every replica is current.
func placeLeader(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream, want string) error {
	asked := false
	for {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return fmt.Errorf("stream %s: %w", stream, err)
		}
		info := st.CachedInfo()
		if info.Cluster != nil && info.Cluster.Leader == want && allCurrent(info.Cluster) {
			return nil
		}
		if info.Cluster != nil && info.Cluster.Leader != "" && info.Cluster.Leader != want && !asked {
			req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": want}})
			m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, req)
			if err != nil {
				return fmt.Errorf("stream %s: leader step-down to %s: %w", stream, want, err)
			}
			var resp struct {
				Success bool `json:"success"`
				Error   *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(m.Data, &resp); err != nil || !resp.Success {
				return fmt.Errorf("stream %s: leader step-down to %s refused: %s", stream, want, m.Data)
			}
			asked = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stream %s: leader not on %s: %w", stream, want, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// allCurrent reports whether every replica but the leader is current.
func allCurrent(ci *jetstream.ClusterInfo) bool {
	for _, p := range ci.Replicas {
		if !p.Current {
			return false
		}
	}
	return true
}

// streamFacts are what the server says of a write stream after the rows:
// its replicas, its leader and how many of them are current with it.
type streamFacts struct {
	replicas, current int
	leader            string
}

// facts reads stream's facts from the server.
func (b *bench) facts(ctx context.Context, stream string) (streamFacts, error) {
	st, err := b.js.Stream(ctx, stream)
	if err != nil {
		return streamFacts{}, err
	}
	info := st.CachedInfo()
	f := streamFacts{replicas: info.Config.Replicas}
	if info.Cluster == nil {
		return f, nil // a server of its own
	}
	f.leader = info.Cluster.Leader
	if f.leader != "" {
		f.current = 1
	}
	for _, p := range info.Cluster.Replicas {
		if p.Current {
			f.current++
		}
	}
	return f, nil
}

// streamFacts adds to out what the server says of both write streams
// after the rows: <stream>_stream_replicas (configured),
// _stream_current (the leader and the replicas current with it),
// _stream_leader and _stream_leaves (the entries and records stored,
// neither checkpoints nor markers; the raw side's with its long chain's
// reference chain), with "write" for roompub's stream and "raw" for the
// raw side's.
func (b *bench) streamFacts(out map[string]any) error {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	for _, s := range []struct {
		key, name string
		subjects  room.Subjects
	}{{"write", writeStream, b.subjects}, {"raw", rawStream, b.rawSubjects}} {
		f, err := b.facts(ctx, s.name)
		if err != nil {
			return fmt.Errorf("stream %s: %w", s.name, err)
		}
		leaves, _, err := b.storedOn(s.name, s.subjects, s.subjects.All())
		if err != nil {
			return fmt.Errorf("stream %s: %w", s.name, err)
		}
		p := s.key + "_stream_"
		out[p+"replicas"], out[p+"current"], out[p+"leader"], out[p+"leaves"] = f.replicas, f.current, f.leader, leaves
		b.logf("stream %s: %d replicas, %d current, leader %q, %d entries and records", s.name, f.replicas, f.current, f.leader, leaves)
	}
	return nil
}
