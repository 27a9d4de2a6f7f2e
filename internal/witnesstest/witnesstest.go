// Package witnesstest runs real witnesses for tests: litewitness and
// witnessctl of filippo.io/torchwood, the version go.mod's tool directives
// pin, built from this module and run as separate processes on loopback,
// each with its own key (served by an ssh-agent in the test process), name
// and sqlite database. Only tests import it.
package witnesstest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

const torchwood = "filippo.io/torchwood"

// tb is what the harness needs of a testing.TB; Launch gives it one that
// turns a failure into an error, for the tools that run witnesses outside
// tests (make run).
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Cleanup(func())
}

// Group is witnesses started by Launch, outside a test.
type Group struct {
	Witnesses []*Witness
	r         *runner
}

// Launch is Start outside a test: it returns the running witnesses, or
// the first failure as an error (and stops what it started). Close stops
// them and removes their directories. A failure of a Witness method
// afterwards (Start, Stop, AddKey) panics with that error.
func Launch(n int, logs ...Log) (g *Group, err error) {
	r := &runner{}
	defer func() {
		if v := recover(); v != nil {
			le, ok := v.(launchError)
			if !ok {
				panic(v)
			}
			r.close()
			g, err = nil, le.err
		}
	}()
	return &Group{Witnesses: start(r, n, logs), r: r}, nil
}

// Close stops the witnesses and removes their directories.
func (g *Group) Close() { g.r.close() }

type launchError struct{ err error }

// runner is the tb of Launch: a failure panics with a launchError, and
// cleanups run on close, last added first.
type runner struct {
	mu       sync.Mutex
	cleanups []func()
}

func (r *runner) Helper()                        {}
func (r *runner) Fatal(args ...any)              { panic(launchError{errors.New(fmt.Sprint(args...))}) }
func (r *runner) Fatalf(format string, a ...any) { panic(launchError{fmt.Errorf(format, a...)}) }
func (r *runner) Skipf(format string, a ...any)  { panic(launchError{fmt.Errorf(format, a...)}) }
func (r *runner) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *runner) close() {
	r.mu.Lock()
	cs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// Log is a log the witnesses accept: its origin and its Ed25519 note
// verifier key (type 0x01), whose name should be the origin.
type Log struct {
	Origin string
	VKey   string
}

// Witness is one litewitness process and what it keeps between runs: its
// key, name, listening address and database.
type Witness struct {
	// Name is the witness's key name, URL-like: witness-<i>.roompub.test.
	Name string
	// URL is its submission prefix, http://127.0.0.1:<port>; it stays the
	// same across Stop and Start.
	URL string
	// VKey is its cosignature verifier key (type 0x04), computed from the
	// key and checked against the one litewitness logs at start.
	VKey string
	// PublicKey is its Ed25519 public key.
	PublicKey ed25519.PublicKey
	// DB is the path of its sqlite database.
	DB string

	t           tb
	bins        binaries
	addr        string
	sock        string
	fingerprint string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	stderr *syncBuffer
}

type binaries struct{ litewitness, witnessctl string }

var (
	buildOnce sync.Once
	built     binaries
	buildErr  error
)

// build builds litewitness and witnessctl once per test binary, into a
// directory under the user cache keyed by the torchwood and Go versions,
// written by rename so concurrent test binaries never see half a file.
func build(t tb) binaries {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("witnesstest: no go command to build litewitness: %v", err)
	}
	buildOnce.Do(func() { built, buildErr = buildBinaries(goCmd) })
	if buildErr != nil {
		t.Fatalf("witnesstest: %v", buildErr)
	}
	return built
}

func buildBinaries(goCmd string) (binaries, error) {
	out, err := exec.Command(goCmd, "list", "-m", "-f", "{{.Version}} {{.Dir}}", torchwood).Output()
	if err != nil {
		return binaries{}, fmt.Errorf("go list -m %s: %w (is it in go.mod's tool directives?)", torchwood, errOutput(err))
	}
	version, _, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	gomod, err := exec.Command(goCmd, "env", "GOMOD").Output()
	if err != nil {
		return binaries{}, fmt.Errorf("go env GOMOD: %w", errOutput(err))
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "roompub-witnesstest", "torchwood-"+version+"-"+runtime.Version())
	b := binaries{filepath.Join(dir, "litewitness"), filepath.Join(dir, "witnessctl")}
	if isFile(b.litewitness) && isFile(b.witnessctl) {
		return b, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return binaries{}, err
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return binaries{}, err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command(goCmd, "build", "-o", tmp+string(filepath.Separator),
		torchwood+"/cmd/litewitness", torchwood+"/cmd/witnessctl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return binaries{}, fmt.Errorf("go build litewitness, witnessctl %s: %v\n%s", version, err, out)
	}
	for _, name := range []string{"litewitness", "witnessctl"} {
		if err := os.Rename(filepath.Join(tmp, name), filepath.Join(dir, name)); err != nil {
			return binaries{}, err
		}
	}
	return b, nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func errOutput(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%v: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}

// Start starts n witnesses, witness-1.roompub.test to
// witness-<n>.roompub.test, each accepting logs, and waits until each
// answers HTTP. They are stopped, their agents closed and their
// directories removed when the test ends.
func Start(t testing.TB, n int, logs ...Log) []*Witness {
	t.Helper()
	return start(t, n, logs)
}

func start(t tb, n int, logs []Log) []*Witness {
	t.Helper()
	bins := build(t)
	ws := make([]*Witness, n)
	for i := range ws {
		ws[i] = newWitness(t, bins, fmt.Sprintf("witness-%d.roompub.test", i+1))
		for _, l := range logs {
			ws[i].register(l)
		}
		ws[i].Start()
	}
	return ws
}

func newWitness(t tb, bins binaries, name string) *Witness {
	t.Helper()
	// A short directory of its own: a unix socket path must stay under
	// 108 bytes, which t.TempDir's test-named paths may not.
	dir, err := os.MkdirTemp("", "wt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	keyring := agent.NewKeyring()
	if err := keyring.Add(agent.AddedKey{PrivateKey: priv}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("witnesstest: agent socket: %v", err)
	}
	var conns sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				agent.ServeAgent(keyring, c)
			})
		}
	}()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	w := &Witness{
		Name:        name,
		URL:         "http://" + addr,
		VKey:        cosignatureVKey(name, pub),
		PublicKey:   pub,
		DB:          filepath.Join(dir, "w.db"),
		t:           t,
		bins:        bins,
		addr:        addr,
		sock:        sock,
		fingerprint: ssh.FingerprintSHA256(sshPub),
	}
	// Cleanups run last-added first: the process stops before the agent
	// closes and the directory goes.
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	t.Cleanup(w.Stop)
	return w
}

// cosignatureVKey is name+hash+base64(0x04 || key), the C2SP
// tlog-cosignature verifier key, hash being the first 4 bytes of
// SHA-256(name || "\n" || 0x04 || key).
func cosignatureVKey(name string, pub ed25519.PublicKey) string {
	raw := append([]byte{0x04}, pub...)
	h := sha256.Sum256(append([]byte(name+"\n"), raw...))
	return fmt.Sprintf("%s+%08x+%s", name, binary.BigEndian.Uint32(h[:4]), base64.StdEncoding.EncodeToString(raw))
}

// Running reports whether the process runs.
func (w *Witness) Running() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cmd != nil
}

// Start runs litewitness on the witness's database, address and key, and
// waits until it answers HTTP (at most 15 s). What the database holds
// (logs, keys, the size and root cosigned per log) survives Stop and
// Start. Starting a running witness fails the test.
func (w *Witness) Start() {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd != nil {
		w.t.Fatalf("witnesstest: %s already running", w.Name)
	}
	cmd := exec.Command(w.bins.litewitness,
		"-name", w.Name, "-db", w.DB, "-ssh-agent", w.sock,
		"-listen", w.addr, "-key", w.fingerprint)
	cmd.Dir = filepath.Dir(w.DB)
	stderr := &syncBuffer{}
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		w.t.Fatalf("witnesstest: starting litewitness: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	w.cmd, w.done, w.stderr = cmd, done, stderr

	deadline := time.Now().Add(15 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-done:
			w.cmd = nil
			w.t.Fatalf("witnesstest: litewitness %s exited at start: %v\n%s", w.Name, cmd.ProcessState, stderr)
		default:
		}
		resp, err := hc.Get(w.URL + "/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("witnesstest: litewitness %s does not answer on %s: %v\n%s", w.Name, w.URL, err, stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	logged := loggedVKey(stderr.String())
	if logged != w.VKey {
		w.t.Fatalf("witnesstest: litewitness %s logs verifier key %q, computed %q", w.Name, logged, w.VKey)
	}
}

var vkeyLine = regexp.MustCompile(`msg="verifier key" vkey="?([^"\s]+)"?`)

func loggedVKey(stderr string) string {
	m := vkeyLine.FindStringSubmatch(stderr)
	if m == nil {
		return ""
	}
	return m[1]
}

// Stop ends the process: SIGTERM, then SIGKILL if it has not exited
// within 5 s. Stopping a stopped witness does nothing.
func (w *Witness) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd == nil {
		return
	}
	w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
		w.cmd.Process.Kill()
		<-w.done
	}
	w.cmd = nil
}

// Log is what the process wrote to stdout and stderr since it last
// started.
func (w *Witness) Log() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stderr == nil {
		return ""
	}
	return w.stderr.String()
}

// AddLog registers a log (witnessctl add-log, then add-key). witnessctl
// writes the database litewitness holds open, so a running witness is
// stopped around it and started again.
func (w *Witness) AddLog(l Log) {
	w.t.Helper()
	w.whileStopped(func() { w.register(l) })
}

// AddKey adds another verifier key to a registered log (witnessctl
// add-key), stopping a running witness around it as AddLog does.
func (w *Witness) AddKey(origin, vkey string) {
	w.t.Helper()
	w.whileStopped(func() { w.witnessctl("add-key", "-db", w.DB, "-origin", origin, "-key", vkey) })
}

// DelKey removes a verifier key of a registered log (witnessctl del-key):
// the end of a log key's rotation. A running witness is stopped around it
// as AddLog does.
func (w *Witness) DelKey(origin, vkey string) {
	w.t.Helper()
	w.whileStopped(func() { w.witnessctl("del-key", "-db", w.DB, "-origin", origin, "-key", vkey) })
}

func (w *Witness) whileStopped(f func()) {
	w.t.Helper()
	running := w.Running()
	w.Stop()
	f()
	if running {
		w.Start()
	}
}

func (w *Witness) register(l Log) {
	w.t.Helper()
	w.witnessctl("add-log", "-db", w.DB, "-origin", l.Origin)
	w.witnessctl("add-key", "-db", w.DB, "-origin", l.Origin, "-key", l.VKey)
}

func (w *Witness) witnessctl(args ...string) {
	w.t.Helper()
	cmd := exec.Command(w.bins.witnessctl, args...)
	cmd.Dir = filepath.Dir(w.DB)
	if out, err := cmd.CombinedOutput(); err != nil {
		w.t.Fatalf("witnesstest: witnessctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

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
