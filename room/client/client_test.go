package client_test

import (
	"context"
	"errors"
	"fmt"
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
