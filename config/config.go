// Package config holds the settings of roompub's commands: the flag
// grammar (kong struct tags), the YAML config file that may stand in for
// flags, validation that reports every problem at once, and the NATS
// connection options built from them. Only cmd/* imports it; it imports
// room/reader for the readers' read mode, never the NATS server
// (test/layout).
package config

import (
	"bytes"
	"cmp"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/nats-io/nats.go"
	"go.yaml.in/yaml/v3"

	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/witness"
)

// ErrInvalid is wrapped by every Validate error.
var ErrInvalid = errors.New("invalid configuration")

// Credentials are the nats CLI's authentication and TLS options. The
// password and the nkey seed are never printed: --help shows no default
// for them, and String redacts them.
type Credentials struct {
	User     string `name:"user" help:"User name." yaml:"user"`
	Password string `name:"password" help:"Password (prefer --creds or an nkey)." yaml:"password"`
	Creds    string `name:"creds" help:"NATS user credentials file (JWT + nkey seed)." placeholder:"FILE" yaml:"creds"`
	NKey     string `name:"nkey" help:"NKey seed file." placeholder:"FILE" yaml:"nkey"`
	TLSCert  string `name:"tlscert" help:"TLS client certificate file." placeholder:"FILE" yaml:"tlscert"`
	TLSKey   string `name:"tlskey" help:"TLS client private key file." placeholder:"FILE" yaml:"tlskey"`
	TLSCA    string `name:"tlsca" help:"TLS certificate authority chain file." placeholder:"FILE" yaml:"tlsca"`
	TLSFirst bool   `name:"tlsfirst" help:"Perform the TLS handshake before the NATS protocol." yaml:"tlsfirst"`
	// PasswordFile and InboxPrefix: secure mode (secure.go).
	PasswordFile string `name:"password-file" help:"File whose first line is the password (keeps it off the command line)." placeholder:"FILE" yaml:"password-file"`
	InboxPrefix  string `name:"inbox-prefix" help:"Inbox prefix for replies, when the user's permissions name its own (e.g. _INBOX_harness)." placeholder:"PREFIX" yaml:"inbox-prefix"`
	// AllowOpenKeyFile lets ReadKeyFile and CheckKeyFile take a private
	// key file that group or others may access.
	AllowOpenKeyFile bool `name:"allow-open-key-file" help:"Use private key files (an --nkey seed, a --creds file, serve's --publisher-key) that group or others may access; without it they are refused, as ssh refuses such keys." yaml:"allow-open-key-file"`
}

// String redacts secrets.
func (c Credentials) String() string {
	pw := ""
	if c.Password != "" {
		pw = "[REDACTED]"
	}
	return fmt.Sprintf("Credentials{user=%q password=%s creds=%q nkey=%q tls=%v}", c.User, pw, c.Creds, c.NKey, c.TLSCert != "")
}

// Validate reports every problem, joined.
func (c Credentials) Validate() error {
	var errs []error
	if c.Creds != "" && (c.NKey != "" || c.User != "") {
		errs = append(errs, fmt.Errorf("%w: --creds excludes --nkey and --user", ErrInvalid))
	}
	if c.NKey != "" && c.User != "" {
		errs = append(errs, fmt.Errorf("%w: --nkey excludes --user", ErrInvalid))
	}
	if c.Password != "" && c.User == "" {
		errs = append(errs, fmt.Errorf("%w: --password needs --user", ErrInvalid))
	}
	errs = append(errs, c.checkSecure())
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, fmt.Errorf("%w: --tlscert and --tlskey go together", ErrInvalid))
	}
	for _, f := range []struct{ flag, path string }{{"--creds", c.Creds}, {"--nkey", c.NKey}, {"--password-file", c.PasswordFile}, {"--tlscert", c.TLSCert}, {"--tlskey", c.TLSKey}, {"--tlsca", c.TLSCA}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %v", ErrInvalid, f.flag, err))
		}
	}
	return errors.Join(errs...)
}

// Options returns the nats.go options these credentials need. An --nkey
// or --creds file open to group or others is refused (ErrInvalid wrapping
// ErrOpenKeyFile) unless AllowOpenKeyFile.
func (c Credentials) Options() ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case c.Creds != "":
		if err := CheckKeyFile(c.Creds, c.AllowOpenKeyFile); err != nil {
			return nil, fmt.Errorf("%w: --creds: %w", ErrInvalid, err)
		}
		opts = append(opts, nats.UserCredentials(c.Creds))
	case c.NKey != "":
		if err := CheckKeyFile(c.NKey, c.AllowOpenKeyFile); err != nil {
			return nil, fmt.Errorf("%w: --nkey: %w", ErrInvalid, err)
		}
		o, err := nats.NkeyOptionFromSeed(c.NKey)
		if err != nil {
			return nil, fmt.Errorf("%w: --nkey: %v", ErrInvalid, err)
		}
		opts = append(opts, o)
	case c.User != "":
		pw, err := c.password()
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserInfo(c.User, pw))
	}
	inbox := c.InboxPrefix
	if inbox == "" {
		id, err := c.Identity()
		if err != nil {
			return nil, err
		}
		if id != room.Anonymous {
			inbox = room.InboxPrefix(id)
		}
	}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	if c.TLSCert != "" {
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if c.TLSFirst {
		opts = append(opts, nats.TLSHandshakeFirst())
	}
	return opts, nil
}

// Logging configures zap in main.
type Logging struct {
	Level  string `name:"log-level" help:"Log level: debug, info, warn, error." default:"info" enum:"debug,info,warn,error" yaml:"log-level"`
	Format string `name:"log-format" help:"Log format: json or console." default:"json" enum:"json,console" yaml:"log-format"`
}

// Serve is the configuration of `publisher serve`. Its zero value, after
// kong applies the defaults, runs the embedded server on 127.0.0.1:4222
// with its store in ./data and an fsync before every acknowledgement.
type Serve struct {
	// Server is deliberately not bound to $NATS_URL: an exported variable
	// must not silently replace the embedded server.
	Server string `name:"server" help:"Use this NATS server or cluster instead of starting the embedded one." placeholder:"URL" yaml:"server"`
	Credentials
	Secure
	Listen       string        `name:"listen" help:"Embedded server: client listen address." default:"127.0.0.1:4222" yaml:"listen"`
	StoreDir     string        `name:"store-dir" help:"Embedded server: JetStream store directory." default:"./data" yaml:"store-dir"`
	SyncInterval time.Duration `name:"sync-interval" help:"Embedded server: fsync interval; 0 (default) fsyncs before every acknowledgement." default:"0s" yaml:"sync-interval"`
	MaxPayload   string        `name:"max-payload" help:"Embedded server: largest message accepted (e.g. 1MB; 64KB to 64MB); empty keeps the server default." yaml:"max-payload"`
	MaxStore     string        `name:"max-store" help:"Embedded server: cap on the JetStream file store (e.g. 10GB); empty means the disk is the limit." yaml:"max-store"`
	Replicas     int           `name:"replicas" help:"Room stream replicas when it is created: default 1 embedded, 3 with --server." yaml:"replicas"`
	Stream       string        `name:"stream" help:"Room stream name: the first partition's with --partitions (the others are <stream>-1 …)." default:"ROOMS" yaml:"stream"`
	Prefix       string        `name:"subject-prefix" help:"First token of every room subject." default:"rooms" yaml:"subject-prefix"`
	// Partitions is node.ServeOptions.Partitions (docs/design.md,
	// "Partitions").
	Partitions   int      `name:"partitions" help:"Place rooms over N room streams (--stream, then --stream-1 …, each with its own leader): recorded in the placement bucket, so a room never moves and partitions can be added later, never removed. 1 (default) is one stream, unless the bucket records more; 1 to 64. See docs/operations.md, \"Partitions\"." default:"1" placeholder:"N" yaml:"partitions"`
	TrustedHosts []string `name:"trusted-host" help:"Host node id whose execution records are accepted (repeatable)." placeholder:"NODE_ID" yaml:"trusted-host"`
	SchemaDir    string   `name:"schema-dir" help:"Validate against the schema files in DIR instead of the embedded ones." placeholder:"DIR" yaml:"schema-dir"`
	HTTP         string   `name:"http" help:"Serve /metrics and /healthz on this address." placeholder:"ADDR" yaml:"http"`
	// Tiles and TilesCache: node.TilesOptions (docs/tiles.md, "The serve
	// endpoint"). Off by default: a room's entries name the room and its
	// subjects.
	Tiles      bool   `name:"tiles" help:"Also serve, on the --http listener, the deployment log at /tiles/deployment/ and each room's log at /tiles/room/<room>/ as C2SP tlog-tiles, for any tlog client to read and verify. Needs --http, --origin and --publisher-key; refused with --secure-config (anyone who reaches the listener reads every room). See docs/tiles.md." yaml:"tiles"`
	TilesCache string `name:"tiles-cache" help:"Memory for the full tiles --tiles keeps, all logs together (e.g. 64MB)." default:"64MB" yaml:"tiles-cache"`
	// AcceptStream is node.ServeOptions.AcceptStream: an operator's act
	// for one start (docs/secure-mode.md, "The stream").
	StreamMark   string   `name:"stream-mark" help:"Also keep the room stream's mark (its creation time and last sequence) in FILE, outside the store: with --server besides the streams bucket on the cluster, which a cluster that lost the stream may lose with it; with the embedded server besides the mark in --store-dir, which a restored backup brings back old. A stream lost or rolled back is then still refused (stream_replaced). See docs/reliability.md." placeholder:"FILE" type:"path" yaml:"stream-mark"`
	AcceptLoss   []string `name:"acknowledge-loss" help:"Write a loss notice for ROOM (repeatable) once serve's survey has found what the store lost of it: an operator's recorded act, attested with --publisher-key, after which the room's other and new chains go on (its damaged chains stay closed). See docs/reliability.md." placeholder:"ROOM" yaml:"acknowledge-loss"`
	AcceptStream bool     `name:"accept-stream" help:"Start on a room stream other than the one serve remembers (it is gone, restored or made anew): create it if missing or take the one there, log what was remembered, and remember it from now on. For one start; without it serve refuses with stream_replaced." yaml:"accept-stream"`
	// StreamCheckInterval is node.ServeOptions.CheckInterval: the stream
	// guard's period (docs/design.md, "The room stream").
	StreamCheckInterval time.Duration `name:"stream-check-interval" help:"Check the room stream again this often while serving (its configuration, writers into room subjects, lost messages) and record its last sequence in the stream mark (0: 30s; at least 1s). Shorter finds a changed or lost stream sooner and keeps the mark closer to the stream; each check is a few requests to the server. See docs/reliability.md." default:"30s" yaml:"stream-check-interval"`
	// ScrubInterval is node.ServeOptions.ScrubInterval: how often the
	// whole room stream is read for messages the server cannot read.
	ScrubInterval time.Duration `name:"scrub-interval" help:"Read the whole room stream once the start's survey has ended and then this often, for messages the server counts but can no longer read (a damaged block whose state file it kept: nothing else finds them); what it finds is logged, on /healthz and roompub_store_unreadable_messages, and closes the chains it cuts. Each scrub reads every message once (about a replay without its checks). 0: never; at least 1m. See docs/reliability.md." default:"24h" yaml:"scrub-interval"`
	// MaxBatch and MaxInflightBatches bound the gate's atomic batches
	// (ingest.GateOptions); 0 is the default.
	MaxBatch           int `name:"max-batch" help:"Journal entries per atomic batch; 0 is 1000, the server's default max_batch_size; no more than the server allows." yaml:"max-batch"`
	MaxInflightBatches int `name:"max-inflight-batches" help:"Atomic batches this publisher keeps open at once; 0 is 32, below the server's default of 50 per stream." yaml:"max-inflight-batches"`
	// Attestations and signed room checkpoints.
	PublisherKey       string        `name:"publisher-key" help:"Attest every appended message and sign room checkpoints with this key (made by 'publisher keygen'; its node id names it). Without it nothing is attested or checkpointed." placeholder:"FILE" yaml:"publisher-key"`
	TrustedPublishers  []string      `name:"trusted-publisher" help:"Node id of another publisher whose attestations and checkpoints count (repeatable); the own key always does." placeholder:"NODE_ID" yaml:"trusted-publisher"`
	Origin             string        `name:"origin" help:"The deployment's origin, a schema-less URL naming it uniquely (e.g. evidence.example.org/roompub): room checkpoints then carry <origin>/room/<room> as origin and key name (C2SP tlog-checkpoint). Without it they carry the room id, as before. See docs/checkpoints.md." placeholder:"ORIGIN" yaml:"origin"`
	WitnessPolicy      string        `name:"witness-policy" help:"Submit each checkpoint of the deployment log to the witnesses of FILE, a C2SP tlog-policy file whose witness lines carry URLs (c2sp.org/tlog-witness), and store their cosignatures beside it. Needs --origin. See docs/witnesses.md." placeholder:"FILE" type:"path" yaml:"witness-policy"`
	CheckpointEvery    int           `name:"checkpoint-every" help:"Write a room's checkpoint once its tree has grown by this many messages (0: 10000)." default:"10000" yaml:"checkpoint-every"`
	CheckpointInterval time.Duration `name:"checkpoint-interval" help:"Write a checkpoint of every room whose tree grew at least this often (0: 10s)." default:"10s" yaml:"checkpoint-interval"`
	CheckpointFullRead bool          `name:"checkpoint-full-read" help:"At start, read every room from its first message instead of resuming it from its latest checkpoint: the whole stream is read again, and a store that lost or changed acknowledged messages is found (/healthz names it once the read reaches it; roompub_checkpoint_unread_messages says how far the read is), and kept for later starts. See docs/checkpoints.md." yaml:"checkpoint-full-read"`
	CheckpointLeafDir  string        `name:"checkpoint-leaf-dir" help:"Directory for the leaf hashes of a room past twice --checkpoint-every without a checkpoint (its checkpoints stopped, or the catch-up read at start), and of a tiles log past 4,096: 32 bytes a message in an unlinked temporary file instead of memory (default: $TMPDIR or /tmp; not a tmpfs). See docs/checkpoints.md." placeholder:"DIR" type:"path" yaml:"checkpoint-leaf-dir"`
	Logging
}

// Validate reports every problem, joined, each wrapping ErrInvalid.
func (s *Serve) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
	}
	if err := s.Credentials.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := s.Secure.check(s); err != nil {
		errs = append(errs, err)
	}
	if s.Server == "" {
		if _, port, err := net.SplitHostPort(s.Listen); err != nil {
			bad("--listen %q: %v", s.Listen, err)
		} else if p, err := strconv.Atoi(port); err != nil || p < -1 || p > 65535 {
			bad("--listen %q: bad port", s.Listen)
		}
		if s.StoreDir == "" {
			bad("--store-dir is empty")
		}
	}
	if s.SyncInterval < 0 {
		bad("--sync-interval must not be negative")
	}
	if n, err := ParseSize(s.MaxPayload); err != nil {
		bad("--max-payload: %v", err)
	} else if n != 0 && n < MinMaxPayload {
		bad("--max-payload %s is below %d bytes: a request carries its lines and the gate's headers, and a client keeps 8 KiB of a message for them", s.MaxPayload, MinMaxPayload)
	} else if n > MaxMaxPayload {
		bad("--max-payload %s is above %d bytes (64MB): nats-server holds at most that much pending for a connection, and warns above 8MB", s.MaxPayload, MaxMaxPayload)
	}
	if _, err := ParseSize(s.MaxStore); err != nil {
		bad("--max-store: %v", err)
	}
	if s.Replicas < 0 || s.Replicas > 5 {
		bad("--replicas must be 1 to 5")
	}
	if s.MaxBatch < 0 || s.MaxBatch > 1000 {
		bad("--max-batch must be 1 to 1000 (a journal request holds at most 1000 lines)")
	}
	if s.MaxInflightBatches < 0 {
		bad("--max-inflight-batches must not be negative")
	}
	if s.StreamCheckInterval != 0 && s.StreamCheckInterval < time.Second {
		// Each check is a few requests; at 1ms they kept a core busy.
		bad("--stream-check-interval %s: want 0 (30s) or at least 1s", s.StreamCheckInterval)
	}
	if s.ScrubInterval != 0 && s.ScrubInterval < time.Minute {
		bad("--scrub-interval %s: want 0 (never) or at least 1m", s.ScrubInterval)
	}
	if err := CheckPartitions(s.Partitions); err != nil {
		errs = append(errs, err)
	}
	if s.Stream == "" || strings.ContainsAny(s.Stream, " \t.*>/\\") {
		bad("--stream %q is not a valid stream name", s.Stream)
	}
	if s.Prefix == "" || strings.ContainsAny(s.Prefix, " \t.*>") {
		bad("--subject-prefix %q must be one subject token", s.Prefix)
	}
	for _, id := range s.TrustedHosts {
		if _, err := events.ParseNodeID(id); err != nil {
			bad("--trusted-host %q: %v", id, err)
		}
	}
	if s.SchemaDir != "" {
		if fi, err := os.Stat(s.SchemaDir); err != nil || !fi.IsDir() {
			bad("--schema-dir %q is not a directory", s.SchemaDir)
		}
	}
	if s.PublisherKey != "" {
		if fi, err := os.Stat(s.PublisherKey); err != nil || fi.IsDir() {
			bad("--publisher-key %q is not a key file", s.PublisherKey)
		}
	}
	for _, id := range s.TrustedPublishers {
		if _, err := events.ParseNodeID(id); err != nil {
			bad("--trusted-publisher %q: %v", id, err)
		}
	}
	if s.Origin != "" {
		if err := checkpoint.CheckOrigin(s.Origin); err != nil {
			bad("--origin: %v", err)
		}
		if s.PublisherKey == "" {
			bad("--origin names the checkpoints' log: it needs --publisher-key")
		}
	}
	if s.WitnessPolicy != "" {
		if s.Origin == "" {
			bad("--witness-policy cosigns the deployment log, which needs --origin")
		}
		if ws, err := LoadWitnesses(s.WitnessPolicy, s.Origin, nil); err != nil {
			bad("--witness-policy: %v", err)
		} else if len(ws) == 0 {
			bad("--witness-policy %s: no witness has a URL to submit to", s.WitnessPolicy)
		}
	}
	if s.Tiles {
		if s.HTTP == "" {
			bad("--tiles serves on the --http listener: give --http")
		}
		if s.Origin == "" {
			bad("--tiles needs --origin: a tlog client verifies a checkpoint by its origin, and the deployment log exists only with one")
		}
		if s.PublisherKey == "" {
			bad("--tiles serves the publisher's checkpoints: give --publisher-key")
		}
		if s.SecureConfig != "" {
			bad("--tiles is refused in secure mode (--secure-config): the endpoint knows no users, so anyone who reaches it would read every room, which secure mode lets only the solver, auditor and admin roles read (docs/tiles.md, \"The serve endpoint\")")
		}
	}
	if n, err := ParseSize(s.TilesCache); err != nil {
		bad("--tiles-cache: %v", err)
	} else if s.Tiles && n == 0 && strings.TrimSpace(s.TilesCache) != "" {
		bad("--tiles-cache must not be 0")
	}
	// 0 is the default (checkpointer.Options), as for --max-batch.
	if s.CheckpointEvery < 0 {
		bad("--checkpoint-every must not be negative")
	}
	if s.CheckpointInterval < 0 {
		bad("--checkpoint-interval must not be negative")
	}
	return errors.Join(errs...)
}

// MinMaxPayload is the least --max-payload serve takes, in bytes: a
// journal request is at most the server's max payload less the 8 KiB a
// client keeps for headers (client.ShipOptions.BatchBytes), and the gate
// adds its own headers to every stored message.
const MinMaxPayload = 64 << 10

// MaxMaxPayload is the most --max-payload serve takes, in bytes: the
// embedded nats-server's default max_pending for a connection, which it
// refuses a max_payload above (it warns above 8 MiB already).
const MaxMaxPayload = 64 << 20

// ParseSize parses "", "1048576", "512KB", "1MB" into bytes (powers of
// 1024); "" is 0, meaning "the default". A size past math.MaxInt64 bytes
// is an error, not a wrapped number.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large a size (at most %d bytes)", s, int64(math.MaxInt64))
	}
	return n * mult, nil
}

// CheckPartitions refuses a --partitions value outside 1 to
// room.MaxPartitions with an error wrapping ErrInvalid that gives the
// range. The libraries take 0 as one stream (room.Layout's zero value); on
// the command line it means nothing an operator would ask for, so it is
// refused with the negative values.
func CheckPartitions(n int) error {
	if n < 1 || n > room.MaxPartitions {
		return fmt.Errorf("%w: --partitions %d: want 1 to %d", ErrInvalid, n, room.MaxPartitions)
	}
	return nil
}

// YAML is a kong.ConfigurationLoader for YAML config files whose keys are
// flag names ("store-dir: /var/lib/roompub", "trusted-host: [node:…]").
// Unlike kong's JSON loader it refuses a key that names no flag, so a typo
// in a config file is an error, not a silently ignored setting; and a
// file of more than one YAML document (a "---" line followed by another),
// whose later documents it would otherwise ignore, naming the line where
// the second starts. Errors wrap ErrInvalid and name the file when r has
// a name (an *os.File, as kong opens it), and the line where the library
// or the file gives one.
func YAML(r io.Reader) (kong.Resolver, error) {
	where := "config file"
	if f, ok := r.(interface{ Name() string }); ok {
		where += " " + f.Name()
	}
	src, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, where, err)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(yaml12(src)))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return yamlResolver{}, nil
		}
		return nil, fmt.Errorf("%w: %s: %v%s", ErrInvalid, where, err, versionHint(err))
	}
	if err := oneDocument(dec, where); err != nil {
		return nil, err
	}
	y := yamlResolver{where: where}
	if err := doc.Decode(&y.values); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, where, err)
	}
	y.lines = map[string]int{}
	if len(doc.Content) > 0 && doc.Content[0].Kind == yaml.MappingNode {
		m := doc.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			if k := m.Content[i]; k.ShortTag() != "!!merge" {
				y.lines[k.Value] = k.Line
			}
		}
	}
	return y, nil
}

// yaml12 returns src with a "%YAML 1.2" directive among its first lines
// (before anything but comments, blank lines and other directives) made
// "%YAML 1.1", in place, so lines and columns stay. The YAML library
// refuses every version but 1.1 ("found incompatible YAML document"), as
// the libyaml it was ported from did, though it reads most of YAML 1.2
// (its documentation: YAML 1.1 booleans only into typed bool fields,
// 1.1's 0777 octals beside 1.2's 0o777, no base-60 floats). No roompub
// file needs a directive; this one is taken because editors and
// generators write it.
func yaml12(src []byte) []byte {
	out, cloned := src, false
	for off := 0; off < len(src); {
		end := bytes.IndexByte(src[off:], '\n')
		if end < 0 {
			end = len(src) - off
		}
		line := src[off : off+end]
		trimmed := bytes.TrimLeft(line, " \t")
		switch {
		case len(trimmed) == 0 || trimmed[0] == '#':
		case yamlDirective12.Match(line):
			if !cloned {
				out, cloned = bytes.Clone(src), true
			}
			i := off + bytes.Index(line, []byte("1.2"))
			out[i+2] = '1'
		case line[0] == '%':
		default:
			return out
		}
		off += end + 1
	}
	return out
}

// yamlDirective12 is a %YAML 1.2 directive line (YAML 1.2, 6.8.1): the
// name, white space, the version, then white space or a comment or nothing.
var yamlDirective12 = regexp.MustCompile(`^%YAML[ \t]+1\.2([ \t].*)?\r?$`)

// versionHint is what to add to the YAML library's error for a %YAML
// directive of a version it does not take: which ones a file may have.
func versionHint(err error) string {
	if strings.Contains(err.Error(), "found incompatible YAML document") {
		return " (a config file may start with %YAML 1.1 or 1.2, or no %YAML line)"
	}
	return ""
}

// oneDocument returns nil when dec, having decoded a file's first YAML
// document, is at the end of the file, else an error wrapping ErrInvalid
// that names where (the file) and the line of the second document's
// "---" (or what is wrong with it): a decoder reads one document at a
// time, and a file's later documents would otherwise be ignored.
func oneDocument(dec *yaml.Decoder, where string) error {
	var second yaml.Node
	switch err := dec.Decode(&second); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return fmt.Errorf("%w: %s: a second YAML document: %v (a config file is one document)", ErrInvalid, where, err)
	}
	return fmt.Errorf("%w: %s:%d: a second YAML document starts here (a config file is one document)", ErrInvalid, where, second.Line)
}

// yamlResolver is a config file read by YAML: its values by key, and the
// line of each key written in the file's top mapping (not of one a merge
// key, "<<", brings in), for Validate's errors.
type yamlResolver struct {
	where  string
	values map[string]yaml.Node
	lines  map[string]int
}

func (y yamlResolver) Validate(app *kong.Application) error {
	known := map[string]bool{}
	_ = kong.Visit(app, func(n kong.Visitable, next kong.Next) error {
		if f, ok := n.(*kong.Flag); ok {
			known[f.Name] = true
		}
		return next(nil)
	})
	var unknown []string
	for k := range y.values {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	// In the order of the file; those of a merge (line 0) first, by name.
	slices.SortFunc(unknown, func(a, b string) int { return cmp.Or(cmp.Compare(y.lines[a], y.lines[b]), cmp.Compare(a, b)) })
	var errs []error
	for _, k := range unknown {
		at := y.where
		if line := y.lines[k]; line > 0 {
			at += ":" + strconv.Itoa(line)
		}
		errs = append(errs, fmt.Errorf("%w: %s: unknown key %q", ErrInvalid, at, k))
	}
	return errors.Join(errs...)
}

// Resolve gives kong a key's value as written in the file (a list's
// items joined by commas), for the flag's own mapper to read: not as the
// YAML library types it, which would make 0x2 and 010 (octal) the
// integers 2 and 8 and 1e3 the float 1000 before a mapper could refuse
// them. A null value is no value.
func (y yamlResolver) Resolve(_ *kong.Context, _ *kong.Path, flag *kong.Flag) (any, error) {
	n, ok := y.values[flag.Name]
	if !ok {
		return nil, nil
	}
	text := func(n *yaml.Node) (string, bool, error) {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		switch {
		case n.Kind == yaml.ScalarNode:
			return n.Value, n.ShortTag() != "!!null", nil
		case n.Kind == yaml.MappingNode:
			return "", false, fmt.Errorf("%w: %s:%d: %s: want a value or a list of values, not a mapping", ErrInvalid, y.where, n.Line, flag.Name)
		default:
			return "", false, fmt.Errorf("%w: %s:%d: %s: want a value or a list of values, not a list of lists", ErrInvalid, y.where, n.Line, flag.Name)
		}
	}
	if n.Kind == yaml.AliasNode {
		n = *n.Alias
	}
	if n.Kind != yaml.SequenceNode {
		v, set, err := text(&n)
		if err != nil || !set {
			return nil, err
		}
		return v, nil
	}
	parts := make([]string, len(n.Content))
	for i, item := range n.Content {
		v, _, err := text(item)
		if err != nil {
			return nil, err
		}
		parts[i] = v
	}
	return strings.Join(parts, ","), nil
}

// Client is the configuration of the commands that talk to a running
// publisher (publisher journal, publisher execution, the subscriber).
type Client struct {
	Server string `name:"server" help:"NATS server URL(s), comma separated (default nats://127.0.0.1:4222)." default:"nats://127.0.0.1:4222" env:"NATS_URL" placeholder:"URL" yaml:"server"`
	Credentials
	Timeout time.Duration `name:"timeout" help:"How long to wait for one reply." default:"30s" yaml:"timeout"`
}

// Validate reports every problem, joined.
func (c *Client) Validate() error {
	var errs []error
	if strings.TrimSpace(c.Server) == "" {
		errs = append(errs, fmt.Errorf("%w: --server is empty", ErrInvalid))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("%w: --timeout must be positive", ErrInvalid))
	}
	if err := c.Credentials.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Connect dials the server with the credentials, failing fast (one
// attempt, the timeout) so a missing server is an error, not a hang. extra
// options come last (a one-shot command adds nats.NoReconnect and a
// closed handler, so a server that goes away ends it at once).
func (c *Client) Connect(name string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := c.Credentials.Options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.Name(name), nats.Timeout(min(c.Timeout, 10*time.Second)))
	opts = append(opts, extra...)
	nc, err := nats.Connect(c.Server, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", RedactURL(c.Server), err)
	}
	return nc, nil
}

// ConnectWaiting is Connect for a command that waits for its server
// (publisher journal --follow): when no server can be reached (refused,
// unreachable, no such host), it calls waiting once with the error and
// returns a connection that keeps trying in the background; once
// connected, it reconnects after any loss for as long as it is open (no
// attempt limit). Any other error (credentials, TLS) is returned as
// Connect returns it, at once.
func (c *Client) ConnectWaiting(name string, waiting func(error), extra ...nats.Option) (*nats.Conn, error) {
	extra = append(extra, nats.MaxReconnects(-1))
	nc, err := c.Connect(name, extra...)
	var ne net.Error
	if err == nil || !(errors.Is(err, nats.ErrNoServers) || errors.As(err, &ne)) {
		return nc, err
	}
	waiting(err)
	return c.Connect(name, append(extra, nats.RetryOnFailedConnect(true))...)
}

// RedactURL hides user:password@ in a URL list before it is printed.
func RedactURL(u string) string {
	parts := strings.Split(u, ",")
	for i, p := range parts {
		if a, b := strings.Index(p, "://"), strings.LastIndex(p, "@"); a >= 0 && b > a {
			parts[i] = p[:a+3] + "[REDACTED]" + p[b:]
		}
	}
	return strings.Join(parts, ",")
}

// Reader is the configuration shared by the subscriber's commands: how to
// reach the stream and what to trust. A record from a host not trusted
// here is refused here, whatever the publisher accepted.
type Reader struct {
	Client
	TrustedHosts []string `name:"trusted-host" help:"Host node id whose execution records are accepted (repeatable)." placeholder:"NODE_ID" yaml:"trusted-host"`
	SchemaDir    string   `name:"schema-dir" help:"Validate against the schema files in DIR instead of the embedded ones." placeholder:"DIR" yaml:"schema-dir"`
	Stream       string   `name:"stream" help:"Room stream name: the first partition's, on a deployment of several (the others are read from the placement bucket)." default:"ROOMS" yaml:"stream"`
	Prefix       string   `name:"subject-prefix" help:"First token of every room subject." default:"rooms" yaml:"subject-prefix"`
}

// Replay is how `subscriber audit`, `evidence` and `prove` read the
// stream.
type Replay struct {
	Read string `name:"read" help:"How to read the stream: auto (batch direct gets for a user named by --user, --nkey or --creds, since secure mode lets solvers create no ephemeral consumer; else an ordered consumer, and direct gets when the stream's consumer limit is reached or from a message the consumer stalls on), consumer, or direct (batch direct gets: creates no consumer, needs no right to)." default:"auto" enum:"auto,consumer,direct" yaml:"read"`
}

// ReadMode is the read path Replay names for a reader with credentials c:
// auto is reader.ReadDirect for a named user (docs/secure-mode.md,
// "Roles and their permissions": a solver may create no ephemeral consumer, and a request
// the server refuses for a permission gets no answer, only a timeout),
// reader.ReadAuto for the anonymous one.
func (r Replay) ReadMode(c Credentials) reader.ReadMode {
	m, err := reader.ParseReadMode(r.Read)
	if err != nil {
		m = reader.ReadAuto // kong's enum keeps other values out
	}
	return autoRead(m, c)
}

// autoRead is ReadMode's choice for auto.
func autoRead(m reader.ReadMode, c Credentials) reader.ReadMode {
	if m != reader.ReadAuto {
		return m
	}
	if id, err := c.Identity(); err == nil && id != room.Anonymous {
		return reader.ReadDirect
	}
	return reader.ReadAuto
}

// FollowRead is the read path of a follower's rebuild for credentials c:
// autoRead of reader.ReadAuto.
func FollowRead(c Credentials) reader.ReadMode { return autoRead(reader.ReadAuto, c) }

// Validate reports every problem, joined.
func (r *Reader) Validate() error {
	errs := []error{r.Client.Validate()}
	for _, id := range r.TrustedHosts {
		if _, err := events.ParseNodeID(id); err != nil {
			errs = append(errs, fmt.Errorf("%w: --trusted-host %q: %v", ErrInvalid, id, err))
		}
	}
	if r.SchemaDir != "" {
		if fi, err := os.Stat(r.SchemaDir); err != nil || !fi.IsDir() {
			errs = append(errs, fmt.Errorf("%w: --schema-dir %q is not a directory", ErrInvalid, r.SchemaDir))
		}
	}
	if r.Stream == "" || strings.ContainsAny(r.Stream, " \t.*>/\\") {
		errs = append(errs, fmt.Errorf("%w: --stream %q is not a valid stream name", ErrInvalid, r.Stream))
	}
	if r.Prefix == "" || strings.ContainsAny(r.Prefix, " \t.*>") {
		errs = append(errs, fmt.Errorf("%w: --subject-prefix %q must be one subject token", ErrInvalid, r.Prefix))
	}
	return errors.Join(errs...)
}

// LoadWitnesses reads a C2SP tlog-policy file (witness.ParsePolicy) and
// returns its witnesses that have a submission URL, the ones serve asks to
// cosign the deployment log. The file must be about this deployment: its
// log lines, if any, must be named origin, and when pub is given, one of
// them must be that key (the log key witnesses know the deployment log
// by: the publisher key named by the origin). Submission URLs must be
// http or https. Errors name the file and what is wrong.
func LoadWitnesses(file, origin string, pub ed25519.PublicKey) ([]witness.Witness, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	p, err := witness.ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	logs := p.Logs()
	for _, l := range logs {
		if l.Name() != origin {
			return nil, fmt.Errorf("%s names log %q, not --origin %q", file, l.Name(), origin)
		}
	}
	if pub != nil && len(logs) > 0 {
		vkey, err := note.NewEd25519VerifierKey(origin, pub)
		if err != nil {
			return nil, err
		}
		own, err := note.NewVerifier(vkey)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(logs, func(l note.Verifier) bool { return l.KeyHash() == own.KeyHash() }) {
			return nil, fmt.Errorf("%s: no log line has the publisher key (%s): witnesses and readers would refuse the log it signs", file, vkey)
		}
	}
	var out []witness.Witness
	for _, w := range p.Witnesses() {
		if w.URL == "" {
			continue
		}
		if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%s: witness %s: submission URL %q is not an http or https URL", file, w.Name, w.URL)
		}
		out = append(out, w)
	}
	return out, nil
}
