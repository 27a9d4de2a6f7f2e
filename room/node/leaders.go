package node

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/room"
)

// leaderView is where one partition's stream leads: its leader and the
// replicas that are current, by server name.
type leaderView struct {
	stream  string
	leader  string
	current []string
}

// leaderMove is one step of spreading the partitions' leaders: stream's
// leader, from, steps down for to.
type leaderMove struct {
	stream, from, to string
}

// nextLeaderMove picks a stream whose leader leads more partitions than a
// current replica of it leads plus one: its leader then steps down in
// favour of that replica. Of several, the server leading most gives one
// up first; nothing to do (false) when no move makes the spread more
// even. Partitions are Raft groups of their own: the cluster elects each
// leader where it likes, so three partitions on three servers all lead
// from one server more often than not, which is one leader's throughput
// again (docs/operations.md, "Partitions").
func nextLeaderMove(views []leaderView) (leaderMove, bool) {
	leads := map[string]int{}
	for _, v := range views {
		if v.leader != "" {
			leads[v.leader]++
		}
	}
	sorted := append([]leaderView(nil), views...)
	sort.SliceStable(sorted, func(i, j int) bool { return leads[sorted[i].leader] > leads[sorted[j].leader] })
	for _, v := range sorted {
		if v.leader == "" {
			continue
		}
		best := ""
		for _, r := range v.current {
			if r != v.leader && leads[r]+1 < leads[v.leader] && (best == "" || leads[r] < leads[best]) {
				best = r
			}
		}
		if best != "" {
			return leaderMove{stream: v.stream, from: v.leader, to: best}, true
		}
	}
	return leaderMove{}, false
}

// leaderViews reads each stream's leader and current replicas; false
// when a stream has no cluster (one server) or no leader now.
func leaderViews(ctx context.Context, js jetstream.JetStream, streams []string) ([]leaderView, bool) {
	var views []leaderView
	for _, name := range streams {
		cctx, cancel := context.WithTimeout(ctx, room.DefaultTimeout)
		st, err := js.Stream(cctx, name)
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = st.Info(cctx)
		}
		cancel()
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) == 0 {
			return nil, false
		}
		v := leaderView{stream: name, leader: info.Cluster.Leader}
		for _, r := range info.Cluster.Replicas {
			if r.Current && !r.Offline {
				v.current = append(v.current, r.Name)
			}
		}
		views = append(views, v)
	}
	return views, true
}

// spreadLeaders makes at most max leader moves (nextLeaderMove), each a
// stream leader step-down naming the preferred new leader
// ($JS.API.STREAM.LEADER.STEPDOWN with placement.preferred, nats-server
// 2.11 and later), waiting up to 10s for each to take effect. It returns
// the moves made. A failed move is logged and ends the round: the next
// check tries again.
func spreadLeaders(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, streams []string, max int, log *zap.Logger) int {
	if len(streams) < 2 {
		return 0
	}
	moved := 0
	for moved < max {
		views, ok := leaderViews(ctx, js, streams)
		if !ok {
			return moved
		}
		m, ok := nextLeaderMove(views)
		if !ok {
			return moved
		}
		if err := stepDownFor(ctx, nc, m); err != nil {
			log.Warn("partition leaders: a step-down to spread them failed", zap.String("stream", m.stream), zap.String("leader", m.from),
				zap.String("preferred", m.to), zap.Error(err))
			return moved
		}
		moved++
		log.Info("partition leaders: moved one to spread them over the servers", zap.String("stream", m.stream),
			zap.String("from", m.from), zap.String("to", m.to))
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if vs, ok := leaderViews(ctx, js, []string{m.stream}); ok && vs[0].leader != m.from {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return moved
}

// stepDownFor asks m.stream's leader to step down in favour of m.to.
func stepDownFor(ctx context.Context, nc *nats.Conn, m leaderMove) error {
	body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": m.to}})
	cctx, cancel := context.WithTimeout(ctx, room.DefaultTimeout)
	defer cancel()
	resp, err := nc.RequestWithContext(cctx, "$JS.API.STREAM.LEADER.STEPDOWN."+m.stream, body)
	if err != nil {
		return err
	}
	var r struct {
		Success bool `json:"success"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return err
	}
	if !r.Success {
		if r.Error != nil {
			return fmt.Errorf("step-down refused: %s", r.Error.Description)
		}
		return fmt.Errorf("step-down refused")
	}
	return nil
}
