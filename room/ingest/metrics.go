package ingest

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// Metrics is an Observer (and BatchObserver, LossObserver and
// PauseObserver) that exports Prometheus
// metrics:
//
//	roompub_items_total{kind,outcome}            items decided (stored, duplicate, refused, failed)
//	roompub_refusals_total{kind,code}            refusals by code
//	roompub_item_duration_seconds{kind,outcome}  time to decide one item (the lines of one journal request share its time)
//	roompub_batches_total{result}                atomic batches published: "stored", the server's error code, or "no_answer"
//	roompub_batch_messages                       messages per atomic batch
//	roompub_replies_refused_total{endpoint}      requests never answered: their reply subject is not the requester's own inbox (reply_not_allowed)
//	roompub_over_quota_total{endpoint}           requests answered over_quota: their identity, or the service, already held its share (docs/secure-mode.md, "Fair ingest")
//	roompub_foreign_writers                      other streams that can write into the room subjects, at the last check (Serve)
//	roompub_store_lost_messages                  messages the room stream shows deleted from inside it, at the last check (Serve)
//	roompub_store_unreadable_messages            messages the server counts but could not return to the last scrub (Gate.Scrub; Serve)
//	roompub_store_damaged_chains                 chains the gate found missing acknowledged positions (closed: store_lost)
//	roompub_store_damaged_rooms                  rooms whose latest checkpoint covers more leaves than the stream holds, at the last survey (Serve), or contradicts its messages (NoteContradiction)
//	roompub_gate_paused                          streams whose appends are paused (Gate.Pause): 1 or 0 with one stream
type Metrics struct {
	replies    *prometheus.CounterVec
	quota      *prometheus.CounterVec
	items      *prometheus.CounterVec
	refusals   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	batches    *prometheus.CounterVec
	sizes      prometheus.Histogram
	foreign    prometheus.Gauge
	lost       *streamSum
	unreadable *streamSum
	chains     *streamSum
	rooms      *streamSum
	paused     *streamSum
	// series holds the items and latency series of each kind and outcome
	// once made (itemSeries): WithLabelValues hashes its labels on every
	// call, and Item is called for every line.
	series sync.Map // itemKey -> *itemSeries
}

type itemKey struct {
	kind    room.Kind
	outcome room.Outcome
}

type itemSeries struct {
	items   prometheus.Counter
	latency prometheus.Observer
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "roompub", Name: "items_total", Help: "Journal entries and execution records decided by the gate, by outcome.",
		}, []string{"kind", "outcome"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "roompub", Name: "refusals_total", Help: "Items refused by the gate, by refusal code.",
		}, []string{"kind", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "roompub", Name: "item_duration_seconds",
			Help:    "Time the gate took to decide one item, including the append; the lines of one journal request share its time equally.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"kind", "outcome"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "roompub", Name: "batches_total",
			Help: "Atomic batches of journal entries the gate published, by result: stored, the server's error code, or no_answer (read back).",
		}, []string{"result"}),
		sizes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "roompub", Name: "batch_messages", Help: "Messages per atomic batch the gate published.",
			Buckets: prometheus.ExponentialBuckets(2, 2, 10),
		}),
		foreign: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "roompub", Name: "foreign_writers",
			Help: "Other streams of the account that can write into the room subjects (a RePublish, a push consumer), at serve's last check; appends pause while it is not 0.",
		}),
		lost: newStreamSum(prometheus.GaugeOpts{
			Namespace: "roompub", Name: "store_lost_messages",
			Help: "Messages the room streams show deleted from inside them, or gone before their first sequence, at serve's last check: the store lost them; /healthz is not ok while it is not 0.",
		}),
	}
	m.unreadable = newStreamSum(prometheus.GaugeOpts{
		Namespace: "roompub", Name: "store_unreadable_messages",
		Help: "Messages the server counts but could not return to serve's last scrub of the room streams (a damaged block whose state file it kept): the store lost them; /healthz is not ok while it is not 0.",
	})
	m.chains = newStreamSum(prometheus.GaugeOpts{
		Namespace: "roompub", Name: "store_damaged_chains",
		Help: "Chains the gate found missing positions the store had acknowledged; each is closed (store_lost) and /healthz is not ok while it is not 0.",
	})
	m.rooms = newStreamSum(prometheus.GaugeOpts{
		Namespace: "roompub", Name: "store_damaged_rooms",
		Help: "Rooms whose latest checkpoint covers more leaves than the stream holds (serve's last survey), or contradicts the messages it holds (the checkpointer's read); /healthz is not ok while it is not 0.",
	})
	m.replies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "roompub", Name: "replies_refused_total",
		Help: "Ingest requests never answered because their reply subject is not under the requester's own inbox prefix (reply_not_allowed), by endpoint.",
	}, []string{"endpoint"})
	m.quota = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "roompub", Name: "over_quota_total",
		Help: "Ingest requests answered over_quota (status 429) because their identity, or the service, already held its share, by endpoint.",
	}, []string{"endpoint"})
	// Every endpoint's series exist from the start, at 0: a rate over a
	// series that appears with its first increment misses that increment,
	// and a dashboard shows "no data" rather than none refused.
	for _, ep := range []string{room.EndpointJournal, room.EndpointExecution, room.EndpointRecords, room.EndpointHead} {
		m.replies.WithLabelValues(ep)
		m.quota.WithLabelValues(ep)
	}
	// A boolean as 0 or 1, so an alert is "== 1" and a panel can sum it
	// over the publishers of a stream.
	m.paused = newStreamSum(prometheus.GaugeOpts{
		Namespace: "roompub", Subsystem: "gate", Name: "paused",
		Help: "The room streams whose gate appends nothing because the stream guard found the stream weak, replaced or written into by another stream (items come back failed): 1 or 0 with one stream.",
	})
	for _, c := range []prometheus.Collector{m.items, m.refusals, m.latency, m.batches, m.sizes, m.replies, m.quota, m.foreign, m.lost.g, m.unreadable.g, m.chains.g, m.rooms.g, m.paused.g} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ReplyRefused implements ServiceObserver.
func (m *Metrics) ReplyRefused(endpoint string) { m.replies.WithLabelValues(endpoint).Inc() }

// OverQuota implements ServiceObserver.
func (m *Metrics) OverQuota(endpoint string) { m.quota.WithLabelValues(endpoint).Inc() }

// Item implements Observer.
func (m *Metrics) Item(kind room.Kind, outcome room.Outcome, code events.Code, took time.Duration) {
	k := itemKey{kind, outcome}
	v, ok := m.series.Load(k)
	if !ok {
		v, _ = m.series.LoadOrStore(k, &itemSeries{items: m.items.WithLabelValues(string(kind), string(outcome)), latency: m.latency.WithLabelValues(string(kind), string(outcome))})
	}
	s := v.(*itemSeries)
	s.items.Inc()
	if outcome == room.OutcomeRefused {
		m.refusals.WithLabelValues(string(kind), string(code)).Inc()
	}
	s.latency.Observe(took.Seconds())
}

// ForeignWriters sets roompub_foreign_writers: n other streams of the
// account can write into the room subjects (docs/secure-mode.md, "Writers
// into room subjects").
func (m *Metrics) ForeignWriters(n int) { m.foreign.Set(float64(n)) }

// StoreLost sets stream's part of roompub_store_lost_messages: the room
// stream shows n messages deleted from inside it (room.CheckStoreLoss).
// The gauge is the sum over the streams (partitions) serve serves.
func (m *Metrics) StoreLost(stream string, n uint64) { m.lost.set(stream, float64(n)) }

// StoreUnreadable sets stream's part of roompub_store_unreadable_messages:
// the last scrub (Gate.Scrub) found n messages the server counts but can
// no longer read.
func (m *Metrics) StoreUnreadable(stream string, n uint64) { m.unreadable.set(stream, float64(n)) }

// ChainsDamaged implements LossObserver: stream's part of
// roompub_store_damaged_chains (summed over the streams).
func (m *Metrics) ChainsDamaged(stream string, n int) { m.chains.set(stream, float64(n)) }

// RoomsDamaged implements LossObserver: stream's part of
// roompub_store_damaged_rooms (summed over the streams), the rooms
// Gate.DamagedRooms lists.
func (m *Metrics) RoomsDamaged(stream string, n int) { m.rooms.set(stream, float64(n)) }

// Paused implements PauseObserver: roompub_gate_paused counts the streams
// whose appends are paused (1 or 0 with one stream).
func (m *Metrics) Paused(stream string, paused bool) {
	v := 0.0
	if paused {
		v = 1
	}
	m.paused.set(stream, v)
}

// streamSum is a gauge that is the sum of a value per room stream: one
// Metrics serves every partition's gate and stream guard, and a gate's
// own value must not overwrite another's.
type streamSum struct {
	mu sync.Mutex
	by map[string]float64
	g  prometheus.Gauge
}

func newStreamSum(o prometheus.GaugeOpts) *streamSum {
	return &streamSum{by: map[string]float64{}, g: prometheus.NewGauge(o)}
}

func (s *streamSum) set(stream string, v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.by[stream] = v
	sum := 0.0
	for _, x := range s.by {
		sum += x
	}
	s.g.Set(sum)
}

// Batch implements BatchObserver.
func (m *Metrics) Batch(messages int, err error, _ time.Duration) {
	m.sizes.Observe(float64(messages))
	m.batches.WithLabelValues(batchResult(err)).Inc()
}

// batchResult names the result of a batch publish for a metric label.
func batchResult(err error) string {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return "stored"
	case errors.As(err, &apiErr):
		return strconv.Itoa(int(apiErr.ErrorCode))
	default:
		return "no_answer"
	}
}
