package integration

// The subscriber: the real `subscriber` binary against a real
// embedded nats-server (JetStream on disk in a temporary directory) whose
// room stream was written partly through the gate and partly straight
// into the stream with js.Publish, as a compromised writer would.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// subReferenceHost signed the reference execution records.
const subReferenceHost = "node:did:key:z6MkqB3fVxzXFbVUK2q1GPrLQzaxgwDGGVuxkDzaf5tsLnpo"

var (
	subOnce sync.Once
	subBin  string
	subErr  error
)

// subscriberBin builds cmd/subscriber once, next to the binaries TestMain
// builds (and removes).
func subscriberBin(t *testing.T) string {
	t.Helper()
	subOnce.Do(func() {
		subBin = filepath.Join(filepath.Dir(publisher), "subscriber")
		cmd := exec.Command("go", "build", "-o", subBin, "./cmd/subscriber")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			subErr = fmt.Errorf("go build ./cmd/subscriber: %v\n%s", err, out)
		}
	})
	if subErr != nil {
		t.Fatal(subErr)
	}
	return subBin
}

// subRooms is an embedded nats-server with the room stream, a gate and the
// ingest service in this process; the subscriber binary connects to it.
type subRooms struct {
	t      *testing.T
	url    string
	nc     *nats.Conn
	js     jetstream.JetStream
	client *client.Client
	key    *events.HostKey // the test's own host, trusted by gate and subscriber
}

func startRooms(t *testing.T) *subRooms {
	t.Helper()
	return startRoomsWith(t, false)
}

// startRoomsWith is startRooms with the stream's record markers on when
// marked (what a new serve makes), off otherwise.
func startRoomsWith(t *testing.T, marked bool) *subRooms {
	t.Helper()
	key, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Without record markers: the scenarios here write around the gate at
	// stream seqs fixed by hand (a stream made before markers; the
	// subscriber reads records alike on either).
	cfg := room.StreamConfig("", room.Subjects{}, 1)
	if !marked {
		delete(cfg.Metadata, room.MetadataRecordMarkers)
	}
	if _, err := room.EnsureStream(ctx, js, cfg, room.Subjects{}); err != nil {
		t.Fatal(err)
	}
	v, err := validate.New(validate.WithTrustedHosts(key.NodeID(), subReferenceHost))
	if err != nil {
		t.Fatal(err)
	}
	gate, err := ingest.NewGate(ctx, nc, ingest.GateOptions{Validator: v})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := ingest.StartService(nc, gate, ingest.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	return &subRooms{t: t, url: srv.ClientURL(), nc: nc, js: js, client: client.New(nc, client.Options{}), key: key}
}

// args are the connection and trust flags every subscriber command takes.
func (r *subRooms) args(cmd string, more ...string) []string {
	return append([]string{cmd, "--server", r.url, "--trusted-host", subReferenceHost, "--trusted-host", r.key.NodeID()}, more...)
}

// subRun runs the subscriber binary to its end (a minute at most).
func subRun(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, subscriberBin(t), args...)
	cmd.Dir = root
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("subscriber %v: %v", args, err)
	}
	return result{status: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
}

func (r *subRooms) shipJournal(roomID string, lines ...[]byte) []uint64 {
	r.t.Helper()
	rep, err := r.client.AppendJournal(context.Background(), roomID, nil, append(bytes.Join(lines, []byte("\n")), '\n'))
	if err != nil || rep.Stored != len(lines) {
		r.t.Fatalf("gate: %+v %v", rep, err)
	}
	var seqs []uint64
	for _, it := range rep.Items {
		seqs = append(seqs, it.StreamSeq)
	}
	return seqs
}

func (r *subRooms) shipRecord(raw []byte) uint64 {
	r.t.Helper()
	rep, err := r.client.AppendRecord(context.Background(), raw)
	if err != nil || rep.Item.Outcome != room.OutcomeStored {
		r.t.Fatalf("gate: %+v %v", rep, err)
	}
	return rep.Item.StreamSeq
}

// raw appends data on subject straight into the stream, bypassing the gate.
func (r *subRooms) raw(subject string, data []byte) uint64 {
	r.t.Helper()
	ack, err := r.js.Publish(context.Background(), subject, data)
	if err != nil {
		r.t.Fatal(err)
	}
	return ack.Sequence
}

// subChain builds n sound entries of one chain, as canonical lines.
func subChain(t *testing.T, runID string, n int) []*events.Entry {
	t.Helper()
	var out []*events.Entry
	parent := events.ZeroHash
	for i := range n {
		e, err := events.NewEntry(map[string]any{
			"schema": events.EntrySchema, "run_id": runID, "capsule_id": "cap", "seq": json.Number(fmt.Sprint(i)),
			"ts": "2026-09-02T00:00:00.000Z", "lineage": "attempt", "kind": "tool.call", "effect_class": "SE0",
			"harness_version": "test/1", "task_family": "slugify", "parent_hash": parent,
			"payload": map[string]any{"tool": "bash", "status": "ok"},
		})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
		parent = e.EntryHash()
	}
	return out
}

func subReference(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, reference, "execution-records", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// subRecord signs the reference verified record with key, moved to roomID
// under its own idempotency key and run ref.
func subRecord(t *testing.T, key *events.HostKey, roomID, name string, changes map[string]any) *events.Record {
	t.Helper()
	rec, err := events.ParseRecord(subReference(t, "verified.json"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	for k, v := range rec.Object() {
		m[k] = v
	}
	m["room/id"], m["idempotency/key"], m["run/ref"] = roomID, "key-"+name, "operator-task-run:"+name
	for k, v := range changes {
		m[k] = v
	}
	signed, err := events.SignRecord(m, key)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

// subWant is one set-aside message as the tests expect it.
type subWant struct {
	Seq     uint64
	Code    string
	Subject string
}

// subScenario writes the compromised writer's stream (the same as
// room/reader_test.go's) and returns the stream sequences of the good
// messages and the set-aside ones, in order.
func subScenario(t *testing.T, r *subRooms) (good []uint64, bad []subWant) {
	t.Helper()
	a, b, c, d, x := subChain(t, "run-a", 5), subChain(t, "run-b", 4), subChain(t, "run-c", 4), subChain(t, "run-d", 3), subChain(t, "run-e", 2)
	const (
		evil  = "room:evil"
		subjA = "rooms.evil.journal.run-a.cap"
		subjB = "rooms.evil.journal.run-b.cap"
		subjC = "rooms.evil.journal.run-c.cap"
		subjD = "rooms.evil.journal.run-d.cap"
		exec  = "rooms.evil.exec"
		ref   = "rooms.qmail-open-relay.exec"
	)
	var seqs []uint64
	step := func(s ...uint64) { seqs = append(seqs, s...) }
	step(r.shipJournal(evil, a[0].Canonical(), a[1].Canonical(), a[2].Canonical(), a[3].Canonical())...) // 1-4
	step(r.shipJournal(evil, b[0].Canonical(), b[1].Canonical(), b[2].Canonical())...)                   // 5-7
	step(r.shipRecord(subReference(t, "verified.json")))                                                 // 8
	evil1 := subRecord(t, r.key, evil, "evil-1", nil)
	step(r.shipRecord(evil1.Canonical())) // 9
	tamperedA4 := bytes.Replace(a[4].Canonical(), []byte(`"status":"ok"`), []byte(`"status":"no"`), 1)
	step(r.raw(subjA, tamperedA4))       // 10 invalid_entry
	step(r.raw(subjA, a[4].Canonical())) // 11 chain_broken
	fork := subForkOf(t, b[1])
	step(r.raw(subjB, fork.Canonical())) // 12 fork
	step(r.raw(subjB, b[3].Canonical())) // 13 chain_broken
	step(r.raw(subjC, c[0].Canonical()), r.raw(subjC, c[1].Canonical()))
	step(r.raw(subjC, c[3].Canonical())) // 16 gap
	step(r.raw(subjC, c[2].Canonical())) // 17 chain_broken
	step(r.raw(subjD, d[0].Canonical()))
	step(r.raw(subjD, a[0].Canonical())) // 19 wrong_room
	step(r.raw(subjD, d[1].Canonical()))
	other, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	step(r.raw(exec, subRecord(t, other, evil, "evil-untrusted", nil).Canonical()))   // 21 untrusted_host
	step(r.raw(ref, subReference(t, "foreign-evidence.json")))                        // 22 foreign_evidence
	step(r.raw(exec, subRecord(t, r.key, "room:elsewhere", "else", nil).Canonical())) // 23 wrong_room
	step(r.raw(exec, evil1.Canonical()))                                              // 24 replayed
	step(r.raw("rooms.evil.junk", []byte(`{"hello":"world"}`)))                       // 25 bad_subject
	step(r.raw("rooms.other.journal.run-a.cap", a[0].Canonical()))                    // 26 room_conflict
	step(r.raw(subjD, d[2].Canonical()))                                              // 27
	step(r.raw(subjD, d[2].Canonical()))                                              // 28 replayed
	step(r.shipJournal(evil, x[0].Canonical(), x[1].Canonical())...)                  // 29-30
	step(r.shipRecord(subRecord(t, r.key, evil, "evil-2", nil).Canonical()))          // 31
	if !slices.Equal(seqs, subSeqs(1, 31)) {
		t.Fatalf("stream seqs %v", seqs)
	}
	return []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 14, 15, 18, 20, 27, 29, 30, 31}, []subWant{
		{10, "invalid_entry", subjA}, {11, "chain_broken", subjA},
		{12, "fork", subjB}, {13, "chain_broken", subjB},
		{16, "gap", subjC}, {17, "chain_broken", subjC},
		{19, "wrong_room", subjD},
		{21, "untrusted_host", exec}, {22, "foreign_evidence", ref}, {23, "wrong_room", exec}, {24, "replayed", exec},
		{25, "bad_subject", "rooms.evil.junk"}, {26, "room_conflict", "rooms.other.journal.run-a.cap"},
		{28, "replayed", subjD},
	}
}

// subForkOf returns an entry at e's chain position with another payload:
// well formed and hash-chained to e's parent.
func subForkOf(t *testing.T, e *events.Entry) *events.Entry {
	t.Helper()
	m := map[string]any{}
	for k, v := range e.Object() {
		m[k] = v
	}
	m["payload"] = map[string]any{"tool": "bash", "status": "forked"}
	f, err := events.NewEntry(m)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func subSeqs(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// subAuditReport is the part of `subscriber audit --json` the tests read.
type subAuditReport struct {
	Stream     string `json:"stream"`
	FromSeq    uint64 `json:"from_seq"`
	LastSeq    uint64 `json:"last_seq"`
	Violations []struct {
		Seq      uint64 `json:"stream_seq"`
		Code     string `json:"code"`
		Subject  string `json:"subject"`
		Room     string `json:"room"`
		Reason   string `json:"reason"`
		Problems []struct {
			Code string `json:"code"`
			At   struct {
				Seq uint64 `json:"seq"`
			} `json:"at"`
		} `json:"problems"`
	} `json:"violations"`
	Chains []struct {
		Room  string `json:"room"`
		Chain struct {
			RunID string `json:"run_id"`
		} `json:"chain"`
		Entries int64  `json:"entries"`
		Verdict string `json:"verdict"`
		Broken  *struct {
			Seq  uint64 `json:"stream_seq"`
			Code string `json:"code"`
		} `json:"broken"`
	} `json:"chains"`
	Records map[string]int `json:"records"`
	Totals  struct {
		Messages     uint64         `json:"messages"`
		Entries      uint64         `json:"entries"`
		Records      uint64         `json:"records"`
		SetAside     uint64         `json:"set_aside"`
		ByCode       map[string]int `json:"by_code"`
		ChainsOK     int            `json:"chains_ok"`
		ChainsBroken int            `json:"chains_broken"`
		Sound        bool           `json:"stream_append_only"`
	} `json:"totals"`
}

// TestSubscriberAudit: `subscriber audit --json` names every bad message
// with its code and stream sequence, gives each chain its verdict and
// exits 1; the text report says the same; a clean stream exits 0.
func TestSubscriberAudit(t *testing.T) {
	r := startRooms(t)
	_, bad := subScenario(t, r)
	res := subRun(t, r.args("audit", "--json")...)
	if res.status != 1 {
		t.Fatalf("audit: exit %d, want 1\n%s%s", res.status, res.stdout, res.stderr)
	}
	var rep subAuditReport
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || strings.Count(res.stdout, "\n") != 1 {
		t.Fatalf("audit --json printed %q: %v", res.stdout, err)
	}
	var got []subWant
	for _, v := range rep.Violations {
		got = append(got, subWant{v.Seq, v.Code, v.Subject})
		if len(v.Problems) == 0 || v.Problems[0].Code != v.Code || v.Problems[0].At.Seq != v.Seq || v.Reason == "" {
			t.Errorf("violation at stream seq %d: %+v", v.Seq, v)
		}
	}
	if !slices.Equal(got, bad) {
		t.Errorf("violations\n got %v\nwant %v", got, bad)
	}
	var chains []string
	for _, c := range rep.Chains {
		s := fmt.Sprintf("%s %s %d %s", c.Room, c.Chain.RunID, c.Entries, c.Verdict)
		if c.Broken != nil {
			s += fmt.Sprintf(" at %d %s", c.Broken.Seq, c.Broken.Code)
		}
		chains = append(chains, s)
	}
	wantChains := []string{
		"room:evil run-a 4 broken at 10 invalid_entry",
		"room:evil run-b 3 broken at 12 fork",
		"room:evil run-c 2 broken at 16 gap",
		"room:evil run-d 3 ok",
		"room:evil run-e 2 ok",
	}
	if !slices.Equal(chains, wantChains) {
		t.Errorf("chains\n got %q\nwant %q", chains, wantChains)
	}
	tot := rep.Totals
	if rep.Stream != "ROOMS" || rep.FromSeq != 1 || rep.LastSeq != 31 || tot.Messages != 31 || tot.Entries != 14 || tot.Records != 3 ||
		tot.SetAside != 14 || tot.ChainsOK != 2 || tot.ChainsBroken != 3 || !tot.Sound ||
		rep.Records["room:evil"] != 2 || rep.Records["room:qmail-open-relay"] != 1 || len(rep.Records) != 2 {
		t.Errorf("report: %+v", rep)
	}
	wantByCode := map[string]int{"invalid_entry": 1, "chain_broken": 3, "fork": 1, "gap": 1, "wrong_room": 2, "untrusted_host": 1,
		"foreign_evidence": 1, "replayed": 2, "bad_subject": 1, "room_conflict": 1}
	if fmt.Sprint(tot.ByCode) != fmt.Sprint(wantByCode) {
		t.Errorf("by code %v, want %v", tot.ByCode, wantByCode)
	}
	if !strings.Contains(res.stderr, "subscriber: audit: 14 message(s) set aside, 3 chain(s) broken, 0 stream problem(s)") {
		t.Errorf("stderr: %s", res.stderr)
	}

	// The text report.
	res = subRun(t, r.args("audit")...)
	for _, want := range []string{
		"audit of stream ROOMS, stream seq 1 to 31\n",
		"  journal run-b/cap: 3 entries, head ",
		", broken at stream seq 12: fork\n",
		"  fork at stream seq 12 (rooms.evil.journal.run-b.cap): chain position 1 is already held by an earlier entry: the first one stored wins\n",
		"  bad_subject at stream seq 25 (rooms.evil.junk): ",
		"REFUSED: 31 messages, 14 entries and 3 records verified, 14 set aside; 2 chains ok, 3 broken; stream append-only: true\n",
	} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("text report lacks %q:\n%s", want, res.stdout)
		}
	}
	if res.status != 1 {
		t.Errorf("text audit: exit %d", res.status)
	}

	// One room, audited alone.
	res = subRun(t, r.args("audit", "--json", "--room", "room:qmail-open-relay")...)
	rep = subAuditReport{}
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || res.status != 1 || len(rep.Violations) != 1 ||
		rep.Violations[0].Seq != 22 || rep.Violations[0].Code != "foreign_evidence" || rep.Totals.Messages != 2 {
		t.Errorf("audit of room:qmail-open-relay: exit %d %v\n%s", res.status, err, res.stdout)
	}

	// A clean stream: everything through the gate.
	clean := startRooms(t)
	es := subChain(t, "run-clean", 3)
	clean.shipJournal("room:clean", es[0].Canonical(), es[1].Canonical(), es[2].Canonical())
	clean.shipRecord(subReference(t, "verified.json"))
	clean.shipRecord(subRecord(t, clean.key, "room:clean", "clean-1", nil).Canonical())
	res = subRun(t, clean.args("audit", "--json")...)
	rep = subAuditReport{}
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || res.status != 0 || len(rep.Violations) != 0 ||
		rep.Totals.Messages != 5 || rep.Totals.Entries != 3 || rep.Totals.Records != 2 || rep.Totals.ChainsOK != 1 || !rep.Totals.Sound {
		t.Errorf("clean stream: exit %d %v\n%s%s", res.status, err, res.stdout, res.stderr)
	}
	res = subRun(t, clean.args("audit")...)
	if res.status != 0 || !strings.Contains(res.stdout, "CLEAN: 5 messages, 3 entries and 2 records verified, 0 set aside; 1 chains ok, 0 broken; stream append-only: true\n") {
		t.Errorf("clean stream, text: exit %d\n%s%s", res.status, res.stdout, res.stderr)
	}
	if strings.Contains(res.stderr, "no --trusted-host") {
		t.Errorf("a warning with --trusted-host given: %s", res.stderr)
	}
	// With no --trusted-host a reader trusts no host: both records are set
	// aside, and stderr says why before the report does.
	const warning = "subscriber: no --trusted-host: every execution record will be set aside as untrusted_host"
	res = subRun(t, "audit", "--json", "--server", clean.url)
	rep = subAuditReport{}
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || res.status != 1 || rep.Totals.SetAside != 2 || rep.Totals.ByCode["untrusted_host"] != 2 ||
		!strings.HasPrefix(res.stderr, warning) {
		t.Errorf("no --trusted-host: exit %d %v\n%s%s", res.status, err, res.stdout, res.stderr)
	}
}

// subFollow is a `subscriber follow` process.
type subFollow struct {
	cmd    *exec.Cmd
	stdout *subBuffer
	stderr *subBuffer
	exited chan struct{}
}

// subBuffer is a bytes.Buffer safe for a child's writer and the test.
type subBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *subBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *subBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func subStartFollow(t *testing.T, args []string, stdout *os.File) *subFollow {
	t.Helper()
	f := &subFollow{stdout: &subBuffer{}, stderr: &subBuffer{}, exited: make(chan struct{})}
	f.cmd = exec.Command(subscriberBin(t), args...)
	f.cmd.Dir = root
	f.cmd.Stdout, f.cmd.Stderr = f.stdout, f.stderr
	if stdout != nil {
		f.cmd.Stdout = stdout
	}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = f.cmd.Wait()
		close(f.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-f.exited:
		default:
			_ = f.cmd.Process.Kill()
			<-f.exited
		}
	})
	return f
}

// waitFor polls cond for 20s.
func (f *subFollow) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		select {
		case <-f.exited:
			t.Fatalf("follow exited (%d) before %s\nstdout:\n%s\nstderr:\n%s", f.cmd.ProcessState.ExitCode(), what, f.stdout, f.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 20s\nstdout:\n%s\nstderr:\n%s", what, f.stdout, f.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends SIGTERM and expects exit 0.
func (f *subFollow) stop(t *testing.T) {
	t.Helper()
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-f.exited:
		if code := f.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("follow: exit %d after SIGTERM\n%s", code, f.stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("follow did not stop within 15s of SIGTERM")
	}
}

// subEvent is one line `subscriber follow` prints.
type subEvent struct {
	Room      string `json:"room"`
	Kind      string `json:"kind"`
	Seq       uint64 `json:"stream_seq"`
	Subject   string `json:"subject"`
	Time      string `json:"time"`
	Position  *int64 `json:"seq"`
	EntryHash string `json:"entry_hash"`
	Ref       string `json:"ref"`
	Digest    string `json:"digest"`
	Instance  string `json:"instance"`
	Outcome   string `json:"outcome"`
	Chain     *struct {
		RunID     string `json:"run_id"`
		CapsuleID string `json:"capsule_id"`
	} `json:"chain"`
}

func subEvents(t *testing.T, stdout string) []subEvent {
	t.Helper()
	var out []subEvent
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		var ev subEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("not an event line: %q: %v", sc.Text(), err)
		}
		out = append(out, ev)
	}
	return out
}

func subEventSeqs(evs []subEvent) []uint64 {
	out := make([]uint64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Seq
	}
	return out
}

// TestSubscriberFollowSetsAside: `subscriber follow` prints every good
// message of the compromised writer's stream as a JSON line, in stream
// order, and sets every bad one aside: on stderr and in
// <durable>.set-aside.ndjson, with its code and stream sequence.
func TestSubscriberFollowSetsAside(t *testing.T) {
	r := startRooms(t)
	good, bad := subScenario(t, r)
	state := t.TempDir()
	f := subStartFollow(t, r.args("follow", "--room", "room:evil", "--room", "room:other", "--room", "room:qmail-open-relay",
		"--durable", "solver-1", "--state-dir", state), nil)
	qpath := filepath.Join(state, "solver-1.set-aside.ndjson")
	f.waitFor(t, "every message", func() bool {
		q, _ := os.ReadFile(qpath)
		return strings.Count(f.stdout.String(), "\n") >= len(good) && bytes.Count(q, []byte("\n")) >= len(bad)
	})
	f.stop(t)

	evs := subEvents(t, f.stdout.String())
	if got := subEventSeqs(evs); !slices.Equal(got, good) {
		t.Errorf("printed stream seqs %v, want %v", got, good)
	}
	first := evs[0]
	if first.Room != "room:evil" || first.Kind != "journal" || first.Subject != "rooms.evil.journal.run-a.cap" || first.Position == nil || *first.Position != 0 ||
		first.Chain == nil || first.Chain.RunID != "run-a" || first.Chain.CapsuleID != "cap" || len(first.EntryHash) != 64 || first.Time == "" {
		t.Errorf("first event: %+v", first)
	}
	if rec := evs[7]; rec.Seq != 8 || rec.Kind != "execution" || rec.Room != "room:qmail-open-relay" ||
		rec.Ref != "corpus-task-pack-execution:sha256:PEaap8mlrUCWgXaNN_ov8LMrV0U6McBdaRiHIbFzaS0" ||
		!strings.HasPrefix(rec.Digest, "sha256:") || rec.Instance != "environment:qmail-01" || rec.Outcome != "verified" {
		t.Errorf("record event: %+v", rec)
	}

	q, err := os.ReadFile(qpath) // compared after the restart below
	if err != nil {
		t.Fatal(err)
	}
	if got := setAsides(t, qpath); !slices.Equal(got, bad) {
		t.Errorf("set-aside list\n got %v\nwant %v", got, bad)
	}
	for _, w := range bad {
		line := fmt.Sprintf("set aside: %s at stream seq %d (%s): ", w.Code, w.Seq, w.Subject)
		if !strings.Contains(f.stderr.String(), line) {
			t.Errorf("stderr lacks %q", line)
		}
	}
	if !strings.Contains(f.stderr.String(), "(resumed after stream seq 0; set-aside list "+qpath+"; attestations not checked: no --trusted-publisher)") {
		t.Errorf("stderr: %s", f.stderr)
	}

	// Started again with the same --durable: everything is acknowledged,
	// nothing is printed or set aside again.
	f = subStartFollow(t, r.args("follow", "--room", "room:evil", "--room", "room:other", "--room", "room:qmail-open-relay",
		"--durable", "solver-1", "--state-dir", state), nil)
	f.waitFor(t, "the resume line", func() bool { return strings.Contains(f.stderr.String(), "(resumed after stream seq 31; ") })
	time.Sleep(300 * time.Millisecond)
	f.stop(t)
	if again, _ := os.ReadFile(qpath); f.stdout.String() != "" || !bytes.Equal(again, q) || strings.Contains(f.stderr.String(), "set aside:") {
		t.Errorf("restart repeated: stdout %q, stderr %q, set-aside list grew by %d bytes", f.stdout, f.stderr, len(again)-len(q))
	}
}

// TestSubscriberFollowReexamine: a signed record is set aside by a
// `subscriber follow` run that trusts no host (untrusted_host): listed and
// acknowledged, so a run that trusts the host does not see it again. A run
// with --trusted-host and --reexamine prints it, exactly once, marked
// "reexamined", and takes it off the list; the next such run prints
// nothing.
func TestSubscriberFollowReexamine(t *testing.T) {
	r := startRooms(t)
	es := subChain(t, "run-x", 2)
	r.shipJournal("room:x", es[0].Canonical(), es[1].Canonical())              // 1, 2
	rec := r.shipRecord(subRecord(t, r.key, "room:x", "x-1", nil).Canonical()) // 3
	state := t.TempDir()
	qpath := filepath.Join(state, "solver-1.set-aside.ndjson")
	base := []string{"follow", "--server", r.url, "--room", "room:x", "--durable", "solver-1", "--state-dir", state}
	trusted := append(slices.Clip(base), "--trusted-host", r.key.NodeID())

	f := subStartFollow(t, base, nil)
	f.waitFor(t, "the record set aside", func() bool { q, _ := os.ReadFile(qpath); return bytes.Count(q, []byte("\n")) == 1 })
	f.stop(t)
	if got := subEventSeqs(subEvents(t, f.stdout.String())); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("first run printed %v", got)
	}
	if got := setAsides(t, qpath); !slices.Equal(got, []subWant{{rec, "untrusted_host", "rooms.x.exec"}}) {
		t.Fatalf("set-aside list %v", got)
	}

	// Trusted now, but not re-examined: nothing again, and stderr says
	// the record would pass.
	f = subStartFollow(t, trusted, nil)
	f.waitFor(t, "the resume line", func() bool { return strings.Contains(f.stderr.String(), "(resumed after stream seq 3; ") })
	time.Sleep(300 * time.Millisecond)
	f.stop(t)
	if f.stdout.String() != "" || !strings.Contains(f.stderr.String(), "subscriber: 1 listed message(s) pass now and stay set aside: --reexamine serves them, and listed messages that wait on them may pass too\n") {
		t.Errorf("trusted, not re-examined: stdout %q\nstderr %s", f.stdout, f.stderr)
	}

	// Re-examined: printed once, marked.
	again := append(slices.Clip(trusted), "--reexamine")
	f = subStartFollow(t, again, nil)
	f.waitFor(t, "the resume line", func() bool { return strings.Contains(f.stderr.String(), "(resumed after stream seq 3; ") })
	time.Sleep(300 * time.Millisecond)
	f.stop(t)
	type reexamined struct {
		subEvent
		Reexamined bool `json:"reexamined"`
	}
	var evs []reexamined
	for _, l := range strings.Split(strings.TrimSuffix(f.stdout.String(), "\n"), "\n") {
		var ev reexamined
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("not an event line: %q: %v", l, err)
		}
		evs = append(evs, ev)
	}
	if len(evs) != 1 || evs[0].Seq != rec || evs[0].Kind != "execution" || !evs[0].Reexamined || evs[0].Ref == "" ||
		!strings.Contains(f.stderr.String(), "subscriber: re-examined 1 listed message(s): 1 served, 0 still set aside\n") {
		t.Errorf("re-examination printed %+v\nstderr %s", evs, f.stderr)
	}
	if q, err := os.ReadFile(qpath); err != nil || len(q) != 0 {
		t.Errorf("set-aside list after the re-examination: %q %v", q, err)
	}

	// Nothing a third time.
	f = subStartFollow(t, again, nil)
	f.waitFor(t, "the resume line", func() bool { return strings.Contains(f.stderr.String(), "(resumed after stream seq 3; ") })
	time.Sleep(300 * time.Millisecond)
	f.stop(t)
	if f.stdout.String() != "" || !strings.Contains(f.stderr.String(), "subscriber: re-examined 0 listed message(s): 0 served, 0 still set aside\n") {
		t.Errorf("third run: stdout %q\nstderr %s", f.stdout, f.stderr)
	}
}

// TestSubscriberFollowKilled: `subscriber follow` killed with SIGKILL in
// the middle of a long room and started again with the same --durable
// loses nothing and repeats nothing acknowledged: across both runs every
// message is printed once, in stream order, except at most the one being
// handled at the kill (printed, not yet acknowledged), which is then the
// last line of the first run and the first of the second.
func TestSubscriberFollowKilled(t *testing.T) {
	r := startRooms(t)
	res, err := client.ShipCapsule(context.Background(), r.client, filepath.Join(root, samples, "capsules", "slugify-run"), "room:long", client.ShipOptions{})
	if err != nil || res.Stored != 299 || res.Refused != nil {
		t.Fatalf("ship: %+v %v", res, err)
	}
	r.shipRecord(subReference(t, "verified.json"))
	r.shipRecord(subReference(t, "refused.json"))
	// 299 entries in room:long, then 2 records in room:qmail-open-relay.
	const total = 301
	state := t.TempDir()
	args := r.args("follow", "--room", "room:long", "--room", "room:qmail-open-relay", "--durable", "solver-1", "--state-dir", state)

	// The first run writes into a pipe the test reads slowly: it reads 100
	// lines, then the pipe fills and the subscriber blocks in the middle
	// of the room, where it is killed. The pipe is shrunk to one page
	// (Linux; elsewhere it keeps its size) so that the kill comes well
	// before the end, with messages delivered to the first run but not
	// acknowledged and later ones not yet delivered.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	const fSetPipeSize = 1031 // F_SETPIPE_SZ
	_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, pw.Fd(), fSetPipeSize, 4096)
	f1 := subStartFollow(t, args, pw)
	pw.Close()
	br := bufio.NewReader(pr)
	var first bytes.Buffer
	for range 100 {
		l, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("first run: %v after %d lines\n%s", err, bytes.Count(first.Bytes(), []byte("\n")), f1.stderr)
		}
		first.Write(l)
	}
	time.Sleep(300 * time.Millisecond)
	if err := f1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-f1.exited
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	first.Write(rest)
	run1 := subEventSeqs(subEvents(t, first.String()))
	if len(run1) < 100 || len(run1) >= total || !slices.Equal(run1, subSeqs(1, uint64(len(run1)))) {
		t.Fatalf("first run printed %d events: %v", len(run1), run1)
	}
	lastPrinted := run1[len(run1)-1]

	f2 := subStartFollow(t, args, nil)
	f2.waitFor(t, "the rest of the room", func() bool {
		evs := strings.Count(f2.stdout.String(), "\n")
		return evs >= total-len(run1)
	})
	time.Sleep(200 * time.Millisecond) // nothing more may come
	f2.stop(t)
	run2 := subEventSeqs(subEvents(t, f2.stdout.String()))
	var resumed uint64
	errText := f2.stderr.String()
	i := strings.Index(errText, "resumed after stream seq ")
	if i < 0 {
		t.Fatalf("second run's stderr: %s", errText)
	}
	if _, err := fmt.Sscanf(errText[i:], "resumed after stream seq %d", &resumed); err != nil {
		t.Fatalf("second run's stderr: %s: %v", errText, err)
	}
	t.Logf("first run printed stream seqs 1..%d before SIGKILL; second run resumed after %d and printed %d", lastPrinted, resumed, len(run2))
	switch {
	case resumed == lastPrinted && slices.Equal(run2, subSeqs(lastPrinted+1, total)):
		// Killed after the last printed event was acknowledged.
	case resumed == lastPrinted-1 && slices.Equal(run2, subSeqs(lastPrinted, total)):
		// Killed between printing and acknowledging: that event, and only
		// it, is printed again.
	default:
		t.Fatalf("first run printed 1..%d; second run resumed after %d and printed %v", lastPrinted, resumed, run2)
	}
	seen := map[uint64]int{}
	for _, s := range append(run1, run2...) {
		seen[s]++
	}
	for s := uint64(1); s <= total; s++ {
		if seen[s] == 0 || (seen[s] > 1 && s != lastPrinted) || seen[s] > 2 {
			t.Errorf("stream seq %d printed %d times", s, seen[s])
		}
	}
	if q, err := os.ReadFile(filepath.Join(state, "solver-1.set-aside.ndjson")); err != nil || len(q) != 0 {
		t.Errorf("set-aside list: %q %v", q, err)
	}
}

// TestSubscriberEvidence: `subscriber evidence --instance … --json`
// prints the verified records observed on that instance only, with their
// evidence; the reference foreign-evidence.json, written straight into
// the stream, is filed under no instance.
func TestSubscriberEvidence(t *testing.T) {
	r := startRooms(t)
	verified := subReference(t, "verified.json")
	r.shipRecord(verified) // 1
	onB := map[string]any{"environment/ref": "environment:b", "evidence": []any{map[string]any{
		"step/id": "inspect", "artifact-ref": "object-store:sha256:" + strings.Repeat("b", 43),
		"digest": "sha256:" + strings.Repeat("b", 43), "environment/ref": "environment:b"}}}
	r.shipRecord(subRecord(t, r.key, "room:qmail-open-relay", "on-b", onB).Canonical()) // 2
	r.raw("rooms.qmail-open-relay.exec", subReference(t, "foreign-evidence.json"))      // 3

	res := subRun(t, r.args("evidence", "--instance", "environment:qmail-01", "--json")...)
	if res.status != 0 {
		t.Fatalf("evidence: exit %d\n%s%s", res.status, res.stdout, res.stderr)
	}
	// The counts go to stderr with --json too: what was set aside, and why.
	if !strings.Contains(res.stderr, "subscriber: 1 verified record(s) observed on environment:qmail-01; 1 message(s) of the room(s) set aside (foreign_evidence 1)\n") {
		t.Errorf("evidence --json: stderr %q", res.stderr)
	}
	for _, inst := range []string{"", " environment:qmail-01"} {
		if bad := subRun(t, r.args("evidence", "--instance", inst)...); bad.status != 2 || !strings.Contains(bad.stderr, "--instance") {
			t.Errorf("evidence --instance %q: exit %d, %s; want exit 2 naming --instance", inst, bad.status, bad.stderr)
		}
	}
	rec, err := events.ParseRecord(verified)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(reader.VerifiedRecord{RoomID: "room:qmail-open-relay", Ref: rec.ComputedRef(), Digest: rec.ContentDigest(), StreamSeq: 1,
		Instance: "environment:qmail-01", Outcome: "verified", RunRef: "operator-task-run:run-01", Evidence: rec.Evidence()})
	if err != nil {
		t.Fatal(err)
	}
	if res.stdout != string(want)+"\n" {
		t.Errorf("evidence --json printed\n%s\nwant\n%s", res.stdout, want)
	}
	var got struct {
		Ref      string `json:"ref"`
		Evidence []struct {
			Env string `json:"environment/ref"`
		} `json:"evidence"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil || got.Ref != "corpus-task-pack-execution:sha256:PEaap8mlrUCWgXaNN_ov8LMrV0U6McBdaRiHIbFzaS0" || len(got.Evidence) != 3 {
		t.Fatalf("evidence: %+v %v", got, err)
	}
	for _, it := range got.Evidence {
		if it.Env != "environment:qmail-01" {
			t.Errorf("evidence item of %q", it.Env)
		}
	}

	for _, tc := range []struct {
		args  []string
		lines int
	}{
		{[]string{"--instance", "environment:b", "--json"}, 1},
		{[]string{"--instance", "environment:qmail-01", "--room", "room:qmail-open-relay", "--json"}, 1},
		{[]string{"--instance", "environment:qmail-01", "--room", "room:other", "--json"}, 0},
		{[]string{"--instance", "environment:qmail-00", "--json"}, 0}, // foreign-evidence.json's first item
	} {
		res := subRun(t, r.args("evidence", tc.args...)...)
		if res.status != 0 || strings.Count(res.stdout, "\n") != tc.lines {
			t.Errorf("evidence %v: exit %d, %d lines\n%s%s", tc.args, res.status, strings.Count(res.stdout, "\n"), res.stdout, res.stderr)
		}
	}
	res = subRun(t, r.args("evidence", "--instance", "environment:qmail-01")...)
	if res.status != 0 || !strings.Contains(res.stderr, "subscriber: 1 verified record(s) observed on environment:qmail-01; 1 message(s) of the room(s) set aside (foreign_evidence 1)\n") ||
		!strings.Contains(res.stdout, "room:qmail-open-relay "+rec.ComputedRef()+" ("+rec.ContentDigest()+") at stream seq 1: outcome verified, run operator-task-run:run-01\n") {
		t.Errorf("evidence, text: exit %d\n%s%s", res.status, res.stdout, res.stderr)
	}
}

// TestSubscriberEvidenceMarked: on a stream with record markers (what a
// new serve makes), `subscriber evidence --instance` without
// --trusted-publisher finds the instance's records through its markers
// and asks for no attestation, as audit does; a record of another
// instance is not among them.
func TestSubscriberEvidenceMarked(t *testing.T) {
	r := startRoomsWith(t, true)
	verified := subReference(t, "verified.json")
	seq := r.shipRecord(verified)
	onB := map[string]any{"environment/ref": "environment:b", "evidence": []any{map[string]any{
		"step/id": "inspect", "artifact-ref": "object-store:sha256:" + strings.Repeat("b", 43),
		"digest": "sha256:" + strings.Repeat("b", 43), "environment/ref": "environment:b"}}}
	r.shipRecord(subRecord(t, r.key, "room:qmail-open-relay", "on-b", onB).Canonical())
	rec, err := events.ParseRecord(verified)
	if err != nil {
		t.Fatal(err)
	}
	res := subRun(t, r.args("evidence", "--instance", "environment:qmail-01")...)
	if res.status != 0 || !strings.Contains(res.stderr, "subscriber: 1 verified record(s) observed on environment:qmail-01; 0 message(s) of the room(s) set aside\n") ||
		!strings.Contains(res.stdout, fmt.Sprintf("room:qmail-open-relay %s (%s) at stream seq %d: outcome verified", rec.ComputedRef(), rec.ContentDigest(), seq)) {
		t.Errorf("evidence on a marked stream: exit %d\n%s%s", res.status, res.stdout, res.stderr)
	}
}
