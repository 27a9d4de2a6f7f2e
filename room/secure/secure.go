// Package secure is roompub's secure mode: the roles (publisher, harness,
// solver, admin), each user's exact NATS permissions, identifying a user
// by password or nkey, and the nats-server authorization block
// (docs/secure-mode.md). It names subjects and buckets through package
// room's vocabulary and imports no other roompub package (test/layout).
package secure

import (
	"crypto/tls"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/roompub/roompub/room"
)

// ErrMode is wrapped by every secure mode error.
var ErrMode = errors.New("secure mode")

// Role is what an identity does with the rooms in secure mode. Each role
// has exactly the permissions Permissions gives it (docs/secure-mode.md).
type Role string

// The four roles.
const (
	// RolePublisher runs `publisher serve`: the only identity that writes
	// room subjects (checkpoint subjects included). It reads and creates
	// its stream, reads messages for the gate's decisions, serves the
	// ingest service, and creates and writes the checkpoint lease bucket.
	// It also lists the account's streams and consumers and keeps its
	// stream mark in the streams bucket (docs/secure-mode.md, "The
	// stream").
	RolePublisher Role = "publisher"
	// RoleHarness ships journals and records through the ingest service
	// and may do nothing else: no room subject, no JetStream API.
	RoleHarness Role = "harness"
	// RoleSolver (alias "auditor") reads rooms: stream info, message gets,
	// its own pull consumers and their acks. It never writes a room
	// subject and never changes the stream.
	RoleSolver Role = "solver"
	// RoleAdmin may do everything except write room subjects directly:
	// it is the only identity that may update or delete the stream.
	RoleAdmin Role = "admin"
)

// Roles lists the roles in the order the table of docs/secure-mode.md,
// "Roles and their permissions", has them.
var Roles = []Role{RolePublisher, RoleHarness, RoleSolver, RoleAdmin}

// ParseRole parses a role name; "auditor" is the solver role.
func ParseRole(s string) (Role, error) {
	switch r := Role(strings.ToLower(strings.TrimSpace(s))); r {
	case RolePublisher, RoleHarness, RoleSolver, RoleAdmin:
		return r, nil
	case "auditor":
		return RoleSolver, nil
	}
	return "", fmt.Errorf("%w: unknown role %q (publisher, harness, solver or auditor, admin)", ErrMode, s)
}

// User is one identity of the embedded server: a user name with a
// bcrypt password hash, or a public user nkey. It never holds a plain
// password or an nkey seed; String and GoString print no hash either.
type User struct {
	Role         Role
	Name         string // user name (password users)
	PasswordHash string // bcrypt hash of the password ($2a$, $2b$, $2y$)
	NKey         string // public user nkey, "U…" (nkey users)
	// room.InboxPrefix, when set, must be the user's own inbox prefix,
	// room.InboxPrefix(u.Token()): the only inbox it may subscribe to, which
	// its clients connect with (the commands derive it from --user,
	// --nkey or --creds). Empty means the same; the field stays so that
	// configs which named it keep working.
	InboxPrefix string
	// Durables are the names of the durable consumers a solver may
	// create and use on the room stream: its quota of consumers, and
	// names no other solver may touch (docs/secure-mode.md,
	// "Roles and their permissions"). Empty: one, DefaultDurable of the user. Other roles
	// have none.
	Durables []string
}

// DefaultDurable is the durable consumer name of a solver whose secure
// config names none: its identity token.
func DefaultDurable(u User) string { return u.Token() }

// durables is u's durable names, the default filled in.
func (u User) durables() []string {
	if len(u.Durables) == 0 {
		return []string{DefaultDurable(u)}
	}
	return u.Durables
}

// Token is the user's identity token (room.IdentityToken of ID): its ingest
// subjects are <service prefix>.<token>.<endpoint>.
func (u User) Token() string { return room.IdentityToken(u.ID()) }

// Inbox is the user's own inbox prefix, room.InboxPrefix(u.Token()).
func (u User) Inbox() string { return room.InboxPrefix(u.Token()) }

// ID names the user in messages: its name or its public nkey.
func (u User) ID() string {
	if u.NKey != "" {
		return u.NKey
	}
	return u.Name
}

// String describes the user without its password hash.
func (u User) String() string {
	auth := "nkey"
	if u.NKey == "" {
		auth = "password"
		if u.PasswordHash != "" {
			auth = "password [REDACTED]"
		}
	}
	return fmt.Sprintf("%s %s (%s)", u.Role, u.ID(), auth)
}

// GoString is String, so %#v prints no hash either.
func (u User) GoString() string { return "secure.User{" + u.String() + "}" }

// TLS is the embedded server's TLS: its certificate and key, and
// the CA that signs client certificates when Verify is set.
type TLS struct {
	Cert, Key, CA string
	Verify        bool // require and verify client certificates (mutual TLS)
}

// Options is the secure mode of the embedded server: who may
// connect, in which role. Stream, room.Subjects and ServicePrefix must be the
// ones `publisher serve` uses, since the permissions name them.
type Options struct {
	Users []User
	// Stream is the room stream's name; default room.DefaultStream.
	Stream   string
	Subjects room.Subjects
	// Partitions is how many room streams the deployment places rooms on
	// (room.Layout): Stream and Subjects are the first, and every
	// permission on them is given on each. 0 or 1: one.
	Partitions int
	// ServicePrefix is the ingest service's subject prefix; default
	// room.DefaultServicePrefix.
	ServicePrefix string
	// SolverHead lets solvers ask the ingest service where a chain stands
	// (<ServicePrefix>.head, a read), never append through it. Off by
	// default: solvers do not talk to the ingest service at all.
	SolverHead bool
	// LeaseBucket is the checkpoint lease bucket, which only
	// the publisher (and the admin) may write; default room.DefaultLeaseBucket.
	LeaseBucket string
	// Deployment is the deployment log's stream and subjects (docs/
	// witnesses.md): only the publisher writes them; every role that reads
	// rooms reads them too. Zero: the defaults.
	Deployment room.DeploymentLog
	// TLS, when Cert is set, turns TLS on (and off plain connections).
	TLS TLS
}

var (
	userNameRe   = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,128}$`)
	streamNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	tokenRe      = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	// consumerNameRe is what a solver's durable may be called: a subject
	// token and a file name (room.IdentityToken's alphabet).
	consumerNameRe = regexp.MustCompile(`^[A-Za-z0-9_~:-]{1,255}$`)
)

func (o Options) stream() string {
	if o.Stream == "" {
		return room.DefaultStream
	}
	return o.Stream
}

func (o Options) leaseBucket() string {
	if o.LeaseBucket == "" {
		return room.DefaultLeaseBucket
	}
	return o.LeaseBucket
}

func (o Options) service() string {
	if o.ServicePrefix == "" {
		return room.DefaultServicePrefix
	}
	return o.ServicePrefix
}

// Check reports every problem of the options, joined, each wrapping
// ErrMode. No message holds a password hash.
func (o Options) Check() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrMode}, args...)...))
	}
	if !streamNameRe.MatchString(o.stream()) {
		bad("stream name %q is not a plain token", o.stream())
	}
	if !tokenRe.MatchString(o.Subjects.Root()) {
		bad("subject prefix %q is not a plain token", o.Subjects.Root())
	}
	if err := (room.Layout{Partitions: o.Partitions}).Check(); err != nil {
		bad("%v", err)
	}
	if !tokenRe.MatchString(o.leaseBucket()) {
		bad("lease bucket %q is not a plain token", o.leaseBucket())
	}
	for _, tok := range strings.Split(o.service(), ".") {
		if !tokenRe.MatchString(tok) {
			bad("service prefix %q is not a dotted subject of plain tokens", o.service())
			break
		}
	}
	names, nkeysSeen, inboxes, durables := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]string{}
	publishers := 0
	for i, u := range o.Users {
		at := fmt.Sprintf("user %d", i+1)
		switch {
		case u.NKey != "" && nkeys.IsValidPublicUserKey(u.NKey):
			at = fmt.Sprintf("user %d (%s)", i+1, u.NKey)
		case u.NKey == "" && u.Name != "":
			// Never the nkey field otherwise: it may hold a seed.
			at = fmt.Sprintf("user %d (%s)", i+1, u.Name)
		}
		role, err := ParseRole(string(u.Role))
		if err != nil {
			bad("%s: unknown role %q", at, u.Role)
		}
		if role == RolePublisher {
			publishers++
		}
		switch {
		case u.NKey != "" && (u.Name != "" || u.PasswordHash != ""):
			bad("%s: an nkey user has no name or password", at)
		case u.NKey != "":
			if !nkeys.IsValidPublicUserKey(u.NKey) {
				bad("%s: nkey is not a public user nkey (U…; the seed, S…, never goes in this file)", at)
			}
			if nkeysSeen[u.NKey] {
				bad("%s: nkey listed twice", at)
			}
			nkeysSeen[u.NKey] = true
		default:
			if !userNameRe.MatchString(u.Name) {
				bad("%s: user name must be 1 to 128 of A-Z a-z 0-9 _ . @ -", at)
			}
			if names[u.Name] {
				bad("%s: user name listed twice", at)
			}
			names[u.Name] = true
			if _, err := bcrypt.Cost([]byte(u.PasswordHash)); err != nil || !strings.HasPrefix(u.PasswordHash, "$2") {
				bad("%s: password must be a bcrypt hash ($2a$…, $2b$…); make one with `publisher passwd`", at)
			}
		}
		if u.InboxPrefix != "" && u.InboxPrefix != u.Inbox() {
			bad("%s: inbox prefix %q is not the user's own, %s (every user's inbox is _INBOX_ + its name or nkey; leave inbox-prefix out)", at, u.InboxPrefix, u.Inbox())
		}
		if len(u.Durables) > 0 && role != RoleSolver {
			bad("%s: only solvers have durables", at)
		}
		if role == RoleSolver {
			for _, d := range u.durables() {
				if !consumerNameRe.MatchString(d) {
					bad("%s: durable %q is not a consumer name (1 to 255 of A-Z a-z 0-9 _ - ~ :)", at, d)
				}
				if owner, ok := durables[d]; ok {
					bad("%s: durable %q is also %s's", at, d, owner)
				}
				durables[d] = at
			}
		}
		if inboxes[u.Token()] {
			bad("%s: identity token %s is another user's too", at, u.Token())
		}
		inboxes[u.Token()] = true
	}
	if publishers == 0 {
		bad("no user has the publisher role: `publisher serve` connects as one")
	}
	if t := o.TLS; t.Cert != "" || t.Key != "" || t.CA != "" || t.Verify {
		if t.Cert == "" || t.Key == "" {
			bad("tls: cert and key go together")
		}
		if t.Verify && t.CA == "" {
			bad("tls: verify needs the ca that signs client certificates")
		}
	}
	return errors.Join(errs...)
}

// permSet is a role's permissions, as lists.
type permSet struct {
	pubAllow, pubDeny, subAllow, subDeny []string
}

// perms is u's permissions (docs/secure-mode.md, "Roles and their
// permissions"). Every user subscribes to its own inbox only, and the
// publisher publishes replies there (no allow_responses: a reply subject
// chosen by the requester could name any subject the publisher may
// write). Each user calls the ingest service on its own identity's
// subjects only, so the subject tells the service who asks.
func (o Options) perms(u User) permSet {
	role := u.Role
	if r, err := ParseRole(string(role)); err == nil {
		role = r
	}
	svc := o.service()
	parts := room.Layout{Stream: o.stream(), Subjects: o.Subjects, Partitions: o.Partitions}.All()
	// Every room stream's API subject of op, and every room subject.
	apis := func(op string, suffixes ...string) []string {
		var out []string
		for _, p := range parts {
			for _, s := range append([]string{""}, suffixes...) {
				out = append(out, "$JS.API."+op+"."+p.Stream+s)
			}
		}
		return out
	}
	var rooms []string
	for _, p := range parts {
		rooms = append(rooms, p.Subjects.All())
	}
	// The placement bucket (docs/design.md, "Partitions"): the publisher
	// records, every reader reads where rooms are.
	kvPlace := "KV_" + room.DefaultPlacementBucket
	placeRead := []string{"$JS.API.STREAM.INFO." + kvPlace, "$JS.API.STREAM.MSG.GET." + kvPlace,
		"$JS.API.DIRECT.GET." + kvPlace, "$JS.API.DIRECT.GET." + kvPlace + ".>"}
	if len(parts) == 1 {
		// Whether a second partition's stream exists tells a lost
		// placement bucket (room.OpenPlacement).
		placeRead = append(placeRead, "$JS.API.STREAM.INFO."+room.Layout{Stream: o.stream(), Partitions: 2}.Partition(1).Stream)
	}
	inbox := u.Inbox() + ".>"
	own := svc + "." + u.Token()
	// The anonymous identity's endpoints: no one's in secure mode.
	var anonymous []string
	for _, e := range room.Endpoints {
		anonymous = append(anonymous, room.ServiceSubject(svc, room.Anonymous, e))
	}
	// The deployment log: its own stream, read as the room stream is;
	// its subjects written by the publisher alone.
	dst, dlog := o.Deployment.StreamName(), o.Deployment.Subjects().All()
	dapi := func(op string) string { return "$JS.API." + op + "." + dst }
	// What no identity but the admin may ever ask JetStream for.
	streamAdmin := slices.Concat(apis("STREAM.UPDATE"), apis("STREAM.DELETE"), apis("STREAM.PURGE"), apis("STREAM.MSG.DELETE"),
		[]string{dapi("STREAM.UPDATE"), dapi("STREAM.DELETE"), dapi("STREAM.PURGE"), dapi("STREAM.MSG.DELETE"),
			"$JS.API.STREAM.UPDATE." + kvPlace, "$JS.API.STREAM.DELETE." + kvPlace, "$JS.API.STREAM.PURGE." + kvPlace, "$JS.API.STREAM.MSG.DELETE." + kvPlace})
	read := slices.Concat(
		apis("STREAM.INFO"),
		apis("STREAM.MSG.GET"),
		apis("DIRECT.GET", ".>"),
		[]string{
			dapi("STREAM.INFO"),
			dapi("STREAM.MSG.GET"),
			dapi("DIRECT.GET"), dapi("DIRECT.GET") + ".>",
		},
		placeRead)
	switch role {
	case RolePublisher:
		// The checkpoint lease bucket: a key-value bucket is the stream
		// KV_<bucket> on the subjects $KV.<bucket>.>.
		kvStream := "KV_" + o.leaseBucket()
		leases := []string{
			"$KV." + o.leaseBucket() + ".>",
			"$JS.API.STREAM.INFO." + kvStream,
			"$JS.API.STREAM.CREATE." + kvStream,
			"$JS.API.STREAM.MSG.GET." + kvStream,
			"$JS.API.DIRECT.GET." + kvStream, "$JS.API.DIRECT.GET." + kvStream + ".>",
			// nats.go reads the account's JetStream info before it
			// creates a bucket (limits and usage; it changes nothing).
			"$JS.API.INFO",
		}
		// The stream guard (docs/secure-mode.md, "The stream"): the
		// streams bucket, only the room stream's keys, where serve on a
		// server of its own remembers the stream; and the account's
		// stream and consumer lists (read-only), to find other streams
		// that write into room subjects.
		kvStreams := "KV_" + room.DefaultStreamsBucket
		for _, p := range parts {
			// The stream's mark, and the rooms found contradicting their
			// checkpoint, kept across starts.
			leases = append(leases, "$KV."+room.DefaultStreamsBucket+"."+p.Stream, "$KV."+room.DefaultStreamsBucket+"."+p.Stream+".contradicted")
		}
		leases = append(leases,
			"$KV."+room.DefaultPlacementBucket+".>", "$JS.API.STREAM.CREATE."+kvPlace,
			"$JS.API.STREAM.INFO."+kvStreams,
			"$JS.API.STREAM.CREATE."+kvStreams,
			"$JS.API.STREAM.MSG.GET."+kvStreams,
			"$JS.API.DIRECT.GET."+kvStreams, "$JS.API.DIRECT.GET."+kvStreams+".>",
			"$JS.API.STREAM.LIST", "$JS.API.CONSUMER.LIST.*",
		)
		// Replies to ingest requests and $SRV requests: every other
		// user's own inbox, and nothing else.
		var replies []string
		for _, other := range o.Users {
			if other.ID() != u.ID() {
				replies = append(replies, other.Inbox()+".>")
			}
		}
		return permSet{
			// No consumer API: serve reads with direct gets alone, so a
			// stream whose consumers are exhausted stops none of it.
			// Leader step-downs spread the partitions' leaders over the
			// servers (docs/operations.md, "Partitions").
			pubAllow: slices.Concat(rooms, apis("STREAM.CREATE"), apis("STREAM.LEADER.STEPDOWN"), []string{dlog, dapi("STREAM.CREATE")}, read, leases, replies),
			pubDeny:  streamAdmin,
			subAllow: []string{svc + ".>", "$SRV.>", inbox},
		}
	case RoleHarness:
		return permSet{
			pubAllow: []string{own + ".>"},
			pubDeny:  slices.Concat(rooms, []string{dlog, "$JS.>", "$KV.>", "$SRV.>"}),
			subAllow: []string{inbox},
			subDeny:  slices.Concat([]string{svc + ".>"}, rooms),
		}
	case RoleSolver:
		// Reads by direct get, and its own durables, by name: no
		// ephemeral consumer (which has no name a permission could
		// bound), so a solver holds at most its durables and touches
		// no other's (docs/secure-mode.md, "Roles and their permissions").
		allow := append([]string(nil), read...)
		for _, p := range parts {
			st := p.Stream
			api := func(op string) string { return "$JS.API." + op + "." + st }
			for _, d := range u.durables() {
				allow = append(allow,
					api("CONSUMER.CREATE")+"."+d, api("CONSUMER.CREATE")+"."+d+".>",
					api("CONSUMER.DURABLE.CREATE")+"."+d,
					api("CONSUMER.INFO")+"."+d,
					api("CONSUMER.MSG.NEXT")+"."+d,
					api("CONSUMER.DELETE")+"."+d,
					api("CONSUMER.RESET")+"."+d,
					"$JS.ACK."+st+"."+d+".>", "$JS.ACK.*.*."+st+"."+d+".>", // v1 and v2 ack subjects
					"$JS.FC."+st+"."+d+".>", "$JS.FC.*.*."+st+"."+d+".>", // flow control of push consumers
				)
			}
		}
		deny := slices.Concat(rooms, []string{dlog}, streamAdmin)
		if o.SolverHead {
			allow = append(allow, room.ServiceSubject(svc, u.Token(), room.EndpointHead))
			for _, e := range []string{room.EndpointJournal, room.EndpointExecution, room.EndpointRecords} {
				deny = append(deny, svc+".*."+e)
			}
			deny = append(deny, anonymous...)
		} else {
			deny = append(deny, svc+".>")
		}
		return permSet{pubAllow: allow, pubDeny: deny, subAllow: []string{inbox}, subDeny: []string{svc + ".>"}}
	case RoleAdmin:
		// Everything but writing rooms, directly or through the ingest
		// service: a permission cannot allow its own token while denying
		// every other, configured or not (a made-up or a removed user's),
		// so the admin calls the service as no one; harnesses ship.
		return permSet{pubAllow: []string{">"}, pubDeny: slices.Concat(rooms, []string{dlog, svc + ".>"}), subAllow: []string{">"}}
	}
	// An unknown role may do nothing at all.
	return permSet{pubAllow: []string{}, subAllow: []string{}}
}

// Permissions returns the nats-server permissions of user u of these
// options (their roles and the other users' inboxes decide them).
func (o Options) Permissions(u User) *server.Permissions {
	ps := o.perms(u)
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: ps.pubAllow, Deny: ps.pubDeny},
		Subscribe: &server.SubjectPermission{Allow: ps.subAllow, Deny: ps.subDeny},
	}
}

// Configure checks the options and returns the function that applies them
// to the embedded server's options (embedded.Options.Configure): the users
// with their permissions, no anonymous access, and TLS when set.
func (o Options) Configure() (func(*server.Options), error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	var tlsConfig *tls.Config
	if o.TLS.Cert != "" {
		var err error
		tlsConfig, err = server.GenTLSConfig(&server.TLSConfigOpts{CertFile: o.TLS.Cert, KeyFile: o.TLS.Key, CaFile: o.TLS.CA, Verify: o.TLS.Verify})
		if err != nil {
			// The error names files, never their contents.
			return nil, fmt.Errorf("%w: tls: %v", ErrMode, err)
		}
	}
	var users []*server.User
	var nkeyUsers []*server.NkeyUser
	for _, u := range o.Users {
		perms := o.Permissions(u)
		if u.NKey != "" {
			nkeyUsers = append(nkeyUsers, &server.NkeyUser{Nkey: u.NKey, Permissions: perms})
		} else {
			users = append(users, &server.User{Username: u.Name, Password: u.PasswordHash, Permissions: perms})
		}
	}
	return func(opts *server.Options) {
		opts.Users, opts.Nkeys = users, nkeyUsers
		opts.NoAuthUser = ""
		opts.Username, opts.Password, opts.Authorization = "", "", ""
		if tlsConfig != nil {
			opts.TLS, opts.TLSConfig, opts.TLSVerify, opts.TLSTimeout = true, tlsConfig, o.TLS.Verify, 2
		}
	}, nil
}

// IdentifyPassword returns the user name of a publisher-role password
// user whose hash matches password; with name set, only that user. The
// error names the user, never the password or its hash.
func (o Options) IdentifyPassword(name, password string) (User, error) {
	var candidates []User
	for _, u := range o.Users {
		if r, _ := ParseRole(string(u.Role)); r == RolePublisher && u.NKey == "" && (name == "" || u.Name == name) {
			candidates = append(candidates, u)
		}
	}
	if len(candidates) == 0 {
		if name != "" {
			return User{}, fmt.Errorf("%w: no publisher-role password user named %q", ErrMode, name)
		}
		return User{}, fmt.Errorf("%w: no publisher-role password user", ErrMode)
	}
	for _, u := range candidates {
		if bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(password)) == nil {
			return u, nil
		}
	}
	if name != "" {
		return User{}, fmt.Errorf("%w: the password does not match publisher user %q", ErrMode, name)
	}
	return User{}, fmt.Errorf("%w: the password matches no publisher-role user", ErrMode)
}

// IdentifyNKey returns the publisher-role nkey user of public key pub.
func (o Options) IdentifyNKey(pub string) (User, error) {
	for _, u := range o.Users {
		if u.NKey == pub {
			if r, _ := ParseRole(string(u.Role)); r != RolePublisher {
				return User{}, fmt.Errorf("%w: nkey %s has role %s, not publisher", ErrMode, pub, u.Role)
			}
			return u, nil
		}
	}
	return User{}, fmt.Errorf("%w: nkey %s is not a user of the secure config", ErrMode, pub)
}

// AuthorizationConf renders the same users and permissions as a
// nats-server configuration block, for a server or cluster run outside
// roompub: an `authorization { users = [...] }` block, or, with account
// set, an `accounts { <account> { jetstream: enabled, users = [...] } }`
// block. It holds the bcrypt hashes and public nkeys, no secret; TLS is
// not part of it.
func (o Options) AuthorizationConf(account string) (string, error) {
	if err := o.Check(); err != nil {
		return "", err
	}
	if account != "" && !tokenRe.MatchString(account) {
		return "", fmt.Errorf("%w: account name %q is not a plain token", ErrMode, account)
	}
	var b strings.Builder
	parts := room.Layout{Stream: o.stream(), Subjects: o.Subjects, Partitions: o.Partitions}.All()
	var streams, subjects []string
	for _, p := range parts {
		streams, subjects = append(streams, p.Stream), append(subjects, p.Subjects.All())
	}
	fmt.Fprintf(&b, "# roompub secure mode: stream %s, room subjects %s, ingest service %s.>\n", strings.Join(streams, " "), strings.Join(subjects, " "), o.service())
	fmt.Fprintf(&b, "# Generated by `publisher authconf`; docs/secure-mode.md explains every permission.\n")
	indent := "  "
	if account != "" {
		fmt.Fprintf(&b, "accounts {\n  %s {\n    jetstream: enabled\n", account)
		indent = "    "
	} else {
		b.WriteString("authorization {\n")
	}
	fmt.Fprintf(&b, "%susers = [\n", indent)
	users := append([]User(nil), o.Users...)
	order := map[Role]int{RolePublisher: 0, RoleHarness: 1, RoleSolver: 2, RoleAdmin: 3}
	for i := range users {
		if r, err := ParseRole(string(users[i].Role)); err == nil {
			users[i].Role = r
		}
	}
	sort.SliceStable(users, func(i, j int) bool { return order[users[i].Role] < order[users[j].Role] })
	in := indent + "  "
	for _, u := range users {
		ps := o.perms(u)
		fmt.Fprintf(&b, "%s# %s\n%s{\n", in, u.Role, in)
		if u.NKey != "" {
			fmt.Fprintf(&b, "%s  nkey: %q\n", in, u.NKey)
		} else {
			fmt.Fprintf(&b, "%s  user: %q\n%s  password: %q\n", in, u.Name, in, u.PasswordHash)
		}
		fmt.Fprintf(&b, "%s  permissions: {\n", in)
		confSubjects(&b, in+"    ", "publish", ps.pubAllow, ps.pubDeny)
		confSubjects(&b, in+"    ", "subscribe", ps.subAllow, ps.subDeny)
		fmt.Fprintf(&b, "%s  }\n%s}\n", in, in)
	}
	fmt.Fprintf(&b, "%s]\n", indent)
	if account != "" {
		b.WriteString("  }\n}\n")
	} else {
		b.WriteString("}\n")
	}
	return b.String(), nil
}

// confSubjects writes "what: { allow: [...] deny: [...] }", one subject a
// line.
func confSubjects(b *strings.Builder, in, what string, allow, deny []string) {
	fmt.Fprintf(b, "%s%s: {\n", in, what)
	for _, l := range []struct {
		key  string
		subs []string
	}{{"allow", allow}, {"deny", deny}} {
		if len(l.subs) == 0 {
			continue
		}
		fmt.Fprintf(b, "%s  %s: [\n", in, l.key)
		for _, s := range l.subs {
			fmt.Fprintf(b, "%s    %q\n", in, s)
		}
		fmt.Fprintf(b, "%s  ]\n", in)
	}
	fmt.Fprintf(b, "%s}\n", in)
}
