package node_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/node"
	"github.com/roompub/roompub/validate"
)

// serveRun is one node.Serve with its logs (debug level, JSON).
type serveRun struct {
	info   node.ServeInfo
	logs   *syncBuf
	cancel context.CancelFunc
	done   chan error
}

// guardValidator trusts the reference host.
func guardValidator(t *testing.T) *validate.Validator {
	t.Helper()
	key, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	v, err := validate.New(validate.WithTrustedHosts(key.NodeID(), roomtest.ReferenceHost))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// tryServe starts node.Serve with so and returns it once ready, or the
// error it returned before that.
func tryServe(t *testing.T, so node.ServeOptions) (*serveRun, error) {
	t.Helper()
	r := &serveRun{logs: &syncBuf{}, done: make(chan error, 1)}
	so.Logger = zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), r.logs, zapcore.DebugLevel))
	ready := make(chan node.ServeInfo, 1)
	so.Ready = func(i node.ServeInfo) { ready <- i }
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- node.Serve(ctx, so) }()
	select {
	case r.info = <-ready:
	case err := <-r.done:
		cancel()
		return nil, err
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("serve not ready after 30s\n%s", r.logs)
	}
	t.Cleanup(func() {
		if r.cancel != nil {
			r.cancel()
			<-r.done
		}
	})
	return r, nil
}

// stop ends Serve and asserts it returned nil.
func (r *serveRun) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30s")
	}
}

// get fetches path from the run's metrics/health listener.
func (r *serveRun) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + r.info.HTTPAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// waitHealth polls /healthz until it answers code with body, for at most
// 10 s.
func (r *serveRun) waitHealth(t *testing.T, code int, body string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, b := r.get(t, "/healthz")
		if c == code && b == body {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz: %d %q, want %d %q", c, b, code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// onStore runs f with a JetStream client of an embedded server on dir,
// with no Serve (an operator, or an attacker, between two runs).
func onStore(t *testing.T, dir string, f func(js jetstream.JetStream)) {
	t.Helper()
	emb, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Shutdown()
	nc, err := nats.Connect(emb.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	f(js)
}

func readMark(t *testing.T, path string) room.StreamMark {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m room.StreamMark
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func shipEntries(t *testing.T, url string, n, stored int) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, body := roomtest.Journal(t, "run-1", "cap-1", n)
	if r := roomtest.ShipJournal(t, nc, "room:alpha", body); r.Stored != stored {
		t.Fatalf("shipped: %+v", r)
	}
}

func rfc(tm time.Time) string { return tm.UTC().Format(time.RFC3339Nano) }

const acceptHint = "if that is expected (the stream was restored from a backup or deliberately made anew), " +
	"start serve once with --accept-stream (accept-stream: true; ServeOptions.AcceptStream); " +
	"otherwise find out who removed it, or whether the server dropped it from a damaged block file " +
	"(docs/reliability.md, \"When the store loses what it acknowledged\"), and restore it before serve starts"

// TestStreamGoneRefusesServe: the room stream is deleted between two runs
// of serve on the embedded server. The second run refuses to start with
// stream_replaced and creates nothing; with AcceptStream it creates the
// stream anew and remembers it, and a plain run after that starts.
func TestStreamGoneRefusesServe(t *testing.T) {
	dir := t.TempDir()
	so := node.ServeOptions{Embedded: embedded.Options{Listen: "127.0.0.1:-1", StoreDir: dir}, Validator: guardValidator(t), CheckInterval: time.Hour}
	markPath := room.StreamMarkFile(dir, room.DefaultStream)

	r, err := tryServe(t, so)
	if err != nil {
		t.Fatal(err)
	}
	shipEntries(t, r.info.ClientURL, 3, 3)
	r.stop(t)
	m := readMark(t, markPath)
	if m.Stream != "ROOMS" || m.FirstSeq != 1 || m.LastSeq != 3 || m.Created.IsZero() {
		t.Fatalf("mark after the first run: %+v", m)
	}

	onStore(t, dir, func(js jetstream.JetStream) {
		if err := js.DeleteStream(context.Background(), room.DefaultStream); err != nil {
			t.Fatal(err)
		}
	})

	_, err = tryServe(t, so)
	want := "stream_replaced: stream ROOMS is gone: serve remembers it created " + rfc(m.Created) + ", last sequence 3 (" + markPath +
		"); serve creates no new stream on its own: " + acceptHint
	if !errors.Is(err, room.ErrStreamReplaced) || !errors.Is(err, events.StreamReplaced) || err.Error() != want {
		t.Fatalf("second run: %v\nwant %s", err, want)
	}
	onStore(t, dir, func(js jetstream.JetStream) {
		if _, err := js.Stream(context.Background(), room.DefaultStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("after the refused run the stream is there: %v", err)
		}
	})
	if got := readMark(t, markPath); got != m {
		t.Fatalf("the refused run changed the mark: %+v, was %+v", got, m)
	}

	accept := so
	accept.AcceptStream = true
	r, err = tryServe(t, accept)
	if err != nil {
		t.Fatalf("with AcceptStream: %v", err)
	}
	r.stop(t)
	logs := r.logs.String()
	if !strings.Contains(logs, `"level":"warn"`) || !strings.Contains(logs, `"msg":"room stream: accepting a stream other than the one serve remembers (accept-stream)"`) ||
		!strings.Contains(logs, `"remembered_last_seq":3`) || !strings.Contains(logs, `"stream_exists":false`) {
		t.Fatalf("no warning of the accepted stream:\n%s", logs)
	}
	m2 := readMark(t, markPath)
	if m2.Stream != "ROOMS" || m2.FirstSeq != 0 || m2.LastSeq != 0 || !m2.Created.After(m.Created) {
		t.Fatalf("mark after the accepting run: %+v (was %+v)", m2, m)
	}

	r, err = tryServe(t, so)
	if err != nil {
		t.Fatalf("plain run after the accepting one: %v", err)
	}
	shipEntries(t, r.info.ClientURL, 2, 2)
	r.stop(t)
	if got := readMark(t, markPath); got.Created != m2.Created || got.FirstSeq != 1 || got.LastSeq != 2 {
		t.Fatalf("mark after the last run: %+v", got)
	}
}

// TestStreamRecreatedRefusesServe: while serve is down someone deletes the
// room stream and creates one of the same name and configuration, with
// messages of their own. serve refuses it: another creation time.
func TestStreamRecreatedRefusesServe(t *testing.T) {
	dir := t.TempDir()
	so := node.ServeOptions{Embedded: embedded.Options{Listen: "127.0.0.1:-1", StoreDir: dir}, Validator: guardValidator(t), CheckInterval: time.Hour}
	markPath := room.StreamMarkFile(dir, room.DefaultStream)
	r, err := tryServe(t, so)
	if err != nil {
		t.Fatal(err)
	}
	shipEntries(t, r.info.ClientURL, 2, 2)
	r.stop(t)
	m := readMark(t, markPath)

	var created time.Time
	onStore(t, dir, func(js jetstream.JetStream) {
		ctx := context.Background()
		if err := js.DeleteStream(ctx, room.DefaultStream); err != nil {
			t.Fatal(err)
		}
		st, err := js.CreateStream(ctx, room.StreamConfig("", room.Subjects{}, 1))
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if _, err := js.Publish(ctx, "rooms.alpha.exec", []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
		created = st.CachedInfo().Created
	})

	_, err = tryServe(t, so)
	want := "stream_replaced: stream ROOMS is another stream: found it created " + rfc(created) + ", last sequence 5, serve remembers it created " +
		rfc(m.Created) + ", last sequence 2 (" + markPath + "): " + acceptHint
	if !errors.Is(err, room.ErrStreamReplaced) || err.Error() != want {
		t.Fatalf("run on the recreated stream: %v\nwant %s", err, want)
	}
	onStore(t, dir, func(js jetstream.JetStream) {
		st, err := js.Stream(context.Background(), room.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		if info := st.CachedInfo(); !info.Created.Equal(created) || info.State.Msgs != 5 {
			t.Fatalf("the refused run touched the stream: %+v", info.State)
		}
	})
}

// TestStreamShrunkRefusesServe: the store holds the stream serve
// remembers, with fewer messages than it saw (a store put back from an
// older backup, mark and all, then the mark of the newer state):
// refused as lost messages.
func TestStreamShrunkRefusesServe(t *testing.T) {
	dir := t.TempDir()
	so := node.ServeOptions{Embedded: embedded.Options{Listen: "127.0.0.1:-1", StoreDir: dir}, Validator: guardValidator(t), CheckInterval: time.Hour}
	markPath := room.StreamMarkFile(dir, room.DefaultStream)
	r, err := tryServe(t, so)
	if err != nil {
		t.Fatal(err)
	}
	shipEntries(t, r.info.ClientURL, 2, 2)
	r.stop(t)
	m := readMark(t, markPath)
	seen := m
	seen.LastSeq = 5
	data, _ := json.Marshal(seen)
	if err := os.WriteFile(markPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = tryServe(t, so)
	want := "stream_replaced: stream ROOMS lost messages: found it created " + rfc(m.Created) + ", last sequence 2, serve remembers it created " +
		rfc(m.Created) + ", last sequence 5 (" + markPath + "): " + acceptHint
	if !errors.Is(err, room.ErrStreamReplaced) || err.Error() != want {
		t.Fatalf("run on the shrunk stream: %v\nwant %s", err, want)
	}
}

// TestStreamGoneWhileServing: the room stream is deleted while serve runs.
// The next check pauses appends and /healthz names the reason; nothing
// creates the stream again.
func TestStreamGoneWhileServing(t *testing.T) {
	dir := t.TempDir()
	so := node.ServeOptions{Embedded: embedded.Options{Listen: "127.0.0.1:-1", StoreDir: dir}, Validator: guardValidator(t),
		CheckInterval: 50 * time.Millisecond, HTTPAddr: "127.0.0.1:0"}
	r, err := tryServe(t, so)
	if err != nil {
		t.Fatal(err)
	}
	r.waitHealth(t, 200, "ok\n")
	nc, err := nats.Connect(r.info.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	entries, body := roomtest.Journal(t, "run-1", "cap-1", 2)
	if jr := roomtest.ShipJournal(t, nc, "room:alpha", roomtest.Lines(entries[:1])); jr.Stored != 1 {
		t.Fatalf("first entry: %+v", jr)
	}
	markPath := room.StreamMarkFile(dir, room.DefaultStream)
	for readMark(t, markPath).LastSeq != 1 { // a check records it
		time.Sleep(10 * time.Millisecond)
	}
	st, err := js.Stream(ctx, room.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	created := st.CachedInfo().Created
	if err := js.DeleteStream(ctx, room.DefaultStream); err != nil {
		t.Fatal(err)
	}
	reason := "stream_replaced: stream ROOMS is gone: serve remembers it created " + rfc(created) + ", last sequence 1 (" +
		markPath + "); serve creates no new stream on its own: " + acceptHint
	r.waitHealth(t, 503, "unhealthy: "+reason+"\n")
	// The gate reads the chain before it appends, and that read fails
	// first: nothing is appended, and /healthz says why.
	jr := roomtest.ShipJournal(t, nc, "room:alpha", body)
	if jr.Failures != 1 || jr.Skipped != 1 || jr.Stored != 0 ||
		!strings.Contains(jr.Items[0].Reason, "read chain rooms.alpha.journal.run-1.cap-1: ") || !strings.Contains(jr.Items[0].Reason, "err_code=10059 description=stream not found") {
		t.Fatalf("paused: %+v", jr)
	}
	// A few more checks: still gone.
	r.waitHealth(t, 503, "unhealthy: "+reason+"\n")
	time.Sleep(5 * so.CheckInterval)
	if _, err := js.Stream(ctx, room.DefaultStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the stream came back: %v", err)
	}
	r.stop(t)
}

// TestStreamGuardExternalServer: serve on a server of its own remembers
// the stream in the streams bucket; the same refusal and acceptance as on
// the embedded server.
func TestStreamGuardExternalServer(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	so := node.ServeOptions{ServerURL: srv.ClientURL(), Replicas: 1, Validator: guardValidator(t), CheckInterval: time.Hour}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	mark := func() (room.StreamMark, jetstream.KeyValueStatus) {
		t.Helper()
		kv, err := js.KeyValue(ctx, room.DefaultStreamsBucket)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, room.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		var m room.StreamMark
		if err := json.Unmarshal(e.Value(), &m); err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m, st
	}

	r, err := tryServe(t, so)
	if err != nil {
		t.Fatal(err)
	}
	shipEntries(t, r.info.ClientURL, 2, 2)
	r.stop(t)
	m, st := mark()
	stream, err := js.Stream(ctx, room.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if m.Stream != "ROOMS" || !m.Created.Equal(stream.CachedInfo().Created) || m.FirstSeq != 1 || m.LastSeq != 2 || st.History() != 1 ||
		st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas != 1 {
		t.Fatalf("mark %+v, bucket %+v", m, st)
	}

	if err := js.DeleteStream(ctx, room.DefaultStream); err != nil {
		t.Fatal(err)
	}
	_, err = tryServe(t, so)
	want := "stream_replaced: stream ROOMS is gone: serve remembers it created " + rfc(m.Created) +
		", last sequence 2 (key ROOMS of bucket ROOMPUB_STREAMS); serve creates no new stream on its own: " + acceptHint
	if !errors.Is(err, room.ErrStreamReplaced) || err.Error() != want {
		t.Fatalf("second run: %v\nwant %s", err, want)
	}
	if _, err := js.Stream(ctx, room.DefaultStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("after the refused run the stream is there: %v", err)
	}

	accept := so
	accept.AcceptStream = true
	r, err = tryServe(t, accept)
	if err != nil {
		t.Fatalf("with AcceptStream: %v", err)
	}
	r.stop(t)
	m2, _ := mark()
	if m2.LastSeq != 0 || !m2.Created.After(m.Created) {
		t.Fatalf("mark after the accepting run: %+v", m2)
	}
	r, err = tryServe(t, so)
	if err != nil {
		t.Fatalf("plain run after the accepting one: %v", err)
	}
	shipEntries(t, r.info.ClientURL, 1, 1)
	r.stop(t)
	if m3, _ := mark(); !m3.Created.Equal(m2.Created) || m3.LastSeq != 1 {
		t.Fatalf("mark after the last run: %+v", m3)
	}
}

// TestSecureForeignWriter: in secure mode the admin creates a stream
// whose RePublish writes onto a room subject. serve reports weak_stream
// naming it (log, /healthz, metric) and pauses appends; once the admin
// deletes it, appends resume. The same for a push consumer of another
// stream that delivers onto a room subject.
func TestSecureForeignWriter(t *testing.T) {
	id := newIdentities(t, false)
	configure, err := id.opts.Configure()
	if err != nil {
		t.Fatal(err)
	}
	r, err := tryServe(t, node.ServeOptions{
		Embedded:      embedded.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), Configure: configure},
		Connect:       []nats.Option{id.as(userPublisher)},
		Validator:     guardValidator(t),
		HTTPAddr:      "127.0.0.1:0",
		CheckInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	admin := dial(t, r.info.ClientURL, "admin", id.as(userAdmin))
	harness := dial(t, r.info.ClientURL, "harness", id.as(userHarness))
	entries, body := roomtest.Journal(t, "run-1", "cap-1", 3)
	if jr := roomtest.ShipJournalAs(t, harness.nc, userHarness, "room:alpha", roomtest.Lines(entries[:1])); jr.Stored != 1 {
		t.Fatalf("before: %+v", jr)
	}
	r.waitHealth(t, 200, "ok\n")

	ctx := context.Background()
	if _, err := admin.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "SNEAK", Subjects: []string{"sneak.>"}, Storage: jetstream.MemoryStorage,
		// The server wants every wildcard of the source in the
		// destination: rooms.{{wildcard(1)}}.exec reaches rooms.*.exec.
		RePublish: &jetstream.RePublish{Source: "sneak.*", Destination: "rooms.{{wildcard(1)}}.exec"},
	}); err != nil {
		t.Fatalf("admin: create SNEAK: %v", err)
	}
	reason := "weak_stream: stream SNEAK republishes sneak.* to rooms.{{wildcard(1)}}.exec, which can write into the room subjects rooms.> without passing the gate"
	r.waitHealth(t, 503, "unhealthy: "+reason+"\n")
	if _, m := r.get(t, "/metrics"); !strings.Contains(m, "\nroompub_foreign_writers 1\n") {
		t.Fatalf("metrics: no roompub_foreign_writers 1")
	}
	logs := r.logs.String()
	if !strings.Contains(logs, `"level":"error"`) || !strings.Contains(logs, `"msg":"another stream can write into the room subjects: appends paused","streams":["SNEAK"]`) {
		t.Fatalf("no error log naming SNEAK:\n%s", logs)
	}
	before, _, _ := streamNow(t, admin)
	jr := roomtest.ShipJournalAs(t, harness.nc, userHarness, "room:alpha", body)
	if jr.Dupes != 1 || jr.Failures != 1 || jr.Skipped != 1 || jr.Stored != 0 || jr.Items[1].Reason != "appends paused: "+reason {
		t.Fatalf("paused: %+v", jr)
	}
	if after, _, _ := streamNow(t, admin); after != before {
		t.Fatalf("%d messages appended while paused", after-before)
	}

	if err := admin.js.DeleteStream(ctx, "SNEAK"); err != nil {
		t.Fatal(err)
	}
	r.waitHealth(t, 200, "ok\n")
	if _, m := r.get(t, "/metrics"); !strings.Contains(m, "\nroompub_foreign_writers 0\n") {
		t.Fatalf("metrics: no roompub_foreign_writers 0")
	}
	if jr := roomtest.ShipJournalAs(t, harness.nc, userHarness, "room:alpha", body); jr.Dupes != 1 || jr.Stored != 2 || jr.Items[2].StreamSeq != 3 {
		t.Fatalf("resumed: %+v", jr)
	}

	// A push consumer of another stream delivers onto a room subject.
	if _, err := admin.js.CreateStream(ctx, jetstream.StreamConfig{Name: "SNEAK2", Subjects: []string{"sneak2.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.js.CreateOrUpdatePushConsumer(ctx, "SNEAK2", jetstream.ConsumerConfig{Durable: "P", DeliverSubject: "rooms.y.exec", AckPolicy: jetstream.AckNonePolicy}); err != nil {
		t.Fatalf("admin: push consumer: %v", err)
	}
	r.waitHealth(t, 503, "unhealthy: weak_stream: consumer P of stream SNEAK2 delivers to rooms.y.exec, which can write into the room subjects rooms.> without passing the gate\n")
	if err := admin.js.DeleteConsumer(ctx, "SNEAK2", "P"); err != nil {
		t.Fatal(err)
	}
	r.waitHealth(t, 200, "ok\n")
	r.stop(t)
}

// TestStreamMarkFileOutlivesTheBucket: on an external server, serve with
// a StreamMark file keeps the mark there too. When the server loses the
// room stream and the streams bucket with it (a cluster whose stores were
// lost), the bucket remembers nothing, but the file does: serve refuses
// the start (stream_replaced, naming both places) instead of making a new,
// empty stream without a word; without the file it would start.
func TestStreamMarkFileOutlivesTheBucket(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	file := t.TempDir() + "/rooms.mark"
	so := node.ServeOptions{ServerURL: srv.ClientURL(), Replicas: 1, Validator: guardValidator(t), CheckInterval: time.Hour, StreamMark: file}
	r, err := tryServe(t, so)
	if err != nil {
		t.Fatal(err)
	}
	shipEntries(t, r.info.ClientURL, 3, 3)
	r.stop(t)
	var m room.StreamMark
	if data, err := os.ReadFile(file); err != nil || json.Unmarshal(data, &m) != nil || m.LastSeq != 3 || m.Stream != "ROOMS" {
		t.Fatalf("mark file: %s, %v", data, err)
	}

	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	// A stream the test keeps: when an account's last stream is deleted,
	// the server removes its empty streams directory in the background,
	// and a stream created meanwhile can fail with "error creating store
	// for stream" (10049). Serve is not what that would test.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{room.DefaultStream, "KV_" + room.DefaultStreamsBucket} {
		if err := js.DeleteStream(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	_, err = tryServe(t, so)
	want := "stream_replaced: stream ROOMS is gone: serve remembers it created " + rfc(m.Created) +
		", last sequence 3 (" + file + " and key ROOMS of bucket ROOMPUB_STREAMS); serve creates no new stream on its own: " + acceptHint
	if !errors.Is(err, room.ErrStreamReplaced) || err.Error() != want {
		t.Fatalf("after the loss: %v\nwant %s", err, want)
	}
	// Without the file, nothing remembers the stream.
	plain := so
	plain.StreamMark = ""
	r, err = tryServe(t, plain)
	if err != nil {
		t.Fatalf("without the mark file: %v", err)
	}
	r.stop(t)
}

// TestStreamMarkOutsideTheStore: on the embedded server, StreamMark keeps
// a second mark outside the store directory. A store directory restored
// from an older copy brings its own older mark back; the outside mark
// still refuses it (stream_replaced: fewer messages than remembered).
// Wrong settings stop serve before anything is created: a mark file
// whose directory does not exist, a leaf directory that does not exist,
// a mark of another stream, a room id that is none for AcknowledgeLoss,
// and AcknowledgeLoss without a key.
func TestStreamMarkOutsideTheStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	old := filepath.Join(t.TempDir(), "store-old")
	outside := filepath.Join(t.TempDir(), "rooms.mark")
	so := node.ServeOptions{Embedded: embedded.Options{Listen: "127.0.0.1:-1", StoreDir: dir}, Validator: guardValidator(t), CheckInterval: time.Hour, StreamMark: outside}
	r, err := tryServe(t, so)
	if err != nil {
		t.Fatal(err)
	}
	shipEntries(t, r.info.ClientURL, 2, 2)
	r.stop(t)
	if out, err := exec.Command("cp", "-a", dir, old).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	r, err = tryServe(t, so)
	if err != nil {
		t.Fatal(err)
	}
	shipEntries(t, r.info.ClientURL, 3, 1)
	r.stop(t)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(old, dir); err != nil {
		t.Fatal(err)
	}
	_, err = tryServe(t, so)
	if !errors.Is(err, room.ErrStreamReplaced) || !strings.Contains(err.Error(), "stream ROOMS lost messages") || !strings.Contains(err.Error(), "and "+outside+")") {
		t.Fatalf("the older store: %v", err)
	}

	for name, bad := range map[string]node.ServeOptions{
		"no directory":            {StreamMark: filepath.Join(t.TempDir(), "nodir", "m.json")},
		"bad room id":             {AcknowledgeLoss: []string{"big"}, PublisherKey: roomtest.NewPublisherKey(t)},
		"no key":                  {AcknowledgeLoss: []string{"room:big"}},
		"tiles without an origin": {Tiles: node.TilesOptions{Enabled: true}, HTTPAddr: "127.0.0.1:0", PublisherKey: roomtest.NewPublisherKey(t)},
		"tiles without a key":     {Tiles: node.TilesOptions{Enabled: true}, HTTPAddr: "127.0.0.1:0", Checkpoint: checkpointer.Options{Origin: "example.org/log"}},
		"tiles without http":      {Tiles: node.TilesOptions{Enabled: true}, PublisherKey: roomtest.NewPublisherKey(t), Checkpoint: checkpointer.Options{Origin: "example.org/log"}},
		"no leaf directory":       {PublisherKey: roomtest.NewPublisherKey(t), Checkpoint: checkpointer.Options{LeafDir: filepath.Join(t.TempDir(), "nodir")}},
	} {
		fresh := filepath.Join(t.TempDir(), "fresh")
		bad.Embedded, bad.Validator, bad.CheckInterval = embedded.Options{Listen: "127.0.0.1:-1", StoreDir: fresh}, guardValidator(t), time.Hour
		if _, err := tryServe(t, bad); err == nil {
			t.Errorf("%s: served", name)
		} else if strings.HasPrefix(name, "tiles") && !errors.Is(err, node.ErrTiles) {
			t.Errorf("%s: %v, want node.ErrTiles", name, err)
		} else if name == "no leaf directory" && !errors.Is(err, checkpointer.ErrCheckpointer) {
			t.Errorf("%s: %v, want checkpointer.ErrCheckpointer", name, err)
		} else if _, serr := os.Stat(filepath.Join(fresh, "jetstream", "$G", "streams", "ROOMS")); serr == nil {
			t.Errorf("%s: refused (%v) only after it made the stream", name, err)
		}
	}
	other := filepath.Join(t.TempDir(), "other.mark")
	if err := os.WriteFile(other, []byte(`{"stream":"R2","created":"2026-12-01T00:00:00Z","first_seq":1,"last_seq":5}`), 0o600); err != nil {
		t.Fatal(err)
	}
	so.StreamMark = other
	if _, err := tryServe(t, so); !errors.Is(err, room.ErrStreamReplaced) || !strings.Contains(err.Error(), other+" of stream R2") {
		t.Errorf("a mark of another stream: %v", err)
	}
}
