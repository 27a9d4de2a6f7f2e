package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// sizes are the amounts of work of one run.
type sizes struct {
	chainEntries, chains, chainLength, records, readChains, readLength, verifyEntries int
	rooms                                                                             int // the parallel row's
}

var (
	fullSizes  = sizes{chainEntries: 10000, chains: 100, chainLength: 1000, records: 2000, readChains: 100, readLength: 10000, verifyEntries: 200000, rooms: 1}
	quickSizes = sizes{chainEntries: 500, chains: 10, chainLength: 100, records: 100, readChains: 10, readLength: 2000, verifyEntries: 5000, rooms: 1}
)

func (c *cli) sizes() sizes {
	sz := fullSizes
	if c.Quick {
		sz = quickSizes
	}
	for _, f := range []struct {
		flag int
		dst  *int
	}{{c.ChainEntries, &sz.chainEntries}, {c.Chains, &sz.chains}, {c.ChainLength, &sz.chainLength}, {c.Records, &sz.records},
		{c.ReadChains, &sz.readChains}, {c.ReadLength, &sz.readLength}, {c.VerifyEntries, &sz.verifyEntries}, {c.Rooms, &sz.rooms}} {
		if f.flag > 0 {
			*f.dst = f.flag
		}
	}
	return sz
}

// Validate reports every bad flag, joined.
func (c *cli) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{config.ErrInvalid}, args...)...))
	}
	for name, v := range map[string]int{"--chain-entries": c.ChainEntries, "--chains": c.Chains, "--chain-length": c.ChainLength,
		"--records": c.Records, "--read-chains": c.ReadChains, "--read-length": c.ReadLength, "--verify-entries": c.VerifyEntries, "--rooms": c.Rooms} {
		if v < 0 {
			bad("%s must not be negative", name)
		}
	}
	if c.Inflight < 1 {
		bad("--inflight must be at least 1")
	}
	if c.Batch < 1 || c.Batch > room.MaxBatchLines {
		bad("--batch must be between 1 and %d", room.MaxBatchLines)
	}
	for _, p := range c.Points {
		if p < 1 {
			bad("--points must be at least 1, not %d", p)
		}
	}
	if len(c.Points) > 0 && c.Curve == "" {
		bad("--points needs --curve")
	}
	if c.Curve != "" && (c.CurveEntries < 1 || c.CurveChains < 1) {
		bad("--curve-entries and --curve-chains must be at least 1")
	}
	if c.Curve != "" && (len(c.Modes) > 0 || c.Check) {
		bad("--curve excludes --modes and --check")
	}
	switch {
	case c.Replicas != 1 && c.Replicas != 3:
		bad("--replicas must be 1 or 3, not %d", c.Replicas)
	case c.Replicas > 1 && (c.Check || c.StoreDir != ""):
		bad("--replicas %d excludes --check (the floors are one server's) and --store-dir (the cluster's stores are temporary)", c.Replicas)
	case c.Replicas > 1 && slices.ContainsFunc(c.Only, func(o string) bool { return !slices.Contains(clusterRows, o) }):
		bad("--replicas %d runs the long chain and parallel rows only (--only long, --only parallel)", c.Replicas)
	}
	if c.Rounds < 0 {
		bad("--rounds must not be negative")
	}
	if c.Repeat < 1 {
		bad("--repeat must be at least 1")
	}
	if c.Timeout <= 0 {
		bad("--timeout must be positive")
	}
	for i, m := range c.Modes {
		if slices.Contains(c.Modes[:i], m) {
			bad("--modes names %s twice", m)
		}
	}
	if c.NoAttest && (len(c.Modes) > 0 || c.Witnesses > 0) {
		bad("--no-attest excludes --modes and --witnesses (--modes keyless runs the keyless path)")
	}
	if c.Witnesses < 0 {
		bad("--witnesses must not be negative")
	}
	if c.Witnesses > 0 && len(c.Modes) > 0 && !slices.Contains(c.Modes, modeWitnessed) {
		bad("--witnesses is for the witnessed mode, which --modes does not name")
	}
	if c.Quorum < 0 || c.Quorum > c.witnessCount() {
		bad("--witness-quorum %d of %d witnesses", c.Quorum, c.witnessCount())
	}
	return errors.Join(errs...)
}

// The modes roompub's side runs in: what `publisher serve` is given.
const (
	// modeKeyless is serve without --publisher-key: no attestation, no
	// checkpoint; audit trusts no publisher.
	modeKeyless = "keyless"
	// modeAttested is serve --publisher-key: attestations and signed room
	// checkpoints; audit --trusted-publisher.
	modeAttested = "attested"
	// modeWitnessed adds --origin and --witness-policy: the checkpointer
	// keeps the deployment log, cosigned by real witnesses; audit checks
	// it under the witness policy.
	modeWitnessed = "witnessed"
)

// modeRows are the rows --modes runs once per mode.
var modeRows = []string{"long", "parallel", "read"}

// modes returns the main mode, whose pass runs every selected row and
// fills the main table (the floors), and the other modes of --modes in
// their order, whose passes run the selected rows of modeRows.
func (c *cli) modes() (main string, others []string) {
	switch {
	case len(c.Modes) > 0 && slices.Contains(c.Modes, modeAttested):
		main = modeAttested
	case len(c.Modes) > 0:
		main = c.Modes[0]
	case c.NoAttest:
		main = modeKeyless
	case c.Witnesses > 0:
		main = modeWitnessed
	default:
		main = modeAttested
	}
	for _, m := range c.Modes {
		if m != main {
			others = append(others, m)
		}
	}
	return main, others
}

// witnessCount is how many witnesses the witnessed mode runs.
func (c *cli) witnessCount() int {
	if c.Witnesses > 0 {
		return c.Witnesses
	}
	return 3
}

// quorum is how many cosignatures audit needs on a deployment
// checkpoint: --witness-quorum, or a majority of the witnesses.
func (c *cli) quorum() int {
	if c.Quorum > 0 {
		return c.Quorum
	}
	return c.witnessCount()/2 + 1
}

// selected reports whether the row name runs: every row, or those --only
// names; on a cluster (--replicas 3) only clusterRows.
func (c *cli) selected(name string) bool {
	if c.Replicas > 1 && !slices.Contains(clusterRows, name) {
		return false
	}
	return len(c.Only) == 0 || slices.Contains(c.Only, name)
}

// Stream layout. Each side of the write scenarios has its own stream, made
// afresh each run so every chain starts empty, with the same configuration
// (room.StreamConfig: file storage, the same limits; the server fsyncs
// before every acknowledgement): roompub's room stream, which its
// checkpointer reads, and the raw side's, which no checkpointer reads.
// The raw side's prefix is as long as roompub's, so both sides' subjects
// have the same length. The read stream is filled once and kept (its
// metadata names what it holds).
const (
	writeStream = room.DefaultStream
	rawStream   = "RAW"
	rawPrefix   = "rawjs"
	readStream  = "READ"
	readPrefix  = "read"
	// fillService is the service prefix of the publisher that fills the
	// read stream, while roompub's on the write stream may be serving.
	fillService = "roompub-bench.fill"
	fillKey     = "roompub-bench-fill"
	// fillPublisherKey is the read stream's metadata naming the node id
	// of the publisher key that attested it (a public key; the key
	// itself was never kept).
	fillPublisherKey = "roompub-bench-publisher"
)

// bench is one run: the embedded server, the raw side's connection, and
// roompub's publisher (node.Serve) and client on the write stream.
type bench struct {
	c   *cli
	out *streams
	ctx context.Context
	sz  sizes
	tmp string // capsule directories

	storeDir string
	emb      *embedded.Server // the server every client connects to
	cluster  *cluster         // with --replicas 3: every server, emb the first
	nc       *nats.Conn       // the raw side's connection
	js       jetstream.JetStream

	subjects     room.Subjects   // the write stream's layout
	rawSubjects  room.Subjects   // the raw stream's layout
	key          *events.HostKey // the trusted host key: signs the records
	pub          *publisher      // roompub's node.Serve on the write stream
	clientNC     *nats.Conn
	client       *client.Client
	pubInflight  string // how roompub's side is capped, for the table
	inflightNote string
	rounds       int
	wrote        bool // the write streams were made: close deletes them

	// mode is the mode of the pass running; primary the main pass's
	// (--modes); all every mode of the run.
	mode, primary string
	all           []string
	wit           *witnessed // the witnesses and keys, once a witnessed pass started
}

// attested reports whether roompub runs with a publisher key and a
// checkpointer, and readers trust it (not keyless).
func (b *bench) attested() bool { return b.mode != modeKeyless }

// witnessing reports whether roompub's checkpointer keeps a deployment
// log cosigned by witnesses, and audit checks it.
func (b *bench) witnessing() bool { return b.mode == modeWitnessed }

// fillAttested reports whether the read stream is filled attested: when
// any mode of the run trusts a publisher (a keyless pass audits it
// without trusting one, so the stream in the cache serves every mode).
func (b *bench) fillAttested() bool {
	return slices.ContainsFunc(b.all, func(m string) bool { return m != modeKeyless })
}

// Run runs the selected scenarios, prints the table and the JSON line.
func (c *cli) Run(s *streams) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, bin := range []struct{ scenario, flag, path string }{{"verify", "--publisher", c.Publisher}, {"read", "--subscriber", c.Subscriber}} {
		if c.selected(bin.scenario) {
			if _, err := exec.LookPath(bin.path); err != nil {
				return fmt.Errorf("%w: %s %s: %v (run make build, or name the binary)", config.ErrInvalid, bin.flag, bin.path, err)
			}
		}
	}
	if c.CPUProfile != "" {
		f, err := os.Create(c.CPUProfile)
		if err != nil {
			return fmt.Errorf("%w: --cpuprofile: %v", config.ErrInvalid, err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if c.MemProfile != "" {
		f, err := os.Create(c.MemProfile)
		if err != nil {
			return fmt.Errorf("%w: --memprofile: %v", config.ErrInvalid, err)
		}
		defer func() {
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fmt.Fprintf(os.Stderr, "roompub-bench: --memprofile: %v\n", err)
			}
			f.Close()
		}()
	}
	if c.Trace != "" {
		if err := os.MkdirAll(c.Trace, 0o755); err != nil {
			return fmt.Errorf("%w: --trace: %v", config.ErrInvalid, err)
		}
		sideTraces = tracer{dir: c.Trace}
		defer func() { sideTraces.stop(); sideTraces = tracer{} }()
	}
	b := &bench{c: c, out: s, ctx: ctx, sz: c.sizes(), rounds: c.Rounds, rawSubjects: room.Subjects{Prefix: rawPrefix}}
	var others []string
	b.primary, others = c.modes()
	b.all = append([]string{b.primary}, others...)
	if b.rounds == 0 {
		b.rounds = 3
		if c.Quick {
			b.rounds = 2
		}
	}
	defer b.close()
	if err := b.start(); err != nil {
		return err
	}
	if c.Curve != "" {
		b.mode = b.primary
		return b.curve()
	}
	// The passes run in the order --modes names them (a run's first pass
	// starts on a cold process and store: reorder to see what that
	// weighs).
	order := c.Modes
	if len(order) == 0 {
		order = b.all
	}
	byMode := map[string][]*result{}
	audit := map[string]any{}
	for _, m := range order {
		rs, a, err := b.pass(m)
		if err != nil {
			return fmt.Errorf("%s mode: %w", m, err)
		}
		byMode[m] = rs
		for k, v := range a {
			if m != b.primary {
				k = strings.Replace(k, "write_audit_", "write_audit_"+m+"_", 1)
			}
			audit[k] = v
		}
	}
	results := byMode[b.primary]
	b.mode = b.primary
	b.printTable(results)
	if len(c.Modes) > 0 {
		b.printModes(byMode)
	}
	if err := b.printJSON(results, audit, byMode); err != nil {
		return err
	}
	if c.Check {
		var below []string
		for _, r := range results {
			if !r.ok {
				below = append(below, fmt.Sprintf("%s %s", r.key, r.verdictReason()))
			}
		}
		if len(below) > 0 {
			return fmt.Errorf("below the floor: %v: %w", below, config.ErrRefused)
		}
	}
	return nil
}

// pass runs the rows of one mode: the write rows on a roompub of that
// mode (records only in the main pass), which is stopped (and the write
// streams audited, with --quick or --audit-writes) before the read row;
// verify only in the main pass, as it runs no publisher. It returns the
// rows and the write audit's facts.
func (b *bench) pass(mode string) ([]*result, map[string]any, error) {
	b.mode = mode
	main := mode == b.primary
	if b.witnessing() {
		if err := b.startWitnesses(); err != nil {
			return nil, nil, err
		}
	}
	b.logf("mode %s: %s", mode, b.storePath())
	var results []*result
	run := func(rows []string) error {
		for _, sc := range []struct {
			name string
			run  func() (*result, error)
		}{
			{"long", b.longChain},
			{"parallel", b.parallel},
			{"records", b.records},
			{"read", b.read},
			{"verify", b.verify},
		} {
			if !slices.Contains(rows, sc.name) || !b.c.selected(sc.name) || (!main && !slices.Contains(modeRows, sc.name)) {
				continue
			}
			r, err := sc.run()
			if err != nil {
				return fmt.Errorf("%s: %w", sc.name, err)
			}
			if sideTraces.err != nil {
				return sideTraces.err
			}
			for _, r := range append([]*result{r}, r.also...) {
				if b.cluster != nil {
					r.floor = 0 // the floors are one server's
				}
				r.finish()
				b.logf("%s (%s): raw %s, roompub %s, ratio %.3f (floor %.2f) %s", r.name, mode, r.raw, r.pub, r.ratio, r.floor, r.verdict())
				results = append(results, r)
			}
		}
		return nil
	}
	if err := run([]string{"long", "parallel", "records"}); err != nil {
		return nil, nil, err
	}
	audit := map[string]any{}
	if (b.c.Quick || b.c.AuditWrites) && b.client != nil {
		var err error
		if audit, err = b.auditWrites(results); err != nil {
			return nil, nil, err
		}
	}
	if main && b.client != nil {
		if err := b.streamFacts(audit); err != nil {
			return nil, nil, err
		}
	}
	if err := b.endRoompub(); err != nil {
		return nil, nil, err
	}
	if err := run([]string{"read", "verify"}); err != nil {
		return nil, nil, err
	}
	return results, audit, nil
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.out.err, "roompub-bench: "+format+"\n", args...)
}

// start makes the temporary directory and starts the embedded server with
// the durability of `publisher serve` (SyncInterval zero: fsync before
// every acknowledgement), listening on a port the subscriber subprocess
// can reach; and makes the trusted host key.
func (b *bench) start() error {
	var err error
	if b.tmp, err = os.MkdirTemp("", "roompub-bench-"); err != nil {
		return err
	}
	b.storeDir = b.c.StoreDir
	if b.storeDir == "" && (b.c.Quick || b.c.Replicas > 1) {
		b.storeDir = filepath.Join(b.tmp, "store") // removed with b.tmp
	}
	if b.storeDir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("no --store-dir and no user cache dir: %w", err)
		}
		b.storeDir = filepath.Join(cache, "roompub-bench")
	}
	if err := os.MkdirAll(b.storeDir, 0o755); err != nil {
		return err
	}
	if b.c.Replicas > 1 {
		if b.cluster, err = startCluster(b.storeDir, b.c.Replicas); err != nil {
			return err
		}
		b.emb = b.cluster.servers[0]
	} else if b.emb, err = embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: b.storeDir, ServerName: "roompub-bench"}); err != nil {
		return err
	}
	if b.nc, err = nats.Connect(b.emb.ClientURL(), nats.Name("roompub-bench-raw")); err != nil {
		return err
	}
	// The raw side waits for an acknowledgement as long as roompub's cl
	// waits for a reply.
	if b.js, err = jetstream.New(b.nc, jetstream.WithDefaultTimeout(b.c.Timeout)); err != nil {
		return err
	}
	if b.key, err = events.GenerateHostKey(rand.Reader); err != nil {
		return err
	}
	b.logf("%s at %s, store %s", b.serverNote(), b.emb.ClientURL(), b.storeDir)
	return nil
}

// startRoompub makes both write streams afresh and starts roompub on its
// own as `publisher serve --publisher-key` runs (startPublisher: node.Serve,
// which creates the room stream as on a first start; with --no-attest
// `publisher serve` without a key); the client has a connection of its
// own, as a harness does.
func (b *bench) startRoompub() error {
	if b.client != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	b.wrote = true
	for _, name := range []string{writeStream, rawStream} {
		if err := b.dropStream(ctx, name); err != nil {
			return err
		}
	}
	if err := b.dropDeploymentLog(ctx); err != nil {
		return err
	}
	if _, err := room.EnsureStream(ctx, b.js, room.StreamConfig(rawStream, b.rawSubjects, b.c.Replicas), b.rawSubjects); err != nil {
		return err
	}
	v, err := validate.New(validate.WithTrustedHosts(b.key.NodeID()))
	if err != nil {
		return err
	}
	if b.pub, err = b.startPublisher(writeStream, b.subjects, "", v, b.writeOptions()); err != nil {
		return err
	}
	if b.cluster != nil {
		// Both streams led by the server every client connects to: each
		// append takes the same hops on both sides.
		for _, name := range []string{writeStream, rawStream} {
			if err := placeLeader(ctx, b.nc, b.js, name, b.emb.NATSServer().Name()); err != nil {
				return err
			}
		}
	}
	if b.clientNC, err = nats.Connect(b.emb.ClientURL(), nats.Name("roompub-bench-harness")); err != nil {
		return err
	}
	b.client = client.New(b.clientNC, client.Options{Timeout: b.c.Timeout})
	b.pubInflight = fmt.Sprintf("all shipping at once; the gate's atomic batches: up to %d messages, at most %d in flight (serve's --max-batch, --max-inflight-batches; the ingest service at serve's default concurrency)",
		b.c.Batch, b.c.Inflight)
	b.inflightNote = fmt.Sprintf("raw: at most %d atomic batches in flight; roompub: %s", b.c.Inflight, b.pubInflight)
	return nil
}

// stopRoompub stops roompub's publisher as SIGTERM stops serve: the
// ingest service, then the checkpointer's final checkpoints. It runs once.
func (b *bench) stopRoompub() error {
	return b.pub.stop()
}

// endRoompub stops roompub's publisher and closes the client, so that the
// next pass starts a roompub of its own mode on fresh write streams.
func (b *bench) endRoompub() error {
	err := b.stopRoompub()
	if b.clientNC != nil {
		b.clientNC.Close()
	}
	b.pub, b.client, b.clientNC = nil, nil, nil
	return err
}

// close stops everything started, in reverse order; the write streams are
// deleted (the read stream stays for the next run).
func (b *bench) close() {
	if err := b.stopRoompub(); err != nil {
		b.logf("stopping roompub: %v", err)
	}
	if b.clientNC != nil {
		b.clientNC.Close()
	}
	if b.js != nil && (b.wrote || b.wit != nil) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for _, name := range []string{writeStream, rawStream} {
			if err := b.dropStream(ctx, name); err != nil {
				b.logf("%v", err)
			}
		}
		if err := b.dropDeploymentLog(ctx); err != nil {
			b.logf("%v", err)
		}
		cancel()
	}
	if b.wit != nil {
		b.wit.group.Close()
	}
	if b.nc != nil {
		b.nc.Close()
	}
	switch {
	case b.cluster != nil:
		b.cluster.shutdown()
	case b.emb != nil:
		b.emb.Shutdown()
	}
	if b.tmp != "" {
		_ = os.RemoveAll(b.tmp)
	}
}

// storedOn counts the messages the stream (of layout subjects) holds on
// subjects matching filter: the leaves (journal entries and records) and
// the checkpoints; record markers are neither.
func (b *bench) storedOn(stream string, subjects room.Subjects, filter string) (msgs, checkpoints int, err error) {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	st, err := b.js.Stream(ctx, stream)
	if err != nil {
		return 0, 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, 0, err
	}
	for subj, c := range info.State.Subjects {
		switch p, err := subjects.Parse(subj); {
		case err == nil && p.Kind == room.KindCheckpoint:
			checkpoints += int(c)
		case err == nil && p.Kind == room.KindMarker:
		default:
			msgs += int(c)
		}
	}
	return msgs, checkpoints, nil
}

// environment describes the machine and the server for the table header
// and the JSON line.
func (b *bench) environment() map[string]any {
	env := map[string]any{
		"go_version":          runtime.Version(),
		"gomaxprocs":          runtime.GOMAXPROCS(0),
		"nats_server_version": server.VERSION,
		"sync":                b.syncSetting(),
		"inflight":            b.c.Inflight,
		"batch":               b.c.Batch,
		"quick":               b.c.Quick,
		"rounds":              b.rounds,
		"attested":            b.primary != modeKeyless,
		"witnessed":           b.primary == modeWitnessed,
		"replicas":            b.c.Replicas,
		"servers":             1,
	}
	if b.cluster != nil {
		env["servers"] = len(b.cluster.servers)
	}
	if len(b.c.Modes) > 0 {
		env["modes"] = b.c.Modes
	}
	if slices.Contains(b.all, modeWitnessed) {
		env["witnesses"], env["witness_quorum"] = b.c.witnessCount(), b.c.quorum()
	}
	return env
}

// auditWrites stops roompub (its checkpointer writes the final
// checkpoints, as on serve's SIGTERM) and replays both write streams with
// reader.Audit, as `subscriber audit` would: roompub's stream trusting its
// publisher key (every message admitted, covered by a verified checkpoint),
// the raw stream without (its messages carry no attestation). Both must
// verify: the raw side's messages are exactly what roompub stores
// (subjects, bytes, chains), and roompub's side stored every item once.
func (b *bench) auditWrites(results []*result) (map[string]any, error) {
	// What each side stored; the raw side has the long chain's reference
	// chain of synchronous publishes too.
	var entries, records, syncEntries uint64
	chains := 0
	for _, r := range results {
		switch r.key {
		case "long_chain":
			entries += uint64(r.items)
			chains += r.rounds
			syncEntries = uint64(r.syncEntries)
		case "parallel":
			entries += uint64(r.items)
			chains += r.rounds * b.sz.chains
		case "records":
			records += uint64(r.items)
		}
	}
	rawChains := chains
	if syncEntries > 0 {
		rawChains++
	}
	if err := b.stopRoompub(); err != nil {
		return nil, err
	}
	v, err := validate.New(validate.WithTrustedHosts(b.key.NodeID()))
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	if b.witnessing() {
		// The room checkpoints written as serve stopped enter the
		// deployment log when serve next reads them: a checkpointer of
		// the deployment reads them, as a restarted serve would.
		if _, err := b.serveDeploymentLog(writeStream, b.subjects, b.wit.write, nil); err != nil {
			return nil, fmt.Errorf("the write stream's deployment log: %w", err)
		}
	}
	b.logf("auditing roompub's stream: %d entries, %d records expected (attestations and checkpoints checked: %v, witnessed: %v)", entries, records, b.attested(), b.witnessing())
	start := time.Now()
	o := reader.AuditOptions{Stream: writeStream, Subjects: b.subjects, Validator: v}
	if b.attested() {
		if o.Trust, err = checkpoint.NewTrust(b.pub.nodeID); err != nil {
			return nil, err
		}
	}
	if b.witnessing() {
		if o.Trust, err = o.Trust.WithOrigin(b.wit.write.origin); err != nil {
			return nil, err
		}
		o.Witnessing = &reader.Witnessing{Policy: b.wit.policy}
	}
	rep, err := reader.Audit(b.ctx, b.js, o)
	if err != nil {
		return nil, fmt.Errorf("audit of roompub's stream: %w", err)
	}
	if err := checkAudit(rep, entries, records, chains); err != nil {
		return nil, fmt.Errorf("audit of roompub's stream: %w", err)
	}
	if b.witnessing() {
		wf, err := b.checkWitnessed(rep)
		if err != nil {
			return nil, fmt.Errorf("audit of roompub's stream: %w", err)
		}
		for k, v := range wf {
			out["write_audit_"+k] = v
		}
	}
	out["write_audit_attestation_checked"] = rep.Attestation.Checked
	if b.attested() {
		ck, err := checkCovered(rep, entries+records)
		if err != nil {
			return nil, fmt.Errorf("audit of roompub's stream: %w", err)
		}
		out["write_audit_admitted"], out["write_audit_checkpoints_verified"] = ck.admitted, ck.checkpoints
		out["write_audit_admitted_by_checkpoint"], out["write_audit_attestations_verified"] = ck.byCheckpoint, ck.verified
		b.logf("roompub's stream: clean, %d messages admitted (%d by a covering checkpoint, %d attestations verified one by one), %d checkpoints verified, none after the last",
			ck.admitted, ck.byCheckpoint, ck.verified, ck.checkpoints)
	}
	b.logf("auditing the raw stream: %d entries expected", entries+syncEntries)
	rawRep, err := reader.Audit(b.ctx, b.js, reader.AuditOptions{Stream: rawStream, Subjects: b.rawSubjects, Validator: v})
	if err != nil {
		return nil, fmt.Errorf("audit of the raw stream: %w", err)
	}
	if err := checkAudit(rawRep, entries+syncEntries, records, rawChains); err != nil {
		return nil, fmt.Errorf("audit of the raw stream: %w", err)
	}
	t, rt := rep.Totals, rawRep.Totals
	b.logf("write streams audit: clean, %d entries, %d records, %d chains in %.1fs",
		t.Entries+rt.Entries, t.Records+rt.Records, t.ChainsOK+rt.ChainsOK, time.Since(start).Seconds())
	out["write_audit_clean"] = true
	out["write_audit_entries"] = t.Entries + rt.Entries
	out["write_audit_records"] = t.Records + rt.Records
	out["write_audit_chains_ok"] = t.ChainsOK + rt.ChainsOK
	return out, nil
}

// checkAudit reports how rep departs from a clean audit of exactly these
// entries, records and chains.
func checkAudit(rep *reader.AuditReport, entries, records uint64, chains int) error {
	t := rep.Totals
	if !rep.Clean() || t.Entries != entries || t.Records != records || t.ChainsOK != chains {
		return fmt.Errorf("clean %v, %d entries (want %d), %d records (want %d), %d chains ok (want %d), %d set aside %v %v",
			rep.Clean(), t.Entries, entries, t.Records, records, t.ChainsOK, chains, t.SetAside, t.ByCode, firstViolations(rep))
	}
	return nil
}

// firstViolations names the first few violations of rep.
func firstViolations(rep *reader.AuditReport) []string {
	var out []string
	for _, v := range rep.Violations[:min(3, len(rep.Violations))] {
		out = append(out, v.Error())
	}
	return out
}

// covered is what a trusting audit's checkpoints admitted.
type covered struct {
	admitted    uint64 // messages admitted: leaves of the rooms' trees
	checkpoints uint64 // checkpoints verified
	// byCheckpoint were admitted by a covering checkpoint with no
	// signature check of their own (the optimistic path); verified had
	// their attestations verified one by one (no checkpoint came soon
	// enough: the reader's queue of waiting verdicts is bounded).
	byCheckpoint, verified uint64
	// spilled and reread are the leaf hashes the audit wrote to its
	// temporary file and read back (checkpoint.LeafBounds).
	spilled, reread uint64
}

// checkCovered checks a trusting audit of a stream whose publisher wrote
// its final checkpoints: attestations were checked, want messages were
// admitted, every one covered by a verified checkpoint (no tail after the
// last one), and no checkpoint refused.
func checkCovered(rep *reader.AuditReport, want uint64) (covered, error) {
	var c covered
	if !rep.Attestation.Checked {
		return c, fmt.Errorf("attestations not checked: %s", rep.Attestation.Why)
	}
	var tail, refused uint64
	for _, r := range rep.Checkpoints {
		c.admitted += r.Admitted
		c.checkpoints += r.Checkpoints
		c.byCheckpoint += r.AdmittedByCheckpoint
		c.verified += r.AttestationsVerified
		c.spilled += r.LeavesSpilled
		c.reread += r.LeavesReread
		tail += r.Tail
		refused += r.CheckpointsRefused
	}
	if c.admitted != want || tail != 0 || refused != 0 || c.checkpoints == 0 || c.checkpoints != rep.Totals.Checkpoints {
		return c, fmt.Errorf("%d messages admitted (want %d), %d after the last checkpoint (want 0), %d checkpoints verified of %d, %d refused",
			c.admitted, want, tail, c.checkpoints, rep.Totals.Checkpoints, refused)
	}
	return c, nil
}

// syncSetting reads the running server's JetStream fsync setting:
// "always" (sync_interval: always, what `publisher serve` runs with) or
// the interval.
func (b *bench) syncSetting() string {
	if b.emb == nil {
		return "unknown"
	}
	cfg := b.emb.NATSServer().JetStreamConfig()
	switch {
	case cfg == nil:
		return "no JetStream"
	case cfg.SyncAlways:
		return "always"
	default:
		return cfg.SyncInterval.String()
	}
}

// serverNote names the servers the run is on, for the log and the
// tables' headers.
func (b *bench) serverNote() string {
	if b.cluster != nil {
		return fmt.Sprintf("%d nats-servers %s (embedded, in process, clustered by routes on loopback; streams at %d replicas, led by %s, where every client connects)",
			len(b.cluster.servers), server.VERSION, b.c.Replicas, b.emb.NATSServer().Name())
	}
	return fmt.Sprintf("nats-server %s (embedded, in process)", server.VERSION)
}
