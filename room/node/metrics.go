package node

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// What Serve itself owns, as Prometheus series (docs/operations.md,
// "Metrics and health"): the connection, the stream guard's verdict, and
// the room stream's and the account's storage. The gate's and the
// checkpointer's series are their packages' own.
var (
	natsConnectedDesc = prometheus.NewDesc("roompub_nats_connected",
		"1 while serve's connection to NATS is up, else 0 (/healthz is not ok while it is 0).", nil, nil)
	guardOKDesc = prometheus.NewDesc("roompub_stream_guard_ok",
		"1 when the stream guard's last check of every room stream passed, else 0: a room stream is not append-only (weak_stream), is gone or replaced (stream_replaced), "+
			"or another stream can write into the room subjects; appends are paused while it is 0.", nil, nil)
	jsAPIOKDesc = prometheus.NewDesc("roompub_jetstream_api_ok",
		"1 when the JetStream API answered this scrape's reads of the room stream and the account (2 s each), else 0 and the storage series are left out.", nil, nil)
	streamMsgsDesc = prometheus.NewDesc("roompub_stream_stored_messages",
		"Messages the room streams hold (every partition's, summed), as the server reports at the scrape.", nil, nil)
	streamBytesDesc = prometheus.NewDesc("roompub_stream_stored_bytes",
		"Bytes the room streams hold (every partition's, summed), as the server reports at the scrape.", nil, nil)
	jsUsedDesc = prometheus.NewDesc("roompub_jetstream_storage_used_bytes",
		"File storage the account uses in JetStream, every stream of the account (the deployment log and the buckets too), in bytes.", nil, nil)
	jsLimitDesc = prometheus.NewDesc("roompub_jetstream_storage_limit_bytes",
		"File storage the account may use in JetStream, in bytes: the account's limit, else the embedded server's store limit (--max-store, "+
			"or without it what nats-server derives from the disk's free space); -1 when neither is known. A full store refuses appends (insufficient resources).", nil, nil)
)

// scrapeTimeout bounds each JetStream read of a scrape.
const scrapeTimeout = 2 * time.Second

// serveCollector reads serve's state at each scrape: what it reports is
// the state then, not at the last stream check.
type serveCollector struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	streams []string // every partition's room stream
	// guardOK reports the stream guard's last verdict.
	guardOK func() bool
	// serverMaxStore is the embedded server's file storage limit in
	// bytes (--max-store, else what nats-server derived from the free
	// disk at start); 0 with an external server.
	serverMaxStore int64
}

// Describe implements prometheus.Collector.
func (c *serveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{natsConnectedDesc, guardOKDesc, jsAPIOKDesc, streamMsgsDesc, streamBytesDesc, jsUsedDesc, jsLimitDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *serveCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	bool01 := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge(natsConnectedDesc, bool01(c.nc.IsConnected()))
	gauge(guardOKDesc, bool01(c.guardOK()))
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	var msgs, bytes uint64
	for _, name := range c.streams {
		st, err := c.js.Stream(ctx, name)
		if err != nil {
			gauge(jsAPIOKDesc, 0)
			return
		}
		msgs, bytes = msgs+st.CachedInfo().State.Msgs, bytes+st.CachedInfo().State.Bytes
	}
	actx, acancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer acancel()
	acct, err := c.js.AccountInfo(actx)
	if err != nil {
		gauge(jsAPIOKDesc, 0)
		return
	}
	gauge(jsAPIOKDesc, 1)
	gauge(streamMsgsDesc, float64(msgs))
	gauge(streamBytesDesc, float64(bytes))
	gauge(jsUsedDesc, float64(acct.Store))
	limit := acct.Limits.MaxStore
	if limit <= 0 && c.serverMaxStore > 0 {
		limit = c.serverMaxStore
	}
	if limit <= 0 {
		limit = -1
	}
	gauge(jsLimitDesc, float64(limit))
}
