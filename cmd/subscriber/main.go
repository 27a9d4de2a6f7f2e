// Command subscriber reads rooms back from NATS JetStream and trusts
// nothing it reads: every journal entry and execution record is verified
// again with the code `publisher verify` and the gate use.
//
//	subscriber follow --room ROOM --durable NAME [--json]
//	subscriber audit [--room ROOM]... [--from-seq N | --since TIME] [--json]
//	subscriber evidence --instance ENV_REF [--room ROOM] [--json]
//
// Exit status: 0 clean, 1 something was refused (audit, evidence), 2 usage,
// configuration or connection errors.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/alecthomas/kong"

	"github.com/roompub/roompub/config"
)

// Exit statuses.
const (
	exitOK      = 0
	exitRefused = 1
	exitUsage   = 2
)

// errRefused: the command found something refused and printed it.
var errRefused = errors.New("refused")

var version = ""

type cli struct {
	Version kong.VersionFlag `help:"Print the version and exit."`
	Config  kong.ConfigFlag  `name:"config" help:"YAML file of flag values (keys are flag names); flags given on the command line win." placeholder:"FILE"`

	Follow   followCmd   `cmd:"" help:"Follow rooms with a durable consumer and print verified events as JSON lines."`
	Audit    auditCmd    `cmd:"" help:"Replay rooms from the stream, verify everything and print a verdict."`
	Evidence evidenceCmd `cmd:"" help:"Print one instance's verified execution records and evidence items."`
}

type streams struct {
	out, err io.Writer
}

type exitRequest int

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) (status int) {
	defer func() {
		if r := recover(); r != nil {
			req, ok := r.(exitRequest)
			if !ok {
				panic(r)
			}
			status = int(req)
		}
	}()
	var grammar cli
	parser, err := kong.New(&grammar,
		kong.Name("subscriber"),
		kong.Description("roompub subscriber: follow, audit and query rooms, verifying every message again."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(exitRequest(code)) }),
		kong.Vars{"version": buildVersion()},
		kong.Bind(&streams{out: stdout, err: stderr}),
		kong.Configuration(config.YAML),
	)
	if err != nil {
		fmt.Fprintf(stderr, "subscriber: %v\n", err)
		return exitUsage
	}
	ctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "subscriber: %v\nRun 'subscriber --help' for usage.\n", err)
		return exitUsage
	}
	err = ctx.Run()
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errRefused):
		fmt.Fprintf(stderr, "subscriber: %v\n", err)
		return exitRefused
	default:
		fmt.Fprintf(stderr, "subscriber: %v\n", err)
		return exitUsage
	}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}
