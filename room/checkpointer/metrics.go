package checkpointer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// checkpointMetrics are the checkpointer's Prometheus metrics.
type checkpointMetrics struct {
	written    prometheus.Counter
	leases     prometheus.Gauge
	blocked    prometheus.Gauge
	unadmitted prometheus.Counter
	setAside   *prometheus.CounterVec
	overridden *prometheus.CounterVec
	resumed    *prometheus.CounterVec // rooms at start, by how they were rebuilt
	// The deployment log (docs/witnesses.md).
	deploymentCheckpoints prometheus.Counter
	witnessAnswers        *prometheus.CounterVec
	// The latest witness round that got a cosignature: the deployment
	// log's size it cosigned and when (unix seconds); the cosignatures of
	// the latest round, whatever they were.
	witnessCosignedSize prometheus.Gauge
	witnessCosignedTime prometheus.Gauge
	witnessRoundCosigs  prometheus.Gauge
}

// The checkpoint lag series. They are aggregates over the rooms, never a
// series per room: rooms come and go by the thousand (docs/design.md,
// "Departures from the brief"), and a room label would make the
// series unbounded; the log names a room whose checkpoint fails.
var (
	lagMessagesDesc = prometheus.NewDesc("roompub_checkpoint_lag_max_messages",
		"Largest number of a room's leaves (attested messages) that no signed checkpoint covers yet, over the rooms this publisher reads; 0 when every room's latest checkpoint covers its whole tree.",
		nil, nil)
	lagSecondsDesc = prometheus.NewDesc("roompub_checkpoint_lag_max_seconds",
		"Longest time a room has held leaves that no signed checkpoint covers, over the rooms this publisher reads, in seconds; 0 when every room's latest checkpoint covers its whole tree.",
		nil, nil)
	lagRoomsDesc = prometheus.NewDesc("roompub_checkpoint_lagging_rooms",
		"Rooms whose tree holds leaves that no signed checkpoint covers yet.",
		nil, nil)
	unreadDesc = prometheus.NewDesc("roompub_checkpoint_unread_messages",
		"Messages the room stream holds that this publisher's checkpointer has not read yet, as it last learned the stream's end (its reads, the gate's acknowledgements): no checkpoint of it covers them; 0 when it keeps up.",
		nil, nil)
	spilledDesc = prometheus.NewDesc("roompub_checkpoint_leaves_spilled_total",
		"Leaf hashes of rooms' trees written to a file (32 bytes each, Options.LeafDir) because no checkpoint covered them within the room's window (twice Every leaves, from 4,096 to 1,048,576): rooms whose checkpoints stopped, or read from their first message at start.",
		nil, nil)
)

// checkpointLag is what the lag series report at one moment.
type checkpointLag struct {
	maxMessages uint64
	maxAge      time.Duration
	rooms       int
	unread      uint64 // messages stored after the last one handled
	spilled     uint64 // leaves the rooms' trees wrote to their files
}

// lagCollector reads the checkpointer's rooms at each scrape, so the lag
// is the current one, not the one at the last write.
type lagCollector struct{ lag func() checkpointLag }

// Describe implements prometheus.Collector.
func (l lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagMessagesDesc
	ch <- lagSecondsDesc
	ch <- lagRoomsDesc
	ch <- unreadDesc
	ch <- spilledDesc
}

// Collect implements prometheus.Collector.
func (l lagCollector) Collect(ch chan<- prometheus.Metric) {
	v := l.lag()
	ch <- prometheus.MustNewConstMetric(lagMessagesDesc, prometheus.GaugeValue, float64(v.maxMessages))
	ch <- prometheus.MustNewConstMetric(lagSecondsDesc, prometheus.GaugeValue, v.maxAge.Seconds())
	ch <- prometheus.MustNewConstMetric(lagRoomsDesc, prometheus.GaugeValue, float64(v.rooms))
	ch <- prometheus.MustNewConstMetric(unreadDesc, prometheus.GaugeValue, float64(v.unread))
	ch <- prometheus.MustNewConstMetric(spilledDesc, prometheus.CounterValue, float64(v.spilled))
}

// lag is the checkpoint lag over c's rooms now: a room lags by the
// leaves of its tree beyond its latest checkpoint (read from the stream,
// or written by c), since its tree first grew past it; and the stream by
// the messages after the last one handled, which no room's tree holds yet.
func (c *Checkpointer) lag() checkpointLag {
	now := time.Now()
	var l checkpointLag
	if seen, handled := c.seen.Load(), c.handled.Load(); seen > handled {
		l.unread = seen - handled
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.rooms {
		l.spilled += r.ledger.LeafStats().Spilled
		size, covered := r.ledger.Size(), max(r.ledger.Covered(), r.written)
		if size <= covered {
			continue
		}
		l.rooms++
		l.maxMessages = max(l.maxMessages, size-covered)
		if !r.grewAt.IsZero() {
			l.maxAge = max(l.maxAge, now.Sub(r.grewAt))
		}
	}
	return l
}

// newCheckpointMetrics makes the checkpointer's series and registers
// them on reg (nil: none); the deployment log's and the witnesses' only
// with keepsLog: another partition's checkpointer keeps the log, and a
// series of its own would stay 0 beside the keeper's.
func newCheckpointMetrics(reg prometheus.Registerer, lag func() checkpointLag, keepsLog bool) (*checkpointMetrics, error) {
	m := &checkpointMetrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "roompub", Name: "checkpoints_written_total", Help: "Signed room checkpoints this publisher wrote.",
		}),
		leases: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "roompub", Name: "checkpoint_leases_held", Help: "Room checkpoint leases this publisher holds.",
		}),
		blocked: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "roompub", Name: "checkpoint_rooms_blocked",
			Help: "Rooms whose latest checkpoint contradicts their messages as this publisher reads them, whose leaves the store lost (serve's survey), or whose tree lost the leaves it wrote to its file (until a restart): it writes none for them.",
		}),
		unadmitted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "roompub", Name: "checkpoint_unadmitted_messages_total",
			Help: "Messages on room subjects without a valid attestation by a trusted publisher: not leaves of any checkpoint.",
		}),
		setAside: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "roompub", Name: "checkpoint_set_aside_total",
			Help: "Messages on room checkpoint subjects that are not checkpoints of the room signed by a trusted publisher, by reason " +
				"(malformed, other_room, untrusted, bad_signature): set aside, they neither count as the room's latest checkpoint nor stop its checkpoints.",
		}, []string{"reason"}),
	}
	m.resumed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "roompub", Name: "checkpoint_resumed_rooms_total",
		Help: "Rooms with a checkpoint at the checkpointer's start, by outcome: resumed (from the resume header of its latest checkpoint, " +
			"verified), or why that checkpoint could not be resumed from and the room was read from its first message " +
			"(no_header, unsigned, malformed, bad_note, other_key, leaf_mismatch, bad_range, trust_changed, unreadable, contradicted).",
	}, []string{"outcome"})
	m.overridden = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "roompub", Name: "checkpoint_leases_overridden_total",
		Help: "Room checkpoint leases this publisher took over because their value was not honoured, by reason " +
			"(unsigned, untrusted, stale, future).",
	}, []string{"reason"})
	m.deploymentCheckpoints = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "roompub", Name: "deployment_checkpoints_written_total",
		Help: "Signed checkpoints of the deployment log this publisher wrote.",
	})
	m.witnessAnswers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "roompub", Name: "witness_answers_total",
		Help: "Witnesses' answers to the deployment log's checkpoints, by answer (cosigned; conflict: the witness saw another history; " +
			"inconsistent: the consistency proof failed; failed: anything else, the witness unreachable included).",
	}, []string{"answer"})
	m.witnessCosignedSize = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "roompub", Subsystem: "witness", Name: "cosigned_size_entries",
		Help: "Size, in entries, of the latest deployment log checkpoint a witness round of this publisher got at least one cosignature for; 0 before any.",
	})
	m.witnessCosignedTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "roompub", Subsystem: "witness", Name: "cosigned_timestamp_seconds",
		Help: "Unix time of the latest witness round of this publisher that got at least one cosignature; 0 before any (its age: time() minus it).",
	})
	m.witnessRoundCosigs = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "roompub", Subsystem: "witness", Name: "round_cosignatures",
		Help: "Cosignatures the latest witness round of this publisher got: below the witness policy's quorum, readers refuse the checkpoint (witness_quorum).",
	})
	for _, a := range []string{"cosigned", "conflict", "inconsistent", "failed"} {
		m.witnessAnswers.WithLabelValues(a)
	}
	for _, why := range []string{asideMalformed, asideOtherRoom, asideUntrusted, asideBadSignature} {
		m.setAside.WithLabelValues(why)
	}
	for _, why := range []string{resumeOK, resumeNoHeader, resumeMalformed, resumeBadNote, resumeOtherKey, resumeLeafMismatch, resumeBadRange, resumeTrustChanged, resumeUnreadable, resumeContradicted} {
		m.resumed.WithLabelValues(why)
	}
	for _, why := range []string{leaseUnsigned, leaseUntrusted, leaseStale, leaseFuture} {
		m.overridden.WithLabelValues(why)
	}
	if reg == nil {
		return m, nil
	}
	cols := []prometheus.Collector{m.written, m.leases, m.blocked, m.unadmitted, m.setAside, m.overridden, m.resumed, lagCollector{lag}}
	if keepsLog {
		cols = append(cols, m.deploymentCheckpoints, m.witnessAnswers, m.witnessCosignedSize, m.witnessCosignedTime, m.witnessRoundCosigs)
	}
	for _, col := range cols {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}
