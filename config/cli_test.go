package config_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/roompub/roompub/config"
)

// failing is a grammar whose one command returns err.
type failing struct {
	Fail failCmd `cmd:""`
}

type failCmd struct{ err error }

func (c *failCmd) Run() error { return c.err }

// TestRunExitsOnSignal: a command a signal stopped exits 128 + the
// signal's number (130 for SIGINT, 143 for SIGTERM), as a shell reports
// a process the signal ended, whatever else its error wraps.
func TestRunExitsOnSignal(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("1 of 1 capsules: %w", &config.SignalError{Signal: syscall.SIGINT}), config.ExitInterrupted},
		{fmt.Errorf("%w", &config.SignalError{Signal: syscall.SIGTERM}), 143},
		{errors.Join(config.ErrRefused, &config.SignalError{Signal: syscall.SIGINT}), config.ExitInterrupted},
		{config.ErrRefused, config.ExitRefused},
		{errors.New("no server"), config.ExitUsage},
	} {
		g := failing{Fail: failCmd{err: tc.err}}
		if got := config.Run("test", "", "v0", &g, []string{"fail"}, io.Discard, io.Discard); got != tc.want {
			t.Errorf("%v: exit %d, want %d", tc.err, got, tc.want)
		}
	}
	if config.ExitInterrupted != 130 {
		t.Errorf("ExitInterrupted is %d", config.ExitInterrupted)
	}
}

// TestNotifyContext: the first signal cancels the context with a
// SignalError naming it as the cause (the test sends itself SIGINT, which
// NotifyContext catches).
func TestNotifyContext(t *testing.T) {
	ctx, stop := config.NotifyContext(context.Background(), syscall.SIGINT)
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not canceled by the signal")
	}
	var se *config.SignalError
	if !errors.As(context.Cause(ctx), &se) || se.Signal != syscall.SIGINT || se.Error() != "interrupted by SIGINT" {
		t.Errorf("cause %v, want interrupted by SIGINT", context.Cause(ctx))
	}
}
