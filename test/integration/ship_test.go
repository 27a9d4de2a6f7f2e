package integration

// Shipping: the real `publisher serve`, `publisher journal` and
// `publisher execution` binaries against a real embedded server on a fresh
// store per test; what landed is read back from the stream with nats.go's
// jetstream package and compared byte for byte with the journal lines.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// trustedHost signed the reference execution records.
const trustedHost = "node:did:key:z6MkqB3fVxzXFbVUK2q1GPrLQzaxgwDGGVuxkDzaf5tsLnpo"

// The sample chains and their subjects in the rooms the tests use.
const (
	slugifyDir     = samples + "/capsules/slugify-run"
	slugifyJournal = slugifyDir + "/journal.ndjson"
	slugifyChain   = "run-20260902-slugify-0417/cap-slugify-0417-a"
	slugifyHead    = "b6b2f3045fdf28aa2b62c0bf5e81c525e6247a7cc1d6b6e2b0090b5af60c83fd"
	brokenDir      = samples + "/capsules/broken"
	brokenJournal  = brokenDir + "/journal.ndjson"
	csvDir         = samples + "/capsules/csv-dedupe"
	execSubject    = "rooms.qmail-open-relay.exec"
)

func journalSubject(roomToken, runID, capsuleID string) string {
	return "rooms." + roomToken + ".journal." + runID + "." + capsuleID
}

// syncBuffer is a bytes.Buffer safe for a child's writer and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// server is one `publisher serve` process on the embedded nats-server.
type server struct {
	t      *testing.T
	store  string
	url    string
	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan struct{}
}

var servingRE = regexp.MustCompile(`(?m)^publisher: serving on (nats://\S+) \(stream ROOMS, service roompub-ingest\)$`)

// startServer starts `publisher serve` on a free port with its JetStream
// store in store, waits until it serves, and stops it (SIGTERM) when the
// test ends.
func startServer(t *testing.T, store string) *server {
	t.Helper()
	return startServerOn(t, store, "127.0.0.1:-1")
}

// startServerOn is startServer listening on listen.
func startServerOn(t *testing.T, store, listen string) *server {
	t.Helper()
	return startServe(t, store, false, "--listen", listen, "--store-dir", store, "--trusted-host", trustedHost)
}

// startServe starts `publisher serve args...` with its store in store
// (stderr in s.log, and stdout too with stdout), waits until it serves,
// and stops it (SIGTERM) when the test ends.
func startServe(t *testing.T, store string, stdout bool, args ...string) *server {
	t.Helper()
	s := &server{t: t, store: store, log: &syncBuffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(publisher, append([]string{"serve"}, args...)...)
	s.cmd.Dir = root
	s.cmd.Env = childEnv()
	s.cmd.Stderr = s.log
	if stdout {
		s.cmd.Stdout = s.log
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(s.stop)
	deadline := time.After(20 * time.Second)
	for {
		if m := servingRE.FindStringSubmatch(s.log.String()); m != nil {
			s.url = m[1]
			return s
		}
		select {
		case <-s.exited:
			t.Fatalf("publisher serve exited with %d before serving:\n%s", s.cmd.ProcessState.ExitCode(), s.log)
		case <-deadline:
			t.Fatalf("publisher serve did not say it serves within 20s:\n%s", s.log)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and expects a clean exit (status 0) within 15s. It
// does nothing if the server has exited already.
func (s *server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		if code := s.cmd.ProcessState.ExitCode(); code != 0 {
			s.t.Errorf("publisher serve: exit status %d after SIGTERM:\n%s", code, s.log)
		}
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		s.t.Errorf("publisher serve did not stop within 15s of SIGTERM:\n%s", s.log)
	}
}

// kill ends the server with SIGKILL: no drain, no flush, no shutdown.
func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// childEnv is the test's environment without NATS_URL, so only the tests
// that mean to use it do.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NATS_URL=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// runPub runs the publisher binary in the repository root with env added
// to the environment, and fails the test if it runs longer than a minute.
func runPub(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, publisher, args...)
	cmd.Dir = root
	cmd.Env = childEnv(env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("publisher %v: still running after a minute\n%s%s", args, out.String(), errOut.String())
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("publisher %v: %v", args, err)
	}
	return result{status: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
}

// background is a publisher command running while the test does other
// things.
type background struct {
	cmd         *exec.Cmd
	stdout, err *syncBuffer
	exited      chan struct{}
}

func startPub(t *testing.T, args ...string) *background {
	t.Helper()
	b := &background{stdout: &syncBuffer{}, err: &syncBuffer{}, exited: make(chan struct{})}
	b.cmd = exec.Command(publisher, args...)
	b.cmd.Dir = root
	b.cmd.Env = childEnv()
	b.cmd.Stdout, b.cmd.Stderr = b.stdout, b.err
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = b.cmd.Wait()
		close(b.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-b.exited:
		default:
			_ = b.cmd.Process.Kill()
			<-b.exited
		}
	})
	return b
}

// wait waits for the command to exit and returns its status.
func (b *background) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-b.exited:
		return b.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("publisher %v still running after %s\nstdout:\n%s\nstderr:\n%s", b.cmd.Args[1:], within, b.stdout, b.err)
		return -1
	}
}

func (b *background) running() bool {
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

// inspector reads the room stream directly, as any NATS client may.
type inspector struct {
	t      *testing.T
	nc     *nats.Conn
	stream jetstream.Stream
}

func inspect(t *testing.T, url string) *inspector {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "ROOMS")
	if err != nil {
		t.Fatal(err)
	}
	return &inspector{t: t, nc: nc, stream: st}
}

// counts returns the number of messages on every subject and in all.
func (in *inspector) counts() (map[string]uint64, uint64) {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := in.stream.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		in.t.Fatal(err)
	}
	subjects := info.State.Subjects
	if subjects == nil {
		subjects = map[string]uint64{}
	}
	return subjects, info.State.Msgs
}

// expectCounts checks that the stream holds exactly these subjects with
// these counts, and nothing else but the records' markers (no leaves; the
// gate's, tested in room/ingest).
func (in *inspector) expectCounts(want map[string]uint64) {
	in.t.Helper()
	got, total := in.counts()
	for subj, n := range got {
		if p, err := (room.Subjects{}).Parse(subj); err == nil && p.Kind == room.KindMarker {
			delete(got, subj)
			total -= n
		}
	}
	var sum uint64
	for _, n := range want {
		sum += n
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || total != sum {
		in.t.Errorf("stream holds %v (%d messages), want %v (%d)", got, total, want, sum)
	}
}

// waitCount waits until subject holds at least n messages and returns the
// count then.
func (in *inspector) waitCount(subject string, n uint64, within time.Duration) uint64 {
	in.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, _ := in.counts()
		if got[subject] >= n {
			return got[subject]
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("%s holds %d messages after %s, want %d", subject, got[subject], within, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// storedMsg is one message of the stream.
type storedMsg struct {
	seq  uint64
	data []byte
}

// read returns every message on subject, in stream order.
func (in *inspector) read(subject string) []storedMsg {
	in.t.Helper()
	counts, _ := in.counts()
	want := int(counts[subject])
	if want == 0 {
		return nil
	}
	var out []storedMsg
	for _, m := range in.fetchAll(subject, want) {
		if m.subject != subject {
			in.t.Fatalf("message on %s, want %s", m.subject, subject)
		}
		out = append(out, storedMsg{seq: m.seq, data: m.data})
	}
	return out
}

// roomMsg is one message as stored.
type roomMsg struct {
	seq     uint64
	subject string
	data    []byte
	header  nats.Header
}

// fetchAll reads want messages on filter, in stream order, with an
// ordered consumer; fewer than want is fatal.
func (in *inspector) fetchAll(filter string, want int) []roomMsg {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := in.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		in.t.Fatal(err)
	}
	var out []roomMsg
	for len(out) < want {
		batch, err := cons.Fetch(min(want-len(out), 1000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			in.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				in.t.Fatal(err)
			}
			out = append(out, roomMsg{seq: meta.Sequence.Stream, subject: m.Subject(), data: m.Data(), header: m.Headers()})
			n++
		}
		if batch.Error() != nil {
			in.t.Fatal(batch.Error())
		}
		if n == 0 {
			in.t.Fatalf("read %d of %d messages on %s", len(out), want, filter)
		}
	}
	return out
}

// expectLines checks that subject holds exactly lines, byte-equal and in
// order, at strictly increasing stream sequences, and returns the
// messages.
func (in *inspector) expectLines(subject string, lines [][]byte) []storedMsg {
	in.t.Helper()
	msgs := in.read(subject)
	if len(msgs) != len(lines) {
		in.t.Errorf("%s holds %d messages, want %d", subject, len(msgs), len(lines))
	}
	for i := range min(len(msgs), len(lines)) {
		if !bytes.Equal(msgs[i].data, lines[i]) {
			in.t.Errorf("%s message %d (stream seq %d) differs from journal line %d:\n got %.120s\nwant %.120s", subject, i+1, msgs[i].seq, i+1, msgs[i].data, lines[i])
			break
		}
		if i > 0 && msgs[i].seq <= msgs[i-1].seq {
			in.t.Errorf("%s message %d at stream seq %d after %d", subject, i+1, msgs[i].seq, msgs[i-1].seq)
		}
	}
	return msgs
}

// fileLines returns a journal's lines without their newlines.
func fileLines(t *testing.T, path string) [][]byte {
	t.Helper()
	if !filepath.IsAbs(path) {
		path = filepath.Join(root, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 || data[len(data)-1] != '\n' {
		t.Fatalf("%s does not end in a newline", path)
	}
	return bytes.Split(data[:len(data)-1], []byte("\n"))
}

func joinLines(lines [][]byte) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// entries builds n valid, hash-chained journal lines (without newlines) of
// one chain with events.NewEntry.
func entries(t *testing.T, meta events.CapsuleMeta, n int) [][]byte {
	t.Helper()
	out := make([][]byte, 0, n)
	parent := events.ZeroHash
	for i := range n {
		e, err := events.NewEntry(map[string]any{
			"schema": events.EntrySchema, "run_id": meta.RunID, "capsule_id": meta.CapsuleID, "seq": json.Number(strconv.Itoa(i)),
			"ts":      time.Date(2026, 9, 5, 8, 0, 0, 0, time.UTC).Add(time.Duration(i) * 37 * time.Millisecond).Format("2006-01-02T15:04:05.000Z07:00"),
			"lineage": "attempt", "kind": "tool.call", "effect_class": "SE0",
			"harness_version": meta.HarnessVersion, "task_family": meta.TaskFamily, "parent_hash": parent,
			"payload": map[string]any{"tool": "bash", "duration_ms": json.Number(strconv.Itoa(5 + i%97)), "status": "ok", "task_id": fmt.Sprintf("t%04d", i/20)},
		})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e.Canonical())
		parent = e.EntryHash()
	}
	return out
}

// writeCapsule writes the capsule directory dir: capsule.json for meta and
// journal.ndjson holding journal.
func writeCapsule(t *testing.T, dir string, meta events.CapsuleMeta, journal []byte) {
	t.Helper()
	writeCapsuleJSON(t, dir, meta)
	if err := os.WriteFile(filepath.Join(dir, "journal.ndjson"), journal, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeCapsuleJSON writes dir/capsule.json for meta (creating dir).
func writeCapsuleJSON(t *testing.T, dir string, meta events.CapsuleMeta) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(map[string]string{
		"schema": events.EntrySchema, "run_id": meta.RunID, "capsule_id": meta.CapsuleID,
		"harness_version": meta.HarnessVersion, "task_family": meta.TaskFamily, "created_at": "2026-09-05T08:00:00.000Z",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "capsule.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// appendFile appends data to path (creating it) in one write.
func appendFile(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// shipLine is one line of `publisher journal --json`.
type shipLine struct {
	Dir   string `json:"dir"`
	Room  string `json:"room"`
	Chain struct {
		RunID     string `json:"run_id"`
		CapsuleID string `json:"capsule_id"`
	} `json:"chain"`
	Lines         int `json:"lines"`
	AlreadyStored int `json:"already_stored"`
	Stored        int `json:"stored"`
	Duplicates    int `json:"duplicates"`
	Head          struct {
		Room      string `json:"room"`
		Next      int64  `json:"next"`
		Head      string `json:"head"`
		StreamSeq uint64 `json:"stream_seq"`
	} `json:"head"`
	Refused *struct {
		Code string `json:"code"`
		At   struct {
			File    string `json:"file"`
			Line    int    `json:"line"`
			Pointer string `json:"pointer"`
		} `json:"at"`
		Reason   string `json:"reason"`
		Problems []struct {
			Code string `json:"code"`
		} `json:"problems"`
	} `json:"refused"`
	PartialTail bool   `json:"partial_tail"`
	OK          bool   `json:"ok"`
	Error       string `json:"error"`
}

func shipLines(t *testing.T, stdout string) []shipLine {
	t.Helper()
	var out []shipLine
	for _, l := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		if l == "" {
			continue
		}
		var s shipLine
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("not a JSON line: %v\n%s", err, l)
		}
		out = append(out, s)
	}
	return out
}

// oneShipLine is the only line of `publisher journal --json` with one
// capsule directory.
func oneShipLine(t *testing.T, r result) shipLine {
	t.Helper()
	lines := shipLines(t, r.stdout)
	if len(lines) != 1 {
		t.Fatalf("%d JSON lines, want 1:\n%s%s", len(lines), r.stdout, r.stderr)
	}
	return lines[0]
}

// expectShip checks the numbers of a journal shipment.
func expectShip(t *testing.T, got shipLine, room string, alreadyStored, stored, next int, head string, streamSeq uint64) {
	t.Helper()
	if got.Room != room || got.AlreadyStored != alreadyStored || got.Stored != stored || got.Duplicates != 0 ||
		got.Head.Room != room || got.Head.Next != int64(next) || got.Head.Head != head || got.Head.StreamSeq != streamSeq {
		t.Errorf("shipped: room %q, %d already stored, %d stored, %d duplicates, head room %q next %d %s at stream seq %d\n"+
			"want:    room %q, %d already stored, %d stored, 0 duplicates, head room %q next %d %s at stream seq %d",
			got.Room, got.AlreadyStored, got.Stored, got.Duplicates, got.Head.Room, got.Head.Next, got.Head.Head, got.Head.StreamSeq,
			room, alreadyStored, stored, room, next, head, streamSeq)
	}
}

// headOf returns the entry_hash of the last of lines.
func headOf(t *testing.T, lines [][]byte) string {
	t.Helper()
	e, err := events.ParseEntry(lines[len(lines)-1])
	if err != nil {
		t.Fatal(err)
	}
	return e.EntryHash()
}

// TestShipCapsule: a 299-entry capsule lands whole, byte-equal and in
// order, on its chain's subject; the text output names the room, the
// chain, the count and the head.
func TestShipCapsule(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	lines := fileLines(t, slugifyJournal)
	if len(lines) != 299 || headOf(t, lines) != slugifyHead {
		t.Fatalf("sample changed: %d lines, head %s", len(lines), headOf(t, lines))
	}
	r := runPub(t, nil, "journal", "--server", srv.url, "--room", "room:eval-slugify", slugifyDir)
	if r.status != 0 {
		t.Fatalf("journal: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"ok       " + slugifyDir + " → room:eval-slugify  chain " + slugifyChain + ": 299 stored, 0 duplicate, 0 already stored;",
		"head seq 298 " + slugifyHead[:16] + "… at stream seq 299",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Count(r.stdout, "\n") != 1 || strings.Contains(r.stdout, "nothing new") {
		t.Errorf("want one line, not \"nothing new\":\n%s", r.stdout)
	}
	in := inspect(t, srv.url)
	subj := journalSubject("eval-slugify", "run-20260902-slugify-0417", "cap-slugify-0417-a")
	in.expectCounts(map[string]uint64{subj: 299})
	msgs := in.expectLines(subj, lines)
	for i, m := range msgs {
		if m.seq != uint64(i+1) {
			t.Fatalf("entry %d at stream seq %d, want %d", i+1, m.seq, i+1)
		}
	}

	// A room id with '.', '/' and a non-ASCII character is one encoded
	// subject token.
	r = runPub(t, nil, "journal", "--json", "--server", srv.url, "--room", "room:lab/csv.v2-é", csvDir)
	if r.status != 0 {
		t.Fatalf("journal: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	csv := fileLines(t, csvDir+"/journal.ndjson")
	expectShip(t, oneShipLine(t, r), "room:lab/csv.v2-é", 0, 14, 14, headOf(t, csv), 313)
	csvSubj := journalSubject("lab~2Fcsv~2Ev2-~C3~A9", "run-20260903-csv-dedupe-0009", "cap-csv-dedupe-0009")
	in.expectCounts(map[string]uint64{subj: 299, csvSubj: 14})
	in.expectLines(csvSubj, csv)
}

// TestReship: shipping again sends nothing; shipping a prefix of a journal
// and then the whole journal sends only the rest.
func TestReship(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	lines := fileLines(t, slugifyJournal)
	subj := journalSubject("eval-slugify", "run-20260902-slugify-0417", "cap-slugify-0417-a")

	// The first 120 lines, in a copy of the capsule directory.
	prefix := t.TempDir()
	capsule, err := os.ReadFile(filepath.Join(root, slugifyDir, "capsule.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prefix, "capsule.json"), capsule, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prefix, "journal.ndjson"), joinLines(lines[:120]), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runPub(t, nil, "journal", "--json", "--server", srv.url, "--room", "room:eval-slugify", prefix)
	if r.status != 0 {
		t.Fatalf("prefix: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	expectShip(t, oneShipLine(t, r), "room:eval-slugify", 0, 120, 120, headOf(t, lines[:120]), 120)
	in := inspect(t, srv.url)
	in.expectCounts(map[string]uint64{subj: 120})

	// The whole journal: the 120 are already stored, 179 are sent.
	r = runPub(t, nil, "journal", "--json", "--server", srv.url, "--room", "room:eval-slugify", slugifyDir)
	if r.status != 0 {
		t.Fatalf("whole journal: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	got := oneShipLine(t, r)
	expectShip(t, got, "room:eval-slugify", 120, 179, 299, slugifyHead, 299)
	if got.Lines != 299 || !got.OK {
		t.Errorf("lines %d ok %v, want 299 true", got.Lines, got.OK)
	}
	in.expectCounts(map[string]uint64{subj: 299})

	// Again: nothing new, in text and in JSON.
	r = runPub(t, nil, "journal", "--server", srv.url, "--room", "room:eval-slugify", slugifyDir)
	want := "ok       " + slugifyDir + " → room:eval-slugify  chain " + slugifyChain +
		": 0 stored, 0 duplicate, 299 already stored (nothing new); head seq 298 " + slugifyHead[:16] + "… at stream seq 299\n"
	if r.status != 0 || r.stdout != want {
		t.Errorf("re-ship: exit %d\n got %q\nwant %q\n%s", r.status, r.stdout, want, r.stderr)
	}
	r = runPub(t, nil, "journal", "--json", "--server", srv.url, "--room", "room:eval-slugify", slugifyDir)
	if r.status != 0 {
		t.Errorf("re-ship: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	expectShip(t, oneShipLine(t, r), "room:eval-slugify", 299, 0, 299, slugifyHead, 299)
	in.expectCounts(map[string]uint64{subj: 299})
	in.expectLines(subj, lines)

	// The prefix again, now that the chain is longer than it: nothing is
	// sent or refused.
	r = runPub(t, nil, "journal", "--json", "--server", srv.url, "--room", "room:eval-slugify", prefix)
	if r.status != 0 {
		t.Errorf("prefix after the whole: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	} else if got := oneShipLine(t, r); got.Stored != 0 || got.Refused != nil || got.Head.Next != 299 {
		t.Errorf("prefix after the whole: %+v", got)
	}
	in.expectCounts(map[string]uint64{subj: 299})
}

// TestShipRefusedMidJournal: the tampered line 14 of broken is refused;
// lines 1-13 land, nothing after them; running again refuses the same line
// and stores nothing.
func TestShipRefusedMidJournal(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	lines := fileLines(t, brokenJournal)
	if len(lines) != 30 {
		t.Fatalf("broken has %d lines, want 30", len(lines))
	}
	subj := journalSubject("eval-rerun", "run-20260904-slugify-0418", "cap-slugify-0418-a")
	in := inspect(t, srv.url)
	tampered, err := events.ParseEntry(lines[13])
	if err != nil {
		t.Fatal(err)
	}
	wantAt := "invalid_entry at " + brokenJournal + ":14 /entry_hash: entry_hash is not the SHA-256 of the canonical entry without entry_hash" +
		fmt.Sprintf(" (expected %q, got %q)", tampered.ComputedHash(), tampered.EntryHash())

	r := runPub(t, nil, "journal", "--server", srv.url, "--room", "room:eval-rerun", brokenDir)
	if r.status != 1 {
		t.Errorf("exit %d, want 1\n%s%s", r.status, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"REFUSED  " + brokenDir + " → room:eval-rerun  chain run-20260904-slugify-0418/cap-slugify-0418-a: 13 stored, 0 duplicate, 0 already stored;",
		"\n         " + wantAt + "\n",
		"lines before it are in the room; it and every later line are not",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "publisher: 1 of 1 capsules refused") {
		t.Errorf("stderr: %q", r.stderr)
	}
	in.expectCounts(map[string]uint64{subj: 13})
	in.expectLines(subj, lines[:13])

	for range 2 {
		r = runPub(t, nil, "journal", "--json", "--server", srv.url, "--room", "room:eval-rerun", brokenDir)
		if r.status != 1 {
			t.Errorf("again: exit %d, want 1\n%s%s", r.status, r.stdout, r.stderr)
		}
		got := oneShipLine(t, r)
		expectShip(t, got, "room:eval-rerun", 13, 0, 13, headOf(t, lines[:13]), 13)
		if got.OK || got.Refused == nil || got.Refused.Code != "invalid_entry" || got.Refused.At.File != brokenJournal ||
			got.Refused.At.Line != 14 || got.Refused.At.Pointer != "/entry_hash" || got.Refused.Reason == "" ||
			len(got.Refused.Problems) != 1 || got.Refused.Problems[0].Code != "invalid_entry" {
			t.Errorf("again: %s", r.stdout)
		}
		in.expectCounts(map[string]uint64{subj: 13})
	}
	in.expectLines(subj, lines[:13])
}

// TestKillServerMidShipment: the server is killed (SIGKILL) while a
// 5,000-entry journal is being shipped. `publisher journal` exits 2 and
// says how much was stored; after a restart on the same store, shipping
// again completes the chain: every entry exactly once, in order, and every
// entry stored before the kill is still there.
func TestKillServerMidShipment(t *testing.T) {
	t.Parallel()
	const total = 5000
	meta := events.CapsuleMeta{RunID: "run-20260905-long-0001", CapsuleID: "cap-long-0001-a", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	dir := filepath.Join(t.TempDir(), "long")
	lines := entries(t, meta, total)
	writeCapsule(t, dir, meta, joinLines(lines))
	subj := journalSubject("long", meta.RunID, meta.CapsuleID)
	store := t.TempDir()
	srv := startServer(t, store)
	in := inspect(t, srv.url)

	ship := startPub(t, "journal", "--server", srv.url, "--timeout", "5s", "--room", "room:long", dir)
	// Kill it inside the second batch of 1,000: the first batch's reply has
	// come back, the second's never will.
	seen := in.waitCount(subj, 1300, 30*time.Second)
	srv.kill()
	in.nc.Close()
	if seen >= total {
		t.Fatalf("the shipment finished (%d entries) before the kill", seen)
	}
	status := ship.wait(t, 30*time.Second)
	out, errOut := ship.stdout.String(), ship.err.String()
	t.Logf("killed at >= %d entries; journal said:\n%s%s", seen, out, errOut)
	if status != 2 {
		t.Errorf("journal: exit %d, want 2", status)
	}
	m := regexp.MustCompile(`(?m)^FAILED   ` + regexp.QuoteMeta(dir) + ` → room:long  chain ` + meta.RunID + `/` + meta.CapsuleID + `: (\d+) stored, 0 duplicate, 0 already stored`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no FAILED line saying what was stored:\n%s", out)
	}
	acked, _ := strconv.Atoi(m[1])
	if acked%1000 != 0 || acked == 0 {
		t.Errorf("said %d stored; want the whole batches whose replies came back before the kill", acked)
	}
	if !strings.Contains(errOut, "run again to resume") || !strings.Contains(errOut, "ingest service unavailable") {
		t.Errorf("stderr does not say the service went away and to run again:\n%s", errOut)
	}

	// Restart on the same store: nothing the stream held is lost.
	srv = startServer(t, store)
	in = inspect(t, srv.url)
	counts, _ := in.counts()
	after := counts[subj]
	if after < seen || after < uint64(acked) || after >= total {
		t.Fatalf("after the restart the chain holds %d entries; before the kill the stream held %d and %d were acknowledged", after, seen, acked)
	}
	in.expectLines(subj, lines[:after])

	r := runPub(t, nil, "journal", "--json", "--server", srv.url, "--room", "room:long", dir)
	if r.status != 0 {
		t.Fatalf("resume: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	expectShip(t, oneShipLine(t, r), "room:long", int(after), total-int(after), total, headOf(t, lines), total)
	in.expectCounts(map[string]uint64{subj: total})
	msgs := in.expectLines(subj, lines)
	for i, m := range msgs {
		if m.seq != uint64(i+1) {
			t.Fatalf("entry %d at stream seq %d: a gap or a duplicate", i+1, m.seq)
		}
	}
}

// TestInterruptMidShipment: SIGINT while a 10,000-entry journal is being
// shipped. `publisher journal` says it was interrupted (not that the
// service went away), prints what the stream holds of the chain (the
// requests in flight are answered and the chain's head asked after the
// interrupt), and exits 130. It blamed the server ("ingest service
// unavailable: … context canceled", exit 2) and counted only the replies
// that came, less than the stream held. Running again resumes.
func TestInterruptMidShipment(t *testing.T) {
	t.Parallel()
	const total = 10000
	meta := events.CapsuleMeta{RunID: "run-20260905-stop-0007", CapsuleID: "cap-stop-0007-a", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	dir := filepath.Join(t.TempDir(), "stop")
	lines := entries(t, meta, total)
	writeCapsule(t, dir, meta, joinLines(lines))
	subj := journalSubject("stop", meta.RunID, meta.CapsuleID)
	srv := startServer(t, t.TempDir())
	in := inspect(t, srv.url)

	ship := startPub(t, "journal", "--server", srv.url, "--room", "room:stop", dir)
	// Inside the second batch of 1,000: the first one's reply has come
	// back, the next ones are in flight.
	seen := in.waitCount(subj, 1300, 30*time.Second)
	_ = ship.cmd.Process.Signal(os.Interrupt)
	status := ship.wait(t, 30*time.Second)
	out, errOut := ship.stdout.String(), ship.err.String()
	t.Logf("interrupted at >= %d entries; journal said:\n%s%s", seen, out, errOut)
	if status != 130 {
		t.Errorf("journal: exit %d after SIGINT, want 130", status)
	}
	// What the stream holds, once nothing lands any more.
	held := in.waitCount(subj, seen, time.Second)
	for {
		time.Sleep(500 * time.Millisecond)
		now, _ := in.counts()
		if now[subj] == held {
			break
		}
		held = now[subj]
	}
	if held >= total {
		t.Fatalf("the shipment finished (%d entries) before the interrupt", held)
	}
	m := regexp.MustCompile(`(?m)^STOPPED  ` + regexp.QuoteMeta(dir) + ` → room:stop  chain ` + meta.RunID + `/` + meta.CapsuleID +
		`: (\d+) stored, 0 duplicate, 0 already stored; head seq (\d+) ([0-9a-f]{16})… at stream seq (\d+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no STOPPED line with the count and the head:\n%s", out)
	}
	stored, _ := strconv.Atoi(m[1])
	headSeq, _ := strconv.Atoi(m[2])
	streamSeq, _ := strconv.ParseUint(m[4], 10, 64)
	if uint64(stored) != held || headSeq != stored-1 || m[3] != headOf(t, lines[:held])[:16] || streamSeq != held {
		t.Errorf("printed %d stored, head seq %d %s… at stream seq %d; the stream holds %d entries", stored, headSeq, m[3], streamSeq, held)
	}
	for _, want := range []string{
		fmt.Sprintf("publisher: %s: stopped: interrupted by SIGINT; the stream holds %d lines of the chain (run again to resume)\n", dir, held),
		"publisher: interrupted by SIGINT: 1 of 1 capsules could not be shipped\n",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if strings.Contains(errOut, "unavailable") || strings.Contains(errOut, "context canceled") {
		t.Errorf("stderr blames the service:\n%s", errOut)
	}

	r := runPub(t, nil, "journal", "--json", "--server", srv.url, "--room", "room:stop", dir)
	if r.status != 0 {
		t.Fatalf("resume: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	expectShip(t, oneShipLine(t, r), "room:stop", int(held), total-int(held), total, headOf(t, lines), total)
	in.expectLines(subj, lines)
}

// TestFollow: `publisher journal --follow` ships what the harness appends,
// never a line without its newline, each line once; SIGTERM ends it with
// status 0. A capsule directory that appears after the start is shipped
// once it is there.
func TestFollow(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	in := inspect(t, srv.url)
	meta := events.CapsuleMeta{RunID: "run-20260905-follow-0002", CapsuleID: "cap-follow-0002-a", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	lines := entries(t, meta, 40)
	subj := journalSubject("live", meta.RunID, meta.CapsuleID)
	dir := filepath.Join(t.TempDir(), "live")
	journal := filepath.Join(dir, "journal.ndjson")
	writeCapsuleJSON(t, dir, meta)
	appendFile(t, journal, joinLines(lines[:10]))

	// The directory of a second capsule does not exist yet.
	lateMeta := events.CapsuleMeta{RunID: "run-20260905-late-0003", CapsuleID: "cap-late-0003-a", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	late := entries(t, lateMeta, 7)
	lateSubj := journalSubject("live", lateMeta.RunID, lateMeta.CapsuleID)
	lateDir := filepath.Join(t.TempDir(), "not-yet", "late")

	f := startPub(t, "journal", "--follow", "--json", "--server", srv.url, "--room", "room:live", dir, lateDir)
	in.waitCount(subj, 10, 10*time.Second)

	// Ten more lines and half of the next one.
	half := len(lines[20]) / 2
	appendFile(t, journal, append(joinLines(lines[10:20]), lines[20][:half]...))
	in.waitCount(subj, 20, 10*time.Second)
	time.Sleep(time.Second) // four polls
	if counts, _ := in.counts(); counts[subj] != 20 {
		t.Fatalf("the half-written line 21 was shipped: %d entries stored", counts[subj])
	}
	// The rest of it, and the remaining lines in two writes.
	appendFile(t, journal, append(append([]byte{}, lines[20][half:]...), '\n'))
	appendFile(t, journal, joinLines(lines[21:30]))
	in.waitCount(subj, 30, 10*time.Second)
	appendFile(t, journal, joinLines(lines[30:]))
	in.waitCount(subj, 40, 10*time.Second)

	// Now the late capsule: capsule.json first, then its journal.
	writeCapsuleJSON(t, lateDir, lateMeta)
	appendFile(t, filepath.Join(lateDir, "journal.ndjson"), joinLines(late))
	in.waitCount(lateSubj, 7, 10*time.Second)

	time.Sleep(600 * time.Millisecond) // more polls: nothing is sent twice
	in.expectCounts(map[string]uint64{subj: 40, lateSubj: 7})
	in.expectLines(subj, lines)
	in.expectLines(lateSubj, late)

	if !f.running() {
		t.Fatalf("the follower exited early:\n%s%s", f.stdout, f.err)
	}
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	if status := f.wait(t, 10*time.Second); status != 0 {
		t.Errorf("follower: exit %d after SIGTERM, want 0\n%s%s", status, f.stdout, f.err)
	}
	// The last line for each directory has the totals.
	last := map[string]shipLine{}
	for _, l := range shipLines(t, f.stdout.String()) {
		if !l.OK || l.Refused != nil || l.Error != "" || l.Duplicates != 0 {
			t.Errorf("follower reported %+v", l)
		}
		last[l.Dir] = l
	}
	if l := last[dir]; l.Stored != 40 || l.AlreadyStored != 0 || l.Head.Next != 40 || l.Head.Head != headOf(t, lines) {
		t.Errorf("last report for %s: %+v", dir, l)
	}
	if l := last[lateDir]; l.Stored != 7 || l.Head.Next != 7 || l.Head.Head != headOf(t, late) {
		t.Errorf("last report for %s: %+v", lateDir, l)
	}
}

// TestFollowRidesOutRestart: the server is killed while a follower runs
// and the harness keeps appending; once the server is back (same address,
// same store) the follower ships the rest, each entry once.
func TestFollowRidesOutRestart(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", closedPort(t))
	srv := startServerOn(t, store, listen)
	in := inspect(t, srv.url)
	meta := events.CapsuleMeta{RunID: "run-20260905-restart-0005", CapsuleID: "cap-restart-0005-a", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	lines := entries(t, meta, 30)
	subj := journalSubject("live", meta.RunID, meta.CapsuleID)
	dir := filepath.Join(t.TempDir(), "restart")
	journal := filepath.Join(dir, "journal.ndjson")
	writeCapsuleJSON(t, dir, meta)
	appendFile(t, journal, joinLines(lines[:10]))

	f := startPub(t, "journal", "--follow", "--json", "--server", srv.url, "--room", "room:live", dir)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the follower's stdout:\n%s\nstderr:\n%s", f.stdout, f.err)
		}
	})
	in.waitCount(subj, 10, 10*time.Second)
	in.nc.Close()
	srv.kill()
	appendFile(t, journal, joinLines(lines[10:20]))
	time.Sleep(700 * time.Millisecond)
	if !f.running() {
		t.Fatalf("the follower gave up when the server went away: exit %d\n%s%s", f.cmd.ProcessState.ExitCode(), f.stdout, f.err)
	}

	srv = startServerOn(t, store, listen)
	in = inspect(t, srv.url)
	in.waitCount(subj, 20, 20*time.Second)
	appendFile(t, journal, joinLines(lines[20:]))
	in.waitCount(subj, 30, 10*time.Second)
	in.expectCounts(map[string]uint64{subj: 30})
	in.expectLines(subj, lines)
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	if status := f.wait(t, 10*time.Second); status != 0 {
		t.Errorf("follower: exit %d after SIGTERM, want 0\n%s%s", status, f.stdout, f.err)
	}
}

// TestFollowJournalBeforeCapsule: a harness that creates journal.ndjson
// before capsule.json is waited for, as --follow waits for a directory
// that does not exist yet.
func TestFollowJournalBeforeCapsule(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	in := inspect(t, srv.url)
	meta := events.CapsuleMeta{RunID: "run-20260905-order-0004", CapsuleID: "cap-order-0004-a", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	lines := entries(t, meta, 5)
	subj := journalSubject("live", meta.RunID, meta.CapsuleID)
	dir := filepath.Join(t.TempDir(), "order")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	appendFile(t, filepath.Join(dir, "journal.ndjson"), joinLines(lines[:3]))

	f := startPub(t, "journal", "--follow", "--json", "--server", srv.url, "--room", "room:live", dir)
	time.Sleep(700 * time.Millisecond)
	if !f.running() {
		t.Fatalf("the follower gave up before capsule.json was written: exit %d\n%s%s", f.cmd.ProcessState.ExitCode(), f.stdout, f.err)
	}
	writeCapsuleJSON(t, dir, meta)
	appendFile(t, filepath.Join(dir, "journal.ndjson"), joinLines(lines[3:]))
	in.waitCount(subj, 5, 10*time.Second)
	in.expectLines(subj, lines)
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	if status := f.wait(t, 10*time.Second); status != 0 {
		t.Errorf("follower: exit %d after SIGTERM, want 0\n%s%s", status, f.stdout, f.err)
	}
}

// recordLine is one line of `publisher execution --json`.
type recordLine struct {
	File string `json:"file"`
	OK   bool   `json:"ok"`
	Room string `json:"room"`
	Item struct {
		Outcome   string `json:"outcome"`
		Hash      string `json:"hash"`
		StreamSeq uint64 `json:"stream_seq"`
		Subject   string `json:"subject"`
		Code      string `json:"code"`
		At        *struct {
			Pointer string `json:"pointer"`
		} `json:"at"`
	} `json:"item"`
}

func recordLines(t *testing.T, stdout string) []recordLine {
	t.Helper()
	var out []recordLine
	for _, l := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		var r recordLine
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("not a JSON line: %v\n%s", err, stdout)
		}
		out = append(out, r)
	}
	return out
}

// TestShipRecords: the reference records are stored, then duplicates at
// the same stream seqs; a record with foreign evidence and one signed by
// an untrusted host are refused and never reach the stream.
func TestShipRecords(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	in := inspect(t, srv.url)
	verified, refused := samples+"/records/verified.json", samples+"/records/refused.json"
	refs := map[string]string{
		verified: "corpus-task-pack-execution:sha256:PEaap8mlrUCWgXaNN_ov8LMrV0U6McBdaRiHIbFzaS0",
		refused:  "corpus-task-pack-execution:sha256:bOfnms-342jheEQTRshIkvucGZG2pRO1bZfNtctasY4",
	}
	// verified.json at 1 and its five markers (key, run, decision,
	// instance, the room's format), refused.json at 7.
	recSeqs := []uint64{1, 7}
	for i, outcome := range []string{"stored", "duplicate"} {
		r := runPub(t, nil, "execution", "--json", "--server", srv.url, verified, refused)
		if r.status != 0 {
			t.Fatalf("%s: exit %d\n%s%s", outcome, r.status, r.stdout, r.stderr)
		}
		lines := recordLines(t, r.stdout)
		if len(lines) != 2 {
			t.Fatalf("%d lines:\n%s", len(lines), r.stdout)
		}
		for j, l := range lines {
			file := []string{verified, refused}[j]
			if l.File != file || !l.OK || l.Room != "room:qmail-open-relay" || l.Item.Outcome != outcome ||
				l.Item.Hash != refs[file] || l.Item.StreamSeq != recSeqs[j] || l.Item.Subject != execSubject {
				t.Errorf("run %d, %s: %+v", i+1, file, l)
			}
		}
		in.expectCounts(map[string]uint64{execSubject: 2})
	}
	r := runPub(t, nil, "execution", "--server", srv.url, verified)
	if want := "duplicate " + verified + " → room:qmail-open-relay  " + refs[verified] + " at stream seq 1\n"; r.status != 0 || r.stdout != want {
		t.Errorf("text duplicate: exit %d\n got %q\nwant %q", r.status, r.stdout, want)
	}

	foreign := samples + "/records/foreign-evidence.json"
	r = runPub(t, nil, "execution", "--server", srv.url, foreign)
	want := "REFUSED   " + foreign + " → room:qmail-open-relay\n" +
		"          foreign_evidence at " + foreign + " /evidence/0/environment~1ref: evidence observed on another instance than the record's (expected \"environment:qmail-01\", got \"environment:qmail-00\")\n"
	if r.status != 1 || r.stdout != want || !strings.Contains(r.stderr, "1 of 1 records refused") {
		t.Errorf("foreign evidence: exit %d\n got %q\nwant %q\n%s", r.status, r.stdout, want, r.stderr)
	}

	// Signed by a fresh key the server does not trust.
	dir := t.TempDir()
	key := filepath.Join(dir, "host.pem")
	if r := runPub(t, nil, "keygen", "--out", key); r.status != 0 {
		t.Fatalf("keygen: %s", r.stderr)
	}
	r = runPub(t, nil, "sign", "--key", key, verified)
	if r.status != 0 {
		t.Fatalf("sign: %s", r.stderr)
	}
	signed := filepath.Join(dir, "signed.json")
	if err := os.WriteFile(signed, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runPub(t, nil, "execution", "--json", "--server", srv.url, signed)
	if l := recordLines(t, r.stdout); r.status != 1 || len(l) != 1 || l[0].OK || l[0].Item.Outcome != "refused" ||
		l[0].Item.Code != "untrusted_host" || l[0].Room != "room:qmail-open-relay" {
		t.Errorf("untrusted host: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	r = runPub(t, nil, "execution", "--server", srv.url, signed)
	if r.status != 1 || !strings.Contains(r.stdout, "untrusted_host at "+signed) {
		t.Errorf("untrusted host (text): exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}

	// A file that cannot be read has its own line, in the order given, and
	// does not stop the records around it (already stored: duplicates).
	missing := filepath.Join(dir, "missing.json")
	r = runPub(t, nil, "execution", "--json", "--server", srv.url, verified, missing, refused)
	if l := recordLines(t, r.stdout); r.status != 2 || len(l) != 3 || l[0].File != verified || l[0].Item.Outcome != "duplicate" ||
		l[1].File != missing || l[1].OK || l[1].Item.Outcome != "failed" || !strings.Contains(r.stdout, "no such file") ||
		l[2].File != refused || l[2].Item.Outcome != "duplicate" {
		t.Errorf("a missing file among records (--json): exit %d, want 2\n%s%s", r.status, r.stdout, r.stderr)
	}
	r = runPub(t, nil, "execution", "--server", srv.url, missing, verified)
	if lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); r.status != 2 || len(lines) != 2 ||
		!strings.HasPrefix(lines[0], "FAILED    "+missing+": open ") || !strings.HasPrefix(lines[1], "duplicate ") {
		t.Errorf("a missing file among records (text): exit %d, want 2\n%s%s", r.status, r.stdout, r.stderr)
	}

	// Only the two accepted records are in the stream, in canonical form.
	in.expectCounts(map[string]uint64{execSubject: 2})
	msgs := in.read(execSubject)
	for i, file := range []string{verified, refused} {
		raw, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := events.ParseRecord(raw)
		if err != nil {
			t.Fatal(err)
		}
		if i >= len(msgs) || msgs[i].seq != recSeqs[i] || !bytes.Equal(msgs[i].data, rec.Canonical()) {
			t.Errorf("stream message %d is not the canonical %s", i+1, file)
		}
	}
}

// closedPort returns a local port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// TestShipUsageAndConnection: bad room ids and non-capsule directories
// exit 2 without sending anything; no server exits 2 with a clear message;
// NATS_URL stands in for --server, and --server wins over it.
func TestShipUsageAndConnection(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	in := inspect(t, srv.url)

	for _, room := range []string{"room:eval slugify", "eval-slugify", "room:", "room:tab\there"} {
		r := runPub(t, nil, "journal", "--server", srv.url, "--room", room, csvDir)
		if r.status != 2 || r.stdout != "" || !strings.Contains(r.stderr, "--room") {
			t.Errorf("--room %q: exit %d, stdout %q, stderr %q; want 2 and a message naming --room", room, r.status, r.stdout, r.stderr)
		}
	}
	empty := t.TempDir()
	for _, dir := range []string{empty, filepath.Join(empty, "missing"), samples + "/records"} {
		r := runPub(t, nil, "journal", "--server", srv.url, "--room", "room:x", dir)
		if r.status != 2 || !strings.Contains(r.stderr, "is not a capsule directory") {
			t.Errorf("journal %s: exit %d\n%s%s", dir, r.status, r.stdout, r.stderr)
		}
	}
	if r := runPub(t, nil, "execution", "--server", srv.url, samples+"/no-such-record.json"); r.status != 2 ||
		!strings.HasPrefix(r.stdout, "FAILED    "+samples+"/no-such-record.json: open ") || !strings.Contains(r.stderr, "of 1 records, 1 could not be read") {
		t.Errorf("missing record file: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	in.expectCounts(map[string]uint64{})

	// Nothing listens.
	nowhere := fmt.Sprintf("nats://127.0.0.1:%d", closedPort(t))
	for _, args := range [][]string{
		{"journal", "--server", nowhere, "--room", "room:x", csvDir},
		{"execution", "--server", nowhere, samples + "/records/verified.json"},
	} {
		start := time.Now()
		r := runPub(t, nil, args...)
		if r.status != 2 || r.stdout != "" || !strings.Contains(r.stderr, "publisher: connect "+nowhere+": nats: no servers available for connection") {
			t.Errorf("%s with no server: exit %d, stdout %q, stderr %q", args[0], r.status, r.stdout, r.stderr)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s with no server took %s to give up", args[0], d)
		}
	}

	// NATS_URL instead of --server; --server wins over it.
	env := []string{"NATS_URL=" + srv.url}
	r := runPub(t, env, "journal", "--json", "--room", "room:eval-csv", csvDir)
	if r.status != 0 {
		t.Fatalf("journal with NATS_URL: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	csv := fileLines(t, csvDir+"/journal.ndjson")
	expectShip(t, oneShipLine(t, r), "room:eval-csv", 0, 14, 14, headOf(t, csv), 14)
	if r := runPub(t, env, "execution", samples+"/records/verified.json"); r.status != 0 || !strings.HasPrefix(r.stdout, "stored ") {
		t.Errorf("execution with NATS_URL: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	if r := runPub(t, []string{"NATS_URL=" + nowhere}, "execution", "--server", srv.url, samples+"/records/verified.json"); r.status != 0 || !strings.HasPrefix(r.stdout, "duplicate ") {
		t.Errorf("--server over NATS_URL: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	if r := runPub(t, []string{"NATS_URL=" + nowhere}, "journal", "--room", "room:eval-csv", csvDir); r.status != 2 || !strings.Contains(r.stderr, "connect "+nowhere) {
		t.Errorf("journal with NATS_URL to nowhere: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	in.expectCounts(map[string]uint64{
		journalSubject("eval-csv", "run-20260903-csv-dedupe-0009", "cap-csv-dedupe-0009"): 14,
		execSubject: 1,
	})
}

// TestMakeRunLeavesNothingBehind runs the `make run` script with its own
// TMPDIR: it exits 0, its server is gone, and so is its temporary
// directory.
func TestMakeRunLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, samples, "run.sh"), publisher, subscriberBin(t))
	cmd.Dir = root
	cmd.Env = childEnv("TMPDIR=" + tmp)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "\nmake run: OK: ") {
		t.Fatalf("run.sh: %v\n%s", err, out)
	}
	for _, want := range []string{
		"as expected  exit 0: 3a. ship a 299-entry capsule",
		"as expected  exit 1: 3d. ship the tampered capsule",
		"as expected  exit 1: 4b. one refused record",
		"as expected  server stopped, no process left behind",
		"as expected  exit 0: 6a. every message attested, every checkpoint verified",
		"as expected  the audit verified the rooms' checkpoints",
		"as expected  exit 0: 6b. an inclusion proof of entry 4 of room:eval-csv",
		"\nvalid: room:eval-csv (rooms.eval-csv.journal.run-20260903-csv-dedupe-0009.cap-csv-dedupe-0009) is leaf 4 of the checkpoint of size 14 signed by node:did:key:",
		"as expected  exit 0: 6c. check the proof offline",
		"as expected  exit 1: 6d. the same proof claiming another leaf is refused",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("run.sh output lacks %q", want)
		}
	}
	if procs := processesMentioning(t, tmp); len(procs) > 0 {
		t.Errorf("processes left behind: %v", procs)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("run.sh left %d entries in its TMPDIR", len(left))
	}
}

// processesMentioning lists the processes whose command line contains s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	pids, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil || len(pids) == 0 {
		t.Skip("no /proc to look for processes in")
	}
	var out []string
	for _, p := range pids {
		cmdline, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		if bytes.Contains(cmdline, []byte(s)) {
			out = append(out, filepath.Base(filepath.Dir(p))+": "+string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return out
}

// TestFollowWaitsForServer: `publisher journal --follow` started before
// any server is up waits for one, saying so once on stderr, and ships
// once it comes (it exited at once with "no servers available"), as it
// rides out a restart: a harness need not start it after the server.
func TestFollowWaitsForServer(t *testing.T) {
	t.Parallel()
	listen := fmt.Sprintf("127.0.0.1:%d", closedPort(t))
	meta := events.CapsuleMeta{RunID: "run-20260905-early-0006", CapsuleID: "cap-early-0006-a", HarnessVersion: "ecc-eval-harness/1.4.2", TaskFamily: "slugify"}
	lines := entries(t, meta, 12)
	subj := journalSubject("live", meta.RunID, meta.CapsuleID)
	dir := filepath.Join(t.TempDir(), "early")
	journal := filepath.Join(dir, "journal.ndjson")
	writeCapsuleJSON(t, dir, meta)
	appendFile(t, journal, joinLines(lines[:5]))

	f := startPub(t, "journal", "--follow", "--json", "--server", "nats://"+listen, "--timeout", "5s", "--room", "room:live", dir)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the follower's stdout:\n%s\nstderr:\n%s", f.stdout, f.err)
		}
	})
	time.Sleep(1500 * time.Millisecond)
	if !f.running() {
		t.Fatalf("the follower gave up with no server: exit %d\n%s%s", f.cmd.ProcessState.ExitCode(), f.stdout, f.err)
	}
	waiting := regexp.MustCompile(`(?m)^publisher: no server at nats://` + regexp.QuoteMeta(listen) + ` yet \(.*\): waiting for one$`)
	if n := len(waiting.FindAllString(f.err.String(), -1)); n != 1 {
		t.Fatalf("%d waiting messages on stderr, want 1:\n%s", n, f.err)
	}

	srv := startServerOn(t, t.TempDir(), listen)
	in := inspect(t, srv.url)
	in.waitCount(subj, 5, 20*time.Second)
	appendFile(t, journal, joinLines(lines[5:]))
	in.waitCount(subj, 12, 10*time.Second)
	in.expectCounts(map[string]uint64{subj: 12})
	in.expectLines(subj, lines)
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	if status := f.wait(t, 10*time.Second); status != 0 {
		t.Errorf("follower: exit %d after SIGTERM, want 0\n%s%s", status, f.stdout, f.err)
	}
	if n := len(waiting.FindAllString(f.err.String(), -1)); n != 1 || strings.Count(f.err.String(), "\n") != 1 {
		t.Errorf("stderr, want the one waiting message:\n%s", f.err)
	}
}
