package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	fastjson "github.com/segmentio/encoding/json"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// ErrUnavailable is wrapped by Client calls whose request got no answer
// (no service, timeout, lost connection): nothing is known to be decided;
// the same request may be sent again.
var ErrUnavailable = errors.New("ingest service unavailable")

// ErrNotPermitted is wrapped by Client calls whose request got no answer
// because the server refused this connection's user publishing it (a
// permissions violation: in secure mode, a solver or auditor calling an
// endpoint its role does not allow, docs/secure-mode.md). Sending it
// again fails the same way.
var ErrNotPermitted = errors.New("the server does not permit this user the request")

// ServiceError is a request-level error reply from the ingest service
// (Nats-Service-Error-Code and an room.ErrorReply body).
type ServiceError struct {
	Status string // the Nats-Service-Error-Code header, e.g. "400"
	room.ErrorReply
}

// Error names the code, the reason and the status.
func (e *ServiceError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("ingest service: %s: %s (status %s)", e.Code, e.Reason, e.Status)
	}
	return fmt.Sprintf("ingest service: %s (status %s)", e.Reason, e.Status)
}

// IsOverQuota reports whether err is (or wraps) the ingest service's
// events.OverQuota answer (status 429): the request's identity already
// had its share of the service in use; nothing in it was looked at, and
// it may be sent again (docs/secure-mode.md, "Fair ingest").
func IsOverQuota(err error) bool {
	var se *ServiceError
	return errors.As(err, &se) && se.Code == events.OverQuota
}

// Retryable reports whether sending again may succeed where err failed:
// the request got no answer (ErrUnavailable: no service, a timeout, a
// lost connection), the service was over quota or stopping (a 429, 5xx
// *ServiceError), or ctx ended it (ErrStopped, a deadline, an
// interrupt). Anything
// else (no capsule directory, an unreadable file, a malformed request)
// fails again the same way.
func Retryable(err error) bool {
	var se *ServiceError
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrStopped), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return true
	case errors.As(err, &se):
		return se.Code == events.OverQuota || strings.HasPrefix(se.Status, "5")
	}
	return false
}

// Backing off after an over_quota answer (retryOverQuota): the first wait
// is about quotaBackoffMin, doubled each time up to quotaBackoffMax, each
// drawn at random between half of it and all of it (so clients that were
// refused together do not come back together); at most quotaRetries
// resends, then the *ServiceError is returned.
const (
	quotaBackoffMin = 20 * time.Millisecond
	quotaBackoffMax = time.Second
	quotaRetries    = 60
)

// retryOverQuota calls send until it returns anything but an over_quota
// answer (IsOverQuota), backing off between calls; it gives up with the
// last answer after quotaRetries resends, or with ctx's error.
func retryOverQuota(ctx context.Context, send func() error) error {
	d := quotaBackoffMin
	for attempt := 0; ; attempt++ {
		err := send()
		if !IsOverQuota(err) || attempt == quotaRetries {
			return err
		}
		wait := d/2 + rand.N(d/2+1)
		if !jsapi.Sleep(ctx, wait) {
			return ctx.Err()
		}
		d = min(2*d, quotaBackoffMax)
	}
}

// Options configures a Client; the zero value is the default.
type Options struct {
	// Prefix is the ingest service's subject prefix; default
	// room.DefaultServicePrefix.
	Prefix string
	// Timeout bounds one request when ctx has no deadline; default 30s (a
	// batch of 1,000 fsynced appends takes a while).
	Timeout time.Duration
	// Identity is the room.IdentityToken of the connection's NATS user, or
	// Anonymous: requests go to room.ServiceSubject(Prefix, Identity, …), and
	// the connection must use room.InboxPrefix(Identity) for its replies
	// (nats.CustomInboxPrefix), the only reply subjects the service
	// answers on (docs/secure-mode.md, "Identities and replies").
	Identity string
}

// Client speaks the ingest service's wire format (docs/wire.md). It is safe for concurrent use.
type Client struct {
	nc       *nats.Conn
	prefix   string
	identity string
	timeout  time.Duration
}

// New returns a client on nc.
func New(nc *nats.Conn, o Options) *Client {
	c := &Client{nc: nc, prefix: o.Prefix, timeout: o.Timeout, identity: o.Identity}
	if c.prefix == "" {
		c.prefix = room.DefaultServicePrefix
	}
	if c.timeout <= 0 {
		c.timeout = 30 * time.Second
	}
	return c
}

// MaxPayload is the largest request the server accepts, in bytes.
func (c *Client) MaxPayload() int64 { return c.nc.MaxPayload() }

// errConnectionLost is why a request was given up when its connection
// dropped before the reply came.
var errConnectionLost = errors.New("the connection was lost before the reply came: the outcome is unknown")

func (c *Client) request(ctx context.Context, endpoint string, hdr nats.Header, body []byte, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	// A reply cannot come back over a connection that dropped (the server
	// or serve died mid-request): the request is given up at once instead
	// of after the whole timeout. The outcome is unknown, so the caller asks
	// where the chain stands and resends; the gate decides a resend by
	// content (a duplicate, never a second copy).
	lost := c.nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	defer c.nc.RemoveStatusListener(lost)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-lost:
			cancel(errConnectionLost)
		case <-done:
		}
	}()
	msg := &nats.Msg{Subject: room.ServiceSubject(c.prefix, c.identity, endpoint), Header: hdr, Data: body}
	resp, err := c.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errConnectionLost) {
			err = cause
		}
		// The server says so asynchronously (-ERR), which nats.go keeps
		// as the connection's last error: no answer then is no outage.
		if le := c.nc.LastError(); errors.Is(le, nats.ErrPermissionViolation) && strings.Contains(le.Error(), `"`+msg.Subject+`"`) {
			return fmt.Errorf("%w: %s: %v", ErrNotPermitted, msg.Subject, le)
		}
		return fmt.Errorf("%w: %s: %v", ErrUnavailable, msg.Subject, err)
	}
	if status := resp.Header.Get("Nats-Service-Error-Code"); status != "" {
		se := &ServiceError{Status: status}
		if json.Unmarshal(resp.Data, &se.ErrorReply) != nil || se.Reason == "" {
			se.Reason = resp.Header.Get("Nats-Service-Error")
		}
		return se
	}
	// segmentio/encoding/json decodes a 1,000-item journal reply about 7× faster
	// than encoding/json, into the same values (TestReplyJSON).
	if err := fastjson.Unmarshal(resp.Data, out); err != nil {
		return fmt.Errorf("%s: unreadable reply: %w", msg.Subject, err)
	}
	return nil
}

// Identity returns the identity token the client's requests name
// (Options.Identity; Anonymous by default).
func (c *Client) Identity() string { return c.identity }

// Head asks where a chain stands.
func (c *Client) Head(ctx context.Context, key events.ChainKey) (room.ChainHead, error) {
	body, _ := json.Marshal(room.HeadRequest{RunID: key.RunID, CapsuleID: key.CapsuleID})
	var h room.ChainHead
	err := c.request(ctx, "head", nil, body, &h)
	return h, err
}

// AppendJournal sends journal lines of one chain (each ending in "\n") to
// roomID. capsule, when not nil, is sent as the Roompub-Capsule header.
// Errors: *ServiceError for a request-level refusal, ErrUnavailable when
// no answer came.
func (c *Client) AppendJournal(ctx context.Context, roomID string, capsule *events.CapsuleMeta, lines []byte) (room.JournalReply, error) {
	return c.appendJournal(ctx, roomID, capsule, lines, -1, false)
}

// appendJournal is AppendJournal; after >= 0 marks the request
// HeaderPipelined: the request ahead of it, whose last line has seq after,
// is in flight; brief asks for a brief reply (room.HeaderReply).
func (c *Client) appendJournal(ctx context.Context, roomID string, capsule *events.CapsuleMeta, lines []byte, after int64, brief bool) (room.JournalReply, error) {
	hdr := nats.Header{}
	hdr.Set(room.HeaderRoom, roomID)
	if after >= 0 {
		hdr.Set(room.HeaderPipelined, strconv.FormatInt(after, 10))
	}
	if brief {
		hdr.Set(room.HeaderReply, room.ReplyBrief)
	}
	if capsule != nil {
		b, err := json.Marshal(capsule)
		if err != nil {
			return room.JournalReply{}, err
		}
		hdr.Set(room.HeaderCapsule, string(b))
	}
	// One item per line comes back: room for them up front spares the
	// decoder growing the slice (about half its allocations).
	// Items stays nil when the reply holds none (an error, say), as it
	// would without the room.
	r := room.JournalReply{Items: make([]room.ItemResult, 0, min(bytes.Count(lines, newline)+1, room.MaxBatchLines+1))}
	err := c.request(ctx, "journal", hdr, lines, &r)
	if len(r.Items) == 0 {
		r.Items = nil
	}
	return r, err
}

var newline = []byte{'\n'}

// AppendRecord sends one execution record.
func (c *Client) AppendRecord(ctx context.Context, raw []byte) (room.RecordReply, error) {
	var r room.RecordReply
	err := c.request(ctx, "execution", nil, raw, &r)
	return r, err
}

// AppendRecords sends execution records (each any JSON formatting) through
// the records endpoint, up to room.DefaultRecordsPerRequest in one request, and
// returns one reply per record, in order, with Item.Index its position in
// raws. The gate decides them in order, as AppendRecord one after another
// would, storing each as its own message (Gate.AppendRecords). A record
// that is not JSON, or too large to share a request, is sent alone with
// AppendRecord, so it gets the refusal (or the store) it gets there; one
// larger than the server's max payload cannot be sent at all and is
// answered here, refused too_large (the gate would refuse it too).
//
// The call ends at the first record the gate did not decide (outcome
// failed, or skipped: not looked at, as the records after a failed one in
// its request, or all of them when the gate stopped before deciding
// them), so that no record after it is stored before it: it returns the
// replies so far, that request's included, and an error wrapping
// ErrUnavailable. It also ends at a request-level error (*ServiceError,
// one wrapping ErrUnavailable, a reply that does not match the request);
// an over_quota answer (IsOverQuota) is not one of those while it lasts:
// the request is sent again after a bounded, jittered back-off. Either way the records from len(replies) on were not answered; send the
// failed, skipped and unanswered ones again (a record already stored is
// answered duplicate).
func (c *Client) AppendRecords(ctx context.Context, raws [][]byte) ([]room.RecordReply, error) {
	out := make([]room.RecordReply, 0, len(raws))
	maxBody := int(c.nc.MaxPayload())
	// Fewer per request on a server with a small max payload, so that
	// the reply, about a kilobyte per record at most in practice, fits.
	perRequest := max(1, min(room.DefaultRecordsPerRequest, (maxBody-room.RecordsReplyOverhead)/1024))
	var body, line bytes.Buffer
	n, first := 0, 0 // records in body, and the index of its first
	flush := func() error {
		if n == 0 {
			return nil
		}
		var r room.RecordsReply
		err := retryOverQuota(ctx, func() error {
			r = room.RecordsReply{}
			return c.request(ctx, "records", nil, body.Bytes(), &r)
		})
		if err != nil {
			return err
		}
		if len(r.Records) != n {
			return fmt.Errorf("%s.records: %d replies for %d records", c.prefix, len(r.Records), n)
		}
		for i := range r.Records {
			if got := r.Records[i].Item.Index; got != i {
				return fmt.Errorf("%s.records: reply %d names record %d: the replies answer the records in order", c.prefix, i, got)
			}
			r.Records[i].Item.Index = first + i
		}
		out = append(out, r.Records...)
		body.Reset()
		n = 0
		return notDecided(out[len(out)-len(r.Records):])
	}
	for i, raw := range raws {
		line.Reset()
		// One record per line: compacting keeps every token as it is, so
		// the gate decides the same record.
		err := json.Compact(&line, raw)
		if err != nil || line.Len()+1 > maxBody {
			if err := flush(); err != nil {
				return out, err
			}
			alone := raw // not JSON: the gate says why
			if err == nil {
				alone = line.Bytes()
			}
			var r room.RecordReply
			if len(alone) > maxBody {
				r.Item = room.RefusedItem(i, []events.Problem{{Code: events.TooLarge,
					Reason: fmt.Sprintf("the record is %d bytes: over the server's max payload of %d bytes, so it was not sent", len(alone), maxBody)}})
			} else if err = retryOverQuota(ctx, func() (err error) { r, err = c.AppendRecord(ctx, alone); return err }); err != nil {
				return out, err
			}
			r.Item.Index = i
			out = append(out, r)
			if err := notDecided(out[len(out)-1:]); err != nil {
				return out, err
			}
			continue
		}
		if n == perRequest || body.Len()+line.Len()+1 > maxBody {
			if err := flush(); err != nil {
				return out, err
			}
		}
		if n == 0 {
			first = i
		}
		body.Write(line.Bytes())
		body.WriteByte('\n')
		n++
	}
	return out, flush()
}

// notDecided is the error that ends AppendRecords at the first of replies
// the gate did not decide (failed, or skipped: a gate stopping between
// records answers the rest skipped, with no failed one before them), or
// nil.
func notDecided(replies []room.RecordReply) error {
	for _, r := range replies {
		if r.Item.Outcome == room.OutcomeFailed || r.Item.Outcome == room.OutcomeSkipped {
			return fmt.Errorf("%w: record %d was not decided: %s", ErrUnavailable, r.Item.Index, r.Item.Reason)
		}
	}
	return nil
}
