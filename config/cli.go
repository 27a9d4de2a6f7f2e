package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"unicode/utf8"

	"github.com/alecthomas/kong"
)

// Exit statuses of every roompub command.
const (
	ExitOK      = 0 // success
	ExitRefused = 1 // something was refused (and printed)
	ExitUsage   = 2 // usage, configuration or connection errors
	// ExitInterrupted is the status of a command SIGINT stopped before it
	// was done: 128 + 2, as a shell reports a process SIGINT ended (any
	// signal: SignalError.ExitStatus).
	ExitInterrupted = 130
)

// ErrRefused is wrapped by a command's error when it refused (and printed)
// something: the status is ExitRefused, not ExitUsage.
var ErrRefused = errors.New("refused")

// SignalError is the cause of a context NotifyContext canceled: the
// signal that stopped the command. A command's error that wraps it makes
// Run return its ExitStatus.
type SignalError struct {
	Signal os.Signal
}

// Error says "interrupted by SIGINT" (SIGTERM, SIGHUP; other signals by
// their description).
func (e *SignalError) Error() string {
	switch e.Signal {
	case syscall.SIGINT:
		return "interrupted by SIGINT"
	case syscall.SIGTERM:
		return "interrupted by SIGTERM"
	case syscall.SIGHUP:
		return "interrupted by SIGHUP"
	}
	return "interrupted by signal " + e.Signal.String()
}

// ExitStatus is 128 + the signal's number (ExitInterrupted for SIGINT),
// or ExitUsage for a signal without a number.
func (e *SignalError) ExitStatus() int {
	if n, ok := e.Signal.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return ExitUsage
}

// NotifyContext returns a context canceled, with a *SignalError as its
// cause, when one of sigs arrives, and stop, which releases it. Only the
// first signal is caught: a second one has its default effect (SIGINT
// ends the process at once), so a user need not wait for the command to
// wind down.
func NotifyContext(parent context.Context, sigs ...os.Signal) (ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	go func() {
		select {
		case sig := <-ch:
			signal.Stop(ch)
			cancel(&SignalError{Signal: sig})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel(nil)
	}
}

// Version is the build's version: the module version from the build
// info, or "(devel)".
func Version() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}

// exitRequest carries the status kong asks for (after --help or
// --version) out of parsing, so Run returns instead of exiting.
type exitRequest int

// Run parses args into grammar (a kong struct) with YAML config files,
// runs the selected command with binds available to its Run method, and
// returns the exit status: ExitOK, the signal's status when the
// command's error wraps a *SignalError (ExitInterrupted for SIGINT),
// ExitRefused when it wraps ErrRefused, ExitUsage for any other error.
// Flags may stand anywhere among the positional arguments; "--" ends
// them (flagsFirst). Integer flags take plain decimal only
// (decimalIntegers). An argument that is not valid UTF-8 is refused
// (ExitUsage) before parsing, which would replace its bytes.
// Errors go to stderr prefixed with name. It never calls os.Exit.
func Run(name, description, version string, grammar any, args []string, stdout, stderr io.Writer, binds ...any) (status int) {
	defer func() {
		if r := recover(); r != nil {
			req, ok := r.(exitRequest)
			if !ok {
				panic(r)
			}
			status = int(req)
		}
	}()
	parser, err := kong.New(grammar, append([]kong.Option{
		kong.Name(name),
		kong.Description(description),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(exitRequest(code)) }),
		kong.Vars{"version": version},
		kong.Bind(binds...),
		kong.Configuration(YAML),
	}, decimalIntegers()...)...)
	if err != nil {
		// The grammar is static: this is a programming error.
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return ExitUsage
	}
	for i, a := range args {
		// kong reads an argument as text and puts U+FFFD in place of
		// what is not UTF-8: a room id or path would change unseen.
		if !utf8.ValidString(a) {
			fmt.Fprintf(stderr, "%s: argument %d (%q) is not valid UTF-8: give it as UTF-8 text\nRun '%s --help' for usage.\n", name, i+1, a, name)
			return ExitUsage
		}
	}
	ctx, err := parser.Parse(flagsFirst(parser.Model, args))
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", name, err, name)
		return ExitUsage
	}
	if err := ctx.Run(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		var se *SignalError
		if errors.As(err, &se) {
			return se.ExitStatus()
		}
		if errors.Is(err, ErrRefused) {
			return ExitRefused
		}
		return ExitUsage
	}
	return ExitOK
}
