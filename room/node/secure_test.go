package node_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/crypto/bcrypt"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/node"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/room/secure"
	"github.com/roompub/roompub/validate"
	"github.com/roompub/roompub/witness"
)

// identities are the secure mode users of the tests, with their secrets.
type identities struct {
	opts secure.Options
	// passwords by user name; the solver is an nkey user.
	passwords  map[string]string
	solverSeed []byte
	solverPub  string
	// secrets every log and error must not contain.
	secrets []string
}

const (
	userPublisher = "publisher"
	userHarness   = "harness"
	userHarness2  = "harness.two@lab" // a harness whose name needs encoding into a token
	userAuditor   = "auditor"         // the solver role, as a password user
	userAdmin     = "admin"
	inboxHarness2 = "_INBOX_harness~2Etwo~40lab" // named in its config: its own, as derived
)

func newIdentities(t testing.TB, solverHead bool) *identities {
	t.Helper()
	id := &identities{passwords: map[string]string{}}
	user := func(role secure.Role, name, inbox string) secure.User {
		pw := make([]byte, 18)
		_, _ = rand.Read(pw)
		p := fmt.Sprintf("pw-%x", pw)
		// The lowest cost keeps the tests fast; serve's passwd uses 11.
		h, err := bcrypt.GenerateFromPassword([]byte(p), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		id.passwords[name] = p
		id.secrets = append(id.secrets, p, string(h))
		return secure.User{Role: role, Name: name, PasswordHash: string(h), InboxPrefix: inbox}
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	id.solverSeed, _ = kp.Seed()
	id.solverPub, _ = kp.PublicKey()
	id.secrets = append(id.secrets, string(id.solverSeed))
	id.opts = secure.Options{
		Users: []secure.User{
			user(secure.RolePublisher, userPublisher, ""),
			user(secure.RoleHarness, userHarness, ""),
			user(secure.RoleHarness, userHarness2, inboxHarness2),
			{Role: secure.RoleSolver, NKey: id.solverPub, Durables: []string{"secure-solver", "secure-solver-2"}},
			user("auditor", userAuditor, ""),
			user(secure.RoleAdmin, userAdmin, ""),
		},
		SolverHead: solverHead,
	}
	if err := id.opts.Check(); err != nil {
		t.Fatal(err)
	}
	return id
}

// as returns the connection options of a password user, with the user's
// own inbox prefix (the only one it may subscribe to).
func (id *identities) as(name string) nats.Option {
	return options(nats.UserInfo(name, id.passwords[name]), nats.CustomInboxPrefix(room.InboxPrefix(room.IdentityToken(name))))
}

// asPlain returns a password user's credentials with nats.go's default
// inbox prefix.
func (id *identities) asPlain(name string) nats.Option {
	return nats.UserInfo(name, id.passwords[name])
}

// asSolver returns the connection options of the nkey solver, with its
// own inbox prefix.
func (id *identities) asSolver(t testing.TB) nats.Option {
	t.Helper()
	kp, err := nkeys.FromSeed(id.solverSeed)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return options(nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(room.InboxPrefix(room.IdentityToken(pub))))
}

// options is several connection options as one.
func options(opts ...nats.Option) nats.Option {
	return func(o *nats.Options) error {
		for _, opt := range opts {
			if err := opt(o); err != nil {
				return err
			}
		}
		return nil
	}
}

// clientAs is an ingest client of conn c as identity name (a user name or
// the solver's public nkey).
func clientAs(c *conn, name string) *client.Client {
	return client.New(c.nc, client.Options{Identity: room.IdentityToken(name)})
}

// violations collects a connection's asynchronous errors: the server's
// -ERR 'Permissions Violation …' arrives there.
type violations struct {
	mu   sync.Mutex
	errs []string
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	v.mu.Lock()
	v.errs = append(v.errs, err.Error())
	v.mu.Unlock()
}

// expect waits up to 5s for an error containing want and returns it.
func (v *violations) expect(t testing.TB, want string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v.mu.Lock()
		for _, e := range v.errs {
			if strings.Contains(e, want) {
				v.mu.Unlock()
				return e
			}
		}
		got := append([]string(nil), v.errs...)
		v.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no error containing %q; got %q", want, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// conn is one identity's connection.
type conn struct {
	name string
	nc   *nats.Conn
	js   jetstream.JetStream
	v    *violations
}

func dial(t testing.TB, url, name string, opts ...nats.Option) *conn {
	t.Helper()
	c := &conn{name: name, v: &violations{}}
	var err error
	c.nc, err = nats.Connect(url, append([]nats.Option{nats.Name("roompub-test-" + name), nats.ErrorHandler(c.v.handler), nats.MaxReconnects(0)}, opts...)...)
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	t.Cleanup(c.nc.Close)
	c.js, _ = jetstream.New(c.nc)
	return c
}

// securePlace is one server in secure mode with node.Serve on it,
// connected as the publisher user.
type securePlace struct {
	url  string
	id   *identities
	logs *syncBuf
	key  *events.HostKey
	// pubKey attests and signs checkpoints: serve runs its
	// checkpointer as the publisher user.
	pubKey *events.HostKey
	// http is the metrics and health address, when ServeOptions.HTTPAddr
	// was set.
	http string
	stop func()
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) Sync() error { return nil }

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startSecureServe runs node.Serve until the test ends: on the embedded
// server in secure mode when url is "", else on the server at url. Serve
// has a publisher key, and by default writes no checkpoint before it
// stops; with changes change the options.
func startSecureServe(t *testing.T, id *identities, url string, changes ...func(*node.ServeOptions)) *securePlace {
	t.Helper()
	key, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pubKey, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	v, err := validate.New(validate.WithTrustedHosts(key.NodeID(), roomtest.ReferenceHost))
	if err != nil {
		t.Fatal(err)
	}
	p := &securePlace{id: id, logs: &syncBuf{}, key: key, pubKey: pubKey}
	// Every log line, at debug level, with the embedded server's own.
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), p.logs, zapcore.DebugLevel))
	so := node.ServeOptions{
		ServerURL: url,
		Connect:   []nats.Option{id.as(userPublisher)},
		Validator: v,
		Logger:    log,
		Replicas:  1,
		// The checkpointer starts (the lease bucket is made as the
		// publisher user) but is not due before serve stops.
		PublisherKey: pubKey,
		Checkpoint:   checkpointer.Options{Every: 1 << 30, Interval: time.Hour},
	}
	for _, change := range changes {
		change(&so)
	}
	if url == "" {
		configure, err := id.opts.Configure()
		if err != nil {
			t.Fatal(err)
		}
		so.Embedded = embedded.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), Configure: configure}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan node.ServeInfo, 1)
	so.Ready = func(i node.ServeInfo) { ready <- i }
	go func() { done <- node.Serve(ctx, so) }()
	select {
	case info := <-ready:
		p.url, p.http = info.ClientURL, info.HTTPAddr
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v\n%s", err, p.logs)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("serve not ready after 30s\n%s", p.logs)
	}
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("serve returned %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("serve did not stop within 30s")
			}
		})
	}
	t.Cleanup(p.stop)
	return p
}

// streamNow reads the room stream's count, last sequence and config as
// the admin sees them.
func streamNow(t testing.TB, admin *conn) (uint64, uint64, jetstream.StreamConfig) {
	t.Helper()
	st, err := admin.js.Stream(context.Background(), room.DefaultStream)
	if err != nil {
		t.Fatalf("admin: stream info: %v", err)
	}
	info := st.CachedInfo()
	return info.State.Msgs, info.State.LastSeq, info.Config
}

// leavesNow counts the room stream's leaves (journal entries and records;
// no checkpoint, notice or record marker) as the admin sees them.
func leavesNow(t testing.TB, admin *conn) uint64 {
	t.Helper()
	ctx := context.Background()
	st, err := admin.js.Stream(ctx, room.DefaultStream)
	if err != nil {
		t.Fatalf("admin: stream: %v", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(room.Subjects{}.All()))
	if err != nil {
		t.Fatalf("admin: stream info by subject: %v", err)
	}
	var n uint64
	for subj, c := range info.State.Subjects {
		if p, err := (room.Subjects{}).Parse(subj); err == nil && p.Kind.Leaf() {
			n += c
		}
	}
	return n
}

func short(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 750*time.Millisecond)
}

// TestSecureEmbedded proves every role's permissions against node.Serve on
// the embedded server in secure mode.
func TestSecureEmbedded(t *testing.T) {
	id := newIdentities(t, false)
	p := startSecureServe(t, id, "")
	secureMatrix(t, p)
	p.stop()
	for _, s := range id.secrets {
		if strings.Contains(p.logs.String(), s) {
			t.Errorf("a secret (password, bcrypt hash or nkey seed) is in the logs")
		}
	}
	if !strings.Contains(p.logs.String(), "publisher serving") {
		t.Errorf("logs were not captured:\n%s", p.logs)
	}
}

// TestSecureConfFile proves that `publisher authconf`'s nats-server
// configuration (an authorization block, and an account) gives a server
// run outside roompub the same permissions: the same matrix, with the
// solver allowed to ask the ingest service for chain heads.
func TestSecureConfFile(t *testing.T) {
	for _, account := range []string{"", "ROOMPUB"} {
		t.Run("account="+account, func(t *testing.T) {
			id := newIdentities(t, true)
			conf, err := id.opts.AuthorizationConf(account)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range id.secrets {
				if strings.Contains(conf, s) && !strings.HasPrefix(s, "$2") {
					t.Fatal("the generated configuration holds a password or seed")
				}
			}
			srv := startConfServer(t, conf)
			p := startSecureServe(t, id, srv.ClientURL())
			secureMatrix(t, p)
		})
	}
}

// startConfServer runs a nats-server, outside roompub, configured with
// conf (an authconf block) and JetStream on a temporary store, until the
// test ends.
func startConfServer(t *testing.T, conf string) *server.Server {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "nats-server.conf")
	full := fmt.Sprintf("listen: \"127.0.0.1:-1\"\nserver_name: roompub-conf\njetstream { store_dir: %q }\n%s", filepath.Join(dir, "js"), conf)
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server does not take the generated configuration: %v\n%s", err, full)
	}
	opts.NoSigs, opts.NoLog = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return srv
}

// secureMatrix runs every denial and the positive path against p.
func secureMatrix(t *testing.T, p *securePlace) {
	id := p.id
	ctx := context.Background()
	admin := dial(t, p.url, userAdmin, id.as(userAdmin))
	harness := dial(t, p.url, userHarness, id.as(userHarness))
	solver := dial(t, p.url, "solver", id.asSolver(t))
	auditor := dial(t, p.url, userAuditor, id.as(userAuditor))
	publisher := dial(t, p.url, userPublisher, id.as(userPublisher))

	t.Run("unauthenticated", func(t *testing.T) {
		for name, opts := range map[string][]nats.Option{
			"anonymous":               nil,
			"wrong password":          {nats.UserInfo(userHarness, "not-the-password")},
			"unknown user":            {nats.UserInfo("mallory", id.passwords[userHarness])},
			"unknown nkey":            {nkeyOption(t)},
			"bcrypt hash as password": {nats.UserInfo(userHarness, id.opts.Users[1].PasswordHash)},
		} {
			nc, err := nats.Connect(p.url, append(opts, nats.MaxReconnects(0))...)
			if err == nil {
				nc.Close()
				t.Fatalf("%s: connected", name)
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("%s: %v, want an authorization violation", name, err)
			}
			t.Logf("%s: refused: %v", name, err)
		}
	})

	// The positive path first: the stream holds a capsule and a record.
	t.Run("harness ships through the ingest service", func(t *testing.T) {
		cl := clientAs(harness, userHarness)
		res, err := client.ShipCapsule(ctx, cl, roomtest.Testdata("samples/capsules/csv-dedupe"), "room:secure", client.ShipOptions{})
		if err != nil || res.Refused != nil || res.Stored != 14 {
			t.Fatalf("ship: %+v %v", res, err)
		}
		// Old lines again: the gate reads the chain's hashes (batch
		// direct gets as the publisher user) and answers duplicate.
		lines, err := os.ReadFile(roomtest.Testdata("samples/capsules/csv-dedupe/journal.ndjson"))
		if err != nil {
			t.Fatal(err)
		}
		first3 := bytes.SplitAfterN(lines, []byte("\n"), 4)
		reply, err := cl.AppendJournal(ctx, "room:secure", nil, bytes.Join(first3[:3], nil))
		if err != nil || reply.Dupes != 3 {
			t.Fatalf("resend: %+v %v", reply, err)
		}
		rec, err := cl.AppendRecord(ctx, roomtest.ReferenceBytes(t, "verified.json"))
		if err != nil || rec.Item.Outcome != room.OutcomeStored {
			t.Fatalf("record: %+v %v", rec, err)
		}
		if n := leavesNow(t, admin); n != 15 {
			t.Fatalf("stream holds %d leaves, want 15", n)
		}
		// A user whose name needs encoding: its identity token and inbox
		// are derived from it, and it gets replies there alone.
		own := dial(t, p.url, userHarness2, id.as(userHarness2))
		if _, err := clientAs(own, userHarness2).Head(ctx, events.ChainKey{RunID: res.Chain.RunID, CapsuleID: res.Chain.CapsuleID}); err != nil {
			t.Fatalf("harness with an encoded name: %v", err)
		}
		wrong := dial(t, p.url, userHarness+" (default inbox)", id.asPlain(userHarness))
		cctx, cancel := short(ctx)
		_, err = clientAs(wrong, userHarness).Head(cctx, events.ChainKey{RunID: res.Chain.RunID, CapsuleID: res.Chain.CapsuleID})
		cancel()
		if err == nil {
			t.Fatal("a harness got a reply on the shared _INBOX")
		}
		t.Logf("harness on the shared inbox: %s", wrong.v.expect(t, `Permissions Violation for Subscription to "_INBOX.`))
	})
	msgs, last, cfg := streamNow(t, admin)
	leaves := leavesNow(t, admin) // Follow hands out leaves: no record marker

	unchanged := func(t *testing.T, what string) {
		t.Helper()
		m, l, c := streamNow(t, admin)
		if m != msgs || l != last {
			t.Fatalf("%s: the stream changed: %d messages up to seq %d, was %d up to %d", what, m, l, msgs, last)
		}
		if err := room.CheckStreamConfig(c, room.Subjects{}); err != nil || c.MaxAge != cfg.MaxAge || c.Description != cfg.Description {
			t.Fatalf("%s: the stream's configuration changed: %+v (%v)", what, c, err)
		}
	}

	t.Run("only the publisher writes room subjects", func(t *testing.T) {
		entry := bytes.SplitN(mustRead(t, roomtest.Testdata("samples/capsules/csv-dedupe/journal.ndjson")), []byte("\n"), 2)[0]
		var wg sync.WaitGroup
		for _, c := range []*conn{harness, solver, auditor, admin} {
			for _, subj := range []string{
				"rooms.secure.exec",
				"rooms.secure.journal.run-20260903-csv-dedupe-0009.cap-csv-dedupe-0009",
				"rooms.new-room.exec",
				"rooms.secure.checkpoint", // checkpoints too
			} {
				// Core publish, and a JetStream publish (which waits for an ack).
				if err := c.nc.Publish(subj, entry); err != nil {
					t.Fatal(err)
				}
				_ = c.nc.Flush()
				t.Logf("%s publishes on %s: %s", c.name, subj, c.v.expect(t, `Permissions Violation for Publish to "`+subj+`"`))
				wg.Add(1)
				go func() {
					defer wg.Done()
					cctx, cancel := short(ctx)
					_, err := c.js.Publish(cctx, subj, entry)
					cancel()
					if err == nil {
						t.Errorf("%s: JetStream publish on %s acknowledged", c.name, subj)
					}
				}()
			}
		}
		wg.Wait()
		unchanged(t, "direct writes")
		// Nor the checkpoint leases, but for the admin.
		leases := "$KV." + room.DefaultLeaseBucket + ".secure"
		for _, c := range []*conn{harness, solver, auditor} {
			if err := c.nc.Publish(leases, []byte("mallory")); err != nil {
				t.Fatal(err)
			}
			_ = c.nc.Flush()
			t.Logf("%s publishes on %s: %s", c.name, leases, c.v.expect(t, `Permissions Violation for Publish to "`+leases+`"`))
			cctx, cancel := short(ctx)
			_, err := c.js.KeyValue(cctx, room.DefaultLeaseBucket)
			cancel()
			if err == nil {
				t.Errorf("%s: looked the lease bucket up", c.name)
			}
		}
		kv, err := publisher.js.KeyValue(ctx, room.DefaultLeaseBucket)
		if err != nil {
			t.Fatalf("publisher: the lease bucket serve made: %v", err)
		}
		if _, err := kv.Get(ctx, "secure"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("a lease was written: %v", err)
		}
	})

	t.Run("no one but the admin changes the stream", func(t *testing.T) {
		weak := cfg
		weak.MaxAge = time.Hour
		weak.Description = "weakened"
		ops := []struct {
			api string
			do  func(context.Context, jetstream.JetStream) error
		}{
			{"STREAM.DELETE", func(ctx context.Context, js jetstream.JetStream) error {
				return js.DeleteStream(ctx, room.DefaultStream)
			}},
			{"STREAM.PURGE", func(ctx context.Context, js jetstream.JetStream) error {
				lctx, cancel := short(context.Background())
				st, err := js.Stream(lctx, room.DefaultStream)
				cancel()
				if err != nil {
					// A harness may not even look the stream up: purge by
					// the API subject itself.
					pctx, cancel := short(context.Background())
					defer cancel()
					_, err = js.Conn().RequestWithContext(pctx, "$JS.API.STREAM.PURGE."+room.DefaultStream, []byte(`{}`))
					return err
				}
				return st.Purge(ctx)
			}},
			{"STREAM.MSG.DELETE", func(ctx context.Context, js jetstream.JetStream) error {
				_, err := js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.MSG.DELETE."+room.DefaultStream, []byte(`{"seq":1}`))
				return err
			}},
			{"STREAM.UPDATE", func(ctx context.Context, js jetstream.JetStream) error {
				_, err := js.UpdateStream(ctx, weak)
				return err
			}},
		}
		var wg sync.WaitGroup
		for _, c := range []*conn{publisher, harness, solver, auditor} {
			for _, op := range ops {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cctx, cancel := short(ctx)
					err := op.do(cctx, c.js)
					cancel()
					if err == nil {
						t.Errorf("%s: %s succeeded", c.name, op.api)
					}
				}()
			}
		}
		wg.Wait()
		for _, c := range []*conn{publisher, harness, solver, auditor} {
			for _, op := range ops {
				t.Logf("%s %s: %s", c.name, op.api, c.v.expect(t, `Permissions Violation for Publish to "$JS.API.`+op.api+`.`+room.DefaultStream+`"`))
			}
		}
		unchanged(t, "stream changes")
	})

	t.Run("the harness has no JetStream API", func(t *testing.T) {
		subjects := []string{
			"$JS.API.INFO",
			"$JS.API.STREAM.INFO." + room.DefaultStream,
			"$JS.API.DIRECT.GET." + room.DefaultStream,
			"$JS.API.STREAM.MSG.GET." + room.DefaultStream,
			"$JS.API.CONSUMER.CREATE." + room.DefaultStream + ".peek",
			"$JS.API.STREAM.CREATE.OTHER",
		}
		var wg sync.WaitGroup
		for _, subj := range subjects {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := short(ctx)
				_, err := harness.nc.RequestWithContext(cctx, subj, []byte(`{"seq":1}`))
				cancel()
				if err == nil {
					t.Errorf("harness: %s answered", subj)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := short(ctx)
			_, err := harness.js.Stream(cctx, room.DefaultStream)
			cancel()
			if err == nil {
				t.Error("harness: stream lookup answered")
			}
		}()
		wg.Wait()
		for _, subj := range subjects {
			t.Logf("harness %s: %s", subj, harness.v.expect(t, `Permissions Violation for Publish to "`+subj+`"`))
		}
	})

	t.Run("no one but the publisher serves the ingest subjects", func(t *testing.T) {
		for _, c := range []*conn{harness, solver, auditor} {
			for _, subj := range []string{"roompub.v1.journal", "roompub.v1.>"} {
				if _, err := c.nc.QueueSubscribe(subj, "q", func(*nats.Msg) {}); err != nil {
					t.Fatal(err)
				}
				_ = c.nc.Flush()
				t.Logf("%s subscribes to %s: %s", c.name, subj, c.v.expect(t, `Permissions Violation for Subscription to "`+subj+`"`))
			}
		}
		for _, c := range []*conn{harness} {
			if _, err := c.nc.Subscribe("rooms.>", func(*nats.Msg) {}); err != nil {
				t.Fatal(err)
			}
			_ = c.nc.Flush()
			t.Logf("%s subscribes to rooms.>: %s", c.name, c.v.expect(t, `Permissions Violation for Subscription to "rooms.>"`))
		}
	})

	t.Run("the solver does not append through the ingest service", func(t *testing.T) {
		endpoints := []string{"journal", "execution", "records"}
		if !id.opts.SolverHead {
			endpoints = append(endpoints, "head")
		}
		record := roomtest.ReferenceBytes(t, "refused.json")
		var wg sync.WaitGroup
		for _, c := range []*conn{solver, auditor} {
			for _, ep := range endpoints {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cctx, cancel := short(ctx)
					hdr := nats.Header{room.HeaderRoom: []string{"room:secure"}}
					_, err := c.nc.RequestMsgWithContext(cctx, &nats.Msg{Subject: "roompub.v1." + ep, Header: hdr, Data: record})
					cancel()
					if err == nil {
						t.Errorf("%s: roompub.v1.%s answered", c.name, ep)
					}
				}()
			}
		}
		wg.Wait()
		for _, c := range []*conn{solver, auditor} {
			for _, ep := range endpoints {
				t.Logf("%s calls roompub.v1.%s: %s", c.name, ep, c.v.expect(t, `Permissions Violation for Publish to "roompub.v1.`+ep+`"`))
			}
		}
		if id.opts.SolverHead {
			h, err := clientAs(solver, id.solverPub).Head(ctx, events.ChainKey{RunID: "run-20260903-csv-dedupe-0009", CapsuleID: "cap-csv-dedupe-0009"})
			if err != nil || h.Next != 14 {
				t.Fatalf("solver-head: %+v %v", h, err)
			}
		}
		if !id.opts.SolverHead {
			// A client call the server refuses says so: not an outage
			// to wait out and retry.
			cl := client.New(auditor.nc, client.Options{Identity: room.IdentityToken(userAuditor), Timeout: 500 * time.Millisecond})
			_, err := cl.Head(ctx, events.ChainKey{RunID: "run-20260903-csv-dedupe-0009", CapsuleID: "cap-csv-dedupe-0009"})
			if !errors.Is(err, client.ErrNotPermitted) || errors.Is(err, client.ErrUnavailable) || client.Retryable(err) {
				t.Fatalf("the auditor's head request: %v, want ErrNotPermitted", err)
			}
		}
		unchanged(t, "solver ingest")
	})

	t.Run("the solver audits and follows read-only", func(t *testing.T) {
		v, err := validate.New(validate.WithTrustedHosts(roomtest.ReferenceHost))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []*conn{solver, auditor} {
			rep, err := reader.Audit(ctx, c.js, reader.AuditOptions{Validator: v, Read: reader.ReadDirect})
			if err != nil || !rep.Clean() || rep.Totals.Messages != msgs {
				t.Fatalf("%s: audit: %+v %v", c.name, rep, err)
			}
			st, err := c.js.Stream(ctx, room.DefaultStream)
			if err != nil {
				t.Fatal(err)
			}
			if m, err := st.GetMsg(ctx, 1); err != nil || m.Sequence != 1 { // direct get
				t.Fatalf("%s: direct get: %v", c.name, err)
			}
			if _, err := st.GetLastMsgForSubject(ctx, "rooms.qmail-open-relay.exec"); err != nil {
				t.Fatalf("%s: last by subject: %v", c.name, err)
			}
			resp, err := c.nc.Request("$JS.API.STREAM.MSG.GET."+room.DefaultStream, []byte(`{"seq":2}`), 5*time.Second)
			if err != nil || !bytes.Contains(resp.Data, []byte(`"seq":2`)) {
				t.Fatalf("%s: stream msg get: %v %s", c.name, err, resp.Data)
			}
		}
		// Follow with a durable consumer; a handler error leaves
		// delivered, unacknowledged messages, so the next Follow resets
		// the consumer ($JS.API.CONSUMER.RESET) before it goes on.
		o := reader.FollowOptions{Durable: "secure-solver", Validator: v, Read: reader.ReadDirect}
		f := roomtest.StartFollow(t, solver.js, o, func(ev *reader.Event) error {
			if ev.Seq == 5 {
				return errors.New("stop here")
			}
			return nil
		})
		if err := f.Wait(t); !errors.Is(err, reader.ErrHandler) {
			t.Fatalf("follow: %v", err)
		}
		ci, err := solver.js.Consumer(ctx, room.DefaultStream, "secure-solver")
		if err != nil || ci.CachedInfo().NumAckPending == 0 {
			t.Fatalf("no unacknowledged messages after the handler error: %v", err)
		}
		// The first Follow's last pull request (1s) is still waiting on
		// this connection: a Follow started within that second sees the
		// reset's redeliveries go to it and waits out AckWait (a flaw of
		// reader.Follow, not of the permissions). A new process never has it.
		time.Sleep(1500 * time.Millisecond)
		f = roomtest.StartFollow(t, solver.js, o, nil)
		f.WaitSeen(t, int(leaves)-4)
		if err := f.Stop(t); err != nil {
			t.Fatalf("follow: %v", err)
		}
		if seqs := f.EventSeqs(); len(seqs) != int(leaves)-4 || seqs[0] != 5 {
			t.Fatalf("follow after the reset handed out %v", seqs)
		}
		if _, err := solver.js.ResetConsumer(ctx, room.DefaultStream, "secure-solver"); err != nil {
			t.Fatalf("solver: reset its consumer: %v", err)
		}
		unchanged(t, "reading")
	})

	t.Run("the admin calls the ingest service as no one", func(t *testing.T) {
		entry := bytes.SplitN(mustRead(t, roomtest.Testdata("samples/capsules/csv-dedupe/journal.ndjson")), []byte("\n"), 2)[0]
		// A made-up identity (or a removed user's), its own, another
		// user's and the anonymous one.
		for _, subj := range []string{"roompub.v1.ghost.journal", "roompub.v1.admin.journal", "roompub.v1.harness.journal", "roompub.v1.journal"} {
			msg := &nats.Msg{Subject: subj, Reply: "_INBOX_ghost.x", Data: entry, Header: nats.Header{room.HeaderRoom: []string{"room:ghost"}}}
			if err := admin.nc.PublishMsg(msg); err != nil {
				t.Fatal(err)
			}
			_ = admin.nc.Flush()
			t.Logf("admin publishes on %s: %s", subj, admin.v.expect(t, `Permissions Violation for Publish to "`+subj+`"`))
		}
		unchanged(t, "the admin's ingest requests")
	})

	t.Run("solvers create only their own durables", func(t *testing.T) {
		st, err := solver.js.Stream(ctx, room.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		// Its second durable, named in the secure config: allowed.
		if _, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "secure-solver-2", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatalf("solver: its second durable: %v", err)
		}
		// Any other name, another solver's durable, an ephemeral consumer:
		// refused by the server before anything is created.
		auditorDurable := secure.DefaultDurable(secure.User{Name: userAuditor})
		for _, name := range []string{"solver-extra", auditorDurable} {
			cctx, cancel := short(ctx)
			_, err := st.CreateOrUpdateConsumer(cctx, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy})
			cancel()
			if err == nil {
				t.Fatalf("solver created durable %s", name)
			}
			t.Logf("solver creates %s: %s", name, solver.v.expect(t, `Permissions Violation for Publish to "$JS.API.CONSUMER.CREATE.ROOMS.`+name+`"`))
		}
		cctx, cancel := short(ctx)
		_, err = st.OrderedConsumer(cctx, jetstream.OrderedConsumerConfig{})
		cancel()
		if err == nil {
			t.Fatal("solver created an ephemeral ordered consumer")
		}
		// Nor may the auditor touch the solver's durables.
		ast, err := auditor.js.Stream(ctx, room.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel = short(ctx)
		err = ast.DeleteConsumer(cctx, "secure-solver-2")
		cancel()
		if err == nil {
			t.Fatal("the auditor deleted the solver's durable")
		}
		t.Logf("auditor deletes the solver's durable: %s", auditor.v.expect(t, `Permissions Violation for Publish to "$JS.API.CONSUMER.DELETE.ROOMS.secure-solver-2"`))
		// What exists: the solver's two durables and nothing of the
		// refused attempts.
		names := map[string]bool{}
		adst, err := admin.js.Stream(ctx, room.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		for n := range adst.ConsumerNames(ctx).Name() {
			names[n] = true
		}
		if !names["secure-solver"] || !names["secure-solver-2"] || names["solver-extra"] || names[auditorDurable] {
			t.Fatalf("consumers %v", names)
		}
		unchanged(t, "durables")
	})

	t.Run("the admin updates and deletes the stream", func(t *testing.T) {
		upd := cfg
		upd.Description = "roompub rooms: updated by the admin"
		if _, err := admin.js.UpdateStream(ctx, upd); err != nil {
			t.Fatalf("admin update: %v", err)
		}
		if _, _, c := streamNow(t, admin); c.Description != upd.Description {
			t.Fatalf("admin update did not take: %q", c.Description)
		}
		// The stream itself still refuses a purge, even to the admin.
		st, err := admin.js.Stream(ctx, room.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		err = st.Purge(ctx)
		if err == nil {
			t.Fatal("admin purged an append-only stream")
		}
		t.Logf("admin purge: %v (the stream's deny_purge, not a permission)", err)
		if _, err := admin.js.UpdateStream(ctx, cfg); err != nil {
			t.Fatalf("admin restore: %v", err)
		}
		if err := admin.js.DeleteStream(ctx, room.DefaultStream); err != nil {
			t.Fatalf("admin delete: %v", err)
		}
		if _, err := admin.js.Stream(ctx, room.DefaultStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("the stream is still there: %v", err)
		}
	})
}

func nkeyOption(t testing.TB) nats.Option {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return nats.Nkey(pub, kp.Sign)
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSecurePushConsumerDelivery: JetStream delivers a push consumer's
// messages to its deliver subject with the account's rights, not the
// creating user's, so a solver could make the server publish stored
// messages to a subject it may not publish to itself. It may create no
// consumer but its named durables; the server refuses a deliver subject
// on the stream's own subjects, and what its durables can reach otherwise
// cannot change the room: the stream refuses deletes and purges whoever
// asks, and the ingest service answers nothing whose reply subject is not
// the requester's inbox.
func TestSecurePushConsumerDelivery(t *testing.T) {
	id := newIdentities(t, false)
	p := startSecureServe(t, id, "")
	ctx := context.Background()
	admin := dial(t, p.url, userAdmin, id.as(userAdmin))
	harness := dial(t, p.url, userHarness, id.as(userHarness))
	solver := dial(t, p.url, "solver", id.asSolver(t))
	cl := clientAs(harness, userHarness)
	if res, err := client.ShipCapsule(ctx, cl, roomtest.Testdata("samples/capsules/csv-dedupe"), "room:secure", client.ShipOptions{}); err != nil || res.Stored != 14 {
		t.Fatalf("ship: %+v %v", res, err)
	}
	if rec, err := cl.AppendRecord(ctx, roomtest.ReferenceBytes(t, "verified.json")); err != nil || rec.Item.Outcome != room.OutcomeStored {
		t.Fatalf("record: %+v %v", rec, err)
	}
	msgs, last, _ := streamNow(t, admin)
	st, err := solver.js.Stream(ctx, room.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	// A consumer of another name: the solver may create none.
	cctx, cancel := short(ctx)
	_, err = st.CreatePushConsumer(cctx, jetstream.ConsumerConfig{Name: "loop", DeliverSubject: "roompub.v1.execution", AckPolicy: jetstream.AckNonePolicy})
	cancel()
	if err == nil {
		t.Fatal("solver created a push consumer named loop")
	}
	t.Logf("solver creates push consumer loop: %s", solver.v.expect(t, `Permissions Violation for Publish to "$JS.API.CONSUMER.CREATE.ROOMS.loop`))
	// Its own durable onto a room subject: the server refuses the consumer.
	_, err = st.CreatePushConsumer(ctx, jetstream.ConsumerConfig{Durable: "secure-solver", DeliverSubject: "rooms.secure.exec", AckPolicy: jetstream.AckNonePolicy})
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10081 {
		t.Fatalf("push consumer onto a room subject: %v", err)
	}
	t.Logf("push consumer delivering onto rooms.secure.exec: %v", err)
	// Its two durables onto the message delete API (entries carry "seq")
	// and a harness's ingest subject: the server publishes there, and
	// nothing changes (a delivery has no reply subject under the
	// harness's inbox, so the service would not act on it either).
	targets := map[string]string{
		"secure-solver":   "$JS.API.STREAM.MSG.DELETE." + room.DefaultStream,
		"secure-solver-2": room.ServiceSubject("", room.IdentityToken(userHarness), room.EndpointExecution),
	}
	for name, deliver := range targets {
		if _, err := st.CreatePushConsumer(ctx, jetstream.ConsumerConfig{Durable: name, DeliverSubject: deliver, AckPolicy: jetstream.AckNonePolicy}); err != nil {
			t.Fatalf("push consumer onto %s: %v", deliver, err)
		}
	}
	// Give every consumer time to deliver the whole stream where the
	// server finds interest on its deliver subject.
	time.Sleep(3 * time.Second)
	for name, deliver := range targets {
		c, err := st.PushConsumer(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("push consumer delivering onto %s: delivered up to stream seq %d of %d", deliver, c.CachedInfo().Delivered.Stream, last)
	}
	m, l, cfg := streamNow(t, admin)
	if m != msgs || l != last {
		t.Fatalf("the stream changed: %d messages up to %d, was %d up to %d", m, l, msgs, last)
	}
	if err := room.CheckStreamConfig(cfg, room.Subjects{}); err != nil {
		t.Fatal(err)
	}
}

// TestSecureOptionsCheck: every problem of a secure config is reported,
// and no message holds a hash.
func TestSecureOptionsCheck(t *testing.T) {
	hash, _ := bcrypt.GenerateFromPassword([]byte("a long password"), bcrypt.MinCost)
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	o := secure.Options{Users: []secure.User{
		{Role: "owner", Name: "x", PasswordHash: string(hash)},
		{Role: secure.RoleHarness, Name: "h", PasswordHash: "plain-text-password"},
		{Role: secure.RoleHarness, Name: "h", PasswordHash: string(hash)},
		{Role: secure.RoleSolver, NKey: string(seed)},
		{Role: secure.RoleSolver, Name: "bad name", PasswordHash: string(hash), InboxPrefix: "_INBOX"},
		{Role: secure.RoleSolver, Name: "s", PasswordHash: string(hash), InboxPrefix: "_INBOX_other"},
	}, TLS: secure.TLS{Cert: "c.pem", Verify: true}, LeaseBucket: "bad.bucket"}
	err := o.Check()
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, want := range []string{`unknown role "owner"`, "must be a bcrypt hash", "user name listed twice", "not a public user nkey",
		"user name must be", `inbox prefix "_INBOX_other" is not the user's own, _INBOX_s`, "no user has the publisher role", "cert and key go together", "verify needs the ca",
		`lease bucket "bad.bucket" is not a plain token`} {
		if !strings.Contains(msg, want) {
			t.Errorf("no %q in:\n%s", want, msg)
		}
	}
	for _, secret := range []string{string(hash), "plain-text-password", string(seed)} {
		if strings.Contains(msg, secret) {
			t.Errorf("the error holds a secret:\n%s", msg)
		}
	}
	u := secure.User{Role: secure.RoleAdmin, Name: "admin", PasswordHash: string(hash)}
	for _, s := range []string{u.String(), fmt.Sprintf("%v %+v %#v", u, u, u), fmt.Sprint(o)} {
		if strings.Contains(s, string(hash)) {
			t.Errorf("printed a hash: %s", s)
		}
	}
	// Permissions are data: a JSON round trip for the record.
	b, _ := json.Marshal(secure.Options{}.Permissions(secure.User{Role: secure.RoleHarness, Name: "h-1"}))
	if !strings.Contains(string(b), `"allow":["roompub.v1.h-1.\u003e"]`) || !strings.Contains(string(b), `"allow":["_INBOX_h-1.\u003e"]`) {
		t.Errorf("harness permissions: %s", b)
	}
	// The lease bucket: the publisher's, under its own name.
	leases := func(o secure.Options, role secure.Role) string {
		b, _ := json.Marshal(o.Permissions(secure.User{Role: role, Name: "u"}).Publish.Allow)
		return string(b)
	}
	if p := leases(secure.Options{}, secure.RolePublisher); !strings.Contains(p, `"$KV.ROOMPUB_CHECKPOINT_LEASES.\u003e"`) ||
		!strings.Contains(p, `"$JS.API.STREAM.CREATE.KV_ROOMPUB_CHECKPOINT_LEASES"`) {
		t.Errorf("publisher permissions: %s", p)
	}
	if p := leases(secure.Options{LeaseBucket: "OTHER"}, secure.RolePublisher); !strings.Contains(p, `"$KV.OTHER.\u003e"`) || strings.Contains(p, "ROOMPUB_CHECKPOINT_LEASES") {
		t.Errorf("publisher permissions with another bucket: %s", p)
	}
	for _, role := range []secure.Role{secure.RoleHarness, secure.RoleSolver} {
		if p := leases(secure.Options{}, role); strings.Contains(p, "LEASES") || strings.Contains(p, "$KV.") || strings.Contains(p, "$JS.API.INFO") {
			t.Errorf("%s may touch the lease bucket: %s", role, p)
		}
	}
	// Partitions: every room stream's permissions, the placement bucket
	// written by the publisher alone.
	three := secure.Options{Partitions: 3}
	perms := func(role secure.Role) (allow, deny string) {
		p := three.Permissions(secure.User{Role: role, Name: "u"}).Publish
		a, _ := json.Marshal(p.Allow)
		d, _ := json.Marshal(p.Deny)
		return string(a), string(d)
	}
	if a, _ := perms(secure.RolePublisher); !strings.Contains(a, `"rooms-2.\u003e"`) || !strings.Contains(a, `"$JS.API.STREAM.CREATE.ROOMS-2"`) ||
		!strings.Contains(a, `"$KV.ROOMPUB_PLACEMENT.\u003e"`) || !strings.Contains(a, `"$KV.ROOMPUB_STREAMS.ROOMS-1"`) ||
		!strings.Contains(a, `"$JS.API.STREAM.LEADER.STEPDOWN.ROOMS-2"`) {
		t.Errorf("publisher permissions over 3 partitions: %s", a)
	}
	if a, d := perms(secure.RoleHarness); strings.Contains(a, "rooms") || !strings.Contains(d, `"rooms-1.\u003e"`) || !strings.Contains(d, `"rooms-2.\u003e"`) {
		t.Errorf("harness permissions over 3 partitions: allow %s deny %s", a, d)
	}
	if a, d := perms(secure.RoleSolver); !strings.Contains(a, `"$JS.API.DIRECT.GET.ROOMS-2.\u003e"`) || !strings.Contains(a, `"$JS.API.CONSUMER.CREATE.ROOMS-1.u"`) ||
		!strings.Contains(a, `"$JS.API.DIRECT.GET.KV_ROOMPUB_PLACEMENT.\u003e"`) || strings.Contains(a, "$KV.") || !strings.Contains(d, `"rooms-2.\u003e"`) ||
		!strings.Contains(d, `"$JS.API.STREAM.PURGE.ROOMS-2"`) {
		t.Errorf("solver permissions over 3 partitions: allow %s deny %s", a, d)
	}
}

// TestSecureCheckpoints: in secure mode serve, as the publisher user,
// takes a room's lease and writes its checkpoints; a solver reads them.
func TestSecureCheckpoints(t *testing.T) {
	id := newIdentities(t, false)
	p := startSecureServe(t, id, "", func(so *node.ServeOptions) {
		so.Checkpoint = checkpointer.Options{Every: 5, Interval: 100 * time.Millisecond}
	})
	ctx := context.Background()
	harness := dial(t, p.url, userHarness, id.as(userHarness))
	solver := dial(t, p.url, "solver", id.asSolver(t))
	admin := dial(t, p.url, userAdmin, id.as(userAdmin))
	res, err := client.ShipCapsule(ctx, clientAs(harness, userHarness), roomtest.Testdata("samples/capsules/csv-dedupe"), "room:secure", client.ShipOptions{})
	if err != nil || res.Stored != 14 {
		t.Fatalf("ship: %+v %v", res, err)
	}
	st, err := solver.js.Stream(ctx, room.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	trust, err := checkpoint.NewTrust(p.pubKey.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	var ck *checkpoint.Checkpoint
	roomtest.WaitFor(t, 10*time.Second, "a checkpoint of all 14 entries, read by the solver", func() bool {
		m, err := st.GetLastMsgForSubject(ctx, room.Subjects{}.Checkpoint("room:secure"))
		if err != nil {
			return false
		}
		ck, err = checkpoint.Parse(m.Data, "room:secure", trust)
		return err == nil && ck.Size == 14
	})
	kv, err := admin.js.KeyValue(ctx, room.DefaultLeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	en, err := kv.Get(ctx, checkpointer.LeaseKey("room:secure"))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := trust.VerifyLease(checkpointer.LeaseKey("room:secure"), en.Value()); err != nil || l.NodeID != p.pubKey.NodeID() {
		t.Fatalf("lease: %q %v", en.Value(), err)
	}
	p.stop()
	if strings.Contains(p.logs.String(), "Permissions Violation") || strings.Contains(p.logs.String(), "checkpointer: writing") {
		t.Fatalf("serve hit a permission:\n%s", p.logs)
	}
}

// TestSecureDeploymentLog: in secure mode serve keeps the deployment log
// (its stream, entries, checkpoints) under the publisher's permissions,
// a solver audits it with a witness policy, and no identity but the
// publisher writes its subjects or deletes its stream.
func TestSecureDeploymentLog(t *testing.T) {
	id := newIdentities(t, false)
	p := startSecureServe(t, id, "", func(so *node.ServeOptions) {
		so.Checkpoint = checkpointer.Options{Every: 5, Interval: 100 * time.Millisecond, Origin: roomtest.Deployment,
			Deployment: checkpointer.DeploymentOptions{Interval: 50 * time.Millisecond}}
	})
	ctx := context.Background()
	harness := dial(t, p.url, userHarness, id.as(userHarness))
	solver := dial(t, p.url, "solver", id.asSolver(t))
	auditor := dial(t, p.url, userAuditor, id.as(userAuditor))
	res, err := client.ShipCapsule(ctx, clientAs(harness, userHarness), roomtest.Testdata("samples/capsules/csv-dedupe"), "room:secure", client.ShipOptions{})
	if err != nil || res.Stored != 14 {
		t.Fatalf("ship: %+v %v", res, err)
	}
	trust, err := checkpoint.NewTrust(p.pubKey.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	if trust, err = trust.WithOrigin(roomtest.Deployment); err != nil {
		t.Fatal(err)
	}
	v, err := validate.New(validate.WithTrustedHosts(p.key.NodeID()))
	if err != nil {
		t.Fatal(err)
	}
	none, err := witness.NewPolicy(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var rep *reader.AuditReport
	roomtest.WaitFor(t, 10*time.Second, "the solver's audit of the deployment log", func() bool {
		rep, err = reader.Audit(ctx, solver.js, reader.AuditOptions{Validator: v, Trust: trust, Read: reader.ReadDirect,
			Witnessing: &reader.Witnessing{Policy: none}})
		return err == nil && rep.Clean() && rep.Witness != nil && rep.Witness.Witnessed != nil && rep.Witness.Witnessed.Size == 1
	})
	if len(rep.Checkpoints) != 1 || rep.Checkpoints[0].Witnessed == nil || rep.Checkpoints[0].Witnessed.Size != 14 {
		t.Fatalf("audit: %v %+v %+v", err, rep.Witness, rep.Checkpoints)
	}
	dl := room.DeploymentLog{}
	for _, c := range []*conn{harness, solver, auditor} {
		cctx, cancel := short(ctx)
		if _, err := c.js.Publish(cctx, dl.Entry(), []byte("junk")); err == nil {
			t.Errorf("%s wrote a deployment log entry", c.name)
		}
		if err := c.js.DeleteStream(cctx, dl.StreamName()); err == nil {
			t.Errorf("%s deleted the deployment log", c.name)
		}
		cancel()
	}
	p.stop()
	if strings.Contains(p.logs.String(), "Permissions Violation for Publish to \"roompub_deployment") || strings.Contains(p.logs.String(), "checkpointer: the deployment log") {
		t.Fatalf("serve hit a permission:\n%s", p.logs)
	}
}

// Secure mode over three partitions: the harness ships into rooms of each
// through the service only, and the solver audits every room stream and
// reads the placement bucket; neither writes a room stream or a placement.
func TestSecurePartitions(t *testing.T) {
	id := newIdentities(t, false)
	id.opts.Partitions = 3
	p := startSecureServe(t, id, "", func(so *node.ServeOptions) {
		so.Partitions = 3
		so.Checkpoint = checkpointer.Options{Every: 5, Interval: 100 * time.Millisecond}
	})
	ctx := context.Background()
	harness := dial(t, p.url, userHarness, id.as(userHarness))
	solver := dial(t, p.url, "solver", id.asSolver(t))
	// Rooms until two partitions hold one each.
	streams := map[string]string{}
	var shipped []string
	for i := 0; len(streams) < 2 || len(shipped) < 3; i++ {
		id := fmt.Sprintf("room:secure-part-%d", i)
		_, body := roomtest.Journal(t, "run-secure-part", id, 2)
		r := roomtest.ShipJournalAs(t, harness.nc, room.IdentityToken(userHarness), id, body)
		if r.Stored != 2 {
			t.Fatalf("%s: %+v", id, r)
		}
		shipped = append(shipped, id)
		q := placed(t, solver.js, id)
		streams[q] = id
	}
	trust, err := checkpoint.NewTrust(p.pubKey.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	v, err := validate.New(validate.WithTrustedHosts(p.key.NodeID()))
	if err != nil {
		t.Fatal(err)
	}
	place, err := reader.OpenLayout(ctx, solver.js, room.Layout{})
	if err != nil || len(place.Partitions()) != 3 {
		t.Fatalf("the solver's layout: %v %v", place, err)
	}
	var rep *reader.AuditReport
	roomtest.WaitFor(t, 10*time.Second, "the solver's audit of every partition", func() bool {
		rep, err = reader.AuditDeployment(ctx, solver.js, reader.AuditOptions{Validator: v, Trust: trust, Read: reader.ReadDirect}, place)
		return err == nil && rep.Clean() && len(rep.Checkpoints) == len(shipped)
	})
	if len(rep.Partitions) != 3 || rep.Totals.Entries != uint64(2*len(shipped)) || rep.Totals.ChainsOK != len(shipped) {
		t.Fatalf("audit: %v %+v", err, rep.Totals)
	}
	for _, c := range []*conn{harness, solver} {
		cctx, cancel := short(ctx)
		if _, err := c.js.Publish(cctx, "rooms-1.secure-part-0.exec", []byte("{}")); err == nil {
			t.Errorf("%s wrote onto a room subject of partition 1", c.name)
		}
		// A placement written around serve: the server drops it.
		_ = c.nc.Publish("$KV."+room.DefaultPlacementBucket+"."+room.RoomPlacementKey("room:x"), []byte(`{"stream":"ROOMS-2","prefix":"rooms-2"}`))
		_ = c.nc.Flush()
		if err := c.js.DeleteStream(cctx, "ROOMS-2"); err == nil {
			t.Errorf("%s deleted room stream ROOMS-2", c.name)
		}
		cancel()
	}
	if q := placed(t, solver.js, "room:x"); q != "" {
		t.Errorf("a reader or harness placed room:x on %s", q)
	}
	// The publisher's own permissions are shown by what it did: it placed
	// rooms on two partitions and wrote every room's checkpoint there.
	p.stop()
}
