package jsapi_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room/internal/jsapi"
)

// TestGetterAnswersEachRequestItsOwn: many batch and single direct gets
// in flight at once on one Getter each get their own reply: the messages
// at the sequences asked, with the headers they were stored with, the
// first on a subject from a sequence, none past the end or on a subject
// without messages; a stream that does not exist has no responders.
func TestGetterAnswersEachRequestItsOwn(t *testing.T) {
	nc, js := streamS(t)
	ctx := context.Background()
	// Sequence i (1 to 200) holds "m<i>" on s.<i mod 3>, with header N: i.
	const n = 200
	for i := 1; i <= n; i++ {
		m := &nats.Msg{Subject: "s." + strconv.Itoa(i%3), Data: []byte("m" + strconv.Itoa(i)), Header: nats.Header{"N": []string{strconv.Itoa(i)}}}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	g, err := jsapi.NewGetter(nc, "S", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	check := func(m jsapi.Msg, seq uint64) error {
		if m.Seq != seq || m.Subject != "s."+strconv.FormatUint(seq%3, 10) || string(m.Data) != "m"+strconv.FormatUint(seq, 10) ||
			m.Header.Get("N") != strconv.FormatUint(seq, 10) || m.Header.Get(jetstream.SequenceHeader) != "" {
			return fmt.Errorf("got seq %d on %s, %q, header %v; want sequence %d", m.Seq, m.Subject, m.Data, m.Header, seq)
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3*n)
	for i := uint64(1); i <= n; i++ {
		wg.Add(3)
		go func() {
			defer wg.Done()
			want := min(4, n+1-i)
			ms, err := g.Batch(ctx, jsapi.BatchRequest{Seq: i, Batch: 4})
			if err != nil || uint64(len(ms)) != want {
				errs <- fmt.Errorf("batch from %d: %d messages, %v; want %d", i, len(ms), err, want)
				return
			}
			for j, m := range ms {
				if err := check(m, i+uint64(j)); err != nil {
					errs <- fmt.Errorf("batch from %d: %w", i, err)
				}
			}
		}()
		go func() {
			defer wg.Done()
			m, err := g.Seq(ctx, i)
			if err != nil || m == nil {
				errs <- fmt.Errorf("seq %d: %v, %v", i, m, err)
				return
			}
			if err := check(*m, i); err != nil {
				errs <- fmt.Errorf("seq %d: %w", i, err)
			}
		}()
		go func() {
			defer wg.Done()
			// The first on s.0 from i: the next multiple of 3, none past 198.
			want := (i + 2) / 3 * 3
			m, err := g.NextBySubject(ctx, i, "s.0")
			switch {
			case err != nil:
				errs <- fmt.Errorf("next on s.0 from %d: %v", i, err)
			case want > n:
				if m != nil {
					errs <- fmt.Errorf("next on s.0 from %d: %d, want none", i, m.Seq)
				}
			case m == nil:
				errs <- fmt.Errorf("next on s.0 from %d: none, want %d", i, want)
			default:
				if err := check(*m, want); err != nil {
					errs <- fmt.Errorf("next on s.0 from %d: %w", i, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, tc := range []struct {
		name string
		get  func() (*jsapi.Msg, error)
	}{
		{"past the end", func() (*jsapi.Msg, error) { return g.Seq(ctx, n+1) }},
		{"no such subject", func() (*jsapi.Msg, error) { return g.NextBySubject(ctx, 1, "s.9") }},
	} {
		if m, err := tc.get(); m != nil || err != nil {
			t.Errorf("%s: %v, %v; want none", tc.name, m, err)
		}
	}
	if ms, err := g.Batch(ctx, jsapi.BatchRequest{Seq: n + 1, Batch: 4}); len(ms) != 0 || err != nil {
		t.Errorf("batch past the end: %d messages, %v; want none", len(ms), err)
	}
	none, err := jsapi.NewGetter(nc, "NOPE", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	if _, err := none.Seq(ctx, 1); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("a missing stream: %v, want no responders", err)
	}
}
