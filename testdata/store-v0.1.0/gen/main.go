// Command gen wrote testdata/store-v0.1.0: a JetStream store written by
// roompub v0.1.0 through its command line only, with the keys, capsules and
// records it was written from. It is kept for the record: the store must
// never be written again by a later release (see ../README.md).
//
// It builds capsules with its own RFC 8785 writer (strings, integers and
// decimals only; `publisher verify` checks every file before it is
// shipped) and uses nothing of the module, so it records how the store was
// made whatever the packages become. With the v0.1.0 binaries in BIN
// (`make build BIN=...`), from the repository root:
//
//	go run ./testdata/store-v0.1.0/gen -bin BIN
//
// It refuses to run when the output directory already holds a store.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// The rooms of the store.
const (
	alpha = "room:store-alpha"
	beta  = "room:store-beta"
	gamma = "room:store-gamma"
)

var rooms = []string{alpha, beta, gamma}

func main() {
	bin := flag.String("bin", "bin", "directory holding the v0.1.0 publisher and subscriber binaries")
	out := flag.String("out", "testdata/store-v0.1.0", "directory to write into")
	ref := flag.String("ref", "testdata/reference/execution-records", "the reference execution records to re-sign")
	flag.Parse()
	g := &gen{publisher: filepath.Join(*bin, "publisher"), subscriber: filepath.Join(*bin, "subscriber"), out: *out, ref: *ref}
	if err := g.run(); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

type gen struct {
	publisher, subscriber, out, ref string
	publisherID, hostID             string
	tmp                             string
}

func (g *gen) path(p ...string) string { return filepath.Join(append([]string{g.out}, p...)...) }

func (g *gen) run() error {
	if _, err := os.Stat(g.path("store")); err == nil {
		return fmt.Errorf("%s exists: the store is never written again", g.path("store"))
	}
	var err error
	if g.tmp, err = os.MkdirTemp("", "store-gen-"); err != nil {
		return err
	}
	defer os.RemoveAll(g.tmp)
	version, err := g.cmd(g.publisher, "--version")
	if err != nil {
		return err
	}
	fmt.Printf("binaries: %s (publisher --version %s)\n", filepath.Dir(g.publisher), strings.TrimSpace(version))

	// The keys: the publisher key attests and signs checkpoints, the host
	// key signs the execution records.
	if err := os.MkdirAll(g.path("keys"), 0o755); err != nil {
		return err
	}
	if g.publisherID, err = g.keygen("publisher-key.pem"); err != nil {
		return err
	}
	if g.hostID, err = g.keygen("host-key.pem"); err != nil {
		return err
	}

	// The capsules: what each room holds in the end, and the line that
	// would continue alpha-2 and another entry at its last position.
	a1 := newCapsule("run-20260910-store-alpha-1", "cap-alpha-1", "smoke", 12)
	a2 := newCapsule("run-20260910-store-alpha-2", "cap-alpha-2", "csv-dedupe", 31)
	b1 := newCapsule("run-20260910-store-beta-1", "cap-beta-1", "slugify", 47)
	c1 := newCapsule("run-20260910-store-gamma-1", "cap-gamma-1", "smoke", 5)
	next := a2.lines[30]
	fork := a2.fork(29)
	a2.lines = a2.lines[:30]
	caps := []capsule{a1, a2, b1, c1}
	for _, c := range caps {
		if err := c.write(g.path("capsules", c.capsuleID), len(c.lines)); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(g.path("gate"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(g.path("gate", "alpha-2-next.ndjson"), append(next, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(g.path("gate", "alpha-2-fork.ndjson"), append(fork, '\n'), 0o644); err != nil {
		return err
	}

	// The records: the reference records, moved into the store's rooms and
	// signed with the host key.
	recs := map[string]string{}
	for _, r := range []struct{ name, ref, room string }{
		{"gamma-verified", "verified.json", gamma},
		{"gamma-refused", "refused.json", gamma},
		{"alpha-verified", "verified.json", alpha},
	} {
		if recs[r.name], err = g.record(r.name, r.ref, r.room); err != nil {
			return err
		}
	}
	args := []string{"verify", "--trusted-host", g.hostID}
	for _, c := range caps {
		args = append(args, g.path("capsules", c.capsuleID))
	}
	for _, n := range []string{"gamma-verified", "gamma-refused", "alpha-verified"} {
		args = append(args, recs[n])
	}
	if _, err := g.cmd(g.publisher, args...); err != nil {
		return err
	}

	// First serve: part of alpha-2 and beta-1, all of alpha-1 and gamma-1,
	// one record; checkpoints by the interval (10s), waited for.
	srv, err := g.serve()
	if err != nil {
		return err
	}
	for _, s := range []struct {
		room string
		c    capsule
		n    int
	}{{alpha, a1, 12}, {alpha, a2, 20}, {beta, b1, 25}, {gamma, c1, 5}} {
		if err := g.ship(srv, s.room, s.c, s.n); err != nil {
			return srv.stopWith(err)
		}
	}
	if err := g.execution(srv, recs["gamma-verified"]); err != nil {
		return srv.stopWith(err)
	}
	if err := g.waitCovered(srv.url); err != nil {
		return srv.stopWith(err)
	}
	if err := srv.stop(); err != nil {
		return err
	}

	// Second serve: the rest of alpha-2 and beta-1, two records and one
	// again (a duplicate); SIGTERM at once writes the final checkpoints.
	if srv, err = g.serve(); err != nil {
		return err
	}
	for _, s := range []struct {
		room string
		c    capsule
		n    int
	}{{alpha, a2, 30}, {beta, b1, 47}} {
		if err := g.ship(srv, s.room, s.c, s.n); err != nil {
			return srv.stopWith(err)
		}
	}
	if err := g.execution(srv, recs["alpha-verified"], recs["gamma-refused"], recs["gamma-verified"]); err != nil {
		return srv.stopWith(err)
	}
	if err := srv.stop(); err != nil {
		return err
	}

	// Third serve: nothing shipped; every room must be covered by a
	// checkpoint, and the audits are the store's facts.
	if srv, err = g.serve(); err != nil {
		return err
	}
	if err := g.waitCovered(srv.url); err != nil {
		return srv.stopWith(err)
	}
	var report bytes.Buffer
	fmt.Fprintf(&report, "# The audits of the store as written, by the subscriber of the binaries that wrote it (--version %s),\n"+
		"# trusting the publisher key %s and the host key %s.\n", strings.TrimSpace(version), g.publisherID, g.hostID)
	for _, r := range append([]string{""}, rooms...) {
		args := g.auditArgs(srv.url)
		if r != "" {
			args = append(args, "--room", r)
		}
		text, err := g.cmd(g.subscriber, args...)
		if err != nil {
			return srv.stopWith(err)
		}
		label := ""
		if r != "" {
			label = " --room " + r
		}
		fmt.Fprintf(&report, "\n$ subscriber audit%s\n%s", label, text)
	}
	if err := srv.stop(); err != nil {
		return err
	}
	// The lock is serve's while it runs, not state.
	if err := os.Remove(g.path("store", "roompub.lock")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.WriteFile(g.path("audit-v0.1.0.txt"), report.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Print(report.String())
	fmt.Printf("publisher key %s\nhost key      %s\n", g.publisherID, g.hostID)
	return nil
}

// cmd runs a binary and returns its stdout; a non-zero exit is an error.
func (g *gen) cmd(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	c := exec.CommandContext(ctx, bin, args...)
	c.Stdout, c.Stderr = &out, &errOut
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String(), nil
}

// keygen writes keys/name and returns its node id.
func (g *gen) keygen(name string) (string, error) {
	id, err := g.cmd(g.publisher, "keygen", "--out", g.path("keys", name))
	if err != nil {
		return "", err
	}
	id = strings.TrimSpace(id)
	return id, os.WriteFile(g.path("keys", strings.TrimSuffix(name, ".pem")+".id"), []byte(id+"\n"), 0o644)
}

// record writes records/name.json: the reference record ref with its
// room/id set to roomID, signed with the host key.
func (g *gen) record(name, ref, roomID string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(g.ref, ref))
	if err != nil {
		return "", err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var r map[string]any
	if err := dec.Decode(&r); err != nil {
		return "", fmt.Errorf("%s: %v", ref, err)
	}
	r["room/id"] = roomID
	unsigned := filepath.Join(g.tmp, name+".json")
	if err := os.WriteFile(unsigned, canon(r), 0o644); err != nil {
		return "", err
	}
	signed, err := g.cmd(g.publisher, "sign", "--key", g.path("keys", "host-key.pem"), unsigned)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(g.path("records"), 0o755); err != nil {
		return "", err
	}
	file := g.path("records", name+".json")
	return file, os.WriteFile(file, []byte(signed), 0o644)
}

// ship ships the first n lines of c into roomID (from a copy in tmp, so a
// shipment can stop part way).
func (g *gen) ship(srv *server, roomID string, c capsule, n int) error {
	dir := filepath.Join(g.tmp, "ship", c.capsuleID)
	if err := c.write(dir, n); err != nil {
		return err
	}
	out, err := g.cmd(g.publisher, "journal", "--server", srv.url, "--room", roomID, dir)
	fmt.Print(out)
	return err
}

// execution ships record files.
func (g *gen) execution(srv *server, files ...string) error {
	out, err := g.cmd(g.publisher, append([]string{"execution", "--server", srv.url}, files...)...)
	fmt.Print(out)
	return err
}

func (g *gen) auditArgs(url string) []string {
	return []string{"audit", "--server", url, "--trusted-publisher", g.publisherID, "--trusted-host", g.hostID,
		"--state-dir", filepath.Join(g.tmp, "state-"+fmt.Sprint(time.Now().UnixNano()))}
}

// waitCovered waits until each room's latest checkpoint covers every
// message of the room, as `subscriber audit --json` reads it.
func (g *gen) waitCovered(url string) error {
	deadline := time.Now().Add(45 * time.Second)
	for {
		out, err := g.cmd(g.subscriber, append(g.auditArgs(url), "--json")...)
		if err != nil {
			return err
		}
		var rep struct {
			Checkpoints []struct {
				Room     string `json:"room"`
				Admitted uint64 `json:"admitted"`
				Latest   *struct {
					Size uint64 `json:"size"`
				} `json:"latest"`
			} `json:"checkpoints"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			return err
		}
		covered := 0
		for _, c := range rep.Checkpoints {
			if c.Latest != nil && c.Latest.Size == c.Admitted {
				covered++
			}
		}
		if covered == len(rooms) && len(rep.Checkpoints) == len(rooms) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rooms not covered by checkpoints after 45s:\n%s", out)
		}
		time.Sleep(time.Second)
	}
}

// server is one `publisher serve` on the store.
type server struct {
	cmd    *exec.Cmd
	url    string
	log    *bytes.Buffer
	exited chan error
}

var servingRE = regexp.MustCompile(`(?m)^publisher: serving on (nats://\S+) `)

// serve starts `publisher serve` on the store, attesting and
// checkpointing with the publisher key, and waits until it serves.
func (g *gen) serve() (*server, error) {
	s := &server{log: &bytes.Buffer{}, exited: make(chan error, 1)}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(g.publisher, "serve", "--listen", "127.0.0.1:-1", "--store-dir", g.path("store"),
		"--publisher-key", g.path("keys", "publisher-key.pem"), "--trusted-host", g.hostID, "--log-level", "warn")
	s.cmd.Stderr = pw
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	pw.Close()
	lines := make(chan string)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := pr.Read(buf)
			if n > 0 {
				lines <- string(buf[:n])
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	go func() { s.exited <- s.cmd.Wait() }()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return nil, fmt.Errorf("publisher serve ended before serving:\n%s", s.log)
			}
			s.log.WriteString(l)
			if m := servingRE.FindStringSubmatch(s.log.String()); m != nil {
				s.url = m[1]
				go func() {
					for l := range lines {
						os.Stderr.WriteString(l)
					}
				}()
				return s, nil
			}
		case <-timeout:
			_ = s.cmd.Process.Kill()
			return nil, fmt.Errorf("publisher serve did not serve within 30s:\n%s", s.log)
		}
	}
}

// stop ends serve with SIGTERM, which writes the final checkpoints; it
// must exit 0.
func (s *server) stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		if err != nil {
			return fmt.Errorf("publisher serve after SIGTERM: %v", err)
		}
		return nil
	case <-time.After(45 * time.Second):
		_ = s.cmd.Process.Kill()
		return errors.New("publisher serve did not stop within 45s of SIGTERM")
	}
}

func (s *server) stopWith(err error) error { return errors.Join(err, s.stop()) }

// capsule is one capsule's metadata and canonical journal lines.
type capsule struct {
	runID, capsuleID, family string
	lines                    [][]byte
}

const harness = "store-harness/0.1.0"

func (c capsule) meta() map[string]any {
	return map[string]any{"schema": "capsule-envelope/v1", "run_id": c.runID, "capsule_id": c.capsuleID,
		"harness_version": harness, "task_family": c.family}
}

// newCapsule builds n hash-chained entries: a small eval run cycling
// through plan, strategy, attempt, interaction and environment entries,
// with a null exit code, decimals and non-ASCII text among the values.
func newCapsule(runID, capsuleID, family string, n int) capsule {
	c := capsule{runID: runID, capsuleID: capsuleID, family: family}
	parent := strings.Repeat("0", 64)
	for i := range n {
		e := c.entry(i, parent, step(family, i))
		c.lines = append(c.lines, e)
		parent = hashOf(e)
	}
	return c
}

// fork returns another entry at position i, chained to the same parent.
func (c capsule) fork(i int) []byte {
	parent := strings.Repeat("0", 64)
	if i > 0 {
		parent = hashOf(c.lines[i-1])
	}
	p := step(c.family, i)
	p.payload["note"] = "a second entry at a position already held"
	return c.entry(i, parent, p)
}

type stepT struct {
	kind, lineage, effect string
	payload               map[string]any
}

func step(family string, i int) stepT {
	task := fmt.Sprintf("t%02d", i/6+1)
	switch i % 6 {
	case 0:
		return stepT{"gate.start", "plan", "SE0", map[string]any{"task_id": task, "task_family": family, "stage": "eval", "message": "début – naïve run"}}
	case 1:
		return stepT{"strategy.select", "strategy", "SE0", map[string]any{"task_id": task, "branch_id": task + "-b1", "decision": "retry-on-fail", "reason": "flaky fixture"}}
	case 2:
		return stepT{"tool.call", "interaction", "SE1", map[string]any{"task_id": task, "tool": "bash", "tool_call_id": fmt.Sprintf("call-%03d", i), "args_hash": "sha256:" + hex.EncodeToString(sha([]byte(task)))[:16]}}
	case 3:
		return stepT{"tool.result", "environment", "SE1", map[string]any{"task_id": task, "tool_call_id": fmt.Sprintf("call-%03d", i-1), "status": "ok", "exit_code": nil, "duration_ms": json.Number(fmt.Sprintf("%d.5", 10+i))}}
	case 4:
		return stepT{"model.usage", "attempt", "SE0", map[string]any{"task_id": task, "model": "m-small", "tokens_in": 100 + i, "tokens_out": 20 + i, "cost_usd": json.Number("0.0042")}}
	default:
		return stepT{"gate.end", "plan", "SE0", map[string]any{"task_id": task, "passed": 1, "failed": 0, "total": 1, "score": json.Number("0.75"), "verdict": "pass"}}
	}
}

func (c capsule) entry(i int, parent string, s stepT) []byte {
	e := c.meta()
	e["seq"] = i
	e["ts"] = time.Date(2026, 9, 10, 9, 0, 0, 0, time.UTC).Add(time.Duration(i) * 250 * time.Millisecond).Format("2006-01-02T15:04:05.000Z")
	e["lineage"], e["kind"], e["effect_class"] = s.lineage, s.kind, s.effect
	e["parent_hash"], e["payload"] = parent, s.payload
	e["entry_hash"] = hex.EncodeToString(sha(canon(e)))
	return canon(e)
}

// write writes the capsule directory dir with the first n lines.
func (c capsule) write(dir string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	m := c.meta()
	m["created_at"] = "2026-09-10T09:00:00.000Z"
	if err := os.WriteFile(filepath.Join(dir, "capsule.json"), append(canon(m), '\n'), 0o644); err != nil {
		return err
	}
	var b bytes.Buffer
	for _, l := range c.lines[:n] {
		b.Write(l)
		b.WriteByte('\n')
	}
	return os.WriteFile(filepath.Join(dir, "journal.ndjson"), b.Bytes(), 0o644)
}

// canon is RFC 8785 for this data: ASCII keys (encoding/json sorts them),
// strings without control characters, integers and canonical decimals.
func canon(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func sha(b []byte) []byte { h := sha256.Sum256(b); return h[:] }

// hashOf is the entry_hash of a canonical line.
func hashOf(line []byte) string {
	var e struct {
		EntryHash string `json:"entry_hash"`
	}
	if err := json.Unmarshal(line, &e); err != nil {
		panic(err)
	}
	return e.EntryHash
}
