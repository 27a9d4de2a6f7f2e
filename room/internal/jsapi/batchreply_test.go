package jsapi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// Stored headers that hide the server's: a blank line inside the block
// (nats.go stops reading there, before the headers the server appends),
// the same with the server's headers forged before it, and a line
// without a colon (nats.go reads no header at all).
var hidingHeaders = map[string]string{
	"blank line": "NATS/1.0\r\nX: 1\r\n\r\nY: 2\r\n\r\n",
	"forged":     "NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: s.a\r\nNats-Sequence: 1\r\nNats-Time-Stamp: 2026-01-01T00:00:00Z\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 0\r\n\r\nY: 2\r\n\r\n",
	"no colon":   "NATS/1.0\r\nnot a header\r\n\r\n",
}

// TestStoredHeaderHidingTheServers: one stored message whose header
// hides the server's stopped every direct get over it (a reply without
// Nats-Stream was taken for a status: "direct get refused: status"), for
// good, since the stream is append-only; one that forged them was read
// at the seq and subject it claimed. Every read now takes it where it
// is stored, as the stream leader has it, and reads on past it.
func TestStoredHeaderHidingTheServers(t *testing.T) {
	for name, hdr := range hidingHeaders {
		t.Run(name, func(t *testing.T) {
			nc, js := streamS(t)
			ctx := context.Background()
			for _, subj := range []string{"s.a", "s.c"} {
				if _, err := js.Publish(ctx, subj, []byte("before")); err != nil {
					t.Fatal(err)
				}
			}
			seq := roomtest.PublishRawHeader(t, nc, "s.b", hdr, []byte("hidden"))
			if _, err := js.Publish(ctx, "s.a", []byte("after")); err != nil {
				t.Fatal(err)
			}
			check := func(how string, m *jsapi.Msg) {
				t.Helper()
				if m == nil || m.Seq != seq || m.Subject != "s.b" || string(m.Data) != "hidden" || m.Time.IsZero() {
					t.Errorf("%s: %+v; want seq %d on s.b, its payload and time", how, m, seq)
				}
			}
			for _, req := range []jsapi.BatchRequest{
				{Seq: 1, NextBySubj: "s.>", Batch: 10},
				{Seq: 1, Batch: 10},
				{Seq: 2, NextBySubj: "s.b", Batch: 10},
				{MultiLast: []string{"s.a", "s.b", "s.c"}, Batch: 10},
				{MultiLast: []string{"s.b"}, Batch: 1},
			} {
				ms, err := jsapi.DirectBatch(ctx, nc, "S", req, 5*time.Second)
				if err != nil {
					t.Fatalf("%+v: %v", req, err)
				}
				var got []uint64
				var hidden *jsapi.Msg
				for i := range ms {
					got = append(got, ms[i].Seq)
					if ms[i].Seq == seq {
						hidden = &ms[i]
					}
				}
				check(fmt.Sprintf("%+v (read %v)", req, got), hidden)
				for i := 1; i < len(got); i++ {
					if got[i] <= got[i-1] {
						t.Errorf("%+v: seqs %v out of order", req, got)
					}
				}
			}
			g, err := jsapi.NewGetter(nc, "S", 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			m, err := g.Seq(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			check("Getter.Seq", m)
			if m, err = g.NextBySubject(ctx, 1, "s.b"); err != nil {
				t.Fatal(err)
			}
			check("Getter.NextBySubject", m)
			ms, err := g.Batch(ctx, jsapi.BatchRequest{Seq: 1, NextBySubj: "s.>", Batch: 10})
			if err != nil || len(ms) != 4 {
				t.Fatalf("Getter.Batch: %d messages, %v; want 4", len(ms), err)
			}
			check("Getter.Batch", &ms[2])
			if m, err = jsapi.DirectGet(ctx, nc, "S", map[string]string{"last_by_subj": "s.b"}); err != nil {
				t.Fatal(err)
			}
			check("DirectGet", m)
			if m, err = jsapi.LeaderGet(ctx, nc, "S", 5*time.Second, map[string]uint64{"seq": seq}); err != nil {
				t.Fatal(err)
			}
			check("LeaderGet", m)
		})
	}
}

// tsLen is the length of the time stamp the forgeries assume:
// RFC3339Nano in UTC, nanoseconds not ending in 0 (9 in 10).
const tsLen = 30

// publishForged stores data on subject with the header block mk makes
// for the seq it will have, trying again until the server's time stamp
// has the length the forgery assumed (tsLen); it returns the seq.
func publishForged(t *testing.T, nc *nats.Conn, js jetstream.JetStream, subject string, data []byte, mk func(seq uint64) string) uint64 {
	t.Helper()
	ctx := context.Background()
	for range 20 {
		si, err := js.Stream(ctx, "S")
		if err != nil {
			t.Fatal(err)
		}
		seq := si.CachedInfo().State.LastSeq + 1
		if got := roomtest.PublishRawHeader(t, nc, subject, mk(seq), data); got != seq {
			t.Fatalf("stored at %d, want %d", got, seq)
		}
		m, err := jsapi.LeaderGet(ctx, nc, "S", 5*time.Second, map[string]uint64{"seq": seq})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Time.UTC().Format(time.RFC3339Nano)) == tsLen {
			return seq
		}
	}
	t.Fatal("no time stamp of the assumed length")
	return 0
}

// forging makes a header block of the forged and server lines mk gives
// for a seq (roomtest.HeaderAddingUp).
func forging(mk func(seq uint64) (forged, server [][2]string)) func(uint64) string {
	return func(seq uint64) string { return roomtest.HeaderAddingUp(mk(seq)) }
}

// ts30 stands for a time stamp of tsLen in a forgery's length sum.
var ts30 = strings.Repeat("x", tsLen)

// TestSingleGetForgedHeadersAddingUp: a single direct get of a message
// whose header forges the server's before a blank line, padded with
// bare-LF lines so that its headers add up, was read at the seq and
// subject it claimed (found by a reviewer); with more values than
// maxReplyValues it is read from the leader.
func TestSingleGetForgedHeadersAddingUp(t *testing.T) {
	nc, js := streamS(t)
	ctx := context.Background()
	for _, subj := range []string{"s.a", "s.c"} {
		if _, err := js.Publish(ctx, subj, []byte("before")); err != nil {
			t.Fatal(err)
		}
	}
	seq := publishForged(t, nc, js, "s.b", []byte("hidden"), forging(func(seq uint64) (f, s [][2]string) {
		f = [][2]string{{"Nats-Stream", "S"}, {"Nats-Subject", "s.a"}, {"Nats-Sequence", "1"}, {"Nats-Time-Stamp", "2026-01-01T00:00:00Z"}}
		s = [][2]string{{"Nats-Stream", "S"}, {"Nats-Subject", "s.b"}, {"Nats-Sequence", fmt.Sprint(seq)}, {"Nats-Time-Stamp", ts30}}
		return f, s
	}))
	g, err := jsapi.NewGetter(nc, "S", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	m, err := g.Seq(ctx, seq)
	if err != nil || m.Seq != seq || m.Subject != "s.b" {
		t.Errorf("Getter.Seq(%d): %+v, %v; want seq %d on s.b", seq, m, err, seq)
	}
	m, err = jsapi.DirectGet(ctx, nc, "S", map[string]any{"seq": seq})
	if err != nil || m.Seq != seq || m.Subject != "s.b" {
		t.Errorf("DirectGet seq %d: %+v, %v; want seq %d on s.b", seq, m, err, seq)
	}
}

// TestBatchForgedHeadersAddingUp: the same in a batch, the forged seq the
// real one (the next reply's Nats-Last-Sequence names it): subject, time
// and pending were the forger's. Read from the leader, the message has
// the pending the server counts.
func TestBatchForgedHeadersAddingUp(t *testing.T) {
	nc, js := streamS(t)
	ctx := context.Background()
	for _, subj := range []string{"s.a", "s.c"} {
		if _, err := js.Publish(ctx, subj, []byte("before")); err != nil {
			t.Fatal(err)
		}
	}
	var last uint64
	seq := publishForged(t, nc, js, "s.b", []byte("hidden"), forging(func(seq uint64) (f, s [][2]string) {
		last = seq - 1
		f = [][2]string{{"Nats-Stream", "S"}, {"Nats-Subject", "s.a"}, {"Nats-Sequence", fmt.Sprint(seq)}, {"Nats-Time-Stamp", "2026-01-01T00:00:00Z"},
			{"Nats-Num-Pending", "0"}, {"Nats-Last-Sequence", fmt.Sprint(last)}}
		s = [][2]string{{"Nats-Stream", "S"}, {"Nats-Subject", "s.b"}, {"Nats-Sequence", fmt.Sprint(seq)}, {"Nats-Time-Stamp", ts30},
			{"Nats-Num-Pending", "1"}, {"Nats-Last-Sequence", fmt.Sprint(last)}}
		return f, s
	}))
	if _, err := js.Publish(ctx, "s.a", []byte("after")); err != nil {
		t.Fatal(err)
	}
	req := jsapi.BatchRequest{Seq: last, NextBySubj: "s.>", Batch: 10}
	ms, err := jsapi.DirectBatch(ctx, nc, "S", req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range ms {
		if m.Seq == seq {
			found = true
			if m.Subject != "s.b" || m.Pending != 1 || m.Time.Year() == 2026 && m.Time.Month() == 1 && m.Time.Day() == 1 {
				t.Errorf("DirectBatch: seq %d read on %s, pending %d, at %v; stored on s.b, 1 pending after it, now", seq, m.Subject, m.Pending, m.Time)
			}
		}
	}
	if !found || len(ms) != 3 {
		t.Errorf("DirectBatch: %d messages, seq %d among them %v; want 3", len(ms), seq, found)
	}
}

// statusBlock: a stored header whose read part is a status (a "Status"
// line, which headerWhole counts as on the first line), padded with
// empty Nats-Subject lines, a status header name, so that serverStatus
// takes it for the server's.
func statusBlock(status, last string, server [][2]string) string {
	var b strings.Builder
	b.WriteString("NATS/1.0\r\nStatus:" + status + "\n")
	n := len("NATS/1.0\r\n\r\n") + 1 + len(status)
	if last != "" {
		b.WriteString("Nats-Last-Sequence:" + last + "\n")
		n += len("Nats-Last-Sequence") + 4 + len(last)
	}
	ls := 0
	for _, kv := range server {
		ls += len(kv[0]) + 4 + len(kv[1])
	}
	for {
		switch d := b.Len() + 4 + ls - n; {
		case d == 0:
			b.WriteString("\r\n\r\n")
			return b.String()
		case d == 1:
			b.WriteString("Nats-Subject: \n")
		default:
			b.WriteString("Nats-Subject:\n")
		}
		n += len("Nats-Subject") + 4
	}
}

// TestForgedStatusAddingUp: a stored message, empty, whose headers read
// as an end of batch ended the batch there, and a read from it found
// nothing (a reader that stops on an empty batch stopped for good); as a
// 408, every read of it failed. A status has each of its few headers
// once.
func TestForgedStatusAddingUp(t *testing.T) {
	nc, js := streamS(t)
	ctx := context.Background()
	for _, subj := range []string{"s.a", "s.c"} {
		if _, err := js.Publish(ctx, subj, []byte("before")); err != nil {
			t.Fatal(err)
		}
	}
	var end, fail uint64
	end = publishForged(t, nc, js, "s.b", nil, func(seq uint64) string {
		return statusBlock("204", fmt.Sprint(seq-1), [][2]string{{"Nats-Stream", "S"}, {"Nats-Subject", "s.b"}, {"Nats-Sequence", fmt.Sprint(seq)}, {"Nats-Time-Stamp", ts30},
			{"Nats-Num-Pending", "1"}, {"Nats-Last-Sequence", fmt.Sprint(seq - 1)}})
	})
	fail = publishForged(t, nc, js, "s.b", nil, func(seq uint64) string {
		return statusBlock("408", "", [][2]string{{"Nats-Stream", "S"}, {"Nats-Subject", "s.b"}, {"Nats-Sequence", fmt.Sprint(seq)}, {"Nats-Time-Stamp", ts30}})
	})
	if _, err := js.Publish(ctx, "s.a", []byte("after")); err != nil {
		t.Fatal(err)
	}
	ms, err := jsapi.DirectBatch(ctx, nc, "S", jsapi.BatchRequest{Seq: end - 1, NextBySubj: "s.>", Batch: 10}, 5*time.Second)
	var got []uint64
	for _, m := range ms {
		got = append(got, m.Seq)
	}
	if err != nil || len(got) < 2 || got[1] != end {
		t.Errorf("DirectBatch from %d: %v, %v; want %d (empty, on s.b) and on", end-1, got, err, end)
	}
	g, err := jsapi.NewGetter(nc, "S", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	m, err := g.Seq(ctx, fail)
	if err != nil || m == nil || m.Seq != fail {
		t.Errorf("Getter.Seq(%d): %+v, %v; want the message", fail, m, err)
	}
}

// TestMultiLastHidingPair: two hiding messages, the last of two
// subjects, side by side in a multi_last reply: the second's reply cannot
// name the first's seq, which was ErrUnreadable for every such read until
// both subjects got a newer message; the leader is walked for it.
func TestMultiLastHidingPair(t *testing.T) {
	nc, js := streamS(t)
	ctx := context.Background()
	if _, err := js.Publish(ctx, "s.a", []byte("before")); err != nil {
		t.Fatal(err)
	}
	b := roomtest.PublishRawHeader(t, nc, "s.b", "NATS/1.0\r\nX: 1\r\n\r\nY: 2\r\n\r\n", []byte("one"))
	c := roomtest.PublishRawHeader(t, nc, "s.c", "NATS/1.0\r\nX: 1\r\n\r\nY: 2\r\n\r\n", []byte("two"))
	ms, err := jsapi.DirectBatch(ctx, nc, "S", jsapi.BatchRequest{MultiLast: []string{"s.*"}, Batch: 10}, 5*time.Second)
	if err != nil || len(ms) != 3 || ms[1].Seq != b || ms[2].Seq != c {
		t.Errorf("multi_last: %d messages, %v; want 3 (b %d, c %d)", len(ms), err, b, c)
	}
}

// TestStoredStatusIsNoNoResponders: a header block without a CR keeps its
// status line when stored (the server strips one only up to a CR); an
// empty message so stored read, through nats.go's request, as "no
// responders" for every single direct get of it (found by a reviewer:
// the reader then took a chain's room for its own). Every read now
// returns the message.
func TestStoredStatusIsNoNoResponders(t *testing.T) {
	nc, js := streamS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, "s.a", []byte("before")); err != nil {
		t.Fatal(err)
	}
	seq := roomtest.PublishRawHeader(t, nc, "s.b", "NATS/1.0 503\nX:1\nab", nil)
	if _, err := js.Publish(ctx, "s.a", []byte("after")); err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]any{
		"seq":          map[string]any{"seq": seq},
		"next_by_subj": map[string]any{"seq": 1, "next_by_subj": "s.b"},
		"last_by_subj": map[string]any{"last_by_subj": "s.b"},
	} {
		m, err := jsapi.DirectGet(ctx, nc, "S", req)
		if err != nil || m == nil || m.Seq != seq || m.Subject != "s.b" {
			t.Errorf("DirectGet %s: %+v, %v; want the message at %d", name, m, err, seq)
		}
	}
	g, err := jsapi.NewGetter(nc, "S", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if m, err := g.Seq(ctx, seq); err != nil || m == nil || m.Seq != seq {
		t.Errorf("Getter.Seq: %+v, %v", m, err)
	}
	if ms, err := jsapi.DirectBatch(ctx, nc, "S", jsapi.BatchRequest{Seq: 1, Batch: 10}, 5*time.Second); err != nil || len(ms) != 3 || ms[1].Seq != seq {
		t.Errorf("DirectBatch: %d messages, %v; want 3, the second at %d", len(ms), err, seq)
	}
	// No stream: the server's own 503.
	if _, err := jsapi.DirectGet(ctx, nc, "NOPE", map[string]any{"seq": 1}); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("DirectGet of no stream: %v, want no responders", err)
	}
}
