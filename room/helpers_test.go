package room_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/validate"
)

// env is one embedded server with the room stream, a gate and the ingest
// service, on a fresh store.
type env struct {
	t      *testing.T
	dir    string
	opts   embedded.Options // StoreDir is set by start, and Listen unless given
	srv    *embedded.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	gate   *room.Gate
	svc    *room.Service
	key    *events.HostKey
	v      *validate.Validator
	// aheadWait, when set, is every gate's ahead wait (setAheadWait).
	aheadWait time.Duration
}

// setAheadWait sets how long a pipelined request waits for the chain, in
// e's gate and in every gate e makes after.
func (e *env) setAheadWait(d time.Duration) {
	e.aheadWait = d
	e.gate.SetAheadWait(d)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, embedded.Options{})
}

// newEnvWith is newEnv with server options (MaxPayload, SyncInterval).
func newEnvWith(t *testing.T, opts embedded.Options) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), opts: opts}
	var err error
	e.key, err = events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e.v, err = validate.New(validate.WithTrustedHosts(e.key.NodeID(), referenceHost))
	if err != nil {
		t.Fatal(err)
	}
	e.start()
	t.Cleanup(e.stop)
	return e
}

const referenceHost = "node:did:key:z6MkqB3fVxzXFbVUK2q1GPrLQzaxgwDGGVuxkDzaf5tsLnpo"

func (e *env) start() {
	t := e.t
	t.Helper()
	var err error
	o := e.opts
	o.StoreDir = e.dir
	if o.Listen == "" {
		o.Listen = "127.0.0.1:-1"
	}
	e.srv, err = embedded.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	e.nc, err = nats.Connect(e.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	e.js, _ = jetstream.New(e.nc)
	ctx := context.Background()
	var subj room.Subjects
	e.stream, err = room.EnsureStream(ctx, e.js, room.StreamConfig("", subj, 1), subj)
	if err != nil {
		t.Fatal(err)
	}
	e.gate = e.newGate(e.nc)
	e.svc, err = room.StartService(e.nc, e.gate, room.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) newGate(nc *nats.Conn) *room.Gate {
	g, err := room.NewGate(context.Background(), nc, room.GateOptions{Validator: e.v})
	if err != nil {
		e.t.Fatal(err)
	}
	if e.aheadWait > 0 {
		g.SetAheadWait(e.aheadWait)
	}
	return g
}

// secondService starts another gate and ingest service on a connection
// of its own, in the queue group of e's: a request reaches either. It
// stops with the test.
func (e *env) secondService() *room.Service {
	nc := e.connect()
	svc, err := room.StartService(nc, e.newGate(nc), room.ServiceOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = svc.Stop() })
	return svc
}

func (e *env) stop() {
	if e.svc != nil {
		_ = e.svc.Stop()
	}
	if e.nc != nil {
		e.nc.Close()
	}
	if e.srv != nil {
		e.srv.Shutdown()
	}
	e.svc, e.nc, e.srv = nil, nil, nil
}

// journal builds n valid entries of one chain as journal bytes.
func journal(t testing.TB, runID, capsuleID string, n int) ([]*events.Entry, []byte) {
	t.Helper()
	var out []*events.Entry
	var buf bytes.Buffer
	parent := events.ZeroHash
	for i := 0; i < n; i++ {
		e, err := events.NewEntry(map[string]any{
			"schema": events.EntrySchema, "run_id": runID, "capsule_id": capsuleID, "seq": json.Number(fmt.Sprint(i)),
			"ts": "2026-09-02T00:00:00.000Z", "lineage": "attempt", "kind": "tool.call", "effect_class": "SE0",
			"harness_version": "test/1", "task_family": "slugify", "parent_hash": parent,
			"payload": map[string]any{"tool": "bash", "duration_ms": json.Number("12.5"), "status": "ok"},
		})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
		buf.Write(e.Canonical())
		buf.WriteByte('\n')
		parent = e.EntryHash()
	}
	return out, buf.Bytes()
}

func lines(es []*events.Entry) []byte {
	var buf bytes.Buffer
	for _, e := range es {
		buf.Write(e.Canonical())
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// reference returns a reference record file's members.
func referenceRecord(t testing.TB, name string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile("../testdata/reference/execution-records/" + name)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := events.ParseRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Object()
}

func referenceBytes(t testing.TB, name string) []byte {
	raw, err := os.ReadFile("../testdata/reference/execution-records/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// sign signs members (a copy, with changes applied) with the env's key.
func (e *env) sign(members map[string]any, changes map[string]any) *events.Record {
	e.t.Helper()
	m := map[string]any{}
	for k, v := range members {
		m[k] = v
	}
	for k, v := range changes {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	rec, err := events.SignRecord(m, e.key)
	if err != nil {
		e.t.Fatal(err)
	}
	return rec
}

// request sends one ingest request and decodes the reply into out; it
// returns the service error code header, if any.
func (e *env) request(subject string, hdr nats.Header, body []byte, out any) string {
	e.t.Helper()
	return request(e.t, e.nc, subject, hdr, body, out)
}

func request(t testing.TB, nc *nats.Conn, subject string, hdr nats.Header, body []byte, out any) string {
	t.Helper()
	msg := &nats.Msg{Subject: subject, Header: hdr, Data: body}
	resp, err := nc.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	if out != nil {
		if err := json.Unmarshal(resp.Data, out); err != nil {
			t.Fatalf("reply %q: %v", resp.Data, err)
		}
	}
	return resp.Header.Get("Nats-Service-Error-Code")
}

func (e *env) shipJournal(roomID string, body []byte) room.JournalReply {
	e.t.Helper()
	return shipJournal(e.t, e.nc, roomID, body)
}

func shipJournal(t testing.TB, nc *nats.Conn, roomID string, body []byte) room.JournalReply {
	t.Helper()
	return shipJournalAs(t, nc, room.Anonymous, roomID, body)
}

// shipJournalAs is shipJournal as identity token (its subject; nc must
// use the identity's inbox prefix).
func shipJournalAs(t testing.TB, nc *nats.Conn, token, roomID string, body []byte) room.JournalReply {
	t.Helper()
	var r room.JournalReply
	if code := request(t, nc, room.ServiceSubject("", token, room.EndpointJournal), nats.Header{room.HeaderRoom: []string{roomID}}, body, &r); code != "" {
		t.Fatalf("journal request failed: %s", code)
	}
	return r
}

func (e *env) shipRecord(raw []byte) room.RecordReply {
	e.t.Helper()
	return shipRecord(e.t, e.nc, raw)
}

func shipRecord(t testing.TB, nc *nats.Conn, raw []byte) room.RecordReply {
	t.Helper()
	var r room.RecordReply
	if code := request(t, nc, "roompub.v1.execution", nil, raw, &r); code != "" {
		t.Fatalf("execution request failed: %s", code)
	}
	return r
}

// stored returns every message on the stream, in order.
func (e *env) stored() []*jetstream.RawStreamMsg {
	e.t.Helper()
	ctx := context.Background()
	info, err := e.stream.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		// The leader's message get: a direct get's sequence and subject
		// headers can be forged by a stored message's own.
		m, err := room.LeaderMsg(ctx, e.nc, room.DefaultStream, seq)
		if err != nil || m == nil {
			e.t.Fatalf("stream seq %d: %v %v", seq, m, err)
		}
		out = append(out, m)
	}
	return out
}

// streamState is the stream's message count, bytes and last sequence.
type streamState struct {
	Msgs, Bytes, LastSeq uint64
}

func (e *env) state() streamState {
	e.t.Helper()
	info, err := e.stream.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return streamState{Msgs: info.State.Msgs, Bytes: info.State.Bytes, LastSeq: info.State.LastSeq}
}

// countOn counts the messages stored on subjects matching filter.
func (e *env) countOn(filter string) uint64 {
	e.t.Helper()
	return countOn(e.t, e.stream, filter)
}

func countOn(t testing.TB, st jetstream.Stream, filter string) uint64 {
	t.Helper()
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// requestError sends a request that must fail as a whole: it returns the
// service error code header and the decoded ErrorReply.
func (e *env) requestError(subject string, hdr nats.Header, body []byte) (string, room.ErrorReply) {
	e.t.Helper()
	var er room.ErrorReply
	code := e.request(subject, hdr, body, &er)
	return code, er
}

// onSubject returns the messages stored on subject, in stream order.
func (e *env) onSubject(subject string) []*jetstream.RawStreamMsg {
	e.t.Helper()
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); ; {
		m, err := e.stream.GetMsg(context.Background(), seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, m)
		seq = m.Sequence + 1
	}
}

// connect opens another client connection to the env's server.
func (e *env) connect() *nats.Conn {
	e.t.Helper()
	nc, err := nats.Connect(e.srv.ClientURL())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

// mutate returns a copy of obj with member k set to v.
func mutate(obj map[string]any, k string, v any) map[string]any {
	m := map[string]any{}
	for kk, vv := range obj {
		m[kk] = vv
	}
	m[k] = v
	return m
}
