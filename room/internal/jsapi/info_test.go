package jsapi_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room/internal/jsapi"
)

// streamS is jsapi.StreamS (export_test.go).
var streamS = jsapi.StreamS

// TestSubjectCountsAndLeaderFresh: the leader's per-subject counts for a
// filter, exactly; a stream of one replica is always fresh; a missing
// stream is the API's error, not a stale leader.
func TestSubjectCountsAndLeaderFresh(t *testing.T) {
	nc, js := streamS(t)
	ctx := context.Background()
	for subj, n := range map[string]int{"s.a.x": 3, "s.a.y": 1, "s.b.x": 2} {
		for range n {
			if _, err := js.Publish(ctx, subj, []byte("m")); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := jsapi.SubjectCounts(ctx, nc, "S", "s.a.>", time.Second)
	if want := map[string]uint64{"s.a.x": 3, "s.a.y": 1}; err != nil || !maps.Equal(got, want) {
		t.Errorf("s.a.>: %v, %v; want %v", got, err, want)
	}
	got, err = jsapi.SubjectCounts(ctx, nc, "S", "s.c.>", time.Second)
	if err != nil || len(got) != 0 {
		t.Errorf("s.c.>: %v, %v; want none", got, err)
	}
	if err := jsapi.LeaderFresh(ctx, nc, "S", time.Second); err != nil {
		t.Errorf("one replica: %v", err)
	}
	var apiErr *jetstream.APIError
	if err := jsapi.LeaderFresh(ctx, nc, "NOPE", time.Second); !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamNotFound || errors.Is(err, jsapi.ErrStaleLeader) {
		t.Errorf("missing stream: %v", err)
	}
	if _, err := jsapi.SubjectCounts(ctx, nc, "NOPE", ">", time.Second); !errors.As(err, &apiErr) {
		t.Errorf("missing stream counts: %v", err)
	}
}

// TestStreamDeletions: none deleted is the span (0, 0); deleted seqs 3,
// 7 and 5 are listed, three of them, the span 3..7, the first and last
// kept.
func TestStreamDeletions(t *testing.T) {
	nc, js := streamS(t)
	ctx := context.Background()
	for range 9 {
		if _, err := js.Publish(ctx, "s.a", []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := jsapi.StreamDeletions(ctx, nc, "S", time.Second); err != nil || d.NumDeleted != 0 || d.FirstSeq != 1 || d.LastSeq != 9 {
		t.Fatalf("none deleted: %+v, %v", d, err)
	} else if lo, hi := d.Span(); lo != 0 || hi != 0 {
		t.Fatalf("none deleted: span %d..%d", lo, hi)
	}
	st, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{3, 7, 5} {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	d, err := jsapi.StreamDeletions(ctx, nc, "S", time.Second)
	if lo, hi := d.Span(); err != nil || d.NumDeleted != 3 || !slices.Equal(slices.Sorted(slices.Values(d.Deleted)), []uint64{3, 5, 7}) || lo != 3 || hi != 7 || d.FirstSeq != 1 || d.LastSeq != 9 {
		t.Fatalf("3, 7 and 5 deleted: %+v (span %d..%d), %v", d, lo, hi, err)
	}
	if lo, hi := (jsapi.Deletions{FirstSeq: 4, LastSeq: 20, NumDeleted: 2}).Span(); lo != 4 || hi != 20 {
		t.Errorf("deletions counted, not listed: span %d..%d, want the stream 4..20", lo, hi)
	}
	var apiErr *jetstream.APIError
	if _, err := jsapi.StreamDeletions(ctx, nc, "NOPE", time.Second); !errors.As(err, &apiErr) {
		t.Errorf("missing stream: %v", err)
	}
}

// TestUnread: skipped seqs a list of deletions names count as deleted,
// the others as unreadable (the first ten named, the span kept), with a
// long run counted without walking it when nothing is listed deleted.
func TestUnread(t *testing.T) {
	u := jsapi.NewUnread(1, 20)
	for _, s := range []uint64{1, 2, 6, 9} {
		u.Saw(s, map[uint64]bool{3: true, 4: true})
	}
	u.End(map[uint64]bool{3: true, 4: true})
	if u.Read != 4 || u.Deleted != 2 || u.Unreadable != 14 || !slices.Equal(u.UnreadableSeqs, []uint64{5, 7, 8, 10, 11, 12, 13, 14, 15, 16}) || u.Lo != 5 || u.Hi != 20 {
		t.Errorf("with deletions: %+v", u)
	}
	u = jsapi.NewUnread(0, 1_000_000)
	u.Saw(1, nil)
	u.End(nil)
	if u.Unreadable != 999_999 || len(u.UnreadableSeqs) != 10 || u.Lo != 2 || u.Hi != 1_000_000 {
		t.Errorf("a long run: %d unreadable, seqs %v, span %d..%d", u.Unreadable, u.UnreadableSeqs, u.Lo, u.Hi)
	}
}

// TestReadAllEndsPastAGoneTail: the stream's last seqs at the read's
// start are gone (deleted here; a damaged tail block in the field) and a
// message is appended meanwhile (serve keeps storing). ReadAll ends and
// counts the gone seq; it asked again from the gap forever, every answer
// starting past the span it reads.
func TestReadAllEndsPastAGoneTail(t *testing.T) {
	nc, js := streamS(t)
	ctx := context.Background()
	for range 20 {
		if _, err := js.Publish(ctx, "s.a", []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	st, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, 20); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	appended := make(chan struct{})
	sub, err := nc.Subscribe("$JS.API.DIRECT.GET.S", func(*nats.Msg) {
		once.Do(func() {
			go func() {
				defer close(appended)
				if _, err := js.Publish(ctx, "s.a", []byte("late")); err != nil {
					t.Error(err)
				}
			}()
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u, err := jsapi.ReadAll(rctx, nc, "S", jsapi.WholeStream, 1, time.Second)
	<-appended
	if err != nil {
		t.Fatalf("ReadAll did not end: %v (read %d, next stuck at the gap)", err, u.Read)
	}
	if u.Read != 19 || u.Deleted != 1 || u.Unreadable != 0 {
		t.Errorf("got %+v", u)
	}
}
