package upstream

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/validate"
)

// roomCase is one class's sample through the gate, and another of its
// samples written straight into the stream for the readers.
type roomCase struct {
	cl       class
	s        sample
	gateRoom string
	res      room.ShipResult
	err      error

	forged     *sample
	forgeRoom  string
	forgedSeqs []uint64
}

// roomWorld is one embedded server with the room stream, a gate and the
// ingest service on a fresh store.
type roomWorld struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	client *room.Client
	v      *validate.Validator
}

func startRoomWorld(t *testing.T) *roomWorld {
	t.Helper()
	ctx := context.Background()
	// Acknowledged need not mean on disk here: an fsync per append
	// would be most of the test's time.
	srv, err := room.StartEmbedded(room.EmbeddedOptions{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), SyncInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := &roomWorld{client: room.NewClient(nc, room.ClientOptions{})}
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
	gate, err := room.NewGate(ctx, nc, room.GateOptions{Validator: w.v})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := room.StartService(nc, gate, room.ServiceOptions{})
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
// through the gate (room.ShipCapsule, what `publisher journal` runs) and,
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dirs := t.TempDir()
	pendingRun := os.Getenv("ROOMPUB_UPSTREAM_PENDING") == "run"
	var cases []*roomCase
	for i, cl := range classes() {
		if _, pending := pendingClasses()[cl.name]; pending && !pendingRun {
			cases = append(cases, &roomCase{cl: cl})
			continue
		}
		// The forged sample takes the gate sample's variant.
		g := newGen(classSeed(cl.name, 1000))
		turn := g.r.IntN(64)
		g.turn = turn
		s := cl.make(g, g.ids())
		rc := &roomCase{cl: cl, s: s, gateRoom: fmt.Sprintf("room:gate-%02d-%s", i, cl.name)}
		dir := writeCapsule(t, dirs, cl.name, s.c)
		// Batches of 1 to 3 lines: a refused line may sit mid-request.
		rc.res, rc.err = room.ShipCapsule(ctx, w.client, dir, rc.gateRoom, room.ShipOptions{BatchLines: 1 + i%3})
		if s.forge {
			g := newGen(classSeed(cl.name, 2000))
			g.turn = turn
			f := cl.make(g, g.ids())
			rc.forged, rc.forgeRoom = &f, fmt.Sprintf("room:forge-%02d-%s", i, cl.name)
			subject := room.Subjects{}.Journal(rc.forgeRoom, chainOf(f.c))
			for _, line := range forgeLines(&f) {
				ack, err := w.js.Publish(ctx, subject, line)
				if err != nil {
					t.Fatalf("%s: publish a forged line: %v", cl.name, err)
				}
				rc.forgedSeqs = append(rc.forgedSeqs, ack.Sequence)
			}
		}
		cases = append(cases, rc)
	}

	shipped := time.Since(start)
	// One audit reads every room back.
	type read struct {
		seqs []uint64
	}
	served := map[string]*read{}
	rep, err := room.Audit(ctx, w.js, room.AuditOptions{Validator: w.v, OnEvent: func(ev *room.Event) {
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
		written += rc.res.Stored + len(rc.forgedSeqs)
	}
	if rep.Totals.Messages != uint64(written) {
		t.Errorf("the audit read %d messages; %d were stored or forged", rep.Totals.Messages, written)
	}
	asides := map[string][]room.SetAside{}
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
			skipPending(t, rc.cl.name)
			s, res := rc.s, rc.res
			t.Logf("%s: want %v; gate stored %d of %d, refused %s", s.variant, s.want, res.Stored, len(s.c.lines), refusedAt(res))
			checkGate(t, s, res, rc.err)
			gateCounts[s.want.codeName()]++
			servedAsIs(t, rc.gateRoom, s.c.lines[:min(res.Stored, len(s.c.lines))])
			if as := asides[rc.gateRoom]; len(as) > 0 {
				t.Errorf("%s: the readers set stored lines aside: %v", rc.gateRoom, as)
			}
			if rc.forged == nil {
				return
			}
			f := rc.forged
			forgeCounts[f.want.codeName()]++
			lines := forgeLines(f)
			as := asides[rc.forgeRoom]
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
	}
	t.Logf("gate: %d capsules %v; readers: %d forged %v; audit read %d messages; shipped and forged in %v, %v in all",
		sum(gateCounts), gateCounts, sum(forgeCounts), forgeCounts, rep.Totals.Messages, shipped.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func refusedAt(res room.ShipResult) string {
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
func checkGate(t *testing.T, s sample, res room.ShipResult, err error) {
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
