package jsapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

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
