// Command publisher checks, produces and publishes roompub's evidence
// formats: capsule journals (seed 000) and signed task-pack execution
// records (seed 004).
//
// The offline subcommands are
//
//	publisher verify [--json] [--schema-dir DIR] [--trusted-host NODE_ID ...] PATH...
//	publisher keygen --out FILE [--force]
//	publisher sign --key FILE RECORD.json
//
// and `publisher serve` runs the validating publisher (see serve.go);
// `publisher backup` and `publisher restore` back a stream up and restore
// it (backup.go).
//
// Exit status: 0 on success, 1 when verify refused an input (or backup
// found its stream lacking messages it held), 2 for anything
// that kept a command from doing its job (bad flags, a missing or unreadable
// input, a bad schema directory or key), 128 + the signal's number when a
// signal stopped journal before it was done (130 for SIGINT).
package main

import (
	"errors"
	"io"
	"os"

	"github.com/alecthomas/kong"

	"github.com/roompub/roompub/config"
)

// Exit statuses (config.Run maps errors to them).
const (
	exitOK      = config.ExitOK
	exitRefused = config.ExitRefused // at least one input was refused
	exitUsage   = config.ExitUsage   // the command could not do its job
)

// Errors of the commands, which have printed each input's outcome already.
var (
	// errRefused: some input was refused (exitRefused).
	errRefused = config.ErrRefused
	// errUnverifiable: some input could not be verified at all (exitUsage).
	errUnverifiable = errors.New("could not be verified")
)

// version is stamped at link time by make build (-ldflags "-X
// main.version=$(git describe --tags --always --dirty)"); without it the
// module version from the build info is used.
var version = ""

// cli is the command line grammar.
type cli struct {
	Version kong.VersionFlag `help:"Print the version and exit."`

	Verify verifyCmd `cmd:"" help:"Verify capsule directories, journal files and execution record files offline."`
	Keygen keygenCmd `cmd:"" help:"Write a new Ed25519 host key (PEM, mode 0600) and print its node id."`
	Sign   signCmd   `cmd:"" help:"Sign an execution record with a host key and print the signed record."`
	Serve  serveCmd  `cmd:"" help:"Run the validating publisher: embedded nats-server (or --server), room stream, ingest service."`

	Journal   journalCmd   `cmd:"" help:"Ship capsule directories into a room through the ingest service (resumable; --follow)."`
	Execution executionCmd `cmd:"" help:"Ship execution records into their rooms through the ingest service."`

	Passwd   passwdCmd   `cmd:"" help:"Print the bcrypt hash of a password (read from the terminal or stdin, or generated with --out) for a secure config."`
	Nkeygen  nkeygenCmd  `cmd:"" help:"Write a new user nkey seed (mode 0600) and print its public key for a secure config."`
	Authconf authconfCmd `cmd:"" help:"Print the nats-server authorization block that gives an existing server the secure config's users and permissions."`

	Backup  backupCmd  `cmd:"" help:"Back up a stream (the room stream, or the deployment log) into a directory with JetStream's snapshot API."`
	Restore restoreCmd `cmd:"" help:"Restore a backup directory under its stream's name; refuses to replace an existing stream, checks the restored stream is append-only."`

	Config kong.ConfigFlag `name:"config" help:"YAML file of flag values (keys are flag names); flags given on the command line win." placeholder:"FILE"`
}

// streams are the command's stdin, stdout and stderr, bound into every Run
// method.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run parses args, runs the selected command and returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var grammar cli
	return config.Run("publisher", "roompub publisher: verify, sign and publish evidence into rooms on NATS JetStream.",
		buildVersion(), &grammar, args, stdout, stderr, &streams{in: stdin, out: stdout, err: stderr})
}

func buildVersion() string {
	if version != "" {
		return version
	}
	return config.Version()
}
