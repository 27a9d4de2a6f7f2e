package checkpointer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/node"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// metricValues gathers reg and returns the values of the metric family
// name, keyed by its labels as `k="v",...` ("" for a metric without
// labels).
func metricValues(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetGauge().GetValue()
			if m.GetCounter() != nil {
				v = m.GetCounter().GetValue()
			}
			out[strings.Join(labels, ",")] = v
		}
	}
	return out
}

// TestCheckpointerSetsAsideJunkCheckpoints: four messages on a room's
// checkpoint subject that are not checkpoints of the room signed by a
// trusted publisher (a JSON service reply, a note signed by a key nobody
// trusts, a trusted checkpoint of another room, a trusted checkpoint
// whose root line was changed after signing) are set aside: counted by
// reason, logged (the first at warn level), never the room's latest
// checkpoint; the checkpointer writes the room's next checkpoint over
// them, and an audit verifies both genuine checkpoints, the second against
// the first, and sets aside exactly the four.
func TestCheckpointerSetsAsideJunkCheckpoints(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key, stranger := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	const roomID, other = "room:junk", "room:other"
	reg := prometheus.NewRegistry()
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 5, Interval: time.Hour, Registerer: reg})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	ckSubj := room.Subjects{}.Checkpoint(roomID)
	trust := roomtest.Trusting(t, key)
	es, _ := roomtest.Journal(t, "run-j", "cap-j", 10)
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[:5]), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "the first checkpoint", func() bool { return e.CountOn(ckSubj) == 1 })
	genuine := e.OnSubject(ckSubj)[0]

	signer, err := checkpoint.NewNoteSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	strangerSigner, err := checkpoint.NewNoteSigner(stranger)
	if err != nil {
		t.Fatal(err)
	}
	var root [32]byte
	copy(root[:], "any root the junk cares to claim")
	byStranger, err := checkpoint.Sign(strangerSigner, roomID, 5, root)
	if err != nil {
		t.Fatal(err)
	}
	otherRoom, err := checkpoint.Sign(signer, other, 5, root)
	if err != nil {
		t.Fatal(err)
	}
	// The genuine note with its root line replaced: the trusted name's
	// signature no longer verifies.
	lines3 := bytes.SplitN(genuine.Data, []byte("\n"), 4)
	rootB64 := []byte("YW55IHJvb3QgdGhlIGp1bmsgY2FyZXMgdG8gY2xhaW0=")
	badSig := slices.Concat(lines3[0], []byte("\n"), lines3[1], []byte("\n"), rootB64, []byte("\n"), lines3[3])
	junk := [][]byte{[]byte(`{"type":"io.nats.micro.v1.info_response","name":"roompub"}`), byStranger, otherRoom, badSig}
	var junkSeqs []uint64
	for _, j := range junk {
		ack, err := e.Js.Publish(ctx, ckSubj, j)
		if err != nil {
			t.Fatal(err)
		}
		junkSeqs = append(junkSeqs, ack.Sequence)
	}
	if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[5:]), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "the second checkpoint, over the junk", func() bool { return e.CountOn(ckSubj) == 6 })
	rt := roomtest.RebuildWith(e, roomID, trust, true)
	if sizes := rt.CheckCheckpoints(t); fmt.Sprint(sizes) != "[5 10]" || !slices.Equal(rt.Aside, junkSeqs) || rt.CkptSeqs[1] != junkSeqs[3]+6 {
		t.Fatalf("checkpoint sizes %v at %v, set aside %v; want [5 10], the second after the 5 entries that follow the junk at %v", sizes, rt.CkptSeqs, rt.Aside, junkSeqs)
	}
	if got := metricValues(t, reg, "roompub_checkpoint_set_aside_total"); fmt.Sprint(got) !=
		`map[reason="bad_signature":1 reason="malformed":1 reason="other_room":1 reason="untrusted":1]` {
		t.Errorf("roompub_checkpoint_set_aside_total %v", got)
	}
	if got := metricValues(t, reg, "roompub_checkpoint_rooms_blocked"); got[""] != 0 {
		t.Errorf("roompub_checkpoint_rooms_blocked %v, want 0", got)
	}
	var got []string
	for _, l := range logs.FilterMessageSnippet("set aside").All() {
		c := l.ContextMap()
		got = append(got, fmt.Sprintf("%s %s %d %s %s", l.Level, c["room"], c["stream_seq"], c["why"], c["signer"]))
	}
	want := []string{
		fmt.Sprintf("warn %s %d malformed ", roomID, junkSeqs[0]),
		fmt.Sprintf("debug %s %d untrusted %s", roomID, junkSeqs[1], stranger.NodeID()),
		fmt.Sprintf("debug %s %d other_room %s", roomID, junkSeqs[2], key.NodeID()),
		fmt.Sprintf("debug %s %d bad_signature %s", roomID, junkSeqs[3], key.NodeID()),
	}
	if !slices.Equal(got, want) {
		t.Errorf("set-aside logs\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := logs.FilterLevelExact(zap.ErrorLevel).Len(); n != 0 {
		t.Errorf("%d error logs, want none: %v", n, logs.FilterLevelExact(zap.ErrorLevel).All())
	}

	// A reader sets aside exactly the four, at their stream seqs, and
	// verifies both genuine checkpoints, the second against the first.
	rep, err := reader.Audit(ctx, e.Js, reader.AuditOptions{Validator: e.V, Trust: trust})
	if err != nil {
		t.Fatal(err)
	}
	var aside []string
	for _, v := range rep.Violations {
		aside = append(aside, fmt.Sprintf("%d %s %s", v.Seq, v.Code, v.Subject))
		if !strings.HasPrefix(v.Reason, "not a checkpoint of the room signed by a trusted publisher (set aside; the room's checkpoints are checked without it): ") {
			t.Errorf("stream seq %d: reason %q", v.Seq, v.Reason)
		}
	}
	var wantAside []string
	for _, seq := range junkSeqs {
		wantAside = append(wantAside, fmt.Sprintf("%d %s %s", seq, events.CheckpointMismatch, ckSubj))
	}
	if !slices.Equal(aside, wantAside) {
		t.Fatalf("audit set aside\n%s\nwant\n%s", strings.Join(aside, "\n"), strings.Join(wantAside, "\n"))
	}
	var facts *reader.RoomCheckpoints
	for i := range rep.Checkpoints {
		if rep.Checkpoints[i].RoomID == roomID {
			facts = &rep.Checkpoints[i]
		}
	}
	if facts == nil || facts.Admitted != 10 || facts.Checkpoints != 2 || facts.CheckpointsRefused != 4 || facts.Latest == nil ||
		facts.Latest.Size != 10 || facts.Latest.Seq != rt.CkptSeqs[1] || facts.Covered != 10 || facts.Tail != 0 || facts.Refused != "" {
		t.Fatalf("audit facts of %s: %+v (latest %+v)", roomID, facts, facts.Latest)
	}
}

// TestCheckpointerOverridesUnsignedLeases: a lease value that is not a
// lease statement a trusted publisher signed within the TTL does not hold
// the lease: junk (and a bare node id, what older publishers wrote) put
// into the room's lease key every 200ms, a replayed genuine value older
// than the TTL, one dated in the future and one signed by an untrusted
// key are each taken over by revision, logged and counted, and the room's
// checkpoints go on.
func TestCheckpointerOverridesUnsignedLeases(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	key, stranger := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	const roomID, ttl = "room:leased", 2 * time.Second
	reg := prometheus.NewRegistry()
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Every: 5, Interval: time.Hour, LeaseTTL: ttl, Registerer: reg})
	ckp.SetLeaseSkew(100 * time.Millisecond)
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	ckSubj := room.Subjects{}.Checkpoint(roomID)
	lkey := checkpointer.LeaseKey(roomID)
	trust := roomtest.Trusting(t, key)
	kv, err := e.Js.KeyValue(ctx, room.DefaultLeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	es, _ := roomtest.Journal(t, "run-l", "cap-l", 40)
	next := 0
	// round appends 5 entries, a third of the TTL after the last write
	// (so the write renews or takes the lease), and waits for their
	// checkpoint.
	round := func() {
		t.Helper()
		time.Sleep(ttl/3 + 50*time.Millisecond)
		if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es[next:next+5]), nil); err != nil || r.Stored != 5 {
			t.Fatalf("%+v %v", r, err)
		}
		next += 5
		roomtest.WaitFor(t, 10*time.Second, fmt.Sprintf("checkpoint %d", next/5), func() bool { return e.CountOn(ckSubj) == uint64(next/5) })
	}
	ours := func() checkpoint.Lease {
		t.Helper()
		en, err := kv.Get(ctx, lkey)
		if err != nil {
			t.Fatal(err)
		}
		l, err := trust.VerifyLease(lkey, en.Value())
		if err != nil {
			t.Fatalf("lease value %q: %v", en.Value(), err)
		}
		return l
	}

	// Every value the key takes, to replay a genuine one.
	w, err := kv.Watch(ctx, lkey, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	// Junk every 200ms from before the first append.
	if _, err := kv.Put(ctx, lkey, []byte("junk")); err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		n := 0
		for {
			select {
			case <-stop:
				done <- n
				return
			case <-tick.C:
			}
			v := []byte(fmt.Sprintf("junk %d", n))
			if n%2 == 1 {
				v = []byte(key.NodeID()) // the old, unsigned format
			}
			if _, err := kv.Put(ctx, lkey, v); err != nil {
				t.Errorf("put junk: %v", err)
			}
			n++
		}
	}()
	for range 4 {
		round()
	}
	close(stop)
	puts := <-done
	var genuine []byte // the checkpointer's first value, replayed below
	for genuine == nil {
		select {
		case en := <-w.Updates():
			if _, err := trust.VerifyLease(lkey, en.Value()); err == nil {
				genuine = en.Value()
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no genuine lease value was seen")
		}
	}
	unsigned := metricValues(t, reg, "roompub_checkpoint_leases_overridden_total")[`reason="unsigned"`]
	t.Logf("%d junk values put; %v taken over", puts, unsigned)
	if unsigned < 4 {
		t.Fatalf("%v unsigned leases taken over, want at least one per checkpoint (4)", unsigned)
	}

	// The genuine value, replayed once it is older than the TTL and the
	// skew; then one from the future; then one by a key nobody trusts.
	if _, err := trust.VerifyLease(lkey, genuine); err != nil {
		t.Fatalf("the captured value %q: %v", genuine, err)
	}
	future, err := checkpoint.SignLease(key, lkey, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	byStranger, err := checkpoint.SignLease(stranger, lkey, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range [][]byte{genuine, []byte(future), []byte(byStranger)} {
		before := time.Now()
		if _, err := kv.Put(ctx, lkey, v); err != nil {
			t.Fatal(err)
		}
		round()
		if l := ours(); l.NodeID != key.NodeID() || l.At.Before(before.Truncate(time.Millisecond)) {
			t.Fatalf("lease after the takeover: %+v, want ours, taken after %s", l, before)
		}
	}
	want := map[string]float64{`reason="unsigned"`: unsigned, `reason="untrusted"`: 1, `reason="stale"`: 1, `reason="future"`: 1}
	if got := metricValues(t, reg, "roompub_checkpoint_leases_overridden_total"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("roompub_checkpoint_leases_overridden_total %v, want %v", got, want)
	}
	var got []string
	for _, l := range logs.FilterMessage("checkpointer: the room's lease was not held by a trusted publisher: taken over").All() {
		c := l.ContextMap()
		if c["why"] == "unsigned" {
			continue
		}
		got = append(got, fmt.Sprintf("%s %s %s %s %s", l.Level, c["room"], c["key"], c["why"], c["holder"]))
	}
	wantLogs := []string{
		fmt.Sprintf("warn %s %s stale %s", roomID, lkey, key.NodeID()),
		fmt.Sprintf("warn %s %s future %s", roomID, lkey, key.NodeID()),
		fmt.Sprintf("warn %s %s untrusted ", roomID, lkey),
	}
	if !slices.Equal(got, wantLogs) {
		t.Errorf("takeover logs\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantLogs, "\n"))
	}
	if n := logs.FilterMessage("checkpointer: the room's lease was not held by a trusted publisher: taken over").Len(); float64(n) != unsigned+3 {
		t.Errorf("%d takeover logs, want one per takeover (%v)", n, unsigned+3)
	}
	rt := roomtest.Rebuild(e, roomID, trust)
	if sizes := rt.CheckCheckpoints(t); fmt.Sprint(sizes) != "[5 10 15 20 25 30 35]" {
		t.Fatalf("checkpoint sizes %v", sizes)
	}
}

// TestCheckpointerReadsWithoutConsumers: with the stream's consumers at
// their limit, the checkpointer starts, catches up and follows others'
// appends (it creates no consumer: batch direct gets), and writes the
// checkpoints covering the room. In production the limit is nats-server's
// default_max_consumers (server.JSDefaultMaxConsumersPerStream, 1,000 per
// stream): it applies whenever neither the stream nor the account sets a
// positive limit, and the room stream's MaxConsumers -1 counts as not set.
// Here the server's default is 3, filled with 3 durables.
func TestCheckpointerReadsWithoutConsumers(t *testing.T) {
	e := roomtest.NewEnvWith(t, embedded.Options{Configure: func(o *server.Options) { o.JetStreamLimits.DefaultMaxConsumers = 3 }})
	ctx := context.Background()
	key, peer := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	const roomID = "room:crowded"
	for i := range 3 {
		if _, err := e.Stream.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: fmt.Sprintf("solver-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.Stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeMaximumConsumersLimit {
		t.Fatalf("a fourth consumer: %v, want the maximum consumers limit", err)
	}
	// The peer's gate appends 12 entries before the checkpointer starts
	// (the catch-up read) and 10 after (follow reads them: no sink). A
	// message written raw after each 12 and 5 entries carries the names
	// of the headers the server adds to a direct get's reply, and the
	// status of its end: the server's values, which come last, count.
	peerGate := roomtest.AttestingGate(e, e.Connect(), peer, nil, ingest.GateOptions{})
	es, _ := roomtest.Journal(t, "run-c", "cap-c", 22)
	if r, err := peerGate.AppendJournal(ctx, roomID, roomtest.Lines(es[:12]), nil); err != nil || r.Stored != 12 {
		t.Fatalf("%+v %v", r, err)
	}
	spoof := func() {
		t.Helper()
		h := nats.Header{}
		h.Set("Nats-Sequence", "1")
		h.Set("Nats-Subject", room.Subjects{}.Checkpoint("room:elsewhere"))
		h.Set("Nats-Stream", room.DefaultStream)
		h.Set("Nats-Num-Pending", "0")
		h.Set("Status", "204")
		if _, err := e.Js.PublishMsg(ctx, &nats.Msg{Subject: room.Subjects{}.Journal(roomID, events.ChainKey{RunID: "run-z", CapsuleID: "cap-z"}), Header: h}); err != nil {
			t.Fatal(err)
		}
	}
	spoof()
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, TrustedPublishers: []string{peer.NodeID()},
		Every: 10, Interval: time.Hour})
	ckSubj := room.Subjects{}.Checkpoint(roomID)
	roomtest.WaitFor(t, 10*time.Second, "a checkpoint after the catch-up read", func() bool { return e.CountOn(ckSubj) == 1 })
	if r, err := peerGate.AppendJournal(ctx, roomID, roomtest.Lines(es[12:17]), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	spoof()
	if r, err := peerGate.AppendJournal(ctx, roomID, roomtest.Lines(es[17:]), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	roomtest.WaitFor(t, 10*time.Second, "a checkpoint of what follow read", func() bool { return e.CountOn(ckSubj) == 2 })
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	rt := roomtest.Rebuild(e, roomID, roomtest.Trusting(t, key, peer))
	if sizes := rt.CheckCheckpoints(t); fmt.Sprint(sizes) != "[12 22]" || rt.Tree.Size() != 22 || fmt.Sprint(rt.NotLeaves) != "[13 20]" {
		t.Fatalf("checkpoint sizes %v of %d leaves, not leaves %v; want [12 22] of 22, not leaves [13 20]", sizes, rt.Tree.Size(), rt.NotLeaves)
	}
	// Follow read the 10 entries, a raw message and the 2 checkpoints it
	// wrote.
	if fromMemory, read := ckp.FollowCounts(); fromMemory != 0 || read != 13 {
		t.Errorf("follow took %d messages from memory and read %d, want 0 and 13", fromMemory, read)
	}
	if n := logs.FilterMessage("checkpointer: reading the room stream").Len(); n != 0 {
		t.Errorf("%d read errors logged: %v", n, logs.FilterMessage("checkpointer: reading the room stream").All())
	}
	info, err := e.Stream.Info(ctx)
	if err != nil || info.State.Consumers != 3 {
		t.Fatalf("%d consumers (%v), want the 3 durables", info.State.Consumers, err)
	}
}

// TestServeStartsWithConsumersExhausted: node.Serve with a publisher key
// starts on a stream whose consumers are at their limit (the server's
// default_max_consumers, here 2, filled with durables) and checkpoints
// what it appends.
func TestServeStartsWithConsumersExhausted(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(),
		Configure: func(o *server.Options) { o.JetStreamLimits.DefaultMaxConsumers = 2 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	hostKey, pubKey := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	v, err := validate.New(validate.WithTrustedHosts(hostKey.NodeID()))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	var subj room.Subjects
	st, err := room.EnsureStream(ctx, js, room.StreamConfig("", subj, 1), subj)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: fmt.Sprintf("solver-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	done, ready := make(chan error, 1), make(chan node.ServeInfo, 1)
	go func() {
		done <- node.Serve(sctx, node.ServeOptions{ServerURL: srv.ClientURL(), Replicas: 1, Validator: v, Logger: zap.NewNop(),
			PublisherKey: pubKey, Checkpoint: checkpointer.Options{Every: 5, Interval: time.Hour},
			Ready: func(i node.ServeInfo) { ready <- i }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	es, _ := roomtest.Journal(t, "run-x", "cap-x", 5)
	if r := roomtest.ShipJournal(t, nc, "room:crowded", roomtest.Lines(es)); r.Stored != 5 {
		t.Fatalf("%+v", r)
	}
	ckSubj := subj.Checkpoint("room:crowded")
	roomtest.WaitFor(t, 10*time.Second, "a checkpoint", func() bool { return roomtest.CountOn(t, st, ckSubj) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve returned %v", err)
	}
	last, err := st.GetLastMsgForSubject(ctx, ckSubj)
	if err != nil {
		t.Fatal(err)
	}
	if ck, err := checkpoint.Parse(last.Data, "room:crowded", roomtest.Trusting(t, pubKey)); err != nil || ck.Size != 5 {
		t.Fatalf("checkpoint %+v %v, want size 5", ck, err)
	}
}

// TestFollowRolledBackUnderJunk: a rolled-back copy of a room (its newest
// checkpoint has size 30; the state directory holds one of size 50) with
// junk written after that checkpoint on the checkpoint subject: follow
// looks past the junk to the newest genuine checkpoint and refuses the
// room at once (it used to pass the check over when the newest message
// did not parse), and sets the junk aside in stream order.
func TestFollowRolledBackUnderJunk(t *testing.T) {
	e := roomtest.NewEnv(t)
	pub, stranger := roomtest.NewHostKey(t), roomtest.NewHostKey(t)
	trust := roomtest.Trusting(t, pub)
	a := roomtest.NewAttestor(t, e.Js, pub, roomtest.AttRoom)
	es, _ := roomtest.Journal(t, "run-r", "cap-r", 50)
	for _, en := range es[:30] {
		a.Entry(en)
	}
	ck30 := a.Checkpoint()
	later := a.LaterTree(es[30:50])
	state := &reader.CheckpointState{Dir: t.TempDir()}
	if err := state.Save(roomtest.Parsed(t, a.Note(50, later.Root(), a.Signer))); err != nil {
		t.Fatal(err)
	}
	ckSubj := room.Subjects{}.Checkpoint(roomtest.AttRoom)
	strangerSigner, err := checkpoint.NewNoteSigner(stranger)
	if err != nil {
		t.Fatal(err)
	}
	junk := []uint64{
		a.Publish(ckSubj, []byte(`{"error":"not a checkpoint"}`), ""),
		a.Publish(ckSubj, a.Note(50, later.Root(), strangerSigner), ""),
	}

	f := roomtest.StartFollow(t, e.Js, reader.FollowOptions{Durable: "rbj", Validator: e.V, Trust: trust, State: state, Rooms: []string{roomtest.AttRoom}}, nil)
	// The room's set-aside, its 30 entries, its checkpoint and the junk.
	f.WaitSeen(t, 34)
	want := fmt.Sprintf("rolled back or forked: this reader verified a checkpoint of size 50 (root %x) before; the newest on the stream has size 30 (root %x, stream seq %d)",
		later.Root(), a.Tree.Root(), ck30)
	if len(f.EventSeqs()) != 0 || f.Asides[0].Seq != 0 || f.Asides[0].Reason != want {
		t.Fatalf("follow: served %v, first set-aside %+v\nwant the room refused: %s", f.EventSeqs(), f.Asides[0], want)
	}
	if got := roomtest.Mismatches(t, f.Asides); !slices.Equal(got, slices.Concat([]uint64{0}, roomtest.SeqRange(1, ck30), junk)) {
		t.Errorf("set aside %v, want the room (0), 1-%d and %v", got, ck30, junk)
	}
	_ = f.Stop(t)
}
