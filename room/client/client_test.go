package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
)

// TestRetryable: what a rerun can get past (no answer, over quota, a
// stopping service, a deadline, an interrupt) and what it cannot (no
// capsule directory, a malformed request, anything else).
func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("%w: roompub.v1.head: nats: no responders available for request", client.ErrUnavailable), true},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), true},
		{context.Canceled, true},
		{fmt.Errorf("%w: %w", client.ErrStopped, errors.New("interrupted by SIGINT")), true},
		{&client.ServiceError{Status: "429", ErrorReply: room.ErrorReply{Code: events.OverQuota, Reason: "busy"}}, true},
		{&client.ServiceError{Status: "503", ErrorReply: room.ErrorReply{Reason: "the ingest service is shutting down: send the request again"}}, true},
		{&client.ServiceError{Status: "400", ErrorReply: room.ErrorReply{Code: events.BadRequest, Reason: "no room"}}, false},
		{fmt.Errorf("%w: x is not a capsule directory", client.ErrShip), false},
		{errors.New("something else"), false},
	} {
		if got := client.Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestAppendRecordsReplyNotAnswering: a records reply that does not
// answer the request's records one by one, in order (one missing, two
// swapped), ends AppendRecords with an error naming the mismatch and no
// reply taken from it.
func TestAppendRecordsReplyNotAnswering(t *testing.T) {
	for _, c := range []struct{ name, items, want string }{
		{"missing", `{"item":{"index":0,"outcome":"stored","stream_seq":7}}`, "1 replies for 2 records"},
		{"swapped", `{"item":{"index":1,"outcome":"stored","stream_seq":7}},{"item":{"index":0,"outcome":"stored","stream_seq":8}}`, "reply 0 names record 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			nc := fakeService(t, map[string]string{room.EndpointRecords: `{"records":[` + c.items + `],"stored":2}`})
			replies, err := client.New(nc, client.Options{}).AppendRecords(t.Context(), [][]byte{[]byte(`{"a":1}`), []byte(`{"a":2}`)})
			if err == nil || !strings.Contains(err.Error(), c.want) || len(replies) != 0 {
				t.Fatalf("AppendRecords: %d replies, %v; want none and an error naming %q", len(replies), err, c.want)
			}
		})
	}
}
