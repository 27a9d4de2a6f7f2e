package ingest_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestHostileJournalLines: each hostile line, sent as a one-line journal
// request, is refused with its code; meanwhile a well-behaved harness
// keeps shipping through the same service, and only its entries land.
func TestHostileJournalLines(t *testing.T) {
	e := roomtest.NewEnv(t)
	entries, _ := roomtest.Journal(t, "run-good", "cap-good", 60)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the well-behaved harness, on its own connection
		defer wg.Done()
		nc := e.Connect()
		for i := 0; i < len(entries); i += 3 {
			r := roomtest.ShipJournal(t, nc, "room:good", roomtest.Lines(entries[i:i+3]))
			if r.Stored != 3 {
				t.Errorf("good harness at %d: %+v", i, r)
				return
			}
		}
	}()
	cases := roomtest.HostileLines(t)
	if len(cases) < 40 {
		t.Fatalf("only %d hostile lines", len(cases))
	}
	for _, c := range cases {
		body := append(append([]byte{}, c.Line...), '\n')
		r := e.ShipJournal("room:hostile", body)
		if len(r.Items) != 1 || r.Items[0].Outcome != room.OutcomeRefused || r.Items[0].Code != c.Code {
			t.Errorf("%s: got %+v, want refused %s", c.Name, r.Items, c.Code)
			continue
		}
		if len(r.Items[0].Reason) > events.MaxTextBytes+64 {
			t.Errorf("%s: reason of %d bytes", c.Name, len(r.Items[0].Reason))
		}
	}
	wg.Wait()
	if st := e.State(); st.Msgs != uint64(len(entries)) {
		t.Fatalf("stream holds %d messages, want only the good harness's %d", st.Msgs, len(entries))
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapInuse > 512<<20 {
		t.Fatalf("heap in use %d MiB after the hostile inputs", ms.HeapInuse>>20)
	}
}

// TestHostileRecords: hostile execution records are refused with a code;
// a record over the server's max payload never reaches the service (the
// client library refuses to send it) and the service keeps serving.
func TestHostileRecords(t *testing.T) {
	e := roomtest.NewEnv(t)
	base := roomtest.ReferenceBytes(t, "verified.json")
	var obj map[string]any
	if err := json.Unmarshal(base, &obj); err != nil {
		t.Fatal(err)
	}
	with := func(k string, v any) []byte {
		m := map[string]any{}
		for kk, vv := range obj {
			m[kk] = vv
		}
		m[k] = v
		b, _ := json.Marshal(m)
		return b
	}
	cases := []struct {
		name string
		raw  []byte
		code events.Code
	}{
		{"empty", nil, events.EmptyInput},
		{"white space", []byte(" \n\t"), events.EmptyInput},
		{"truncated", base[:len(base)/2], events.MalformedJSON},
		{"duplicate keys", []byte(`{"schema/v":1,"schema/v":1}`), events.MalformedJSON},
		{"lone surrogate", []byte(`{"room/id":"room:\ud800"}`), events.MalformedJSON},
		{"1e400", []byte(`{"schema/v":1e400}`), events.MalformedJSON},
		{"byte-order mark", append([]byte("\ufeff"), base...), events.MalformedJSON},
		{"an array", []byte(`[1,2]`), events.MalformedJSON},
		{"900 KB unknown member", with("output", strings.Repeat("x", 900<<10)), events.SchemaInvalid},
		{"room/id of 513 characters", with("room/id", "room:"+strings.Repeat("x", 508)), events.SchemaInvalid},
		{"recorded-at not a date-time", with("recorded-at", "2026-13-45T99:00:00Z"), events.SchemaInvalid},
	}
	for k, v := range obj {
		var wrong []any
		switch v.(type) {
		case string:
			wrong = []any{7, nil, []any{}, false}
		case float64:
			wrong = []any{"1", nil}
		case []any:
			wrong = []any{"evidence", map[string]any{}}
		case map[string]any:
			wrong = []any{"x", []any{}}
		}
		for _, w := range wrong {
			cases = append(cases, struct {
				name string
				raw  []byte
				code events.Code
			}{fmt.Sprintf("%s as %T", k, w), with(k, w), events.SchemaInvalid})
		}
	}
	if len(cases) < 60 {
		t.Fatalf("only %d hostile records", len(cases))
	}
	for _, c := range cases {
		r := e.ShipRecord(c.raw)
		if r.Item.Outcome != room.OutcomeRefused || r.Item.Code != c.code {
			t.Errorf("%s: got %s %s, want refused %s", c.name, r.Item.Outcome, r.Item.Code, c.code)
		}
	}
	// Over the max payload: the client refuses to send it at all.
	huge := with("output", strings.Repeat("x", 1<<20))
	if _, err := e.Nc.Request("roompub.v1.execution", huge, 0); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("1 MiB record: %v", err)
	}
	if r := e.ShipRecord(base); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("the service stopped serving: %+v", r.Item)
	}
	if n := len(e.StoredUnmarked()); n != 1 {
		t.Fatalf("stream holds %d messages besides record markers, want 1", n)
	}
}
