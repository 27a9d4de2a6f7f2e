package config_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/room/reader"
)

const host = "node:did:key:z6MkqB3fVxzXFbVUK2q1GPrLQzaxgwDGGVuxkDzaf5tsLnpo"

type grammar struct {
	Config kong.ConfigFlag `name:"config"`
	Serve  struct {
		config.Serve
	} `cmd:""`
}

func parse(t *testing.T, args ...string) (*grammar, error) {
	t.Helper()
	var g grammar
	p, err := kong.New(&g, kong.Configuration(config.YAML), kong.Exit(func(int) { t.Fatal("exit") }))
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Parse(args)
	return &g, err
}

func TestServeDefaults(t *testing.T) {
	g, err := parse(t, "serve")
	if err != nil {
		t.Fatal(err)
	}
	s := g.Serve.Serve
	if s.Server != "" || s.Listen != "127.0.0.1:4222" || s.StoreDir != "./data" || s.SyncInterval != 0 ||
		s.Stream != "ROOMS" || s.Prefix != "rooms" || len(s.TrustedHosts) != 0 || s.Level != "info" || s.Format != "json" ||
		s.PublisherKey != "" || len(s.TrustedPublishers) != 0 || s.CheckpointEvery != 10000 || s.CheckpointInterval != 10*time.Second || s.AcceptStream ||
		s.Tiles || s.TilesCache != "64MB" || s.Partitions != 1 {
		t.Fatalf("defaults: %+v", s)
	}
}

func TestServeNotFromNATSURL(t *testing.T) {
	t.Setenv("NATS_URL", "nats://elsewhere:4222")
	g, err := parse(t, "serve")
	if err != nil {
		t.Fatal(err)
	}
	if g.Serve.Server != "" {
		t.Fatalf("NATS_URL replaced the embedded server: %q", g.Serve.Server)
	}
}

func TestConfigFileAndFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "roompub.yaml")
	keyFile := filepath.Join(dir, "publisher.pem") // Validate checks it exists; serve parses it
	if err := os.WriteFile(keyFile, []byte("not parsed here"), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := "store-dir: /var/lib/roompub\nsync-interval: 50ms\ntrusted-host:\n  - " + host + "\nlisten: 127.0.0.1:5222\n" +
		"publisher-key: " + keyFile + "\ntrusted-publisher: [" + host + "]\ncheckpoint-every: 50\ncheckpoint-interval: 2s\naccept-stream: true\n" +
		"http: 127.0.0.1:9090\norigin: example.org/log\ntiles: true\ntiles-cache: 8MB\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := parse(t, "--config", file, "serve", "--listen", "127.0.0.1:6222")
	if err != nil {
		t.Fatal(err)
	}
	s := g.Serve.Serve
	if s.StoreDir != "/var/lib/roompub" || s.SyncInterval.String() != "50ms" || len(s.TrustedHosts) != 1 || s.TrustedHosts[0] != host {
		t.Fatalf("from file: %+v", s)
	}
	if s.PublisherKey != keyFile || len(s.TrustedPublishers) != 1 || s.TrustedPublishers[0] != host ||
		s.CheckpointEvery != 50 || s.CheckpointInterval != 2*time.Second {
		t.Fatalf("checkpoint keys from file: %+v", s)
	}
	if !s.AcceptStream {
		t.Fatalf("accept-stream from file: %+v", s)
	}
	if !s.Tiles || s.TilesCache != "8MB" || s.HTTP != "127.0.0.1:9090" || s.Origin != "example.org/log" {
		t.Fatalf("tiles keys from file: %+v", s)
	}
	if s.Listen != "127.0.0.1:6222" {
		t.Fatalf("the flag must win over the file: %q", s.Listen)
	}
}

func TestServeTrustedPublisherRepeatable(t *testing.T) {
	other := "node:did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
	g, err := parse(t, "serve", "--trusted-publisher", host, "--trusted-publisher", other, "--checkpoint-every", "7", "--checkpoint-interval", "1m")
	if err != nil {
		t.Fatal(err)
	}
	s := g.Serve.Serve
	if len(s.TrustedPublishers) != 2 || s.TrustedPublishers[0] != host || s.TrustedPublishers[1] != other || s.CheckpointEvery != 7 || s.CheckpointInterval != time.Minute {
		t.Fatalf("got %+v", s)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("valid flags refused: %v", err)
	}
}

// TestConfigFileUnknownKey: a key that names no flag is refused, naming
// the file and the key's line, every such key in the order of the file.
func TestConfigFileUnknownKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("# serve\nlisten: 127.0.0.1:1\nstore_dri: x\n\ntrusted_host:\n  - "+host+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := parse(t, "--config", file, "serve")
	want := "invalid configuration: config file " + file + `:3: unknown key "store_dri"` + "\n" +
		"invalid configuration: config file " + file + `:5: unknown key "trusted_host"`
	if !errors.Is(err, config.ErrInvalid) || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	// A key a merge brings in has no line of its own.
	if err := os.WriteFile(file, []byte("base: &b {listen: 127.0.0.1:1, stor: x}\n<<: *b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = parse(t, "--config", file, "serve")
	want = "invalid configuration: config file " + file + `: unknown key "stor"` + "\n" +
		"invalid configuration: config file " + file + `:1: unknown key "base"`
	if !errors.Is(err, config.ErrInvalid) || err.Error() != want {
		t.Fatalf("with a merge key: got %v, want %q", err, want)
	}
}

// configFileCase is a config file (name, contents) and the refusal that
// serve's flags give it, after "config file DIR/"; "" for none, and then
// the file sets --listen 127.0.0.1:1.
type configFileCase struct{ name, yaml, want string }

func checkConfigFiles(t *testing.T, cases []configFileCase) {
	t.Helper()
	dir := t.TempDir()
	for _, c := range cases {
		file := filepath.Join(dir, c.name)
		if err := os.WriteFile(file, []byte(c.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		g, err := parse(t, "--config", file, "serve")
		if c.want == "" {
			if err != nil || g.Serve.Listen != "127.0.0.1:1" {
				t.Errorf("%s: %v, listen %q", c.name, err, g.Serve.Listen)
			}
			continue
		}
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "config file "+filepath.Join(dir, c.want)) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

// TestConfigFileOneDocument: a config file of a second YAML document is
// refused, naming the file and the line of its "---", not read as its
// first document alone; a leading "---" or "..." ends nothing.
func TestConfigFileOneDocument(t *testing.T) {
	checkConfigFiles(t, []configFileCase{
		{"second.yaml", "listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n", "second.yaml:2: a second YAML document starts here (a config file is one document)"},
		{"comments.yaml", "listen: 127.0.0.1:1\n\n# more\n---\n# below\nstore-dir: x\n", "comments.yaml:4: a second YAML document starts here"},
		{"empty-second.yaml", "listen: 127.0.0.1:1\n---\n", "empty-second.yaml:2: a second YAML document starts here"},
		{"bad-second.yaml", "listen: 127.0.0.1:1\n---\n[\n", "bad-second.yaml: a second YAML document: yaml: line 3: "},
		{"leading.yaml", "---\nlisten: 127.0.0.1:1\n...\n", ""},
	})
}

// TestConfigFileYAMLDirective: a file that starts with a %YAML 1.2
// directive (after comments, beside a %TAG one) is read, though the YAML
// library takes only 1.1; another version is refused, saying which are
// taken.
func TestConfigFileYAMLDirective(t *testing.T) {
	checkConfigFiles(t, []configFileCase{
		{"v12.yaml", "%YAML 1.2\n---\nlisten: 127.0.0.1:1\n", ""},
		{"v12-comments.yaml", "# roompub\n\n%YAML  1.2 # the version\n%TAG !e! tag:example.com,2000:\n--- # start\nlisten: 127.0.0.1:1\n", ""},
		{"v11.yaml", "%YAML 1.1\n---\nlisten: 127.0.0.1:1\n", ""},
		{"v13.yaml", "%YAML 1.3\n---\nlisten: 127.0.0.1:1\n", "v13.yaml: yaml: found incompatible YAML document (a config file may start with %YAML 1.1 or 1.2, or no %YAML line)"},
		{"v12-no-start.yaml", "%YAML 1.2\nlisten: 127.0.0.1:1\n", "v12-no-start.yaml: yaml: line 2: mapping values are not allowed in this context"},
		{"v12-twice.yaml", "%YAML 1.2\n%YAML 1.2\n---\nlisten: 127.0.0.1:1\n", "v12-twice.yaml: yaml: line 1: found duplicate %YAML directive"},
	})
}

func TestServeValidateReportsEveryProblem(t *testing.T) {
	s := config.Serve{Listen: "nope", StoreDir: "", SyncInterval: -1, MaxPayload: "lots", Replicas: 9, Stream: "a.b", MaxBatch: 1001, MaxInflightBatches: -1,
		Prefix: "x>", TrustedHosts: []string{"node:did:key:zBad"}, SchemaDir: "/does/not/exist",
		PublisherKey: "/does/not/exist.pem", TrustedPublishers: []string{"node:did:key:zAlsoBad"}, CheckpointEvery: -1, CheckpointInterval: -time.Second, StreamCheckInterval: -time.Second,
		Credentials: config.Credentials{Password: "pw", TLSCert: "c.pem"}, Tiles: true, TilesCache: "lots", Partitions: 65}
	err := s.Validate()
	if !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("got %v", err)
	}
	for _, want := range []string{"--listen", "--store-dir", "--sync-interval", "--max-payload", "--replicas", "--stream",
		"--subject-prefix", "--trusted-host", "--schema-dir", "--password needs --user", "--tlscert and --tlskey", "--max-batch", "--max-inflight-batches",
		"--publisher-key", "--trusted-publisher", "--checkpoint-every", "--checkpoint-interval", "--stream-check-interval -1s: want 0 (30s) or at least 1s",
		"--tiles serves on the --http listener", "--tiles needs --origin", "--tiles-cache", "--partitions 65: want 1 to 64"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q missing from %v", want, err)
		}
	}
}

// TestServePartitionsRange: --partitions takes 1 to room.MaxPartitions;
// 0, which the libraries read as one stream, is refused with the range,
// as a negative count and one above the bound are.
func TestServePartitionsRange(t *testing.T) {
	for n, want := range map[int]string{-1: "--partitions -1: want 1 to 64", 0: "--partitions 0: want 1 to 64", 65: "--partitions 65: want 1 to 64", 1: "", 64: ""} {
		s := config.Serve{Listen: "127.0.0.1:4222", StoreDir: t.TempDir(), MaxBatch: 1000, MaxInflightBatches: 50, Replicas: 1, Stream: "ROOMS", Prefix: "rooms", Partitions: n}
		err := s.Validate()
		switch {
		case want == "" && err != nil:
			t.Errorf("--partitions %d: %v", n, err)
		case want != "" && (!errors.Is(err, config.ErrInvalid) || !strings.Contains(fmt.Sprint(err), want)):
			t.Errorf("--partitions %d: %v, want %q", n, err, want)
		}
		if err := config.CheckPartitions(n); (err == nil) != (want == "") {
			t.Errorf("CheckPartitions(%d): %v, want %q", n, err, want)
		}
	}
}

// TestServeMaxPayloadFloor: a --max-payload that leaves no room for a
// journal request is refused with the least serve takes; that least and
// the server default ("") are taken.
func TestServeMaxPayloadFloor(t *testing.T) {
	for mp, want := range map[string]string{"1KB": "--max-payload 1KB is below 65536 bytes", "65535": "--max-payload 65535 is below 65536 bytes", "64KB": "", "": "",
		"64MB": "", "64MB1": "is not a size", "67108865": "--max-payload 67108865 is above 67108864 bytes", "2GB": "--max-payload 2GB is above", "4GB": "--max-payload 4GB is above"} {
		s := config.Serve{Listen: "127.0.0.1:4222", StoreDir: t.TempDir(), MaxPayload: mp, MaxBatch: 1000, MaxInflightBatches: 50, Replicas: 1, Partitions: 1}
		err := s.Validate()
		switch {
		case want == "" && err != nil && strings.Contains(err.Error(), "--max-payload"):
			t.Errorf("--max-payload %q: %v", mp, err)
		case want != "" && (!errors.Is(err, config.ErrInvalid) || !strings.Contains(fmt.Sprint(err), want)):
			t.Errorf("--max-payload %q: %v, want %q", mp, err, want)
		}
	}
}

func TestCredentialsRedacted(t *testing.T) {
	c := config.Credentials{User: "u", Password: "hunter2-secret"}
	if s := c.String(); strings.Contains(s, "hunter2") || !strings.Contains(s, "[REDACTED]") {
		t.Fatalf("String: %s", s)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "1024": 1024, "512KB": 512 << 10, "1MB": 1 << 20, "2m": 2 << 20, "1G": 1 << 30, "10B": 10} {
		got, err := config.ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"x", "-1", "1TB", "1.5MB", "17179869184GB", "8589934592G", "9223372036854775807K"} {
		if _, err := config.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

// TestReplayReadMode: auto reads by direct get for a user named by
// --user (secure mode lets solvers create no ephemeral consumer), and is
// reader.ReadAuto without one; an explicit mode stays as given.
func TestReplayReadMode(t *testing.T) {
	for _, tc := range []struct {
		read string
		c    config.Credentials
		want reader.ReadMode
	}{
		{"auto", config.Credentials{}, reader.ReadAuto},
		{"auto", config.Credentials{User: "solver-1"}, reader.ReadDirect},
		{"consumer", config.Credentials{User: "solver-1"}, reader.ReadConsumer},
		{"direct", config.Credentials{}, reader.ReadDirect},
	} {
		if got := (config.Replay{Read: tc.read}).ReadMode(tc.c); got != tc.want {
			t.Errorf("%s with %v: %v, want %v", tc.read, tc.c, got, tc.want)
		}
	}
	if got := config.FollowRead(config.Credentials{User: "s"}); got != reader.ReadDirect {
		t.Errorf("FollowRead of a named user: %v", got)
	}
	if got := config.FollowRead(config.Credentials{}); got != reader.ReadAuto {
		t.Errorf("FollowRead of no user: %v", got)
	}
}

// TestConnectWaiting: with no server listening, ConnectWaiting says why
// once and hands back a connection that keeps trying, where Connect fails.
func TestConnectWaiting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ln.Addr().String()
	ln.Close()
	c := config.Client{Server: url, Timeout: time.Second}
	if _, err := c.Connect("test"); !errors.Is(err, nats.ErrNoServers) {
		t.Fatalf("Connect: %v, want no servers", err)
	}
	var calls []error
	nc, err := c.ConnectWaiting("test", func(err error) { calls = append(calls, err) })
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if len(calls) != 1 || !errors.Is(calls[0], nats.ErrNoServers) || nc.IsConnected() || nc.IsClosed() {
		t.Errorf("waiting called with %v; connected %v, closed %v: want once with no servers, still trying", calls, nc.IsConnected(), nc.IsClosed())
	}
}

// FuzzParseSize: any text parses to a size of at least 0 or is an error,
// never a wrapped number; a plain count of bytes is itself.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"", "1024", "512KB", "1MB", "2m", "1G", "10B", "17179869184GB", "9223372036854775807K", "-1", " 3 kb "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := config.ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
		if v, perr := strconv.ParseInt(strings.TrimSpace(s), 10, 64); perr == nil && v != n {
			t.Fatalf("ParseSize(%q) = %d, want %d", s, n, v)
		}
	})
}
