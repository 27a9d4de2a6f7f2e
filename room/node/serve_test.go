package node_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/node"
	"github.com/roompub/roompub/validate"
)

// served is a running node.Serve with its own embedded server and store,
// and a client connection to it.
type served struct {
	t      *testing.T
	info   node.ServeInfo
	nc     *nats.Conn
	js     jetstream.JetStream
	key    *events.HostKey
	cancel context.CancelFunc
	done   chan error
}

// startServe runs node.Serve in a goroutine until s.stop.
func startServe(t *testing.T, checkInterval time.Duration) *served {
	t.Helper()
	return startServeWith(t, checkInterval, nil)
}

// startServeWith is startServe with more options set by with (nil: none),
// given the host key its validator trusts.
func startServeWith(t *testing.T, checkInterval time.Duration, with func(*node.ServeOptions, *events.HostKey)) *served {
	t.Helper()
	key, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	v, err := validate.New(validate.WithTrustedHosts(key.NodeID(), roomtest.ReferenceHost))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{t: t, key: key, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan node.ServeInfo, 1)
	so := node.ServeOptions{
		Embedded:      embedded.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()},
		Validator:     v,
		HTTPAddr:      "127.0.0.1:0",
		CheckInterval: checkInterval,
		Ready:         func(i node.ServeInfo) { ready <- i },
	}
	if with != nil {
		with(&so, key)
	}
	go func() { s.done <- node.Serve(ctx, so) }()
	select {
	case s.info = <-ready:
	case err := <-s.done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("serve not ready after 30s")
	}
	t.Cleanup(func() {
		if s.cancel != nil {
			s.cancel()
			<-s.done
		}
	})
	if s.info.HTTPAddr == "" || s.info.Stream != room.DefaultStream || s.info.ServiceID == "" {
		t.Fatalf("serve info: %+v", s.info)
	}
	if s.nc, err = nats.Connect(s.info.ClientURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.nc.Close)
	s.js, _ = jetstream.New(s.nc)
	return s
}

// stop cancels Serve's context and asserts it returns nil.
func (s *served) stop() {
	s.t.Helper()
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		if err != nil {
			s.t.Fatalf("serve returned %v", err)
		}
	case <-time.After(30 * time.Second):
		s.t.Fatal("serve did not return within 30s of its context's end")
	}
}

func (s *served) shipJournal(roomID string, body []byte) room.JournalReply {
	s.t.Helper()
	return roomtest.ShipJournal(s.t, s.nc, roomID, body)
}

func (s *served) shipRecord(raw []byte) room.RecordReply {
	s.t.Helper()
	return roomtest.ShipRecord(s.t, s.nc, raw)
}

// get fetches path from the metrics/health listener.
func (s *served) get(path string) (int, string) {
	s.t.Helper()
	resp, err := http.Get("http://" + s.info.HTTPAddr + path)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// count is the number of messages in the room stream.
func (s *served) count() uint64 {
	s.t.Helper()
	st, err := s.js.Stream(context.Background(), room.DefaultStream)
	if err != nil {
		s.t.Fatal(err)
	}
	return st.CachedInfo().State.Msgs
}

// waitHealth polls /healthz until it answers code with body, for at most
// 5 s.
func (s *served) waitHealth(code int, body string) {
	s.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, b := s.get("/healthz")
		if c == code && b == body {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("healthz: %d %q, want %d %q", c, b, code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHealthzWhileStarting: the HTTP address answers from Serve's first
// step: /healthz (and /metrics) say 503 and the step the start is at,
// each step in turn, so a probe sees "starting" while the embedded server
// recovers its store; once the service is up, /healthz says ok.
func TestHealthzWhileStarting(t *testing.T) {
	t.Parallel()
	type answer struct {
		step, health, metrics string
	}
	var seen []answer
	get := func(addr, path string) string {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	s := startServeWith(t, time.Minute, func(so *node.ServeOptions, _ *events.HostKey) {
		node.WithAtStep(so, func(step, addr string) {
			seen = append(seen, answer{step, get(addr, "/healthz"), get(addr, "/metrics")})
		})
	})
	want := []string{
		"starting the embedded nats-server (it recovers its store first)",
		"connecting to NATS",
		"opening the room stream",
		"starting the checkpointers and the gates",
	}
	if len(seen) != len(want) {
		t.Fatalf("steps %+v, want %q", seen, want)
	}
	for i, a := range seen {
		body := "503 starting: " + want[i] + "\n"
		if a.step != want[i] || a.health != body || a.metrics != body {
			t.Errorf("step %d: %+v, want %q answered on /healthz and /metrics", i, a, body)
		}
	}
	s.waitHealth(200, "ok\n")
	if code, body := s.get("/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Errorf("metrics once serving: %d %.80q", code, body)
	}
}
