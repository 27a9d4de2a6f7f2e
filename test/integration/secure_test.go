package integration

// Secure mode (least-privilege identities): the real `publisher
// serve --secure-config` with identities made by `publisher passwd` and
// `publisher nkeygen`; the harness ships with `publisher journal` and
// `publisher execution`, the solver reads with `subscriber audit` and
// `subscriber follow`, and every identity's forbidden act is tried with
// nats.go against the binary's server.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// secureSetup is a directory with a secure config and the identities'
// secret files, made with the publisher binary.
type secureSetup struct {
	dir     string
	config  string
	files   map[string]string // user -> password file; "solver" -> nkey seed file
	secrets []string          // passwords, seeds and hashes
}

func newSecureSetup(t *testing.T, extra string) *secureSetup {
	t.Helper()
	s := &secureSetup{dir: t.TempDir(), files: map[string]string{}}
	hashes := map[string]string{}
	for _, user := range []string{"publisher", "harness", "admin"} {
		f := filepath.Join(s.dir, user+".pw")
		r := pub(t, "passwd", "--cost", "10", "--out", f)
		if r.status != 0 {
			t.Fatalf("passwd --out: %d %s", r.status, r.stderr)
		}
		hashes[user] = strings.TrimSpace(r.stdout)
		pw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(f); fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s has mode %v", f, fi.Mode())
		}
		s.files[user] = f
		s.secrets = append(s.secrets, strings.TrimSpace(string(pw)), hashes[user])
	}
	nk := filepath.Join(s.dir, "solver.nk")
	r := pub(t, "nkeygen", "--out", nk)
	if r.status != 0 || !strings.HasPrefix(r.stdout, "U") {
		t.Fatalf("nkeygen: %d %q %s", r.status, r.stdout, r.stderr)
	}
	seed, _ := os.ReadFile(nk)
	s.files["solver"] = nk
	s.secrets = append(s.secrets, strings.TrimSpace(string(seed)))
	s.config = filepath.Join(s.dir, "secure.yaml")
	yaml := fmt.Sprintf(`users:
  - {role: publisher, user: publisher, password: %q}
  - {role: harness, user: harness, password: %q}
  - {role: solver, nkey: %s, durables: [solver-1]}
  - {role: admin, user: admin, password: %q}
%s`, hashes["publisher"], hashes["harness"], strings.TrimSpace(r.stdout), hashes["admin"], extra)
	if err := os.WriteFile(s.config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// noSecrets fails the test if text holds a password, seed or hash.
func (s *secureSetup) noSecrets(t *testing.T, what, text string) {
	t.Helper()
	for _, secret := range s.secrets {
		if strings.Contains(text, secret) {
			t.Errorf("%s holds a secret (password, nkey seed or bcrypt hash)", what)
		}
	}
}

var secureServingRE = regexp.MustCompile(`(?m)^publisher: serving on ((?:nats|tls)://\S+) \(stream ROOMS, service roompub-ingest\)$`)

// startSecure starts `publisher serve` in secure mode with args added.
func startSecure(t *testing.T, s *secureSetup, args ...string) *server {
	t.Helper()
	srv := &server{t: t, store: t.TempDir(), log: &syncBuffer{}, exited: make(chan struct{})}
	srv.cmd = exec.Command(publisher, append([]string{"serve", "--listen", "127.0.0.1:-1", "--store-dir", srv.store, "--trusted-host", trustedHost,
		"--secure-config", s.config, "--log-level", "debug"}, args...)...)
	srv.cmd.Dir = root
	srv.cmd.Env = childEnv()
	srv.cmd.Stderr = srv.log
	if err := srv.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = srv.cmd.Wait()
		close(srv.exited)
	}()
	t.Cleanup(srv.stop)
	deadline := time.After(20 * time.Second)
	for {
		if m := secureServingRE.FindStringSubmatch(srv.log.String()); m != nil {
			srv.url = m[1]
			return srv
		}
		select {
		case <-srv.exited:
			t.Fatalf("publisher serve exited with %d before serving:\n%s", srv.cmd.ProcessState.ExitCode(), srv.log)
		case <-deadline:
			t.Fatalf("publisher serve did not say it serves within 20s:\n%s", srv.log)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// asyncErrs collects a connection's asynchronous errors.
type asyncErrs struct {
	mu   sync.Mutex
	errs []string
}

func (a *asyncErrs) add(_ *nats.Conn, _ *nats.Subscription, err error) {
	a.mu.Lock()
	a.errs = append(a.errs, err.Error())
	a.mu.Unlock()
}

func (a *asyncErrs) expect(t *testing.T, want string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.mu.Lock()
		for _, e := range a.errs {
			if strings.Contains(e, want) {
				a.mu.Unlock()
				return e
			}
		}
		got := append([]string(nil), a.errs...)
		a.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no error containing %q; got %q", want, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func secureDial(t *testing.T, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, *asyncErrs) {
	t.Helper()
	a := &asyncErrs{}
	nc, err := nats.Connect(url, append([]nats.Option{nats.MaxReconnects(0), nats.ErrorHandler(a.add)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	return nc, js, a
}

func (s *secureSetup) password(t *testing.T, user string) string {
	t.Helper()
	b, err := os.ReadFile(s.files[user])
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestSecureServe(t *testing.T) {
	s := newSecureSetup(t, "")
	srv := startSecure(t, s, "--user", "publisher", "--password-file", s.files["publisher"])
	harness := []string{"--server", srv.url, "--user", "harness", "--password-file", s.files["harness"]}
	solver := []string{"--server", srv.url, "--nkey", s.files["solver"], "--trusted-host", trustedHost}
	var outputs []string
	keep := func(r result) result { outputs = append(outputs, r.stdout, r.stderr); return r }

	// The harness ships through the ingest service.
	r := keep(runPub(t, nil, append([]string{"journal", "--room", "room:secure"}, append(harness, csvDir)...)...))
	if r.status != 0 || !strings.Contains(r.stdout, "14 stored") {
		t.Fatalf("harness journal: %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	r = keep(runPub(t, nil, append([]string{"execution"}, append(harness, samples+"/records/verified.json")...)...))
	if r.status != 0 || !strings.HasPrefix(r.stdout, "stored") {
		t.Fatalf("harness execution: %d\n%s%s", r.status, r.stdout, r.stderr)
	}

	// The solver may not ship, nor may an anonymous client.
	r = keep(runPub(t, nil, append([]string{"journal", "--room", "room:secure", "--timeout", "2s", "--server", srv.url, "--nkey", s.files["solver"]}, csvDir)...))
	if r.status != 2 || !strings.Contains(r.stderr, `Permissions Violation for Publish to "roompub.v1.U`) || !strings.Contains(r.stderr, `.head"`) {
		t.Fatalf("solver journal: %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	t.Logf("solver ships: exit %d: %s", r.status, firstLine(r.stderr))
	r = keep(runPub(t, nil, "journal", "--room", "room:secure", "--server", srv.url, csvDir))
	if r.status != 2 || !strings.Contains(r.stderr, "Authorization Violation") {
		t.Fatalf("anonymous journal: %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	t.Logf("anonymous ships: exit %d: %s", r.status, firstLine(r.stderr))

	// The solver audits and follows, read-only.
	r = keep(subRun(t, append([]string{"audit"}, solver...)...))
	// Fifteen leaves; the record's markers are messages too.
	if r.status != 0 || !strings.Contains(r.stdout, "14 entries and 1 records verified, 0 set aside") {
		t.Fatalf("solver audit: %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "Violation") {
		t.Errorf("solver audit ran into a permission it lacks:\n%s", r.stderr)
	}
	f := subStartFollow(t, append([]string{"follow", "--room", "room:secure", "--room", "room:qmail-open-relay", "--durable", "solver-1", "--state-dir", t.TempDir()}, solver...), nil)
	f.waitFor(t, "15 events", func() bool { return strings.Count(f.stdout.String(), "\n") >= 15 })
	f.stop(t)
	outputs = append(outputs, f.stdout.String(), f.stderr.String())
	if strings.Contains(f.stderr.String(), "Violation") {
		t.Errorf("solver follow ran into a permission it lacks:\n%s", f.stderr)
	}

	// Straight to the server: every forbidden act, and nothing changes.
	ctx := context.Background()
	_, adminJS, _ := secureDial(t, srv.url, nats.UserInfo("admin", s.password(t, "admin")))
	state := func() (uint64, jetstream.StreamConfig) {
		st, err := adminJS.Stream(ctx, "ROOMS")
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().State.Msgs, st.CachedInfo().Config
	}
	msgs, cfg := state()
	hnc, hjs, herrs := secureDial(t, srv.url, nats.UserInfo("harness", s.password(t, "harness")))
	snc, sjs, serrs := secureDial(t, srv.url, nkeyFile(t, s.files["solver"]))
	_, pjs, perrs := secureDial(t, srv.url, nats.UserInfo("publisher", s.password(t, "publisher")))
	for _, c := range []struct {
		who  string
		nc   *nats.Conn
		errs *asyncErrs
	}{{"harness", hnc, herrs}, {"solver", snc, serrs}} {
		if err := c.nc.Publish(execSubject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		_ = c.nc.Flush()
		t.Logf("%s publishes on %s: %s", c.who, execSubject, c.errs.expect(t, `Permissions Violation for Publish to "`+execSubject+`"`))
	}
	for _, c := range []struct {
		who  string
		js   jetstream.JetStream
		errs *asyncErrs
	}{{"publisher", pjs, perrs}, {"harness", hjs, herrs}, {"solver", sjs, serrs}} {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.js.DeleteStream(cctx, "ROOMS")
		cancel()
		if err == nil {
			t.Fatalf("%s deleted the stream", c.who)
		}
		t.Logf("%s deletes the stream: %s", c.who, c.errs.expect(t, `Permissions Violation for Publish to "$JS.API.STREAM.DELETE.ROOMS"`))
		weak := cfg
		weak.MaxAge = time.Hour
		cctx, cancel = context.WithTimeout(ctx, time.Second)
		_, err = c.js.UpdateStream(cctx, weak)
		cancel()
		if err == nil {
			t.Fatalf("%s updated the stream", c.who)
		}
		t.Logf("%s updates the stream: %s", c.who, c.errs.expect(t, `Permissions Violation for Publish to "$JS.API.STREAM.UPDATE.ROOMS"`))
	}
	if m, c := state(); m != msgs || c.MaxAge != 0 {
		t.Fatalf("the stream changed: %d messages (was %d), max age %s", m, msgs, c.MaxAge)
	}
	upd := cfg
	upd.Description = "updated by the admin"
	if _, err := adminJS.UpdateStream(ctx, upd); err != nil {
		t.Fatalf("admin update: %v", err)
	}

	srv.stop()
	if srv.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("serve: exit %d", srv.cmd.ProcessState.ExitCode())
	}
	if !strings.Contains(srv.log.String(), `"level":"debug"`) {
		t.Fatalf("serve logged nothing at debug level:\n%s", srv.log)
	}
	s.noSecrets(t, "serve's log (debug level)", srv.log.String())
	for i, o := range outputs {
		s.noSecrets(t, fmt.Sprintf("command output %d", i), o)
	}
}

// TestSecureServeUsage: secure mode refuses what would put a secret on the
// command line or connect the publisher as another role, and says why
// without quoting a secret.
func TestSecureServeUsage(t *testing.T) {
	s := newSecureSetup(t, "")
	wrong := filepath.Join(s.dir, "wrong.pw")
	if err := os.WriteFile(wrong, []byte("not the publisher's password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := t.TempDir()
	base := []string{"serve", "--listen", "127.0.0.1:-1", "--store-dir", store, "--secure-config", s.config}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		// --password=VALUE: a random password may start with '-', which
		// the flag parser would take for a flag of its own.
		{"password on the command line", []string{"--user", "publisher", "--password=" + s.password(t, "publisher")}, "use --password-file"},
		{"no identity", nil, "give --user and --password-file, or --nkey"},
		{"the wrong password", []string{"--user", "publisher", "--password-file", wrong}, `the password does not match publisher user "publisher"`},
		{"the harness's password", []string{"--user", "harness", "--password-file", s.files["harness"]}, `no publisher-role password user named "harness"`},
		{"the solver's nkey", []string{"--nkey", s.files["solver"]}, "has role solver, not publisher"},
		{"with --server", []string{"--server", "nats://127.0.0.1:1", "--nkey", s.files["solver"]}, "--secure-config configures the embedded server"},
	} {
		r := runPub(t, nil, append(base, c.args...)...)
		if r.status != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: exit %d, want 2 and %q:\n%s", c.name, r.status, c.want, r.stderr)
		}
		s.noSecrets(t, c.name, r.stdout+r.stderr)
	}
	// A config that is not a secure config: every problem, no hash.
	bad := filepath.Join(s.dir, "bad.yaml")
	hash := s.secrets[1]
	if err := os.WriteFile(bad, []byte("users:\n  - {role: owner, user: x, password: plain-text}\n  - {role: harness, user: h, password: \""+hash+"\", nkey: UABC}\nsolver-head: \""+hash+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runPub(t, nil, "serve", "--listen", "127.0.0.1:-1", "--store-dir", store, "--secure-config", bad, "--nkey", s.files["solver"])
	if r.status != 2 || !strings.Contains(r.stderr, bad) {
		t.Errorf("bad secure config: exit %d:\n%s", r.status, r.stderr)
	}
	s.noSecrets(t, "a bad secure config's errors", r.stdout+r.stderr)
	if err := os.WriteFile(bad, []byte("users:\n  - {role: owner, user: x, password: plain-text}\n  - {role: harness, user: h, password: plain}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runPub(t, nil, "serve", "--listen", "127.0.0.1:-1", "--store-dir", store, "--secure-config", bad, "--nkey", s.files["solver"])
	for _, want := range []string{`unknown role "owner"`, "must be a bcrypt hash", "no user has the publisher role"} {
		if r.status != 2 || !strings.Contains(r.stderr, want) {
			t.Errorf("bad secure config: exit %d, want %q:\n%s", r.status, want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "plain-text") {
		t.Errorf("an error quotes a password:\n%s", r.stderr)
	}

	// --help shows no secret and no default for one.
	for _, args := range [][]string{{"--help"}, {"serve", "--help"}, {"journal", "--help"}, {"execution", "--help"}, {"passwd", "--help"}, {"nkeygen", "--help"}, {"authconf", "--help"}} {
		r := runPub(t, nil, args...)
		if r.status != 0 {
			t.Fatalf("publisher %v: %d", args, r.status)
		}
		s.noSecrets(t, fmt.Sprintf("publisher %v", args), r.stdout+r.stderr)
	}
	for _, args := range [][]string{{"follow", "--help"}, {"audit", "--help"}, {"evidence", "--help"}} {
		r := subRun(t, args...)
		s.noSecrets(t, fmt.Sprintf("subscriber %v", args), r.stdout+r.stderr)
		if !strings.Contains(r.stdout, "--password-file=FILE") {
			t.Errorf("subscriber %v: no --password-file", args)
		}
	}
	// passwd reads a password from stdin and never prints it.
	cmd := exec.Command(publisher, "passwd", "--cost", "10")
	cmd.Stdin = strings.NewReader("a password read from stdin\n")
	out, err := cmd.Output()
	if err != nil || !strings.HasPrefix(string(out), "$2a$10$") || strings.Contains(string(out), "stdin") {
		t.Fatalf("passwd from stdin: %v %q", err, out)
	}
	// authconf prints the same users for a server run outside roompub.
	r = runPub(t, nil, "authconf", s.config)
	if r.status != 0 || !strings.Contains(r.stdout, "authorization {") || !strings.Contains(r.stdout, `"$JS.API.STREAM.INFO.ROOMS"`) {
		t.Fatalf("authconf: %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	for _, secret := range s.secrets {
		if strings.Contains(r.stdout, secret) && !strings.HasPrefix(secret, "$2") {
			t.Error("authconf printed a password or seed")
		}
	}
}

// TestSecureServeTLS: with tls in the secure config the server takes TLS
// connections only; serve trusts its own certificate, clients pass --tlsca.
func TestSecureServeTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	selfSigned(t, cert, key)
	s := newSecureSetup(t, fmt.Sprintf("tls: {cert: %q, key: %q}\n", cert, key))
	srv := startSecure(t, s, "--user", "publisher", "--password-file", s.files["publisher"])
	harness := []string{"--server", srv.url, "--user", "harness", "--password-file", s.files["harness"]}
	r := runPub(t, nil, append([]string{"journal", "--room", "room:tls"}, append(harness, "--tlsca", cert, csvDir)...)...)
	if r.status != 0 || !strings.Contains(r.stdout, "14 stored") {
		t.Fatalf("harness journal over TLS: %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	r = runPub(t, nil, append([]string{"journal", "--room", "room:tls"}, append(harness, csvDir)...)...)
	if r.status != 2 || !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("harness journal without the CA: %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	t.Logf("without --tlsca: %s", firstLine(r.stderr))
	r = subRun(t, "audit", "--server", srv.url, "--nkey", s.files["solver"], "--tlsca", cert, "--trusted-host", trustedHost)
	if r.status != 0 || !strings.Contains(r.stdout, "CLEAN: 14 messages") {
		t.Fatalf("solver audit over TLS: %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	// A plain (non-TLS) NATS client is not served.
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.url, "tls://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, _ := conn.Read(buf)
	if !bytes.Contains(buf[:n], []byte(`"tls_required":true`)) {
		t.Fatalf("the server's INFO does not require TLS: %s", buf[:n])
	}
	s.noSecrets(t, "serve's log", srv.log.String())
}

// nkeyFile is the connection option of an nkey seed file.
func nkeyFile(t *testing.T, path string) nats.Option {
	t.Helper()
	o, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func selfSigned(t *testing.T, certFile, keyFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "roompub test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
