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
	Seq        uint64   `json:"seq,omitempty"`
	NextBySubj string   `json:"next_by_subj,omitempty"`
	MultiLast  []string `json:"multi_last,omitempty"`
	UpToSeq    uint64   `json:"up_to_seq,omitempty"`
	Batch      int      `json:"batch"`
	MaxBytes   int      `json:"max_bytes,omitempty"`
}

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
	var out []Msg
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-t.C:
			return nil, fmt.Errorf("direct get %s: %w after %d messages", body, nats.ErrTimeout, len(out))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		t.Reset(timeout)
		msg, end, err := readReply(m, body)
		switch {
		case err != nil:
			return nil, err
		case end:
			return out, nil
		}
		out = append(out, msg)
	}
}

// readReply reads one message of a direct get reply to request body: a
// stored message, or the end (204 end of batch, 404 not found), or an
// error (503: nats.ErrNoResponders; another status: ErrStatus). The
// server's end and errors carry no Nats-Stream; every message it returns
// carries one, last.
func readReply(m *nats.Msg, body []byte) (msg Msg, end bool, err error) {
	if len(m.Header.Values(jetstream.StreamHeader)) == 0 {
		switch status := m.Header.Get("Status"); status {
		case "204", "404":
			return Msg{}, true, nil
		case "503":
			return Msg{}, false, nats.ErrNoResponders
		default:
			return Msg{}, false, fmt.Errorf("direct get %s: %w: status %s %s", body, ErrStatus, status, m.Header.Get("Description"))
		}
	}
	msg, err = fromReply(m)
	if err != nil {
		return Msg{}, false, fmt.Errorf("direct get %s: %w", body, err)
	}
	return msg, false, nil
}

// fromReply reads one message of a direct get reply: the server's values
// are the last of each header it adds.
func fromReply(m *nats.Msg) (Msg, error) {
	last := func(key string) string {
		vs := m.Header.Values(key)
		if len(vs) == 0 {
			return ""
		}
		return vs[len(vs)-1]
	}
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
// none (404). Errors: ctx's (its deadline bounds the request),
// nats.ErrNoResponders (no replica answers direct gets), ErrStatus
// (wrapped), or a reply the server did not form.
func DirectGet(ctx context.Context, nc *nats.Conn, stream string, req any) (*Msg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	m, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream, body)
	if err != nil {
		return nil, err
	}
	msg, end, err := readReply(m, body)
	if err != nil || end {
		return nil, err
	}
	return &msg, nil
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
		if out.Header, err = nats.DecodeHeadersMsg(resp.Message.Hdrs); err != nil {
			return nil, fmt.Errorf("stream get %s: headers: %w", body, err)
		}
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
