package reader_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// slowLink is a TCP proxy to target whose server-to-client direction
// carries about rate bytes a second.
func slowLink(t *testing.T, target string, rate int) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			t.Cleanup(func() { in.Close(); out.Close() })
			go func() { _, _ = io.Copy(out, in) }()
			go func() {
				const chunk = 16 << 10
				buf := make([]byte, chunk)
				for {
					n, err := out.Read(buf)
					if n > 0 {
						if _, werr := in.Write(buf[:n]); werr != nil {
							return
						}
						time.Sleep(time.Duration(n) * time.Second / time.Duration(rate))
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return "nats://" + ln.Addr().String()
}

// TestFollowSlowLink: one follower on a link slower than a pull's batch
// (large messages at about 3 MB/s) hands out every message with no
// resync. A pull that gave up a fixed time after its request dropped
// deliveries still on the wire (the consumer then numbered the next one
// past them, and Follow resynced as if another subscriber had taken
// them); a pull of 64 messages of 400 KB queued the reply to an ack
// behind 25 MB, past the ack's timeout. A pull now waits from its last
// delivery, and asks for at most pullMaxBytes.
func TestFollowSlowLink(t *testing.T) {
	t.Parallel()
	t.Run("32 of 400 KB at 3.4 MB/s", func(t *testing.T) { t.Parallel(); followSlowLink(t, 32, 3_400_000) })
	t.Run("40 of 400 KB at 3 MiB/s", func(t *testing.T) { t.Parallel(); followSlowLink(t, 40, 3<<20) })
}

func followSlowLink(t *testing.T, n, rate int) {
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	data := bytes.Repeat([]byte("x"), 400<<10)
	for range n {
		roomtest.PublishRaw(t, e.Js, "rooms.alpha.journal.run-1.cap-1", data)
	}
	url := slowLink(t, strings.TrimPrefix(e.Srv.ClientURL(), "nats://"), rate)
	nc, err := nats.Connect(url, nats.Timeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var resyncs []string
	o := reader.FollowOptions{Durable: "slowlink", Rooms: []string{"room:alpha"}, Validator: e.V, AckWait: 3 * time.Second,
		OnResync: func(s string) { mu.Lock(); resyncs = append(resyncs, s); mu.Unlock() }}
	f := roomtest.StartFollow(t, js, o, nil)
	deadline := time.Now().Add(40 * time.Second)
	for f.Seen() < n && time.Now().Before(deadline) {
		select {
		case <-f.Done:
			t.Fatalf("Follow returned %v after %d of %d", f.Err, f.Seen(), n)
		default:
		}
		time.Sleep(50 * time.Millisecond)
	}
	seen := f.Seen()
	_ = f.Stop(t)
	mu.Lock()
	defer mu.Unlock()
	if seen < n || len(resyncs) > 0 {
		first := ""
		if len(resyncs) > 0 {
			first = resyncs[0]
		}
		t.Errorf("one follower on a slow link: %d of %d handed out, %d resyncs (%s)", seen, n, len(resyncs), first)
	}
}

// TestFollowDurableDeleted: a durable deleted by someone else while Follow
// follows ends Follow with an error naming it, within about a second (the
// pause after a failed pull); it pulled a consumer that no longer existed
// once a second, forever.
func TestFollowDurableDeleted(t *testing.T) {
	t.Parallel()
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	es, _ := roomtest.Journal(t, "run-1", "cap-1", 2)
	o := reader.FollowOptions{Durable: "gone", Rooms: []string{"room:alpha"}, Validator: e.V}
	f := roomtest.StartFollow(t, e.Js, o, nil)
	e.ShipJournal("room:alpha", roomtest.Lines(es))
	f.WaitSeen(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Js.DeleteConsumer(ctx, room.DefaultStream, "gone"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.Done:
		if f.Err == nil || !errors.Is(f.Err, reader.ErrReader) || !strings.Contains(f.Err.Error(), "durable gone was deleted while following") {
			t.Errorf("Follow returned %v; want the durable named as deleted", f.Err)
		}
	case <-time.After(8 * time.Second):
		t.Error("Follow still running 8 s after its durable was deleted")
	}
}

// TestFollowServerRestart: the server restarting under Follow (serve's
// embedded server, at a routine restart of serve) while messages are
// being handed out ends nothing: an ack the server did not confirm is
// sent again once it is back, and every message is handed out once, in
// order. Follow ended with "ack stream seq N: context deadline exceeded".
func TestFollowServerRestart(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e := roomtest.NewEnvUnmarked(t, embedded.Options{Listen: addr})
	const n = 300
	es, _ := roomtest.Journal(t, "run-1", "cap-1", n)
	e.ShipJournal("room:alpha", roomtest.Lines(es))
	nc, err := nats.Connect(e.Srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	o := reader.FollowOptions{Durable: "restart", Rooms: []string{"room:alpha"}, Validator: e.V, Read: reader.ReadDirect}
	f := roomtest.StartFollow(t, js, o, func(*reader.Event) error { time.Sleep(2 * time.Millisecond); return nil })
	f.WaitSeen(t, 40)
	e.Stop()
	time.Sleep(500 * time.Millisecond)
	e.Start()
	deadline := time.Now().Add(40 * time.Second)
	for f.Seen() < n && time.Now().Before(deadline) {
		select {
		case <-f.Done:
			t.Fatalf("Follow returned %v after %d of %d messages", f.Err, f.Seen(), n)
		default:
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := f.Stop(t); err != nil {
		t.Fatal(err)
	}
	if got := f.EventSeqs(); !slices.Equal(got, roomtest.SeqRange(1, n)) {
		t.Errorf("handed out %d events (%v…), want stream seqs 1 to %d once each", len(got), got[:min(len(got), 10)], n)
	}
}
