package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/node"
)

// hijackReplies are reply subjects a requester could name to make the
// ingest service act in its name: the JetStream API (an empty or error
// body is a valid stream delete), a room's checkpoint subject, the lease
// bucket, another user's inbox (a follower's fetch inbox), and subjects
// that are not plain.
func hijackReplies(otherInbox string) []string {
	return []string{
		"$JS.API.STREAM.DELETE." + room.DefaultStream,
		"$JS.API.STREAM.PURGE." + room.DefaultStream,
		"rooms.secure.checkpoint",
		"rooms.secure.exec",
		"$KV." + room.DefaultLeaseBucket + ".secure",
		otherInbox + ".fetch",
		"_INBOX",
		"",
	}
}

// TestReplyHijack sends, as a harness and as a solver allowed to ask for
// heads, requests whose reply subject is not the sender's own inbox, on
// the embedded server in secure mode and on a server configured from
// authconf. None is answered; each is logged with reply_not_allowed and
// counted; the stream keeps its messages and its configuration, also
// after serve stops with requests still queued (when a stop used to
// answer them with an empty body: a valid stream delete).
func TestReplyHijack(t *testing.T) {
	for _, place := range []string{"embedded", "authconf"} {
		t.Run(place, func(t *testing.T) {
			id := newIdentities(t, true)
			url := ""
			var admin *conn
			if place == "authconf" {
				conf, err := id.opts.AuthorizationConf("")
				if err != nil {
					t.Fatal(err)
				}
				url = startConfServer(t, conf).ClientURL()
			}
			p := startSecureServe(t, id, url, func(o *node.ServeOptions) {
				o.HTTPAddr = "127.0.0.1:0"
				// One request at a time: the flood below queues behind it.
				o.Service.Concurrency = 1
			})
			ctx := context.Background()
			admin = dial(t, p.url, userAdmin, id.as(userAdmin))
			harness := dial(t, p.url, userHarness, id.as(userHarness))
			solver := dial(t, p.url, "solver", id.asSolver(t))
			res, err := client.ShipCapsule(ctx, clientAs(harness, userHarness), roomtest.Testdata("samples/capsules/csv-dedupe"), "room:secure", client.ShipOptions{})
			if err != nil || res.Stored != 14 {
				t.Fatalf("ship: %+v %v", res, err)
			}
			msgs, last, _ := streamNow(t, admin)
			st, err := admin.js.Stream(ctx, room.DefaultStream)
			if err != nil {
				t.Fatal(err)
			}
			created := st.CachedInfo().Created
			head := []byte(`{"run_id":"` + res.Chain.RunID + `","capsule_id":"` + res.Chain.CapsuleID + `"}`)
			lines := mustRead(t, roomtest.Testdata("samples/capsules/csv-dedupe/journal.ndjson"))
			first := lines[:strings.IndexByte(string(lines), '\n')+1]

			// Every hijack, as the harness (journal, execution, records,
			// head) and as the solver (head). The sender listens on every
			// subject it may, so an answer anywhere would be seen.
			sent := 0
			for _, who := range []struct {
				c     *conn
				token string
				eps   []string
			}{
				{harness, room.IdentityToken(userHarness), room.Endpoints},
				{solver, room.IdentityToken(id.solverPub), []string{room.EndpointHead}},
			} {
				for _, ep := range who.eps {
					for _, reply := range hijackReplies(room.InboxPrefix(room.IdentityToken(userAuditor))) {
						body := head
						if ep == room.EndpointJournal {
							body = first
						}
						msg := &nats.Msg{Subject: room.ServiceSubject("", who.token, ep), Reply: reply, Data: body,
							Header: nats.Header{room.HeaderRoom: []string{"room:secure"}}}
						if err := who.c.nc.PublishMsg(msg); err != nil {
							t.Fatal(err)
						}
						sent++
					}
				}
				if err := who.c.nc.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			roomtest.WaitFor(t, 10*time.Second, "every hijack counted", func() bool {
				return metricSum(t, p.http, "roompub_replies_refused_total") == float64(sent)
			})
			if got := strings.Count(p.logs.String(), `"code":"reply_not_allowed"`); got != sent {
				t.Errorf("%d reply_not_allowed log lines, want %d", got, sent)
			}
			if m, l, _ := streamNow(t, admin); m != msgs || l != last {
				t.Fatalf("the stream changed: %d messages up to %d, was %d up to %d", m, l, msgs, last)
			}

			// A flood of valid requests queued behind one slot, and the
			// delete among them, then serve stops.
			c := clientAs(harness, userHarness)
			var wg sync.WaitGroup
			var answered sync.Map
			for i := range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
					defer cancel()
					_, err := c.Head(cctx, events.ChainKey{RunID: res.Chain.RunID, CapsuleID: res.Chain.CapsuleID})
					answered.Store(i, err)
				}()
			}
			del := &nats.Msg{Subject: room.ServiceSubject("", room.IdentityToken(userHarness), room.EndpointHead), Reply: "$JS.API.STREAM.DELETE." + room.DefaultStream, Data: head}
			if err := harness.nc.PublishMsg(del); err != nil {
				t.Fatal(err)
			}
			_ = harness.nc.Flush()
			p.stop()
			wg.Wait()
			// Every answer that came is an answer or an error with a body
			// the client reads (never an empty one).
			answered.Range(func(_, v any) bool {
				if err, _ := v.(error); err != nil {
					var se *client.ServiceError
					if errors.As(err, &se) && se.Reason == "" {
						t.Errorf("an error reply without a reason: %v", err)
					}
				}
				return true
			})
			if place == "authconf" {
				// The server outlives serve: the stream is still the one
				// it was, with the capsule's 14 entries, no record, and
				// at most serve's final checkpoint after them.
				st, err := admin.js.Stream(ctx, room.DefaultStream)
				if err != nil {
					t.Fatalf("after the stop: %v", err)
				}
				info := st.CachedInfo()
				if !info.Created.Equal(created) || info.State.FirstSeq != 1 {
					t.Fatalf("after the stop the stream was made anew: created %v, was %v; first seq %d", info.Created, created, info.State.FirstSeq)
				}
				if n := roomtest.CountOn(t, st, "rooms.secure.journal.>"); n != 14 {
					t.Fatalf("after the stop %d entries, want 14", n)
				}
				if n := roomtest.CountOn(t, st, "rooms.secure.exec"); n != 0 {
					t.Fatalf("after the stop %d messages on the exec subject, want 0", n)
				}
				if m, _, _ := streamNow(t, admin); m > msgs+1 {
					t.Fatalf("after the stop %d messages, was %d", m, msgs)
				}
			}
		})
	}
}

// TestReplyHijackUnauthenticated: in the default mode, with no users, a
// buggy harness cannot aim the service at the JetStream API either.
func TestReplyHijackUnauthenticated(t *testing.T) {
	s := startServe(t, time.Hour)
	ctx := context.Background()
	res, err := client.ShipCapsule(ctx, client.New(s.nc, client.Options{}), roomtest.Testdata("samples/capsules/csv-dedupe"), "room:open", client.ShipOptions{})
	if err != nil || res.Stored != 14 {
		t.Fatalf("ship: %+v %v", res, err)
	}
	js, _ := jetstream.New(s.nc)
	before, err := js.Stream(ctx, room.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	head := []byte(`{"run_id":"` + res.Chain.RunID + `","capsule_id":"` + res.Chain.CapsuleID + `"}`)
	sent := 0
	for _, reply := range hijackReplies("_OTHER") {
		for _, token := range []string{room.Anonymous, "someone"} {
			if err := s.nc.PublishMsg(&nats.Msg{Subject: room.ServiceSubject("", token, room.EndpointHead), Reply: reply, Data: head}); err != nil {
				t.Fatal(err)
			}
			sent++
		}
	}
	_ = s.nc.Flush()
	roomtest.WaitFor(t, 10*time.Second, "every hijack counted", func() bool {
		return metricSum(t, s.info.HTTPAddr, "roompub_replies_refused_total") == float64(sent)
	})
	after, err := js.Stream(ctx, room.DefaultStream)
	if err != nil {
		t.Fatalf("the stream is gone: %v", err)
	}
	if !after.CachedInfo().Created.Equal(before.CachedInfo().Created) || after.CachedInfo().State.Msgs != 14 {
		t.Fatalf("the stream changed: %+v", after.CachedInfo().State)
	}
	// The anonymous identity still gets its answers on any inbox prefix.
	custom, err := nats.Connect(s.info.ClientURL, nats.CustomInboxPrefix("_INBOX_custom"))
	if err != nil {
		t.Fatal(err)
	}
	defer custom.Close()
	h, err := client.New(custom, client.Options{}).Head(ctx, res.Chain)
	if err != nil || h.Next != 14 {
		t.Fatalf("head on a custom inbox: %+v %v", h, err)
	}
}

// metricSum adds up every series of a metric on serve's /metrics.
func metricSum(t testing.TB, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(text), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			var v float64
			if err := json.Unmarshal([]byte(strings.TrimSpace(rest[strings.LastIndexByte(rest, ' '):])), &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}
