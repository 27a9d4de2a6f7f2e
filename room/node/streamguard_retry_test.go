package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestSetupRetry: serve's start waits out a JetStream API that answers
// no responders (a cluster whose meta leader is not elected yet), fails at
// once on any other error, and gives up when its context ends.
func TestSetupRetry(t *testing.T) {
	calls := 0
	err := setupRetry(context.Background(), func() error {
		calls++
		if calls < 4 {
			return nats.ErrNoResponders
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Fatalf("%d calls, %v; want 4 calls and success", calls, err)
	}
	bad := errors.New("permissions violation")
	calls = 0
	if err := setupRetry(context.Background(), func() error { calls++; return bad }); !errors.Is(err, bad) || calls != 1 {
		t.Fatalf("%d calls, %v; want 1 call and the error", calls, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	calls = 0
	if err := setupRetry(ctx, func() error { calls++; return nats.ErrNoResponders }); !errors.Is(err, nats.ErrNoResponders) || calls < 2 {
		t.Fatalf("%d calls, %v; want the last error after retries", calls, err)
	}
}
