// Command roompub-bench measures roompub against raw JetStream in one run,
// on one embedded nats-server with the durability of `publisher serve`
// (sync_interval: always), on the same message bytes (docs/performance.md):
//
//	long chain     one chain: raw atomic batches vs roompub's full path
//	               (client, ingest service, gate, chain check, store)
//	parallel       many chains at once, the atomic batches in flight
//	               capped alike on both sides
//	records        pre-signed execution records: one synchronous publish
//	               each vs the ingest service
//	read           a raw ordered-consumer read of a filled stream vs
//	               `subscriber audit` of it, and audit's peak memory
//	verify         a Go pass that reads a journal and hashes each line
//	               (the floor of any verifier) vs `publisher verify` of
//	               it; and `sha256sum` of it, the yardstick of before
//
// roompub runs as `publisher serve --publisher-key` runs (attested), by
// the same code (node.Serve, on the bench's embedded server): the gate
// attests every message with a publisher key made for the run (never
// printed), and a checkpointer with serve's defaults reads the stream and
// writes signed checkpoints; the read stream is written the same way and
// audited with --trusted-publisher. --no-attest measures the keyless
// path instead, and --witnesses N the witnessed path: N real litewitness
// processes (internal/witnesstest) cosign the deployment log the
// checkpointer keeps, and audit checks it under a witness policy
// (docs/witnesses.md). --modes runs the long chain, parallel and read rows
// once per mode (keyless, attested, witnessed) and prints them side by
// side. The raw side writes to a stream of its own (same configuration),
// which no checkpointer reads. --replicas 3 runs the long chain and
// parallel rows on three embedded nats-servers clustered by routes on
// loopback in this process, both write streams at 3 replicas and led by
// the server every client connects to (cluster.go).
//
// The write scenarios run in rounds, raw first in odd rounds and roompub
// first in even ones; only the work is timed, never the setup. It prints a
// table and, as its last line, one line of JSON with every throughput and
// every ratio (roompub / raw). With --check it exits 1 when a ratio is
// below its floor.
//
//	roompub-bench [--quick] [--check] [--no-attest | --witnesses N]
//	    [--modes keyless,attested,witnessed] [--only SCENARIO]... [--replicas 3]
//
// Exit status: 0 done, 1 below a floor (--check), 2 usage or a failed run.
package main

import (
	"io"
	"os"
	"time"

	"github.com/alecthomas/kong"

	"github.com/roompub/roompub/config"
)

// version is stamped at link time by make build (-ldflags "-X
// main.version=$(git describe --tags --always --dirty)"); without it the
// module version from the build info is used.
var version = ""

// cli is the command line. Size flags default to 0, meaning the bench's
// size, or the --quick size with --quick.
type cli struct {
	Version kong.VersionFlag `help:"Print the version and exit."`
	Config  kong.ConfigFlag  `name:"config" help:"YAML file of flag values (keys are flag names); flags given on the command line win." placeholder:"FILE"`

	Quick       bool     `name:"quick" help:"Small sizes, for a test: a 500-entry chain, 10 chains × 100, 100 records, 20,000 read entries, a 5,000-entry verify."`
	Check       bool     `name:"check" help:"Exit 1 if a ratio is below its floor (long chain 0.65, parallel 0.7, records 0.7, read 0.4 with audit's peak RSS under 128 MiB and peak live heap under 64 MiB (1,000,000 entries of 100 chains, or fewer; not witnessed), verify 0.5 against its floor (within 2× its time) and 0.2 against sha256sum)."`
	AuditWrites bool     `name:"audit-writes" help:"After the write scenarios, audit the write stream (reader.Audit) and fail unless both sides' entries and records all verify (on with --quick)."`
	NoAttest    bool     `name:"no-attest" help:"Measure roompub without the publisher's attestations and checkpoints: a gate with no publisher key, no checkpointer, a read stream without attestations or checkpoints audited without --trusted-publisher (the keyless path, for comparison; the floors are for the attested path)."`
	Modes       []string `name:"modes" enum:"keyless,attested,witnessed" placeholder:"MODE,..." help:"Run the long chain, parallel and read rows once per mode (keyless, attested, witnessed; comma-separated, run in that order), each mode's roompub side against a raw side measured next to it, and print a table with a column per mode. The main table (every row, the floors) is the attested mode's when listed, else the first's."`
	Witnesses   int      `name:"witnesses" placeholder:"N" help:"Run N real litewitness processes that cosign the deployment log (the witnessed mode): alone, the whole run is witnessed; with --modes, the witnessed mode's witnesses (default 3)."`
	Quorum      int      `name:"witness-quorum" placeholder:"K" help:"Cosignatures audit needs on a deployment checkpoint (default a majority of --witnesses: 2 of 3)."`
	Only        []string `name:"only" enum:"long,parallel,records,read,verify" placeholder:"SCENARIO" help:"Run only these scenarios (repeatable): long, parallel, records, read, verify."`

	ChainEntries int `name:"chain-entries" placeholder:"N" help:"Entries of the long chain (default 10000; --quick 500)."`
	Chains       int `name:"chains" placeholder:"N" help:"Chains shipped in parallel (default 100; --quick 10)."`
	ChainLength  int `name:"chain-length" placeholder:"N" help:"Entries of each parallel chain (default 1000; --quick 100)."`
	Records      int `name:"records" placeholder:"N" help:"Execution records (default 2000; --quick 100)."`
	ReadChains   int `name:"read-chains" placeholder:"N" help:"Chains of the read stream (default 100; --quick 10)."`
	ReadLength   int `name:"read-length" placeholder:"N" help:"Entries of each chain of the read stream (default 10000; --quick 2000)."`
	// The read stream fill's checkpointer (checkpointer.Options Every and
	// Interval).
	ReadCheckpointEvery    int           `name:"read-checkpoint-every" placeholder:"N" help:"Leaves a room of the read stream grows by before the fill's checkpointer writes its checkpoint (default serve's, 10000). With a large one and a long --read-checkpoint-interval the rooms' checkpoints are written at the fill's end only: an audit meets every leaf before any checkpoint, as with a checkpointer far behind. The read stream is filled again for another value."`
	ReadCheckpointInterval time.Duration `name:"read-checkpoint-interval" placeholder:"DURATION" help:"How long a room of the read stream grows without a checkpoint before the fill's checkpointer writes one (default serve's, 10s)."`
	VerifyEntries          int           `name:"verify-entries" placeholder:"N" help:"Entries of the verified journal (default 200000; --quick 5000)."`

	Replicas int `name:"replicas" default:"1" placeholder:"N" help:"1: one embedded nats-server. 3: the long chain and parallel rows only, on a cluster of 3 embedded nats-servers in this process, routed on loopback, each with its JetStream store on disk in a temporary directory (removed) and an fsync before every acknowledgement; both write streams (roompub's and the raw side's) at 3 replicas, their leaders on the server every client connects to."`

	Rooms int `name:"rooms" placeholder:"N" help:"Rooms the parallel row's chains are spread over, chain i in room i mod N, on both sides (default 1)."`

	Curve        string `name:"curve" enum:",chain-length,chains,rooms" default:"" placeholder:"NAME" help:"Measure one cost curve instead of the rows: chain-length (the long chain row at each point's entries), chains (the parallel row, each point's chains sharing --curve-entries), rooms (the parallel row of --curve-chains chains spread over each point's rooms); raw and roompub afresh at each point (docs/performance.md, \"Cost curves\")."`
	Points       []int  `name:"points" placeholder:"N,..." help:"The curve's points (default chain-length 10,100,1000,10000,100000,1000000; chains 1,10,100,1000,10000; rooms 1,10,100,1000,10000)."`
	CurveEntries int    `name:"curve-entries" default:"100000" placeholder:"N" help:"Entries per round of each point of the chains curve, shared by its chains."`
	CurveChains  int    `name:"curve-chains" default:"10000" placeholder:"N" help:"Chains of the rooms curve, at each point (--curve-entries shared by them)."`

	Inflight int `name:"inflight" default:"50" help:"Atomic batches in flight at once, on both sides (the server allows 50 per stream by default)."`
	Pipeline int `name:"pipeline" placeholder:"N" help:"Journal requests of one capsule in flight at once on roompub's side (client.ShipOptions.Pipeline; default its default, 2; 1 sends one after another)."`
	Batch    int `name:"batch" default:"1000" help:"Messages per raw atomic batch (the server allows 1000)."`
	Rounds   int `name:"rounds" placeholder:"N" help:"Rounds of the long chain, parallel and records scenarios, raw first in odd rounds, roompub first in even ones; each side's work is added up (default 3; --quick 2)."`
	Repeat   int `name:"repeat" default:"3" help:"Runs of verify, its floor and sha256sum, alternating; the medians count."`

	StoreDir   string        `name:"store-dir" placeholder:"DIR" help:"JetStream store of the embedded server; the read stream is filled once and kept there (default: the user cache dir, roompub-bench; --quick: a temporary directory, removed)."`
	Refill     bool          `name:"refill" help:"Fill the read stream again even if the store holds one of the right size."`
	Publisher  string        `name:"publisher" default:"bin/publisher" placeholder:"FILE" help:"The publisher binary (verify); default bin/publisher."`
	Subscriber string        `name:"subscriber" default:"bin/subscriber" placeholder:"FILE" help:"The subscriber binary (audit); default bin/subscriber."`
	Trace      string        `name:"trace" placeholder:"DIR" help:"Write an execution trace (runtime/trace) of each side's timed work in each round of the write rows to DIR/<row>-r<round>-<side>.trace (<row>-<mode>-r<round>-<side>.trace for the other modes of --modes; go tool trace FILE; its goroutine analysis shows the stream's goroutine running, in system calls, waiting for a core or for messages). Tracing slows the run: its ratios are not the bench's."`
	CPUProfile string        `name:"cpuprofile" placeholder:"FILE" help:"Write a CPU profile (runtime/pprof) of the whole run to FILE: the embedded server, roompub and the raw side share the process, so it shows where both sides spend their time (go tool pprof FILE)."`
	MemProfile string        `name:"memprofile" placeholder:"FILE" help:"Write an allocation profile (runtime/pprof, allocs) of the whole run to FILE at its end: what the server, roompub and the raw side allocated, for the collector's share (go tool pprof -sample_index=alloc_space FILE)."`
	Timeout    time.Duration `name:"timeout" default:"10m" placeholder:"DURATION" help:"How long one ingest request may wait for its reply (requests queue at the service while others are decided)."`
}

type streams struct {
	out, err io.Writer
}

func main() {
	if job := os.Getenv(rawReadEnv); job != "" {
		os.Exit(rawReadMain(job, os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var grammar cli
	return config.Run("roompub-bench", "roompub against raw JetStream on one embedded nats-server, in one run, on the same message bytes.",
		buildVersion(), &grammar, args, stdout, stderr, &streams{out: stdout, err: stderr})
}

func buildVersion() string {
	if version != "" {
		return version
	}
	return config.Version()
}
