package checkpointer

import (
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
	// The deployment log (docs/witnesses.md).
	deploymentCheckpoints prometheus.Counter
	witnessAnswers        *prometheus.CounterVec
}

func newCheckpointMetrics(reg prometheus.Registerer) (*checkpointMetrics, error) {
	m := &checkpointMetrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "roompub", Name: "checkpoints_written_total", Help: "Signed room checkpoints this publisher wrote.",
		}),
		leases: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "roompub", Name: "checkpoint_leases_held", Help: "Room checkpoint leases this publisher holds.",
		}),
		blocked: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "roompub", Name: "checkpoint_rooms_blocked",
			Help: "Rooms whose latest checkpoint contradicts their messages as this publisher reads them: it writes none for them.",
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
	for _, a := range []string{"cosigned", "conflict", "inconsistent", "failed"} {
		m.witnessAnswers.WithLabelValues(a)
	}
	for _, why := range []string{asideMalformed, asideOtherRoom, asideUntrusted, asideBadSignature} {
		m.setAside.WithLabelValues(why)
	}
	for _, why := range []string{leaseUnsigned, leaseUntrusted, leaseStale, leaseFuture} {
		m.overridden.WithLabelValues(why)
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.written, m.leases, m.blocked, m.unadmitted, m.setAside, m.overridden, m.deploymentCheckpoints, m.witnessAnswers} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}
