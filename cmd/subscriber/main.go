// Command subscriber reads rooms back from NATS JetStream and trusts
// nothing it reads: every journal entry and execution record is verified
// again with the code `publisher verify` and the gate use.
//
//	subscriber follow --room ROOM --durable NAME [--json]
//	subscriber audit [--room ROOM]... [--from-seq N | --since TIME] [--json]
//	subscriber evidence --instance ENV_REF [--room ROOM] [--json]
//	subscriber prove --room ROOM (--ref REF | --entry HASH) --trusted-publisher NODE_ID... [witness flags]
//	subscriber export --room ROOM (--entry HASH | --ref REF | --heads | --all) --out DIR --trusted-publisher NODE_ID... witness flags
//	subscriber verify-proof --trusted-publisher NODE_ID... [witness flags] FILE|-
//
// With --trusted-publisher (repeatable, config key trusted-publisher),
// follow, audit and evidence also check the publisher attestations
// and signed room checkpoints, and follow and audit keep the last verified
// checkpoint per room in --state-dir to catch a rolled-back or forked room.
//
// Exit status: 0 clean, 1 something was refused (audit, or an audit that
// read no message of a room it was asked for, unless --allow-empty; prove:
// no proof; export: a message asked for not witnessed yet; verify-proof:
// invalid), 2 usage, configuration or connection
// errors. evidence is a query: it exits 0 after printing what it found, and
// says on stderr how many messages of the rooms were set aside.
package main

import (
	"io"
	"os"
	"runtime/debug"

	"github.com/alecthomas/kong"

	"github.com/roompub/roompub/config"
)

// errRefused: the command found something refused and printed it.
var errRefused = config.ErrRefused

// version is stamped at link time by make build (-ldflags "-X
// main.version=$(git describe --tags --always --dirty)"); without it the
// module version from the build info is used.
var version = ""

type cli struct {
	Version kong.VersionFlag `help:"Print the version and exit."`
	Config  kong.ConfigFlag  `name:"config" help:"YAML file of flag values (keys are flag names); flags given on the command line win." placeholder:"FILE"`

	Follow      followCmd      `cmd:"" help:"Follow rooms with a durable consumer and print verified events as JSON lines."`
	Audit       auditCmd       `cmd:"" help:"Replay rooms from the stream, verify everything and print a verdict."`
	Evidence    evidenceCmd    `cmd:"" help:"Print one instance's verified execution records and evidence items."`
	Prove       proveCmd       `cmd:"" help:"Print the inclusion proof of a message against its room's latest verified checkpoint (JSON); with a witness policy, its evidence bundle. Give one of --entry or --ref (the usage line lists both)."`
	Export      exportCmd      `cmd:"" help:"Write the witnessed evidence bundle of messages of a room, one file each, for offline verification. Give one of --entry, --ref, --heads or --all (the usage line lists all four), and --trusted-publisher with a witness policy (--witness or --witness-policy, and --origin)."`
	VerifyProof verifyProofCmd `cmd:"" name:"verify-proof" help:"Check an inclusion proof or an evidence bundle offline with the trusted publisher keys (and the witness policy) only."`
}

type streams struct {
	in       io.Reader
	out, err io.Writer
}

func main() {
	tuneGC()
	w := startMemWatch()
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	w.report(os.Stderr)
	os.Exit(code)
}

// tuneGC trades a little memory for less collector work, unless GOGC or
// GOMEMLIMIT say otherwise. A replay allocates about 5 KB per message and
// keeps about 20 MiB alive (the messages in flight, the verdicts waiting
// for a checkpoint, per-chain state), so the collector runs about 470
// times per million messages at the default GOGC=100 and 240 at 200
// (`subscriber audit` of 1,000,000 attested entries: peak RSS 60 -> 76
// MiB; 400 with a 112 MiB limit: 111 cycles, 112 MiB, too near the bench's
// 128 MiB cap for a gain the shared machine cannot tell from noise). The
// soft limit only binds where the live heap is large (many chains, records
// up to the server's max payload each): it keeps the heap well under 256
// MiB (docs/performance.md, "Audit memory").
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(192 << 20)
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	var grammar cli
	return config.Run("subscriber", "roompub subscriber: follow, audit and query rooms, verifying every message again.",
		buildVersion(), &grammar, args, stdout, stderr, &streams{in: os.Stdin, out: stdout, err: stderr})
}

func buildVersion() string {
	if version != "" {
		return version
	}
	return config.Version()
}
