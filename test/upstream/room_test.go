package upstream

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// shipWay is one way `publisher journal` may cut a journal into
// requests: its default batches, or one line per request, pipelined
// (what a long journal, or a follower shipping lines as they come, does).
type shipWay struct {
	name string
	opts client.ShipOptions
}

func shipWays() []shipWay {
	return []shipWay{{"gate-batched", client.ShipOptions{}}, {"gate-per-line", client.ShipOptions{BatchLines: 1}}}
}

// shipment is one sample shipped one way into a room of its own.
type shipment struct {
	way    shipWay
	s      sample
	roomID string
	dir    string
	res    client.ShipResult
	err    error
}

// roomCase is one class's samples through the gate, one per way, and
// another sample written straight into the stream for the readers.
type roomCase struct {
	cl    class
	ships []*shipment

	forged     *sample
	forgeRoom  string
	forgedSeqs []uint64
}

// roomWorld is one embedded server with the room stream, a gate and the
// ingest service on a fresh store.
type roomWorld struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	client *client.Client
	v      *validate.Validator
}

func startRoomWorld(t *testing.T) *roomWorld {
	t.Helper()
	ctx := context.Background()
	// Acknowledged need not mean on disk here: an fsync per append
	// would be most of the test's time.
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), SyncInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := &roomWorld{client: client.New(nc, client.Options{})}
	if w.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	var subj room.Subjects
	if w.stream, err = room.EnsureStream(ctx, w.js, room.StreamConfig("", subj, 1), subj); err != nil {
		t.Fatal(err)
	}
	// The gate wants host trust checked; no record is sent, so any
	// host will do.
	host, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if w.v, err = validate.New(validate.WithTrustedHosts(host.NodeID())); err != nil {
		t.Fatal(err)
	}
	gate, err := ingest.NewGate(ctx, nc, ingest.GateOptions{Validator: w.v})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := ingest.StartService(nc, gate, ingest.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A request sent behind a refused one waits out the gate's ahead wait
	// (5 s) before Stop returns.
	t.Cleanup(func() { _ = svc.Stop() })
	return w
}

// forgeLines is how many of s's lines are written straight into the
// stream: up to the line that fails, or all of them.
func forgeLines(s *sample) [][]byte {
	if s.want.code == "" {
		return s.c.lines
	}
	return s.c.lines[:s.want.first]
}

func chainOf(c *capsule) events.ChainKey {
	return events.ChainKey{RunID: c.meta.str("run_id"), CapsuleID: c.meta.str("capsule_id")}
}

// TestGateAndReadersAgreeWithUpstream ships one sample of every class
// through the gate (client.ShipCapsule, what `publisher journal` runs) and,
// for the classes whose fault sits in one line, writes another sample's
// lines straight into the stream past the gate; then it reads every room
// back with an audit (what `subscriber audit` runs). The gate must admit
// every line of a capsule the upstream accepts, and of one it refuses
// store nothing from the failing line on (capsule.json problems before
// any line); the readers must serve stored lines byte for byte, and set
// a forged failing line aside with the class's code.
func TestGateAndReadersAgreeWithUpstream(t *testing.T) {
	start := time.Now()
	w := startRoomWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dirs := t.TempDir()
	pendingRun := os.Getenv("ROOMPUB_UPSTREAM_PENDING") == "run"
	// ROOMPUB_UPSTREAM_ROOM_SAMPLES=N takes N samples of each class (one
	// by default): the gate's order of pipelined requests is timing's.
	samples := 1
	if n, err := strconv.Atoi(os.Getenv("ROOMPUB_UPSTREAM_ROOM_SAMPLES")); err == nil && n > 0 {
		samples = n
	}
	var cases []*roomCase
	for _, cl := range classes() {
		for j := range samples {
			cases = append(cases, prepareRoomCase(ctx, t, w, dirs, cl, j, pendingRun))
		}
	}
	// Every capsule into its own room at once: a request queued behind
	// a refused one waits out the gate's ahead wait (5 s), and those
	// waits overlap.
	var wg sync.WaitGroup
	slots := make(chan struct{}, 16)
	for _, rc := range cases {
		for _, sh := range rc.ships {
			wg.Add(1)
			go func() {
				defer wg.Done()
				slots <- struct{}{}
				defer func() { <-slots }()
				sh.res, sh.err = client.ShipCapsule(ctx, w.client, sh.dir, sh.roomID, sh.way.opts)
			}()
		}
	}
	wg.Wait()
	shipped := time.Since(start)
	// One audit reads every room back.
	type read struct {
		seqs []uint64
	}
	served := map[string]*read{}
	rep, err := reader.Audit(ctx, w.js, reader.AuditOptions{Validator: w.v, OnEvent: func(ev *reader.Event) {
		r := served[ev.RoomID]
		if r == nil {
			r = &read{}
			served[ev.RoomID] = r
		}
		r.seqs = append(r.seqs, ev.Seq)
	}})
	if err != nil {
		t.Fatal(err)
	}
	written := 0
	for _, rc := range cases {
		for _, sh := range rc.ships {
			written += sh.res.Stored
		}
		written += len(rc.forgedSeqs)
	}
	if rep.Totals.Messages != uint64(written) {
		t.Errorf("the audit read %d messages; %d were stored or forged", rep.Totals.Messages, written)
	}
	asides := map[string][]reader.SetAside{}
	for _, a := range rep.Violations {
		asides[a.RoomID] = append(asides[a.RoomID], a)
	}
	// data is a stored message's bytes.
	data := func(seq uint64) []byte {
		m, err := w.stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get stream seq %d: %v", seq, err)
		}
		return m.Data
	}
	// servedAsIs checks that room served exactly lines, byte for byte.
	servedAsIs := func(t *testing.T, roomID string, lines [][]byte) {
		t.Helper()
		var seqs []uint64
		if r := served[roomID]; r != nil {
			seqs = r.seqs
		}
		if len(seqs) != len(lines) {
			t.Errorf("%s: the readers serve %d lines, want %d", roomID, len(seqs), len(lines))
			return
		}
		for i, seq := range seqs {
			if got := data(seq); !bytes.Equal(got, lines[i]) {
				t.Errorf("%s: served line %d is\n%q, want\n%q", roomID, i+1, got, lines[i])
			}
		}
	}

	gateCounts, forgeCounts := map[string]int{}, map[string]int{}
	for _, rc := range cases {
		t.Run(rc.cl.name, func(t *testing.T) {
			for _, way := range shipWays() {
				t.Run(way.name, func(t *testing.T) {
					skipPending(t, rc.cl.name, way.name)
					i := slices.IndexFunc(rc.ships, func(sh *shipment) bool { return sh.way.name == way.name })
					sh := rc.ships[i]
					s, res := sh.s, sh.res
					t.Logf("%s: want %v; the gate stored %d of %d, refused %s", s.variant, s.want, res.Stored, len(s.c.lines), refusedAt(res))
					checkGate(t, s, res, sh.err)
					gateCounts[s.want.codeName()]++
					servedAsIs(t, sh.roomID, s.c.lines[:min(res.Stored, len(s.c.lines))])
					if as := asides[sh.roomID]; len(as) > 0 {
						t.Errorf("%s: the readers set stored lines aside: %v", sh.roomID, as)
					}
				})
			}
			t.Run("readers", func(t *testing.T) {
				skipPending(t, rc.cl.name, "readers")
				f := rc.forged
				if f == nil {
					t.Skip("the class's fault is not in one line")
				}
				forgeCounts[f.want.codeName()]++
				lines := forgeLines(f)
				as := asides[rc.forgeRoom]
				t.Logf("%s: want %v; forged %d lines", f.variant, f.want, len(lines))
				if f.want.code == "" {
					servedAsIs(t, rc.forgeRoom, lines)
					if len(as) > 0 {
						t.Errorf("forged %s: the readers set aside %v; the upstream accepts it", f.variant, as)
					}
					return
				}
				servedAsIs(t, rc.forgeRoom, lines[:len(lines)-1])
				want := f.want.code
				if f.want.reader != "" {
					want = f.want.reader
				}
				last := rc.forgedSeqs[len(rc.forgedSeqs)-1]
				if len(as) != 1 || as[0].Seq != last || as[0].Code != want {
					t.Errorf("forged %s: the readers set aside %v, want stream seq %d as %s", f.variant, as, last, want)
				}
			})
		})
	}
	t.Logf("gate: %d capsules %v; readers: %d forged %v; audit read %d messages; shipped and forged in %v, %v in all",
		sum(gateCounts), gateCounts, sum(forgeCounts), forgeCounts, rep.Totals.Messages, shipped.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// prepareRoomCase draws sample j of cl for each way of shipping (written
// to a capsule directory) and for the readers (published straight onto
// the room subject now).
func prepareRoomCase(ctx context.Context, t *testing.T, w *roomWorld, dirs string, cl class, j int, pendingRun bool) *roomCase {
	t.Helper()
	rc := &roomCase{cl: cl}
	// Each way and the forged sample take one variant.
	turn := newGen(classSeed(cl.name, 1000+10*j)).r.IntN(64)
	name := fmt.Sprintf("%s-%d", cl.name, j)
	for k, way := range shipWays() {
		if pendingFor(cl.name, way.name) != "" && !pendingRun {
			continue
		}
		g := newGen(classSeed(cl.name, 1000+10*j+k+1))
		g.turn = turn
		sh := &shipment{way: way, s: cl.make(g, g.ids()), roomID: "room:" + way.name + "-" + name}
		sh.dir = writeCapsule(t, dirs, way.name+"-"+name, sh.s.c)
		rc.ships = append(rc.ships, sh)
	}
	if pendingFor(cl.name, "readers") != "" && !pendingRun {
		return rc
	}
	g := newGen(classSeed(cl.name, 1000+10*j+9))
	g.turn = turn
	if f := cl.make(g, g.ids()); f.forge {
		rc.forged, rc.forgeRoom = &f, "room:forge-"+name
		subject := room.Subjects{}.Journal(rc.forgeRoom, chainOf(f.c))
		for _, line := range forgeLines(&f) {
			ack, err := w.js.Publish(ctx, subject, line)
			if err != nil {
				t.Fatalf("%s: publish a forged line: %v", name, err)
			}
			rc.forgedSeqs = append(rc.forgedSeqs, ack.Sequence)
		}
	}
	return rc
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func refusedAt(res client.ShipResult) string {
	switch {
	case res.Refused != nil:
		return fmt.Sprintf("%s at line %d", res.Refused.Code, res.Refused.At.Line)
	case res.PartialTail:
		return "nothing (the partial tail was not sent)"
	}
	return "nothing"
}

// checkGate checks a shipment against the upstream's verdict as a gate
// sees it: line by line.
func checkGate(t *testing.T, s sample, res client.ShipResult, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("ship: %v", err)
	}
	n := len(s.c.lines)
	if s.want.code == "" {
		if res.Refused != nil || res.PartialTail || res.Stored != n {
			t.Errorf("the gate stored %d of %d lines, refused %s; the upstream accepts the capsule", res.Stored, n, refusedAt(res))
		}
		return
	}
	if s.want.code == events.InvalidCapsule {
		if res.Refused == nil || res.Refused.Code != events.InvalidCapsule || res.Stored != 0 {
			t.Errorf("the gate stored %d lines, refused %s; want capsule.json refused before any line", res.Stored, refusedAt(res))
		}
		return
	}
	switch {
	case res.Refused != nil:
		line := res.Refused.At.Line
		if line > s.want.first {
			t.Errorf("the gate refused line %d (%s); the first failing line is %d", line, res.Refused.Code, s.want.first)
		}
		if res.Stored > max(line-1, 0) {
			t.Errorf("the gate stored %d lines and refused line %d", res.Stored, line)
		}
	case res.PartialTail && s.want.first == n+1:
		// The failing line is the partial tail, which is never sent.
		if res.Stored > n {
			t.Errorf("the gate stored %d lines of %d", res.Stored, n)
		}
	default:
		t.Errorf("the gate stored %d of %d lines and refused nothing; the upstream refuses %v", res.Stored, n, s.want)
	}
}
