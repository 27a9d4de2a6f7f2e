package jsapi

import (
	"errors"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"
)

// A message stored with headers named like the server's keeps them as its
// own; the server's values, last, say where it is stored.
func TestFromReplyTakesTheServersValues(t *testing.T) {
	reply := &nats.Msg{Data: []byte("x"), Header: nats.Header{
		"Nats-Sequence":    {"1", "42"},
		"Nats-Subject":     {"rooms.other.exec", "rooms.r.exec"},
		"Nats-Stream":      {"OTHER", "ROOMS"},
		"Nats-Time-Stamp":  {"2026-12-02T01:00:00.5Z"},
		"Nats-Num-Pending": {"7"},
		"Nats-Msg-Id":      {"abc"},
		"Status":           {"404"},
	}}
	m, err := fromReply(reply)
	if err != nil {
		t.Fatal(err)
	}
	if m.Seq != 42 || m.Subject != "rooms.r.exec" || m.Pending != 7 || m.Time.Nanosecond() != 500_000_000 || string(m.Data) != "x" {
		t.Errorf("message %+v, want seq 42 on rooms.r.exec, 7 pending, at .5 s", m)
	}
	want := nats.Header{"Nats-Sequence": {"1"}, "Nats-Subject": {"rooms.other.exec"}, "Nats-Stream": {"OTHER"},
		"Nats-Msg-Id": {"abc"}, "Status": {"404"}}
	if !reflect.DeepEqual(m.Header, want) {
		t.Errorf("stored header %v, want %v", m.Header, want)
	}
	if reply.Header.Get("Nats-Sequence") != "1" || len(reply.Header.Values("Nats-Sequence")) != 2 {
		t.Error("fromReply changed the reply's header")
	}
	if _, err := fromReply(&nats.Msg{Header: nats.Header{"Nats-Stream": {"ROOMS"}, "Nats-Sequence": {"x"}}}); err == nil {
		t.Error("a reply without a numeric sequence was read")
	}
	if h := StoredHeader(nats.Header{"Nats-Stream": {"ROOMS"}, "Nats-Sequence": {"3"}}); h != nil {
		t.Errorf("StoredHeader of the server's headers alone = %v, want nil", h)
	}
}

// A reply without Nats-Stream is the server's: the end of a batch, not
// found, no responders, or a refusal.
func TestReadReplyStatuses(t *testing.T) {
	for _, c := range []struct {
		status string
		end    bool
		err    error
	}{{"204", true, nil}, {"404", true, nil}, {"503", false, nats.ErrNoResponders}, {"408", false, ErrStatus}} {
		r, err := readReply(&nats.Msg{Header: nats.Header{"Status": {c.status}, "Description": {"x"}}}, []byte("{}"))
		if end := r.end; end != c.end || r.suspect || (c.err == nil) != (err == nil) || (c.err != nil && !errors.Is(err, c.err)) {
			t.Errorf("status %s: %+v, err %v; want end %v, %v", c.status, r, err, c.end, c.err)
		}
	}
	// A stored message's own Status header does not end anything.
	r, err := readReply(&nats.Msg{Data: []byte("d"), Header: nats.Header{"Status": {"404"}, "Nats-Stream": {"ROOMS"}, "Nats-Sequence": {"9"}}}, nil)
	if err != nil || r.end || r.suspect || r.Seq != 9 || r.Header.Get("Status") != "404" {
		t.Errorf("stored message with a Status header: %+v, %v", r, err)
	}
}
