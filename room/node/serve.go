package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/tilesource"
	"github.com/roompub/roompub/tiles"
	"github.com/roompub/roompub/validate"
)

// ServeOptions configures Serve. The zero value of each field is its
// default, except Validator, which is required.
type ServeOptions struct {
	// ServerURL names an existing NATS server or cluster. Empty starts the
	// embedded server with Embedded.
	ServerURL string
	Embedded  embedded.Options
	// Connect are extra connection options (credentials, TLS).
	Connect []nats.Option
	// Stream and room.Subjects name the room stream; Replicas is its replica
	// count when Serve creates it: default 1 embedded, 3 with ServerURL.
	Stream   string
	Subjects room.Subjects
	Replicas int
	// Partitions is how many room streams rooms are placed over
	// (room.Layout; docs/design.md, "Partitions"): Stream and Subjects are
	// the first. 0 or 1 is one, unless the placement bucket records more,
	// which Serve then serves. A deployment's partitions are added, never
	// removed.
	Partitions int
	// Validator checks every item; it must check host trust.
	Validator *validate.Validator
	// Service configures the ingest service.
	Service ingest.ServiceOptions
	// MaxBatch and MaxInflightBatches bound the gate's atomic batches
	// (ingest.GateOptions); 0 is the default.
	MaxBatch, MaxInflightBatches int
	// HTTPAddr, when set, serves /metrics (Prometheus) and /healthz.
	HTTPAddr string
	// Tiles serves the logs as C2SP tlog-tiles on HTTPAddr too; off by
	// default, as a room's entries name the room and its subjects.
	Tiles TilesOptions
	// CheckInterval is how often the stream is checked again while
	// serving; default 30s. A weakened stream, a stream that is gone or
	// replaced, and another stream that can write into the room subjects
	// pause appends until the next check finds them gone
	// (docs/secure-mode.md, "The stream").
	CheckInterval time.Duration
	// ScrubInterval, when above 0, reads the whole room stream once the
	// first survey has ended and then this often, for messages the server
	// counts but can no longer read (ingest.Gate.Scrub; docs/reliability.md,
	// "Scrubbing"); 0: never.
	ScrubInterval time.Duration
	// AcceptStream lets Serve start on a room stream other than the one
	// it remembers (room.ErrStreamReplaced): it creates the stream when it is
	// gone, or takes the one there (restored, recreated), logs at warn
	// level what it remembered, and remembers the new stream from then
	// on. An operator's act for one start (--accept-stream); left on, it
	// only logs a warning when there is nothing to accept.
	AcceptStream bool
	// StreamMark is a file on serve's own disk that keeps the stream mark
	// too: on a cluster (ServerURL set), besides the streams bucket, which
	// a cluster that loses the room stream may lose with it; on the
	// embedded server, besides the mark in its store directory, which a
	// restored backup of the store brings back old (docs/reliability.md,
	// "Crashes on the cluster"). Its directory must exist. Empty: none.
	StreamMark string
	// AcknowledgeLoss names rooms to write a loss notice for once the
	// first survey has found what the store lost of them
	// (ingest.Gate.AcknowledgeLoss; needs PublisherKey): an operator's
	// recorded act, for one start (docs/reliability.md, "Loss notices").
	AcknowledgeLoss []string
	// PublisherKey, when set, attests every appended message and signs
	// the rooms' checkpoints (ingest.GateOptions.PublisherKey, a
	// checkpointer.Checkpointer). Nil: nothing is attested or checkpointed, and Serve
	// logs a warning.
	PublisherKey *events.HostKey
	// Checkpoint configures the checkpointer when PublisherKey is set;
	// its Key, Stream, room.Subjects, Logger and Registerer are Serve's, and
	// Replicas is the stream's.
	Checkpoint checkpointer.Options
	Logger     *zap.Logger
	// Ready, when set, is called once the service answers requests.
	Ready func(ServeInfo)

	// atStep, when set, is called as Serve starts each step of its
	// start (the step /healthz names) with the bound HTTP address; tests
	// hold a step with it.
	atStep func(step, httpAddr string)
}

// TilesOptions configure the tlog-tiles endpoint (docs/tiles.md, "The
// serve endpoint"): the deployment log at /tiles/deployment/ and each
// room's log at /tiles/room/<checkpoint.RoomSegment>/, read from the
// streams by room/tilesource under the checkpointer's trust (PublisherKey
// and Checkpoint.TrustedPublishers) and origin (Checkpoint.Origin), which
// Enabled requires, with HTTPAddr.
type TilesOptions struct {
	// Enabled turns the endpoint on; off, nothing is served under /tiles/.
	Enabled bool
	// CacheBytes bounds the cache of full tiles all the logs share, in
	// bytes; 0 is tiles.DefaultCacheBytes (64 MiB).
	CacheBytes int64
}

// ErrTiles is wrapped by Serve's refusal of Tiles without what it needs.
var ErrTiles = errors.New("the tiles endpoint needs an HTTP address, a publisher key and an origin")

// checkTiles reports what o.Tiles lacks, or nil.
func (o *ServeOptions) checkTiles() error {
	if !o.Tiles.Enabled {
		return nil
	}
	var missing []string
	if o.HTTPAddr == "" {
		missing = append(missing, "an HTTP address (--http)")
	}
	if o.PublisherKey == nil {
		missing = append(missing, "a publisher key (--publisher-key): the checkpoints it serves are the publisher's")
	}
	if o.Checkpoint.Origin == "" {
		missing = append(missing, "an origin (--origin): a tlog client verifies a checkpoint by its origin, and the deployment log exists only with one")
	}
	if o.Tiles.CacheBytes < 0 {
		missing = append(missing, "a cache bound that is not negative")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing %s", ErrTiles, strings.Join(missing, "; "))
	}
	return nil
}

// tilesHandlers returns the tiles endpoint's handlers by path, reading
// the streams through a connection of its own (nc's options), so tile
// reads never queue behind the gate's acknowledgements, and what closes
// that connection and the logs' files of leaf hashes.
func tilesHandlers(url string, opts []nats.Option, o *ServeOptions, place *room.Placement, log *zap.Logger) (map[string]http.Handler, func(), error) {
	ids := append([]string{o.PublisherKey.NodeID()}, o.Checkpoint.TrustedPublishers...)
	trust, err := checkpoint.NewTrust(ids...)
	if err == nil {
		trust, err = trust.WithOrigin(o.Checkpoint.Origin)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrTiles, err)
	}
	nc, err := connectAs(url, "roompub-publisher-tiles", opts)
	if err != nil {
		return nil, nil, err
	}
	first := place.Partitions()[0]
	so := tilesource.Options{Stream: first.Stream, Subjects: first.Subjects, Deployment: o.Checkpoint.Deployment.Log, Trust: trust, LeafDir: o.Checkpoint.LeafDir}
	if len(place.Partitions()) > 1 {
		so.Placement = place
	}
	dep, err := tilesource.NewDeployment(nc, so)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	rooms, err := tilesource.NewRooms(nc, so)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	closeAll := func() {
		if err := errors.Join(rooms.Close(), dep.Close()); err != nil {
			log.Warn("tiles: a file of leaf hashes could not be removed", zap.Error(err))
		}
		nc.Close()
	}
	size := o.Tiles.CacheBytes
	if size == 0 {
		size = tiles.DefaultCacheBytes
	}
	topts := &tiles.Options{Cache: tiles.NewCache(size), OnError: func(r *http.Request, err error) {
		log.Warn("tiles: a request failed", zap.String("path", r.URL.EscapedPath()), zap.Error(err))
	}}
	depH := tiles.NewHandler(dep, topts)
	// A deployment log with no checkpoint yet is no log to read (404, as
	// an unknown room), not a failure (500, which clients retry).
	depNone := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, err := dep.Checkpoint(r.Context()); errors.Is(err, tilesource.ErrNoCheckpoint) {
			w.Header().Set("Cache-Control", tiles.CacheNone)
			http.NotFound(w, r)
			return
		}
		depH.ServeHTTP(w, r)
	})
	return map[string]http.Handler{
		"/tiles/deployment/": http.StripPrefix("/tiles/deployment", depNone),
		"/tiles/room/":       http.StripPrefix("/tiles/room", tiles.NewMux(rooms.Resolve, topts)),
	}, closeAll, nil
}

// ErrPartitionsAdded is returned by Serve when another serve added
// partitions to the deployment while it served (docs/operations.md,
// "Partitions"): a restart serves them all.
var ErrPartitionsAdded = errors.New("partitions added")

// streamSetupTimeout bounds creating or looking up the room stream at start.
const streamSetupTimeout = 60 * time.Second

// ServeInfo describes a serving publisher.
type ServeInfo struct {
	ClientURL string   // where clients connect
	Stream    string   // the first partition's room stream
	Streams   []string // every partition's room stream, the first one first
	HTTPAddr  string   // the bound metrics/health address, "" if none
	Tiles     string   // the tiles endpoint's URL, ending in "/tiles/"; "" if off
	ServiceID string
}

// Serve runs the publisher until ctx is done: it starts the embedded server
// (or connects to ServerURL), checks the room stream against the one it
// remembers (or creates it on a first start), and serves the ingest
// service, checking the stream and the account's other streams every
// CheckInterval; then it stops the service, waits for requests in flight,
// records the stream's last sequence, drains the connection and shuts the
// embedded server down. A room stream that is gone or replaced since the
// last run fails the start with an error wrapping room.ErrStreamReplaced, unless
// AcceptStream (docs/secure-mode.md, "The stream").
func Serve(ctx context.Context, o ServeOptions) error {
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if o.Validator == nil || !o.Validator.ChecksTrust() {
		return fmt.Errorf("%w: serve needs a validator that checks host trust", ingest.ErrGate)
	}
	if len(o.AcknowledgeLoss) > 0 && o.PublisherKey == nil {
		return fmt.Errorf("%w: a loss notice (--acknowledge-loss) is attested with the publisher key: give --publisher-key", ingest.ErrGate)
	}
	for _, id := range o.AcknowledgeLoss {
		if err := validate.CheckRoomIDForm(id); err != nil {
			return fmt.Errorf("%w: --acknowledge-loss %q: %v", ingest.ErrGate, id, err)
		}
	}
	if err := o.checkTiles(); err != nil {
		return err
	}
	if o.PublisherKey != nil {
		// Before anything is started, as a bad flag should be.
		if err := checkpointer.CheckLeafDir(o.Checkpoint.LeafDir); err != nil {
			return err
		}
	}
	// HTTPAddr answers from here on: /healthz says 503 and the step of the
	// start until the service is up (a store's recovery can take tens of
	// seconds), then what it checks.
	front := &startingHTTP{}
	var httpSrv *http.Server
	httpAddr := ""
	if o.HTTPAddr != "" {
		ln, err := net.Listen("tcp", o.HTTPAddr)
		if err != nil {
			return fmt.Errorf("http listen %s: %w", o.HTTPAddr, err)
		}
		httpAddr = ln.Addr().String()
		httpSrv = &http.Server{Handler: front, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = httpSrv.Serve(ln) }()
		defer httpSrv.Close() // a failed start; after Shutdown below, a no-op
	}
	step := func(what string) {
		front.step.Store(&what)
		if o.atStep != nil {
			o.atStep(what, httpAddr)
		}
	}
	url := o.ServerURL
	replicas := o.Replicas
	var emb *embedded.Server
	if url == "" {
		step(stepEmbedded)
		eo := o.Embedded
		if eo.Logger == nil {
			eo.Logger = log
		}
		var err error
		if emb, err = embedded.Start(eo); err != nil {
			return err
		}
		defer emb.Shutdown()
		url = emb.ClientURL()
		if replicas <= 0 {
			replicas = 1
		}
		log.Info("embedded nats-server started", zap.String("url", url), zap.String("store_dir", eo.StoreDir), zap.Bool("fsync_before_ack", eo.SyncInterval <= 0))
	} else if replicas <= 0 {
		replicas = 3
	}
	// A connection the client gives up on (the server closed it for a
	// protocol error, reconnects exhausted) ends Serve with an error, so a
	// supervisor restarts it instead of it lingering without a service.
	connCtx, connLost := context.WithCancelCause(ctx)
	defer connLost(nil)
	opts := append([]nats.Option{
		nats.ClosedHandler(func(nc *nats.Conn) {
			connLost(fmt.Errorf("connection to NATS closed: %v", nc.LastError()))
		}),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil on our own drain
				log.Warn("nats disconnected", zap.Error(err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", zap.String("url", nc.ConnectedUrlRedacted())) }),
		nats.ErrorHandler(asyncErrorLogger(log)),
	}, o.Connect...)
	step(stepConnect)
	nc, err := connectAs(url, "roompub-publisher", opts)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// Creating a replicated stream elects its leader first: on a cluster
	// that has just formed that can take longer than room.DefaultTimeout.
	step(stepStream)
	ectx, cancel := context.WithTimeout(ctx, streamSetupTimeout)
	place, err := openPlacement(ectx, js, room.Layout{Stream: o.Stream, Subjects: o.Subjects, Partitions: o.Partitions}, replicas)
	if err != nil {
		cancel()
		return err
	}
	if n := len(place.Partitions()); n > max(o.Partitions, 1) {
		// Partitions are never removed: all are served. In secure mode
		// the publisher's permissions must name them all (authconf
		// --partitions), or the lookups below wait out their timeout.
		log.Warn("the placement bucket records more partitions than --partitions asks: serving them all",
			zap.Int("recorded", n), zap.Int("asked", max(o.Partitions, 1)))
	}
	var parts []*partition
	for i, q := range place.Partitions() {
		p := &partition{cfg: room.StreamConfig(q.Stream, q.Subjects, replicas), subjects: q.Subjects}
		po := o
		po.Stream, po.Subjects, po.StreamMark = q.Stream, q.Subjects, partitionMark(o.StreamMark, i, q.Stream)
		if p.guard, p.st, err = openStream(ectx, js, p.cfg, po, emb, log); err != nil {
			cancel()
			return err
		}
		p.contradictions = newContradictionRelay(p.guard.contradicted)
		// Stopped after the checkpointers (deferred below), whose final
		// read may still find a room contradicted.
		pctx, stopPersist := context.WithCancel(context.Background())
		persisted := make(chan struct{})
		go func() { defer close(persisted); p.contradictions.persist(pctx, log) }()
		defer func() { stopPersist(); <-persisted }()
		parts = append(parts, p)
	}
	cancel()
	cfg := parts[0].cfg
	replicas = parts[0].st.CachedInfo().Config.Replicas // an existing stream keeps its own
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := ingest.NewMetrics(reg)
	if err != nil {
		return err
	}
	// Stopped in reverse: every partition's checkpointer before the first
	// one's, which keeps the deployment log the others offer to; then
	// their connections, which their final checkpoints need.
	var ckConns []*nats.Conn
	defer func() {
		for i := len(parts) - 1; i >= 0; i-- {
			stopCheckpointer(parts[i].ckp, log)
		}
		for _, c := range ckConns {
			c.Close()
		}
	}()
	// The surveys of what the store lost read on a connection of their
	// own: after a server start their first reads load the message blocks
	// that hold the chains' heads (seconds at millions of messages), and
	// the server answers a connection's requests in order, so on the
	// gates' connection the first appends would wait behind them.
	step(stepGates)
	surveyNC, err := connectAs(url, "roompub-publisher-survey", opts)
	if err != nil {
		return err
	}
	defer surveyNC.Close() // after the surveys end (deferred below)
	for i, p := range parts {
		gopts := ingest.GateOptions{Stream: p.cfg.Name, Subjects: p.subjects, Validator: o.Validator, Logger: log, Observer: metrics,
			MaxBatch: o.MaxBatch, MaxInflightBatches: o.MaxInflightBatches, PublisherKey: o.PublisherKey,
			TrustedPublishers: o.Checkpoint.TrustedPublishers, SurveyConn: surveyNC}
		if emb != nil && o.Embedded.SyncInterval <= 0 {
			// Acknowledged means on disk: the new file names too, which the
			// server does not fsync (docs/reliability.md).
			gopts.Durable = emb.NameSyncer(p.cfg.Name)
		}
		if o.PublisherKey != nil {
			co := o.Checkpoint
			co.OnContradiction = p.contradictions.note
			if co.ReadWhole, err = p.contradictions.remembered(ctx); err != nil {
				return err
			}
			if len(co.ReadWhole) > 0 {
				log.Warn("an earlier run found rooms contradicting their checkpoint: they are read from their first message again",
					zap.String("stream", p.cfg.Name), zap.Strings("rooms", co.ReadWhole), zap.String("kept_in", p.guard.contradicted.where()))
			}
			co.Key, co.Stream, co.Subjects, co.Logger, co.Registerer, co.Replicas = o.PublisherKey, p.cfg.Name, p.subjects, log, reg, replicas
			if len(parts) > 1 {
				// One set of series per room stream.
				co.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"stream": p.cfg.Name}, reg)
				if i > 0 && o.Checkpoint.Origin != "" {
					co.LogKeeper = parts[0].ckp
				}
			}
			// A connection of its own: the checkpointer reads every message
			// of the stream, which on the gate's connection would queue the
			// gate's acks and the service's requests behind it. Losing it for
			// good ends Serve, as losing nc does.
			ckNC, err := connectAs(url, "roompub-publisher-checkpointer", opts)
			if err != nil {
				return err
			}
			ckConns = append(ckConns, ckNC) // closed after the checkpointers stop (deferred above)
			cctx, cancel := context.WithTimeout(ctx, streamSetupTimeout)
			p.ckp, err = checkpointer.Start(cctx, ckNC, co)
			cancel()
			if err != nil {
				return err
			}
			gopts.Attested = p.ckp
		} else if i == 0 {
			log.Warn("no publisher key (--publisher-key): appended messages carry no attestation and no room checkpoint is written; subscribers that trust publishers will refuse them")
		}
		if p.gate, err = ingest.NewGate(ctx, nc, gopts); err != nil {
			return err
		}
		p.contradictions.attach(p.gate)
	}
	// The survey of what the store lost runs beside the service: every
	// chain an append uses is judged on its first read anyway
	// (ingest.Gate, "store_lost"); the survey finds the ones nobody uses.
	surveyCtx, stopSurveys := context.WithCancel(ctx)
	var scrubs sync.WaitGroup
	checkSoon := make(chan struct{}, 1) // a scrub asks for the stream check before its turn
	defer scrubs.Wait()                 // after stopSurveys (deferred after it) ends them
	defer stopSurveys()
	ackLoss, err := lossByPartition(ctx, place, o.AcknowledgeLoss)
	if err != nil {
		return err
	}
	for i, p := range parts {
		// Writers into room subjects pause appends from the start.
		p.guard.metrics = metrics
		p.guard.checkWriters(ctx)
		p.gate.Pause(p.guard.writers)
		p.guard.checkLoss(ctx, p.st)
		p.surveys = newSurveyor(p.gate, metrics, log, ackLoss[i])
		if p.ckp != nil {
			// A room whose checkpoint covers leaves the store lost gets
			// no more checkpoints: they would sign leaves readers cannot
			// find.
			p.surveys.found = func(sv ingest.Survey) {
				for _, d := range sv.DamagedRooms {
					if d.Size > d.Held {
						p.ckp.Block(d.RoomID, d.What())
					}
				}
			}
		}
		p.contradictions.onFound(func() { p.surveys.start(surveyCtx) })
		defer p.surveys.wait()
		p.surveys.start(surveyCtx)
		if p.guard.lost != nil {
			// The store shows lost messages: no request is served before the
			// survey has found which rooms and chains they were.
			step(stepSurvey)
			p.surveys.waitFirst(surveyCtx)
		}
		p.healthy.Store(checkResult{p.guard.writers})
		// What the store lost does not pause appends; /healthz reports it.
		p.storeLost.Store(checkResult{p.guard.lost})
		p.scrubbed.Store(checkResult{})
		if o.ScrubInterval > 0 {
			p.scrubbed.Store(checkResult{errNotScrubbed})
			scrubs.Go(func() {
				p.scrubLoop(surveyCtx, o.ScrubInterval, func() {
					select {
					case checkSoon <- struct{}{}:
					default:
					}
				}, metrics, log)
			})
		}
	}
	so := o.Service
	if so.Logger == nil {
		so.Logger = log
	}
	if so.Observer == nil {
		so.Observer = metrics
	}
	gates := make([]*ingest.Gate, len(parts))
	streams := make([]string, len(parts))
	for i, p := range parts {
		gates[i], streams[i] = p.gate, p.cfg.Name
	}
	gs, err := ingest.NewGates(place, gates...)
	if err != nil {
		return err
	}
	// Each partition's own leader, spread over the servers before the
	// first request: a leader moved later stalls its rooms for a moment.
	spreadLeaders(ctx, nc, js, streams, len(streams), log)
	svc, err := ingest.StartServiceOver(nc, gs, so)
	if err != nil {
		return err
	}
	info := ServeInfo{ClientURL: url, Stream: cfg.Name, Streams: streams, ServiceID: svc.Info().ID}

	sc := &serveCollector{nc: nc, js: js, streams: streams, guardOK: func() bool {
		for _, p := range parts {
			if p.healthy.Load().(checkResult).err != nil {
				return false
			}
		}
		return true
	}}
	if emb != nil {
		if jc := emb.NATSServer().JetStreamConfig(); jc != nil {
			sc.serverMaxStore = jc.MaxStore
		}
	}
	if err := reg.Register(sc); err != nil {
		_ = svc.Stop()
		return err
	}
	if httpSrv != nil {
		info.HTTPAddr = httpAddr
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			var errs []error
			for _, p := range parts {
				errs = append(errs, p.healthy.Load().(checkResult).err, p.storeLost.Load().(checkResult).err, p.scrubbed.Load().(checkResult).err, damageErr(p.gate))
			}
			herr := errors.Join(errs...)
			if herr == nil && !nc.IsConnected() {
				herr = errors.New("not connected to NATS")
			}
			if herr != nil {
				http.Error(w, "unhealthy: "+herr.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok\n"))
		})
		if o.Tiles.Enabled {
			hs, closeTiles, err := tilesHandlers(url, opts, &o, place, log)
			if err != nil {
				_ = svc.Stop()
				return err
			}
			defer closeTiles()
			for path, h := range hs {
				mux.Handle(path, h)
			}
			info.Tiles = "http://" + info.HTTPAddr + "/tiles/"
		}
		front.serving.Store(mux)
	}
	publisher := ""
	if o.PublisherKey != nil {
		publisher = o.PublisherKey.NodeID()
	}
	log.Info("publisher serving", zap.String("url", redact(url)), zap.String("stream", cfg.Name), zap.Strings("streams", streams), zap.Int("replicas", replicas),
		zap.Strings("trusted_hosts", o.Validator.TrustedHosts()), zap.String("http", info.HTTPAddr), zap.String("tiles", info.Tiles), zap.String("publisher", publisher))
	if len(o.Validator.TrustedHosts()) == 0 {
		log.Warn("no trusted host: every execution record will be refused with untrusted_host")
	}
	if o.Ready != nil {
		o.Ready(info)
	}

	interval := o.CheckInterval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	log.Info("room stream check", zap.Duration("every", interval))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var lost error
loop:
	for {
		select {
		case <-connCtx.Done():
			if ctx.Err() == nil {
				lost = context.Cause(connCtx)
				log.Error("publisher lost its NATS connection: stopping", zap.Error(lost))
			}
			break loop
		case <-checkSoon:
			for _, p := range parts {
				p.check(ctx, surveyCtx, log)
			}
		case <-tick.C:
			for _, p := range parts {
				p.check(ctx, surveyCtx, log)
			}
			// A server that restarted leads nothing until leaders move back.
			spreadLeaders(ctx, nc, js, streams, 1, log)
			if now, err := place.RecordedPartitions(ctx); err == nil && len(now) > len(parts) {
				// Another serve added partitions: requests for their rooms
				// fail here until a start opens them.
				lost = fmt.Errorf("%w: another serve added partitions (the placement bucket records %d, this serve serves %d): "+
					"stopping, so that a restart serves them all", ErrPartitionsAdded, len(now), len(parts))
				log.Error("partitions added: stopping", zap.Error(lost))
				break loop
			}
		}
	}
	log.Info("publisher stopping: draining")
	if httpSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = httpSrv.Shutdown(sctx)
		cancel()
	}
	serr := svc.Stop()
	// Every request is decided: the last checkpoints cover them.
	for i := len(parts) - 1; i >= 0; i-- {
		stopCheckpointer(parts[i].ckp, log)
	}
	for _, p := range parts {
		p.guard.record(context.Background())
	}
	if err := nc.Drain(); err != nil {
		log.Warn("drain", zap.Error(err))
	}
	for i := 0; i < 100 && !nc.IsClosed(); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	log.Info("publisher stopped")
	if lost != nil {
		return lost
	}
	return serr
}

// checkpointerStopTimeout bounds a checkpointer's final checkpoints.
const checkpointerStopTimeout = 30 * time.Second

// stopCheckpointer writes ckp's final checkpoints (nil: nothing to do;
// Stop runs once).
func stopCheckpointer(ckp *checkpointer.Checkpointer, log *zap.Logger) {
	if ckp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkpointerStopTimeout)
	defer cancel()
	if err := ckp.Stop(ctx); err != nil {
		log.Error("final checkpoints", zap.Error(err))
	}
}

// redact drops credentials from a URL before it is logged.
func redact(u string) string {
	if i, j := strings.Index(u, "://"), strings.LastIndex(u, "@"); i >= 0 && j > i {
		return u[:i+3] + "[REDACTED]" + u[j:]
	}
	return u
}

// asyncErrorLogger is serve's nats.ErrHandler: an error the client meets
// outside any call (a message whose stored headers it cannot decode, a
// slow consumer, a permission refused) goes to log at warn level with its
// subscription's subject, where nats.go would print it to stderr, outside
// the structured log an operator reads.
func asyncErrorLogger(log *zap.Logger) nats.ErrHandler {
	return func(nc *nats.Conn, sub *nats.Subscription, err error) {
		fields := []zap.Field{zap.Error(err)}
		if nc != nil {
			fields = append(fields, zap.String("connection", nc.Opts.Name))
		}
		if sub != nil {
			fields = append(fields, zap.String("subject", sub.Subject))
		}
		log.Warn("nats: asynchronous error", fields...)
	}
}

// connectAs opens one of serve's connections to url, named name (the
// server's connz and logs show it), and says which in its error: serve
// opens one for itself, one for its store survey, one per checkpointer
// (with a publisher key, one per partition) and one for --tiles, so a
// server or account that limits connections refuses one of them.
func connectAs(url, name string, opts []nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(url, append(opts, nats.Name(name))...)
	if err != nil {
		return nil, fmt.Errorf("connect %s as %s (one of serve's connections: roompub-publisher, -survey, -checkpointer per partition with a publisher key, -tiles with --tiles): %w", redact(url), name, err)
	}
	return nc, nil
}

// The steps of Serve's start, as /healthz names them until the service is
// up.
const (
	stepEmbedded = "starting the embedded nats-server (it recovers its store first)"
	stepConnect  = "connecting to NATS"
	stepStream   = "opening the room stream"
	stepGates    = "starting the checkpointers and the gates"
	stepSurvey   = "surveying what the store lost"
)

// startingHTTP is the handler on ServeOptions.HTTPAddr: the service's own
// (/metrics, /healthz, /tiles/) once serving holds it; before that, 503
// with the step of the start, so a probe sees "starting" rather than a
// refused connection.
type startingHTTP struct {
	step    atomic.Pointer[string]
	serving atomic.Pointer[http.ServeMux]
}

func (h *startingHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if mux := h.serving.Load(); mux != nil {
		mux.ServeHTTP(w, r)
		return
	}
	step := "starting"
	if s := h.step.Load(); s != nil {
		step = *s
	}
	http.Error(w, "starting: "+step, http.StatusServiceUnavailable)
}
