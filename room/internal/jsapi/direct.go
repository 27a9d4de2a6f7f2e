// Package jsapi holds roompub's reads of the JetStream API that the
// nats.go jetstream package does not make the way a verifier must: batch
// and single direct gets (ADR-31) and the stream leader's message get,
// which take a message's stream sequence, subject and time from the
// server, never from headers the message was stored with; and which
// errors are worth retrying (IsRetryable).
// It imports no roompub package and never logs (docs/design.md, "Package
// map and import rules").
package jsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BatchRequest is a batch direct get request (ADR-31, "Batched Direct
// Get"): Batch messages from Seq on NextBySubj, or with MultiLast the last
// message of each subject up to UpToSeq; MaxBytes bounds the reply (the
// server sends at least one message whatever its size).
type BatchRequest struct {
	// NextBySubj is the subject filter; WholeStream for none.
	Seq        uint64   `json:"seq,omitempty"`
	NextBySubj string   `json:"next_by_subj,omitempty"`
	MultiLast  []string `json:"multi_last,omitempty"`
	UpToSeq    uint64   `json:"up_to_seq,omitempty"`
	Batch      int      `json:"batch"`
	MaxBytes   int      `json:"max_bytes,omitempty"`
}

// WholeStream is a batch direct get's NextBySubj that reads every message
// of the stream, by sequence. nats-server counts the messages pending
// under the request's filter for every batch request (Nats-Num-Pending,
// ADR-31) before it answers: under a wildcard filter ("rooms.>") it walks
// its index of the stream's subjects, a whole pass over millions of them
// on a stream with record markers (0.7 s of the server's CPU a request at
// a million records), where without a filter it subtracts sequences. So a
// read meant for the whole stream asks for it this way and drops, by
// itself, any message outside the subjects it wants. That holds while
// nothing is deleted from the stream: with any message deleted (store
// loss, on a room stream), a request starting in the first half of its
// blocks has the server walk the index again (nats-server v2.15.2,
// fileStore.NumPending).
const WholeStream = ""

// Msg is one message of a batch direct get: where the server stored it
// (Seq, Subject, Time), how many messages matching the request follow it
// (Pending), its data, and Header, the headers it was stored with (the
// ones the server adds to the reply are removed).
type Msg struct {
	Seq     uint64
	Subject string
	Time    time.Time
	Pending uint64
	Header  nats.Header
	Data    []byte
}

// The headers the server adds to each message of a direct get reply
// (nats-server's direct get reply). A stored message may hold the same
// names, set by whoever published it; the server's values come last.
var serverHeaders = [...]string{
	jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader,
	jetstream.TimeStampHeaer, "Nats-Num-Pending", "Nats-Last-Sequence", "Nats-UpTo-Sequence",
}

// ErrStatus is wrapped by DirectBatch for a reply the server ended with a
// status other than end of batch (204) or not found (404); nats.ErrNoResponders
// is returned as itself (status 503: no replica answers direct gets).
var ErrStatus = errors.New("direct get refused")

// ErrUnreadable is wrapped by DirectBatch, DirectGet and the Getter's
// reads for a reply message that did not read as the server formed it
// (a stored header with a blank line inside, say) and that the stream
// leader could not tell apart either: two such messages side by side in
// a multi_last reply, or a leader that returns another message.
var ErrUnreadable = errors.New("a stored message's headers hide where it is stored")

// resolveTimeout bounds each read of the stream leader that takes the
// place of a suspect direct get reply.
const resolveTimeout = 10 * time.Second

// DirectBatch sends req to $JS.API.DIRECT.GET.<stream> and returns the up
// to req.Batch messages of its reply, in stream order, once the server
// has said the batch is over; none when nothing matches. It waits at most
// timeout for each reply message. Errors: ctx's, nats.ErrTimeout (wrapped,
// with how many messages had come), nats.ErrNoResponders, ErrStatus
// (wrapped, with the status and its description), or a reply message the
// server did not form.
func DirectBatch(ctx context.Context, nc *nats.Conn, stream string, req BatchRequest, timeout time.Duration) ([]Msg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	// A plain inbox (not the request mux's, which would get every reply
	// too), with room for the whole batch and its end.
	inbox := nc.NewInbox()
	ch := make(chan *nats.Msg, req.Batch+2)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, body); err != nil {
		return nil, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	var b batchReply
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-t.C:
			return nil, fmt.Errorf("direct get %s: %w after %d messages", body, nats.ErrTimeout, len(b.replies))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		t.Reset(timeout)
		done, err := b.take(m, body)
		if err != nil {
			return nil, err
		}
		if done {
			return b.messages(ctx, nc, stream, req, timeout)
		}
	}
}

// reply is one message of a direct get reply as read: a stored message,
// or the server's end of the reply (end).
type reply struct {
	Msg
	end bool
	// last is the reply's Nats-Last-Sequence: in a batch reply, the seq
	// of the message the server sent before it (0 for the first); on
	// the batch's end, the seq of its last message.
	last uint64
	// suspect: the reply does not read as the server formed it (see
	// readReply); its Seq, Subject and Time are not to be taken from it.
	suspect bool
	// upTo is a multi_last batch end's Nats-UpTo-Sequence: the stream's
	// last seq the reply's "last on its subject" was judged at.
	upTo uint64
}

// readReply reads one message of a direct get reply to request body: a
// stored message, or the end (204 end of batch, 404 not found), or an
// error (503: nats.ErrNoResponders; another status: ErrStatus). The
// server's end and errors carry no Nats-Stream and no payload; every
// stored message it returns carries one, with the server's headers
// appended after the stored ones. A stored header that nats.go stops
// reading early (a blank line inside it, which the server stores as
// sent) hides those: such a reply is suspect (its payload is still the
// message's), as is one whose headers as read do not add up to the
// bytes sent or whose sequence does not parse. A suspect reply is never
// an error: one stored message must not stop every reader of a stream.
func readReply(m *nats.Msg, body []byte) (reply, error) {
	if !headerWhole(m) {
		return reply{Msg: Msg{Data: m.Data}, suspect: true}, nil
	}
	last := func(key string) string { return lastValue(m.Header, key) }
	lastSeq, _ := strconv.ParseUint(last("Nats-Last-Sequence"), 10, 64)
	if len(m.Header.Values(jetstream.StreamHeader)) == 0 {
		if !serverStatus(m) {
			return reply{Msg: Msg{Data: m.Data}, suspect: true}, nil
		}
		switch status := m.Header.Get("Status"); status {
		case "204", "404":
			upTo, _ := strconv.ParseUint(last("Nats-UpTo-Sequence"), 10, 64)
			pending, _ := strconv.ParseUint(last("Nats-Num-Pending"), 10, 64)
			return reply{Msg: Msg{Pending: pending}, end: true, last: lastSeq, upTo: upTo}, nil
		case "503":
			return reply{}, nats.ErrNoResponders
		default:
			return reply{}, fmt.Errorf("direct get %s: %w: status %s %s", body, ErrStatus, status, m.Header.Get("Description"))
		}
	}
	msg, err := fromReply(m)
	if err != nil {
		return reply{Msg: Msg{Data: m.Data}, suspect: true}, nil
	}
	return reply{Msg: msg, last: lastSeq}, nil
}

// maxReplyValues bounds the header values of a reply headerWhole takes
// for whole. A line nats.go reads is at most 2 bytes longer in canonical
// form than sent (a bare LF, no space after the colon), while the lines
// the server appends, which a stored blank line would have to hide
// (Nats-Stream, Nats-Subject, Nats-Sequence, Nats-Time-Stamp, each at
// least 17 bytes, the time stamp 39), come to at least 91 bytes: a stored
// header that hides them cannot add up with 32 values or fewer (64
// bytes). A reply with more is read from the stream leader; roompub's own
// messages carry a few.
const maxReplyValues = 32

// statusHeaders are the headers of the server's own ends and errors of a
// direct get reply (nats-server's eob and eobm, 404, 408, 413..., and
// no responders, which names the request's subject).
var statusHeaders = map[string]bool{"Status": true, "Description": true, "Nats-Subject": true,
	"Nats-Num-Pending": true, "Nats-Last-Sequence": true, "Nats-UpTo-Sequence": true}

// serverStatus reports whether m, a reply without Nats-Stream, is a
// status the server sends: a status line, only status headers, each
// once, no payload. A stored message never is, though its block may keep
// a status line (the server strips one only up to a CR, and a block of
// bare LFs has none): the server appends Nats-Sequence and
// Nats-Time-Stamp to what it returns, which only a blank line could hide,
// and that does not add up (headerWhole).
func serverStatus(m *nats.Msg) bool {
	if len(m.Data) > 0 || m.Header.Get("Status") == "" {
		return false
	}
	for k, vs := range m.Header {
		if !statusHeaders[k] || len(vs) != 1 {
			return false
		}
	}
	return true
}

// headerWhole reports whether m's headers, as nats.go read them, account
// for every header byte the server sent: there are at most maxReplyValues
// of them and their canonical form ("NATS/1.0" and its status, then
// "Key: value" lines, each ending in CRLF, and an empty line) is as long
// as what came. It is not when nats.go stopped at a blank line inside the
// block, or read lines in another form; a message no subscription
// received (made in this process) always is.
func headerWhole(m *nats.Msg) bool {
	if m.Sub == nil {
		return true
	}
	wire := m.Size() - len(m.Subject) - len(m.Reply) - len(m.Data)
	if len(m.Header) == 0 {
		return wire == 0
	}
	values, n := 0, len("NATS/1.0\r\n\r\n")
	for k, vs := range m.Header {
		values += len(vs)
		if k == "Status" || k == "Description" { // on the first line, after a space
			if len(vs) != 1 {
				return false
			}
			n += 1 + len(vs[0])
			continue
		}
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return values <= maxReplyValues && n == wire
}

// fromReply reads one message of a direct get reply: the server's values
// are the last of each header it adds.
func fromReply(m *nats.Msg) (Msg, error) {
	last := func(key string) string { return lastValue(m.Header, key) }
	seq, err := strconv.ParseUint(last(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return Msg{}, fmt.Errorf("sequence: %w", err)
	}
	out := Msg{Seq: seq, Subject: last(jetstream.SubjectHeader), Data: m.Data}
	if ts := last(jetstream.TimeStampHeaer); ts != "" {
		if out.Time, err = time.Parse(time.RFC3339Nano, ts); err != nil {
			return Msg{}, fmt.Errorf("time stamp: %w", err)
		}
	}
	out.Pending, _ = strconv.ParseUint(last("Nats-Num-Pending"), 10, 64)
	out.Header = StoredHeader(m.Header)
	return out, nil
}

// lastValue is the last value of h's key, "" when it has none: where a
// reply carries a header both stored and added by the server, the
// server's comes last.
func lastValue(h nats.Header, key string) string {
	vs := h.Values(key)
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// StoredHeader returns h, a direct get reply message's headers, without
// the ones the server added: the last value of each of its names. The
// result is a new header (nil when none is left); h is not changed.
func StoredHeader(h nats.Header) nats.Header {
	var out nats.Header
	for k, vs := range h {
		for _, s := range serverHeaders {
			if k == s && len(vs) > 0 {
				vs = vs[:len(vs)-1]
				break
			}
		}
		if len(vs) == 0 {
			continue
		}
		if out == nil {
			out = nats.Header{}
		}
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// DirectGet sends one direct get request (ADR-31: {"last_by_subj": ...},
// {"seq": ..., "next_by_subj": ...}; wildcards allowed) to
// $JS.API.DIRECT.GET.<stream> and returns the message, nil when there is
// none (404). Errors: ctx's (its deadline, or else resolveTimeout, bounds
// the request), nats.ErrNoResponders (no replica answers direct gets),
// ErrStatus (wrapped), or a reply the server did not form. The reply is
// taken on a channel subscription of its own, as a batch's is: nats.go's
// request (and a synchronous subscription) would take a stored message
// whose header reads as a 503 status for no responders before readReply
// could tell it from the server's.
func DirectGet(ctx context.Context, nc *nats.Conn, stream string, req any) (*Msg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, resolveTimeout)
		defer cancel()
	}
	// A channel subscription: a synchronous one's NextMsg also takes a
	// 503 without payload for no responders.
	ch := make(chan *nats.Msg, 1)
	sub, err := nc.ChanSubscribe(nc.NewInbox(), ch)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+stream, sub.Subject, body); err != nil {
		return nil, err
	}
	var m *nats.Msg
	select {
	case m = <-ch:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	r, err := readReply(m, body)
	switch {
	case err != nil || r.end:
		return nil, err
	case r.suspect:
		return leaderAgain(ctx, nc, stream, body, r.Data)
	}
	return &r.Msg, nil
}

// leaderAgain is a single direct get whose reply was suspect, sent again
// to the stream leader ($JS.API.STREAM.MSG.GET takes the same request):
// the message it returns, which must hold data, the suspect reply's
// payload. Errors: LeaderGet's, or ErrUnreadable.
func leaderAgain(ctx context.Context, nc *nats.Conn, stream string, body, data []byte) (*Msg, error) {
	m, err := LeaderGet(ctx, nc, stream, resolveTimeout, json.RawMessage(body))
	switch {
	case err != nil:
		return nil, err
	case m == nil || !bytes.Equal(m.Data, data):
		return nil, fmt.Errorf("direct get %s: %w: the stream leader returns another message", body, ErrUnreadable)
	}
	return m, nil
}

// Raw returns m as nats.go's jetstream package represents a stored message.
func (m Msg) Raw() *jetstream.RawStreamMsg {
	return &jetstream.RawStreamMsg{Subject: m.Subject, Sequence: m.Seq, Header: m.Header, Data: m.Data, Time: m.Time}
}

// LeaderGet returns the message req selects ({"seq": ...,
// "next_by_subj": ...}, {"last_by_subj": ...}, {"start_time": ...}) as the
// stream leader has it ($JS.API.STREAM.MSG.GET), or nil when there is none.
// A direct get may be answered by a replica whose copy lags behind the
// stream; what a refusal or a decision rests on is read here instead. It
// waits at most timeout. Errors: ctx's, the request's (nats.ErrTimeout,
// nats.ErrNoResponders), the API's error (a *jetstream.APIError, wrapped),
// or a reply the server did not form.
func LeaderGet(ctx context.Context, nc *nats.Conn, stream string, timeout time.Duration, req any) (*Msg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, body)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Hdrs    []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("stream get %s: %w", body, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, nil
	case resp.Error != nil:
		return nil, fmt.Errorf("stream get %s: %w", body, resp.Error)
	case resp.Message == nil:
		return nil, fmt.Errorf("stream get %s: empty reply", body)
	}
	// The API's reply names the sequence and subject apart from the
	// stored headers, which it returns as they were stored.
	out := &Msg{Seq: resp.Message.Seq, Subject: resp.Message.Subject, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Hdrs) > 0 {
		// Read as nats.go reads a delivered message's: up to a blank line.
		// A block it cannot read at all is taken for none, as a delivery
		// gives it, not an error: it would stop every read of the message.
		out.Header, _ = nats.DecodeHeadersMsg(resp.Message.Hdrs)
	}
	return out, nil
}

// LeaderGetRaw is LeaderGet with the message in jetstream's form, nil
// when there is none; errors as LeaderGet's.
func LeaderGetRaw(ctx context.Context, nc *nats.Conn, stream string, timeout time.Duration, req any) (*jetstream.RawStreamMsg, error) {
	m, err := LeaderGet(ctx, nc, stream, timeout, req)
	if err != nil || m == nil {
		return nil, err
	}
	return m.Raw(), nil
}

// Sleep waits d, or less if ctx is done first; it reports whether the
// whole wait passed (false: ctx is done, stop retrying).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
