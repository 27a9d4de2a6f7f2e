package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"

	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	fastjson "github.com/segmentio/encoding/json"
	"go.uber.org/zap"
	"golang.org/x/mod/semver"
	"golang.org/x/time/rate"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// ServiceOptions configures the ingest service.
type ServiceOptions struct {
	// Prefix is the endpoints' subject prefix; default DefaultServicePrefix.
	// Endpoints: <prefix>.journal, <prefix>.execution, <prefix>.records,
	// <prefix>.head.
	Prefix string
	// Version is reported by `nats micro info`, without a leading "v"
	// (micro takes SemVer 2.0.0 only); anything that is not a full
	// SemVer (a development build) is reported as "0.0.0-dev".
	Version string
	// Concurrency bounds requests decided at once; default 4×GOMAXPROCS.
	// Appends to one chain or one room are serialised regardless.
	Concurrency int
	// PendingBytes bounds the requests waiting for a free slot, per
	// endpoint, in bytes; requests beyond it are dropped (their clients
	// time out: ErrUnavailable). Default DefaultPendingBytes. It also
	// bounds the bytes of all requests the service holds (admitted and
	// not answered yet, RequestOverheadBytes each besides the body): one
	// beyond it is answered events.OverQuota (docs/secure-mode.md, "Fair
	// ingest"), unless its identity holds nothing and the service holds
	// less than PendingBytes plus one IdentityPendingBytes with it.
	PendingBytes int
	// IdentityConcurrency bounds the requests of one identity (the token
	// its subject names, ParseServiceSubject) the service holds at once
	// waiting for a slot or being decided; those waiting for the requests
	// of their chain ahead of them or for their room (slotHold.idle) are
	// bounded by their bytes alone. One beyond it is answered events.OverQuota at
	// once (status 429). Default DefaultIdentityConcurrency. Fairness
	// does not rest on it: the Concurrency slots go to the identities
	// with requests waiting in turn (fairSlots), so an identity alone may
	// use them all; it bounds what one identity can make the service
	// hold (a goroutine and its order ticket per request).
	IdentityConcurrency int
	// IdentityPendingBytes bounds the bytes of one identity's requests the
	// service holds at once (bodies plus RequestOverheadBytes each); one
	// beyond it is answered events.OverQuota, unless the identity holds
	// nothing (a request is never refused for its size alone). Default a
	// quarter of PendingBytes.
	IdentityPendingBytes int
	Logger               *zap.Logger
	// Observer, when set, is told of the service's own events (metrics).
	Observer ServiceObserver

	afterHandle func() // Service.afterHandle
}

// DefaultIdentityConcurrency is ServiceOptions.IdentityConcurrency's
// default: more requests than one client keeps in flight (a shipper
// pipelines a few per chain, a parallel harness a few hundred chains).
const DefaultIdentityConcurrency = 1024

// DefaultPendingBytes is ServiceOptions.PendingBytes's default: room for
// a hundred full journal requests at once (nats.go's own default of 64 MiB
// would drop some of them).
const DefaultPendingBytes = 256 << 20

// Service is the running ingest service: a nats.go micro service whose
// endpoints call a Gate. Several processes may run it on one server; the
// micro queue group spreads requests over them.
type Service struct {
	svc   micro.Service
	gate  *Gate  // the first partition's: it orders journal requests (ticket)
	gates *Gates // every partition's: they decide
	log   *zap.Logger
	// slots is the concurrency limit, shared fairly by identities.
	slots *fairSlots
	// mu guards stopping and orders wg.Add before Stop's wg.Wait.
	mu       sync.Mutex
	stopping bool
	wg       sync.WaitGroup
	ctx      context.Context
	stop     context.CancelFunc
	// maxPayload is the server's max payload, in bytes: the largest reply.
	maxPayload int
	prefix     string
	obs        ServiceObserver
	// refusedReplies counts requests not answered for their reply subject;
	// replyLog bounds how many of them are logged, quotaLog how many
	// over_quota answers.
	refusedReplies atomic.Uint64
	replyLog       *boundedLog
	quotaLog       *boundedLog
	// quota admits requests within their identity's share (quota.go).
	quota *quotas
	// overQuota counts requests answered events.OverQuota.
	overQuota atomic.Uint64
	// afterHandle, when set, runs on a request's goroutine after its
	// handler returns (a test's seam: ServiceOptions.afterHandle).
	afterHandle func()
}

// ServiceObserver receives the ingest service's own events, for metrics.
// Implementations must be safe for concurrent use and must not block.
type ServiceObserver interface {
	// ReplyRefused is called for each request left unanswered because its
	// reply subject is not the requester's own inbox
	// (events.ReplyNotAllowed); endpoint is one of Endpoints, or
	// "unknown".
	ReplyRefused(endpoint string)
	// OverQuota is called for each request answered events.OverQuota:
	// its identity, or the service, already held its share
	// (docs/secure-mode.md, "Fair ingest"); endpoint is one of Endpoints.
	OverQuota(endpoint string)
}

// StartService registers the ingest service on nc, deciding with gate
// (a deployment of one partition).
func StartService(nc *nats.Conn, gate *Gate, o ServiceOptions) (*Service, error) {
	return StartServiceOver(nc, SingleGate(gate), o)
}

// StartServiceOver registers the ingest service on nc, deciding each
// request with the gate of its room's partition (Gates).
func StartServiceOver(nc *nats.Conn, gates *Gates, o ServiceOptions) (*Service, error) {
	gate := gates.Gate(0)
	if o.Prefix == "" {
		o.Prefix = room.DefaultServicePrefix
	}
	o.Version = serviceVersion(o.Version)
	if o.Concurrency <= 0 {
		o.Concurrency = 4 * runtime.GOMAXPROCS(0)
	}
	if o.PendingBytes <= 0 {
		o.PendingBytes = DefaultPendingBytes
	}
	if o.IdentityConcurrency <= 0 {
		o.IdentityConcurrency = DefaultIdentityConcurrency
	}
	if o.IdentityPendingBytes <= 0 {
		o.IdentityPendingBytes = o.PendingBytes / 4
	}
	s := &Service{gate: gate, gates: gates, log: o.Logger, slots: newFairSlots(o.Concurrency), replyLog: newBoundedLog(), quotaLog: newBoundedLog(), maxPayload: int(nc.MaxPayload()), prefix: o.Prefix, obs: o.Observer,
		quota: newQuotas(o.IdentityConcurrency, o.IdentityPendingBytes, o.PendingBytes), afterHandle: o.afterHandle}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	svc, err := micro.AddService(nc, micro.Config{
		Name:        room.ServiceName,
		Version:     o.Version,
		Description: "roompub ingest: validates journal entries and execution records and appends them to their rooms",
		Metadata:    map[string]string{"stream": gate.streamName(), "subjects": gate.subjects.All(), "partitions": strconv.Itoa(gates.Len())},
	})
	if err != nil {
		return nil, fmt.Errorf("add service: %w", err)
	}
	s.svc = svc
	grp := svc.AddGroup(o.Prefix)
	for _, ep := range []struct {
		name    string
		h       func(micro.Request, *slotHold, *orderTicket)
		ordered bool
		doc     string
	}{
		{room.EndpointJournal, s.handleJournal, true, "journal lines of one chain (body: journal.ndjson bytes; header " + room.HeaderRoom + ")"},
		{room.EndpointExecution, s.handleExecution, false, "one execution record (body: JSON)"},
		{room.EndpointRecords, s.handleRecords, false, "execution records, one per line, decided in order (body: one JSON record per line)"},
		{room.EndpointHead, s.handleHead, false, "where a chain stands (body: {\"run_id\",\"capsule_id\"})"},
	} {
		// Each endpoint twice: for the anonymous identity
		// (<prefix>.<endpoint>) and for a named one
		// (<prefix>.<identity>.<endpoint>; docs/secure-mode.md).
		for _, v := range []struct{ name, subject, who string }{
			{ep.name, ep.name, "the anonymous identity"},
			{"identity-" + ep.name, "*." + ep.name, "the identity the subject's second-to-last token names"},
		} {
			meta := map[string]string{"description": ep.doc + "; sent by " + v.who}
			if err := grp.AddEndpoint(v.name, s.async(ep.h, ep.ordered), micro.WithEndpointSubject(v.subject), micro.WithEndpointMetadata(meta),
				micro.WithEndpointPendingLimits(nats.DefaultSubPendingMsgsLimit, o.PendingBytes)); err != nil {
				_ = svc.Stop()
				return nil, fmt.Errorf("add endpoint %s: %w", v.name, err)
			}
		}
	}
	// The endpoints' subscriptions are on the server when StartService
	// returns (serve then says it serves): a client of the same server may
	// send at once, where it could get "no responders" while they were
	// still in the connection's buffer.
	if err := nc.Flush(); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("add service: %w", err)
	}
	return s, nil
}

// async runs h on its own goroutine, bounded by the concurrency limit, so
// a slow append does not hold up the endpoint's subscription. With
// ordered, each request takes its chain's ticket here, where micro hands
// requests over one at a time in the order they arrived, so a client's
// pipelined journal requests of one chain are decided in the order it sent
// them (order.go). A request gives its slot back while it waits for the
// ones ahead of it (orderTicket.idle).
//
// Before anything else, the request's reply subject must be one the
// service may answer its identity on (CheckReply); a request that fails
// that is logged, counted and never answered (events.ReplyNotAllowed).
// Then it must fit in its identity's share and the service's total
// (quota.go); one that does not is answered events.OverQuota at once. The
// subscription goroutine never waits: an admitted request waits for its
// slot on its own goroutine, holding its share meanwhile.
func (s *Service) async(h func(micro.Request, *slotHold, *orderTicket), ordered bool) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		token, endpoint, ok := s.replyAllowed(req)
		if !ok {
			return
		}
		n := len(req.Data())
		if reason := s.quota.admit(token, n); reason != "" {
			s.overQuota.Add(1)
			if s.obs != nil {
				s.obs.OverQuota(endpoint)
			}
			// Who floods is what an operator needs: logged at info
			// level naming the identity, at the rate of the refused
			// replies' log (an identity can send these at will).
			if left, ok := s.quotaLog.allow(); ok {
				requests, heldBytes, total := s.quota.held(token)
				s.log.Info("over quota", zap.String("code", string(events.OverQuota)), zap.String("endpoint", endpoint), zap.String("identity", room.IdentityName(token)),
					zap.String("reason", reason), zap.Int("identity_requests", requests), zap.Int("identity_bytes", heldBytes), zap.Int("service_bytes", total),
					zap.Uint64("not_logged_before", left))
			}
			s.respondError(req, "429", events.OverQuota, reason)
			return
		}
		// Stop waits for the requests it finds started; one that arrives
		// after Stop began is answered, not started.
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			s.quota.release(token, n)
			s.respondError(req, "503", "", shuttingDown)
			return
		}
		s.wg.Add(1)
		s.mu.Unlock()
		var t *orderTicket
		if ordered {
			t = s.gate.ticket(req.Data(), token)
		}
		ans := &answering{Request: req, before: func() { s.quota.release(token, n) }}
		req = ans
		go func() {
			defer func() {
				t.done()
				ans.settle()
				s.wg.Done()
			}()
			if s.slots.acquire(s.ctx, token) != nil {
				s.respondError(req, "503", "", shuttingDown)
				return
			}
			hold := &slotHold{slot: s.slots, holding: true, quota: s.quota, token: token}
			if t != nil {
				t.hold = hold
			}
			defer func() {
				if hold.releases() {
					s.slots.release()
				}
			}()
			h(req, hold, t)
			if s.afterHandle != nil {
				s.afterHandle()
			}
		}()
	})
}

// answering is an admitted request that gives its identity's share back
// (before) as its answer goes out, not after its goroutine ends: a client
// that sends its next request on reading the answer, at exactly its
// share, must find the share free.
type answering struct {
	micro.Request
	before  func()
	settled atomic.Bool
}

// settle runs before once, whichever comes first: the answer or the
// request's end without one.
func (a *answering) settle() {
	if a.settled.CompareAndSwap(false, true) {
		a.before()
	}
}

// Respond gives the share back, then sends the answer.
func (a *answering) Respond(data []byte, opts ...micro.RespondOpt) error {
	a.settle()
	return a.Request.Respond(data, opts...)
}

// RespondJSON gives the share back, then sends the answer.
func (a *answering) RespondJSON(v any, opts ...micro.RespondOpt) error {
	a.settle()
	return a.Request.RespondJSON(v, opts...)
}

// Error gives the share back, then sends the error answer.
func (a *answering) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	a.settle()
	return a.Request.Error(code, description, data, opts...)
}

// OverQuota counts the requests the service answered events.OverQuota
// (docs/secure-mode.md, "Fair ingest").
func (s *Service) OverQuota() uint64 { return s.overQuota.Load() }

// replyLogRate and replyLogBurst bound the "request not answered" and the
// "over quota" log lines, each: at most replyLogBurst at once, then
// replyLogRate per second.
const (
	replyLogRate  = 10
	replyLogBurst = 50
)

// boundedLog bounds the lines of one kind of log that a client can cause
// at will (replyLogRate, replyLogBurst) and counts those it leaves out.
type boundedLog struct {
	lim  *rate.Limiter
	left atomic.Uint64
}

func newBoundedLog() *boundedLog {
	return &boundedLog{lim: rate.NewLimiter(replyLogRate, replyLogBurst)}
}

// allow reports whether one more line may be logged now and, when it
// may, how many were left out since the last one logged (for its
// not_logged_before); when not, it counts this one as left out.
func (b *boundedLog) allow() (left uint64, ok bool) {
	if !b.lim.Allow() {
		b.left.Add(1)
		return 0, false
	}
	return b.left.Swap(0), true
}

// shuttingDown is the reason of the answer to a request the service did
// not start because it is stopping.
const shuttingDown = "the ingest service is shutting down: send the request again"

// replyAllowed reports whether req may be answered (CheckReply for the
// identity its subject names), with that identity's token and the
// endpoint; when not, it logs and counts why.
func (s *Service) replyAllowed(req micro.Request) (token, endpoint string, ok bool) {
	token, endpoint, err := room.ParseServiceSubject(s.prefix, req.Subject())
	if err == nil {
		err = room.CheckReply(token, req.Reply())
	}
	if err == nil {
		return token, endpoint, true
	}
	if endpoint == "" {
		endpoint = "unknown"
	}
	s.refusedReplies.Add(1)
	if s.obs != nil {
		s.obs.ReplyRefused(endpoint)
	}
	// Anyone who may publish on a service subject, or make JetStream
	// deliver there (a pull request's reply subject is the requester's to
	// choose), can send these at will: the metric counts every one, the
	// log takes a bounded rate and says how many it left out.
	left, ok := s.replyLog.allow()
	if !ok {
		return "", "", false
	}
	s.log.Warn("request not answered", zap.String("code", string(events.ReplyNotAllowed)), zap.String("subject", room.ClipSubject(req.Subject())),
		zap.String("reply", room.ClipSubject(req.Reply())), zap.String("reason", err.Error()), zap.Uint64("not_logged_before", left))
	return "", "", false
}

// RefusedReplies counts the requests the service did not answer because
// of their reply subject (events.ReplyNotAllowed).
func (s *Service) RefusedReplies() uint64 { return s.refusedReplies.Load() }

// StopGrace is how long Stop lets requests in flight finish before it
// cancels them.
const StopGrace = 10 * time.Second

// Stop unregisters the service, lets requests in flight finish (up to
// StopGrace, then cancels them) and waits for them.
func (s *Service) Stop() error {
	err := s.svc.Stop()
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(StopGrace):
		s.log.Warn("requests still in flight after the grace period: cancelling them")
	}
	s.stop()
	<-done
	return err
}

// Info returns the micro service's info (id, endpoints).
func (s *Service) Info() micro.Info { return s.svc.Info() }

// Stats returns the micro service's statistics: per endpoint, requests
// handled, errors, and processing time (what `nats micro stats` shows).
func (s *Service) Stats() micro.Stats { return s.svc.Stats() }

func (s *Service) respondError(req micro.Request, status string, code events.Code, reason string) {
	body, _ := json.Marshal(room.ErrorReply{Code: code, Reason: reason})
	// The same headers req.Error sets, sent with Respond: req.Error also
	// records the error on the request for micro's stats, which micro
	// reads as soon as the (async) handler returns, a data race with this
	// goroutine.
	hdr := micro.Headers{micro.ErrorHeader: []string{reason}, micro.ErrorCodeHeader: []string{status}}
	if err := req.Respond(body, micro.WithHeaders(hdr)); err != nil {
		s.log.Warn("respond", zap.Error(err))
	}
}

func (s *Service) respond(req micro.Request, v any) {
	// segmentio/encoding/json writes the same bytes as encoding/json for every reply
	// type (TestReplyJSON), about 4× faster for a 1,000-item journal reply.
	body, err := fastjson.Marshal(v)
	s.send(req, body, err)
}

// send sends body, a reply respond encoded (err: the encoding's error).
func (s *Service) send(req micro.Request, body []byte, err error) {
	if err == nil {
		err = req.Respond(body)
	}
	if err != nil {
		// Typically a reply over the max payload: say so rather than
		// leaving the client to time out.
		s.log.Warn("respond", zap.Error(err))
		s.respondError(req, "500", "", "the reply could not be sent: "+err.Error())
	}
}

func (s *Service) refusalOrError(req micro.Request, err error) {
	var ref *events.Refusal
	if errors.As(err, &ref) {
		s.respondError(req, "400", ref.Code, ref.Reason)
		return
	}
	s.respondError(req, "500", "", err.Error())
}

// header returns the single value of header name, matched without regard
// to case; two values are an error (which one would be meant?).
func header(h micro.Headers, name string) (string, bool, error) {
	var vals []string
	for k, vs := range h {
		if strings.EqualFold(k, name) {
			vals = append(vals, vs...)
		}
	}
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
		return vals[0], true, nil
	default:
		return "", true, fmt.Errorf("%d %s headers: send exactly one", len(vals), name)
	}
}

func (s *Service) handleJournal(req micro.Request, _ *slotHold, t *orderTicket) {
	roomID, ok, err := header(req.Headers(), room.HeaderRoom)
	if err != nil || !ok {
		reason := "no " + room.HeaderRoom + " header: a journal request names its room"
		if err != nil {
			reason = err.Error()
		}
		s.respondError(req, "400", events.BadRequest, reason)
		return
	}
	capsuleRaw, _, err := header(req.Headers(), room.HeaderCapsule)
	if err != nil {
		s.respondError(req, "400", events.BadRequest, err.Error())
		return
	}
	var capsule *events.CapsuleMeta
	if raw := capsuleRaw; raw != "" {
		m, err := events.ParseCapsule([]byte(raw))
		if err != nil {
			s.respondError(req, "400", events.InvalidCapsule, err.Error())
			return
		}
		capsule = &m
	}
	after := int64(-1)
	if v, ok, err := header(req.Headers(), room.HeaderPipelined); err != nil || ok {
		if err == nil {
			after, err = strconv.ParseInt(v, 10, 64)
		}
		if err != nil || after < 0 || after == math.MaxInt64 { // after+1 is this request's first seq
			s.respondError(req, "400", events.BadRequest, room.HeaderPipelined+" must be the seq of the last line of the request ahead (a non-negative integer below 2^63-1)")
			return
		}
	}
	brief := false
	if v, ok, err := header(req.Headers(), room.HeaderReply); err == nil && ok {
		brief = v == room.ReplyBrief
	}
	// The subject was parsed before the request was taken (replyAllowed).
	owner, _, _ := room.ParseServiceSubject(s.prefix, req.Subject())
	reply, err := s.gates.appendJournal(s.ctx, roomID, owner, req.Data(), capsule, t, after)
	if err != nil {
		s.refusalOrError(req, err)
		return
	}
	s.log.Debug("journal", zap.String("room", roomID), zap.String("run_id", reply.Chain.RunID), zap.String("capsule_id", reply.Chain.CapsuleID),
		zap.Int("stored", reply.Stored), zap.Int("duplicates", reply.Dupes), zap.Int("refused", reply.Refused), zap.Int("failed", reply.Failures))
	for _, it := range reply.Items {
		if it.Outcome == room.OutcomeRefused {
			s.log.Info("refused", zap.String("kind", string(room.KindJournal)), zap.String("room", roomID), zap.String("identity", room.IdentityName(owner)),
				zap.String("code", string(it.Code)), zap.Int("line", it.Index+1), zap.String("reason", it.Reason))
		}
	}
	if brief {
		reply.Items = briefItems(reply.Items)
	}
	s.respond(req, reply)
}

// requester names the identity whose subject req came on, for logs (its
// subject was parsed before the request was taken: replyAllowed).
func (s *Service) requester(req micro.Request) string {
	token, _, _ := room.ParseServiceSubject(s.prefix, req.Subject())
	return room.IdentityName(token)
}

// briefItems cuts stored and duplicate items to their index and outcome
// (HeaderReply: ReplyBrief); the others stay whole.
func briefItems(items []room.ItemResult) []room.ItemResult {
	for i, it := range items {
		if it.Outcome == room.OutcomeStored || it.Outcome == room.OutcomeDuplicate {
			items[i] = room.ItemResult{Index: it.Index, Outcome: it.Outcome}
		}
	}
	return items
}

func (s *Service) handleExecution(req micro.Request, hold *slotHold, _ *orderTicket) {
	reply := s.gates.appendRecord(s.ctx, req.Data(), hold)
	if reply.Item.Outcome == room.OutcomeRefused {
		s.log.Info("refused", zap.String("kind", string(room.KindExecution)), zap.String("room", reply.RoomID), zap.String("identity", s.requester(req)),
			zap.String("code", string(reply.Item.Code)), zap.String("reason", reply.Item.Reason))
	}
	s.respond(req, reply)
}

func (s *Service) handleRecords(req micro.Request, hold *slotHold, _ *orderTicket) {
	body := req.Data()
	body = bytes.TrimSuffix(body, []byte("\n"))
	if len(body) == 0 {
		s.respondError(req, "400", events.BadRequest, "no records: the body is one execution record per line")
		return
	}
	n := bytes.Count(body, []byte("\n")) + 1
	if n > room.MaxBatchRecords {
		s.respondError(req, "400", events.BadRequest, fmt.Sprintf("%d records: at most %d per request", n, room.MaxBatchRecords))
		return
	}
	// Decide nothing that could not be answered: even reduced to their
	// outcomes, the items must fit in one reply.
	if most := (s.maxPayload - room.RecordsReplyOverhead) / minRecordItemBytes; n > most {
		s.respondError(req, "400", events.BadRequest, fmt.Sprintf("%d records: this server's max payload (%d bytes) answers at most %d per request", n, s.maxPayload, most))
		return
	}
	replies := s.gates.appendRecords(s.ctx, bytes.Split(body, []byte("\n")), hold)
	reply := room.RecordsReply{Records: replies}
	counts := outcomeCounts{&reply.Stored, &reply.Dupes, &reply.Refused, &reply.Skipped, &reply.Failures, nil}
	for _, r := range replies {
		counts.add(r.Item.Outcome)
		if r.Item.Outcome == room.OutcomeRefused {
			s.log.Info("refused", zap.String("kind", string(room.KindExecution)), zap.String("room", r.RoomID), zap.String("identity", s.requester(req)),
				zap.String("code", string(r.Item.Code)), zap.Int("record", r.Item.Index), zap.String("reason", r.Item.Reason))
		}
	}
	body, err := encodeRecordsReply(&reply, s.maxPayload)
	s.send(req, body, err)
}

// A records reply's size bounds, in bytes: the counts and brackets around
// the items, and one item reduced to its outcome (RecordsTrimmedItems) at
// its longest ({"item":{"index":999,"outcome":"duplicate","stream_seq":
// <20 digits>,"code":"idempotency_conflict"}},).
const minRecordItemBytes = 128

// trimmedTextBytes is how long a refused item's reason and pointer stay
// under RecordsTrimmedTexts.
const trimmedTextBytes = 160

// encodeRecordsReply encodes r in at most max bytes if it can: whole,
// else in the first of the RecordsTrimmed forms that fits (r.Trimmed
// says which). The stored and duplicate outcomes, with their stream
// sequences, are in every form: they are what a client must not lose.
func encodeRecordsReply(r *room.RecordsReply, max int) ([]byte, error) {
	for _, trim := range []string{"", room.RecordsTrimmedProblems, room.RecordsTrimmedTexts, room.RecordsTrimmedItems} {
		for i := range r.Records {
			it := &r.Records[i].Item
			switch trim {
			case room.RecordsTrimmedProblems:
				it.Problems = nil
			case room.RecordsTrimmedTexts:
				it.Reason = clipBytes(it.Reason, trimmedTextBytes)
				if it.At != nil {
					at := *it.At
					at.Pointer = clipBytes(at.Pointer, trimmedTextBytes)
					it.At = &at
				}
			case room.RecordsTrimmedItems:
				r.Records[i] = room.RecordReply{Item: room.ItemResult{Index: it.Index, Outcome: it.Outcome, StreamSeq: it.StreamSeq, Code: it.Code}}
			}
		}
		r.Trimmed = trim
		body, err := fastjson.Marshal(r)
		if err != nil || len(body) <= max || trim == room.RecordsTrimmedItems {
			return body, err
		}
	}
	panic("unreachable")
}

// clipBytes cuts s to at most n bytes on a rune boundary, marking the cut
// with "…".
func clipBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// chainID is the envelope's run_id and capsule_id pattern (seed 000).
var chainID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

func (s *Service) handleHead(req micro.Request, _ *slotHold, _ *orderTicket) {
	const usage = "body must be {\"run_id\":…,\"capsule_id\":…}, both ids of the envelope's form and nothing else"
	obj, _, err := events.DecodeObject(req.Data()) // strict: duplicate keys are an error
	if err != nil || len(obj) != 2 {
		s.respondError(req, "400", events.BadRequest, usage)
		return
	}
	run, _ := obj["run_id"].(string)
	capsule, _ := obj["capsule_id"].(string)
	if !chainID.MatchString(run) || !chainID.MatchString(capsule) {
		s.respondError(req, "400", events.BadRequest, usage)
		return
	}
	hr := room.HeadRequest{RunID: run, CapsuleID: capsule}
	head, err := s.gates.Head(s.ctx, events.ChainKey{RunID: hr.RunID, CapsuleID: hr.CapsuleID})
	if err != nil {
		s.refusalOrError(req, err)
		return
	}
	s.respond(req, head)
}

// serviceVersion is v as the micro service reports it: SemVer 2.0.0
// without Go's leading "v" (micro refuses "v0.1.0", which `git describe`
// and so `make build` stamps), or "0.0.0-dev" for a version that is not
// a full SemVer (a commit hash, "(devel)", "v1.2").
func serviceVersion(v string) string {
	sv := "v" + strings.TrimPrefix(v, "v")
	core, _, _ := strings.Cut(sv, "+")
	if semver.IsValid(sv) && semver.Canonical(sv) == core {
		return sv[1:]
	}
	return "0.0.0-dev"
}
