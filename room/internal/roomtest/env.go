// Package roomtest holds what the room packages' tests share: an
// embedded server with the room stream, a gate and the ingest service
// (Env), journals and records to send, messages written around the gate,
// and a follower. Only test files import it (test/layout checks).
package roomtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/validate"
)

// Env is one embedded server with the room stream, a gate and the ingest
// service, on a fresh store.
type Env struct {
	T      *testing.T
	Dir    string
	Opts   embedded.Options // StoreDir is set by start, and Listen unless given
	Srv    *embedded.Server
	Nc     *nats.Conn
	Js     jetstream.JetStream
	Stream jetstream.Stream
	Gate   *ingest.Gate
	Svc    *ingest.Service
	Key    *events.HostKey
	V      *validate.Validator
	onGate []func(*ingest.Gate) // EachGate's
	// marked: the stream is made with record markers on
	// (room.MetadataRecordMarkers), as StreamConfig makes it; else without,
	// as a stream made before them.
	marked bool
	// everyMessage: the stream is made without the attestations' compact
	// form (room.MetadataAttestation), as a stream made before it.
	everyMessage bool
}

// EachGate runs f on e's gate and on every gate e makes after: a test
// sets a gate's seams (its export_test.go) through it.
func (e *Env) EachGate(f func(*ingest.Gate)) {
	e.onGate = append(e.onGate, f)
	f(e.Gate)
}

// NewEnv starts an Env with default server options; it stops with t.
func NewEnv(t *testing.T) *Env {
	t.Helper()
	return NewEnvWith(t, embedded.Options{})
}

// NewEnvMarked is NewEnvWith, named for tests about the marked path: the
// stream has record markers on (room.RecordMarkers), as StreamConfig makes
// it, and the relation rules are the server's.
func NewEnvMarked(t *testing.T, opts embedded.Options) *Env {
	t.Helper()
	return newEnv(t, opts, true)
}

// NewEnvUnmarked is NewEnvWith on a stream with record markers off, as
// streams made before them are: the relation rules in the gate's index.
// Tests of that path name it so.
func NewEnvUnmarked(t *testing.T, opts embedded.Options) *Env {
	t.Helper()
	return newEnv(t, opts, false)
}

// NewEnvEveryMessage is NewEnv on a stream made before the attestations'
// compact form (without room.MetadataAttestation): its gates attest in
// checkpoint.FormEveryMessage.
func NewEnvEveryMessage(t *testing.T) *Env {
	t.Helper()
	return newEnvOf(t, &Env{T: t, Dir: t.TempDir(), marked: true, everyMessage: true})
}

// NewEnvWith is NewEnv with server options (MaxPayload, SyncInterval):
// the stream is room.StreamConfig's, record markers on.
func NewEnvWith(t *testing.T, opts embedded.Options) *Env {
	t.Helper()
	return newEnv(t, opts, true)
}

func newEnv(t *testing.T, opts embedded.Options, marked bool) *Env {
	t.Helper()
	return newEnvOf(t, &Env{T: t, Dir: t.TempDir(), Opts: opts, marked: marked})
}

// newEnvOf makes e's keys and validator and starts it.
func newEnvOf(t *testing.T, e *Env) *Env {
	t.Helper()
	var err error
	e.Key, err = events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e.V, err = validate.New(validate.WithTrustedHosts(e.Key.NodeID(), ReferenceHost))
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	t.Cleanup(e.Stop)
	return e
}

// ReferenceHost is the host that signed the reference records: every
// Env's validator trusts it.
const ReferenceHost = "node:did:key:z6MkqB3fVxzXFbVUK2q1GPrLQzaxgwDGGVuxkDzaf5tsLnpo"

// Start starts e's server on e.Dir, ensures the room stream and starts a
// gate and the ingest service on it.
func (e *Env) Start() {
	t := e.T
	t.Helper()
	var err error
	o := e.Opts
	o.StoreDir = e.Dir
	if o.Listen == "" {
		o.Listen = "127.0.0.1:-1"
	}
	e.Srv, err = embedded.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	e.Nc, err = nats.Connect(e.Srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	e.Js, _ = jetstream.New(e.Nc)
	ctx := context.Background()
	var subj room.Subjects
	cfg := room.StreamConfig("", subj, 1)
	if !e.marked {
		delete(cfg.Metadata, room.MetadataRecordMarkers)
	}
	if e.everyMessage {
		delete(cfg.Metadata, room.MetadataAttestation)
	}
	e.Stream, err = room.EnsureStream(ctx, e.Js, cfg, subj)
	if err != nil {
		t.Fatal(err)
	}
	e.Gate = e.NewGate(e.Nc)
	e.Svc, err = ingest.StartService(e.Nc, e.Gate, ingest.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// NewGate returns a gate of e's stream on nc, with e's validator and
// every EachGate function applied.
func (e *Env) NewGate(nc *nats.Conn) *ingest.Gate {
	g, err := ingest.NewGate(context.Background(), nc, ingest.GateOptions{Validator: e.V})
	if err != nil {
		e.T.Fatal(err)
	}
	for _, f := range e.onGate {
		f(g)
	}
	return g
}

// SecondService starts another gate and ingest service on a connection
// of its own, in the queue group of e's: a request reaches either. It
// stops with the test.
func (e *Env) SecondService() *ingest.Service {
	nc := e.Connect()
	svc, err := ingest.StartService(nc, e.NewGate(nc), ingest.ServiceOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { _ = svc.Stop() })
	return svc
}

// Stop stops e's service, connection and server (the store stays).
func (e *Env) Stop() {
	if e.Svc != nil {
		_ = e.Svc.Stop()
	}
	if e.Nc != nil {
		e.Nc.Close()
	}
	if e.Srv != nil {
		e.Srv.Shutdown()
	}
	e.Svc, e.Nc, e.Srv = nil, nil, nil
}

// Journal builds n valid entries of one chain as journal bytes.
func Journal(t testing.TB, runID, capsuleID string, n int) ([]*events.Entry, []byte) {
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

// Lines is es as journal lines, one canonical entry and a newline each.
func Lines(es []*events.Entry) []byte {
	var buf bytes.Buffer
	for _, e := range es {
		buf.Write(e.Canonical())
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// reference returns a reference record file's members.
func ReferenceRecord(t testing.TB, name string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(Testdata("reference/execution-records/") + name)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := events.ParseRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Object()
}

// ReferenceBytes returns a reference record file's bytes as stored.
func ReferenceBytes(t testing.TB, name string) []byte {
	raw, err := os.ReadFile(Testdata("reference/execution-records/") + name)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Sign signs members (a copy, with changes applied) with the env's key.
func (e *Env) Sign(members map[string]any, changes map[string]any) *events.Record {
	e.T.Helper()
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
	rec, err := events.SignRecord(m, e.Key)
	if err != nil {
		e.T.Fatal(err)
	}
	return rec
}

// Request sends one ingest request and decodes the reply into out; it
// returns the service error code header, if any.
func (e *Env) Request(subject string, hdr nats.Header, body []byte, out any) string {
	e.T.Helper()
	return Request(e.T, e.Nc, subject, hdr, body, out)
}

// Request sends body to subject on nc, decodes the reply into out and
// returns the service error code header, if any.
func Request(t testing.TB, nc *nats.Conn, subject string, hdr nats.Header, body []byte, out any) string {
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

// ShipJournal sends body as one journal request for roomID on e's
// connection and returns the reply.
func (e *Env) ShipJournal(roomID string, body []byte) room.JournalReply {
	e.T.Helper()
	return ShipJournal(e.T, e.Nc, roomID, body)
}

// ShipJournal sends body as one anonymous journal request for roomID.
func ShipJournal(t testing.TB, nc *nats.Conn, roomID string, body []byte) room.JournalReply {
	t.Helper()
	return ShipJournalAs(t, nc, room.Anonymous, roomID, body)
}

// ShipJournalAs is shipJournal as identity token (its subject; nc must
// use the identity's inbox prefix).
func ShipJournalAs(t testing.TB, nc *nats.Conn, token, roomID string, body []byte) room.JournalReply {
	t.Helper()
	var r room.JournalReply
	if code := Request(t, nc, room.ServiceSubject("", token, room.EndpointJournal), nats.Header{room.HeaderRoom: []string{roomID}}, body, &r); code != "" {
		t.Fatalf("journal request failed: %s", code)
	}
	return r
}

// ShipRecord sends raw as one record request on e's connection.
func (e *Env) ShipRecord(raw []byte) room.RecordReply {
	e.T.Helper()
	return ShipRecord(e.T, e.Nc, raw)
}

// ShipRecord sends raw as one anonymous record request.
func ShipRecord(t testing.TB, nc *nats.Conn, raw []byte) room.RecordReply {
	t.Helper()
	var r room.RecordReply
	if code := Request(t, nc, "roompub.v1.execution", nil, raw, &r); code != "" {
		t.Fatalf("execution request failed: %s", code)
	}
	return r
}

// Stored returns every message on the stream, in order.
func (e *Env) Stored() []*jetstream.RawStreamMsg {
	e.T.Helper()
	ctx := context.Background()
	info, err := e.Stream.Info(ctx)
	if err != nil {
		e.T.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		// The leader's message get: a direct get's sequence and subject
		// headers can be forged by a stored message's own.
		m, err := LeaderMsg(ctx, e.Nc, room.DefaultStream, seq)
		if err != nil || m == nil {
			e.T.Fatalf("stream seq %d: %v %v", seq, m, err)
		}
		out = append(out, m)
	}
	return out
}

// StoredUnmarked is Stored without the record markers (room.KindMarker),
// so a marked stream compares with an unmarked one.
func (e *Env) StoredUnmarked() []*jetstream.RawStreamMsg {
	e.T.Helper()
	var out []*jetstream.RawStreamMsg
	for _, m := range e.Stored() {
		if p, err := (room.Subjects{}).Parse(m.Subject); err == nil && p.Kind == room.KindMarker {
			continue
		}
		out = append(out, m)
	}
	return out
}

// LeaderMsg reads the message at seq with the stream leader's message get
// ($JS.API.STREAM.MSG.GET, JSON), whose sequence, subject and time no
// header of the stored message can stand in for (a direct get's can).
// No message there: jetstream.ErrMsgNotFound.
func LeaderMsg(ctx context.Context, nc *nats.Conn, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	m, err := jsapi.LeaderGetRaw(ctx, nc, stream, room.DefaultTimeout, map[string]any{"seq": seq})
	if err == nil && m == nil {
		return nil, jetstream.ErrMsgNotFound
	}
	return m, err
}

// StreamState is the stream's message count, bytes and last sequence.
type StreamState struct {
	Msgs, Bytes, LastSeq uint64
}

// State returns the stream's message count, bytes and last sequence.
func (e *Env) State() StreamState {
	e.T.Helper()
	info, err := e.Stream.Info(context.Background())
	if err != nil {
		e.T.Fatal(err)
	}
	return StreamState{Msgs: info.State.Msgs, Bytes: info.State.Bytes, LastSeq: info.State.LastSeq}
}

// CountOn counts the messages stored on subjects matching filter.
func (e *Env) CountOn(filter string) uint64 {
	e.T.Helper()
	return CountOn(e.T, e.Stream, filter)
}

// CountOn returns how many messages st holds on subjects matching filter.
func CountOn(t testing.TB, st jetstream.Stream, filter string) uint64 {
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

// RequestError sends a request that must fail as a whole: it returns the
// service error code header and the decoded ErrorReply.
func (e *Env) RequestError(subject string, hdr nats.Header, body []byte) (string, room.ErrorReply) {
	e.T.Helper()
	var er room.ErrorReply
	code := e.Request(subject, hdr, body, &er)
	return code, er
}

// OnSubject returns the messages stored on subject, in stream order.
func (e *Env) OnSubject(subject string) []*jetstream.RawStreamMsg {
	e.T.Helper()
	return OnSubject(e.T, e.Stream, subject)
}

// OnStreamSubject is OnSubject of another stream of the env's server (the
// deployment log's, say).
func (e *Env) OnStreamSubject(stream, subject string) []*jetstream.RawStreamMsg {
	e.T.Helper()
	st, err := e.Js.Stream(context.Background(), stream)
	if err != nil {
		e.T.Fatal(err)
	}
	return OnSubject(e.T, st, subject)
}

// CountOnStream is CountOn of another stream of the env's server; 0 when
// the stream does not exist yet.
func (e *Env) CountOnStream(stream, filter string) uint64 {
	e.T.Helper()
	st, err := e.Js.Stream(context.Background(), stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0
	}
	if err != nil {
		e.T.Fatal(err)
	}
	return CountOn(e.T, st, filter)
}

// OnSubject returns the messages st holds on subject, in stream order.
func OnSubject(t testing.TB, st jetstream.Stream, subject string) []*jetstream.RawStreamMsg {
	t.Helper()
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); ; {
		m, err := st.GetMsg(context.Background(), seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
		seq = m.Sequence + 1
	}
}

// Connect opens another client connection to the env's server.
func (e *Env) Connect() *nats.Conn {
	e.T.Helper()
	nc, err := nats.Connect(e.Srv.ClientURL())
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(nc.Close)
	return nc
}

// Mutate returns a copy of obj with member k set to v.
func Mutate(obj map[string]any, k string, v any) map[string]any {
	m := map[string]any{}
	for kk, vv := range obj {
		m[kk] = vv
	}
	m[k] = v
	return m
}

// Testdata is the path of rel under the repository's testdata directory,
// whichever package's directory a test runs in.
func Testdata(rel string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata") + "/" + rel
}
