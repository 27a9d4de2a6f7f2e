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
	"slices"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/validate"
)

// sizes are the amounts of work of one run.
type sizes struct {
	chainEntries, chains, chainLength, records, readChains, readLength, verifyEntries int
}

var (
	fullSizes  = sizes{chainEntries: 10000, chains: 100, chainLength: 1000, records: 2000, readChains: 100, readLength: 10000, verifyEntries: 200000}
	quickSizes = sizes{chainEntries: 500, chains: 10, chainLength: 100, records: 100, readChains: 10, readLength: 2000, verifyEntries: 5000}
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
		{c.ReadChains, &sz.readChains}, {c.ReadLength, &sz.readLength}, {c.VerifyEntries, &sz.verifyEntries}} {
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
		"--records": c.Records, "--read-chains": c.ReadChains, "--read-length": c.ReadLength, "--verify-entries": c.VerifyEntries} {
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
	if c.Rounds < 0 {
		bad("--rounds must not be negative")
	}
	if c.Repeat < 1 {
		bad("--repeat must be at least 1")
	}
	if c.Timeout <= 0 {
		bad("--timeout must be positive")
	}
	return errors.Join(errs...)
}

func (c *cli) selected(name string) bool { return len(c.Only) == 0 || slices.Contains(c.Only, name) }

// Stream layout. The write scenarios share one stream, made afresh each
// run so every chain starts empty; the read stream is filled once and
// kept (its metadata names what it holds).
const (
	writeStream = "ROOMS"
	readStream  = "READ"
	readPrefix  = "read"
	fillKey     = "roompub-bench-fill"
)

// bench is one run: the embedded server, the raw side's connection, and
// roompub's ingest service and client on the write stream.
type bench struct {
	c   *cli
	out *streams
	ctx context.Context
	sz  sizes
	tmp string // capsule directories

	storeDir string
	emb      *room.Embedded
	nc       *nats.Conn // the raw side's connection
	js       jetstream.JetStream

	subjects     room.Subjects // the write stream's layout
	key          *events.HostKey
	gateNC       *nats.Conn
	svc          *room.Service
	clientNC     *nats.Conn
	client       *room.Client
	pubInflight  string // how roompub's side is capped, for the table
	inflightNote string
	rounds       int
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
	b := &bench{c: c, out: s, ctx: ctx, sz: c.sizes(), rounds: c.Rounds}
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
	var results []*result
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
		if !c.selected(sc.name) {
			continue
		}
		r, err := sc.run()
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		r.finish()
		b.logf("%s: raw %s, roompub %s, ratio %.3f (floor %.2f) %s", r.name, r.raw, r.pub, r.ratio, r.floor, r.verdict())
		results = append(results, r)
	}
	var audit map[string]any
	if (c.Quick || c.AuditWrites) && b.client != nil {
		var err error
		if audit, err = b.auditWrites(results); err != nil {
			return err
		}
	}
	b.printTable(results)
	if err := b.printJSON(results, audit); err != nil {
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

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.out.err, "roompub-bench: "+format+"\n", args...)
}

// start makes the temporary directory and starts the embedded server with
// the durability of `publisher serve` (SyncInterval zero: fsync before
// every acknowledgement), listening on a port the subscriber subprocess
// can reach.
func (b *bench) start() error {
	var err error
	if b.tmp, err = os.MkdirTemp("", "roompub-bench-"); err != nil {
		return err
	}
	b.storeDir = b.c.StoreDir
	if b.storeDir == "" && b.c.Quick {
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
	b.emb, err = room.StartEmbedded(room.EmbeddedOptions{Listen: "127.0.0.1:-1", StoreDir: b.storeDir, ServerName: "roompub-bench"})
	if err != nil {
		return err
	}
	if b.nc, err = nats.Connect(b.emb.ClientURL(), nats.Name("roompub-bench-raw")); err != nil {
		return err
	}
	// The raw side waits for an acknowledgement as long as roompub's client
	// waits for a reply.
	if b.js, err = jetstream.New(b.nc, jetstream.WithDefaultTimeout(b.c.Timeout)); err != nil {
		return err
	}
	b.logf("embedded nats-server %s at %s, store %s", server.VERSION, b.emb.ClientURL(), b.storeDir)
	return nil
}

// startRoompub makes the write stream afresh and starts roompub on it as
// `publisher serve` composes it (room.Serve): a gate with the Prometheus
// observer and the ingest service on one connection, with serve's
// defaults; the client has a connection of its own, as a harness does.
func (b *bench) startRoompub() error {
	if b.client != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := b.js.DeleteStream(ctx, writeStream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete the write stream of an earlier run: %w", err)
	}
	if _, err := room.EnsureStream(ctx, b.js, room.StreamConfig(writeStream, b.subjects, 1), b.subjects); err != nil {
		return err
	}
	var err error
	if b.key, err = events.GenerateHostKey(rand.Reader); err != nil {
		return err
	}
	v, err := validate.New(validate.WithTrustedHosts(b.key.NodeID()))
	if err != nil {
		return err
	}
	if b.gateNC, err = nats.Connect(b.emb.ClientURL(), nats.Name("roompub-publisher")); err != nil {
		return err
	}
	metrics, err := room.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		return err
	}
	// The gate batches as the raw side does: up to --batch messages per
	// atomic batch, at most --inflight batches open at once.
	gate, err := room.NewGate(ctx, b.gateNC, room.GateOptions{Stream: writeStream, Subjects: b.subjects, Validator: v, Observer: metrics,
		MaxBatch: b.c.Batch, MaxInflightBatches: b.c.Inflight})
	if err != nil {
		return err
	}
	if b.svc, err = room.StartService(b.gateNC, gate, room.ServiceOptions{}); err != nil {
		return err
	}
	if b.clientNC, err = nats.Connect(b.emb.ClientURL(), nats.Name("roompub-bench-harness")); err != nil {
		return err
	}
	b.client = room.NewClient(b.clientNC, room.ClientOptions{Timeout: b.c.Timeout})
	b.pubInflight = fmt.Sprintf("all shipping at once; the gate's atomic batches: up to %d messages, at most %d in flight (GateOptions.MaxBatch, MaxInflightBatches; the ingest service at serve's default concurrency)",
		b.c.Batch, b.c.Inflight)
	b.inflightNote = fmt.Sprintf("raw: at most %d atomic batches in flight; roompub: %s", b.c.Inflight, b.pubInflight)
	return nil
}

// close stops everything started, in reverse order; the write stream is
// deleted (the read stream stays for the next run).
func (b *bench) close() {
	if b.svc != nil {
		_ = b.svc.Stop()
	}
	for _, nc := range []*nats.Conn{b.clientNC, b.gateNC} {
		if nc != nil {
			nc.Close()
		}
	}
	if b.js != nil && b.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = b.js.DeleteStream(ctx, writeStream)
		cancel()
	}
	if b.nc != nil {
		b.nc.Close()
	}
	if b.emb != nil {
		b.emb.Shutdown()
	}
	if b.tmp != "" {
		_ = os.RemoveAll(b.tmp)
	}
}

// storedOn counts the messages the stream holds on subjects matching
// filter.
func (b *bench) storedOn(stream, filter string) (int, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	st, err := b.js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n, nil
}

// environment describes the machine and the server for the table header
// and the JSON line.
func (b *bench) environment() map[string]any {
	return map[string]any{
		"go_version":          runtime.Version(),
		"gomaxprocs":          runtime.GOMAXPROCS(0),
		"nats_server_version": server.VERSION,
		"sync":                b.syncSetting(),
		"inflight":            b.c.Inflight,
		"batch":               b.c.Batch,
		"quick":               b.c.Quick,
		"rounds":              b.rounds,
	}
}

// auditWrites replays the write stream with room.Audit, as `subscriber
// audit` would, and checks that every message both sides stored verifies:
// the raw side's messages are exactly what roompub stores (subjects,
// bytes, chains), and roompub's side stored every item once.
func (b *bench) auditWrites(results []*result) (map[string]any, error) {
	var entries, records uint64
	chains := 0
	for _, r := range results {
		switch r.key {
		case "long_chain":
			entries += 2*uint64(r.items) + uint64(r.syncEntries)
			chains += 2 * r.rounds
			if r.syncEntries > 0 {
				chains++
			}
		case "parallel":
			entries += 2 * uint64(r.items)
			chains += 2 * r.rounds * b.sz.chains
		case "records":
			records += 2 * uint64(r.items)
		}
	}
	v, err := validate.New(validate.WithTrustedHosts(b.key.NodeID()))
	if err != nil {
		return nil, err
	}
	b.logf("auditing the write stream: %d entries, %d records expected", entries, records)
	start := time.Now()
	rep, err := room.Audit(b.ctx, b.js, room.AuditOptions{Stream: writeStream, Subjects: b.subjects, Validator: v})
	if err != nil {
		return nil, fmt.Errorf("audit of the write stream: %w", err)
	}
	t := rep.Totals
	if !rep.Clean() || t.Entries != entries || t.Records != records || t.ChainsOK != chains {
		return nil, fmt.Errorf("audit of the write stream: clean %v, %d entries (want %d), %d records (want %d), %d chains ok (want %d), %d set aside %v",
			rep.Clean(), t.Entries, entries, t.Records, records, t.ChainsOK, chains, t.SetAside, t.ByCode)
	}
	b.logf("write stream audit: clean, %d entries, %d records, %d chains in %.1fs", t.Entries, t.Records, t.ChainsOK, time.Since(start).Seconds())
	return map[string]any{"write_audit_clean": true, "write_audit_entries": t.Entries, "write_audit_records": t.Records, "write_audit_chains_ok": t.ChainsOK}, nil
}

// syncSetting reads the running server's JetStream fsync setting:
// "always" (sync_interval: always, what `publisher serve` runs with) or
// the interval.
func (b *bench) syncSetting() string {
	if b.emb == nil {
		return "unknown"
	}
	cfg := b.emb.Server().JetStreamConfig()
	switch {
	case cfg == nil:
		return "no JetStream"
	case cfg.SyncAlways:
		return "always"
	default:
		return cfg.SyncInterval.String()
	}
}
