package config

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/alecthomas/kong"
)

// Exit statuses of every roompub command.
const (
	ExitOK      = 0 // success
	ExitRefused = 1 // something was refused (and printed)
	ExitUsage   = 2 // usage, configuration or connection errors
)

// ErrRefused is wrapped by a command's error when it refused (and printed)
// something: the status is ExitRefused, not ExitUsage.
var ErrRefused = errors.New("refused")

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
// returns the exit status: ExitOK, ExitRefused when the command's error
// wraps ErrRefused, ExitUsage for any other error. Flags may stand
// anywhere among the positional arguments; "--" ends them (flagsFirst).
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
	parser, err := kong.New(grammar,
		kong.Name(name),
		kong.Description(description),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(exitRequest(code)) }),
		kong.Vars{"version": version},
		kong.Bind(binds...),
		kong.Configuration(YAML),
	)
	if err != nil {
		// The grammar is static: this is a programming error.
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return ExitUsage
	}
	ctx, err := parser.Parse(flagsFirst(parser.Model, args))
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", name, err, name)
		return ExitUsage
	}
	if err := ctx.Run(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		if errors.Is(err, ErrRefused) {
			return ExitRefused
		}
		return ExitUsage
	}
	return ExitOK
}
