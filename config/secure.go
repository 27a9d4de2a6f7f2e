package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"go.yaml.in/yaml/v3"

	"github.com/roompub/roompub/room"
)

// Secure is the secure mode of `publisher serve`: the embedded server
// admits only the users of a secure config file, each with its role's
// permissions, and serve itself connects as a publisher-role user, named
// by --user with --password-file, or by --nkey (never a password on the
// command line).
type Secure struct {
	SecureConfig string `name:"secure-config" help:"Secure mode: YAML file of the embedded server's users per role (bcrypt hashes or public nkeys); serve connects as a publisher user given with --user and --password-file, or --nkey." placeholder:"FILE" yaml:"secure-config"`
}

// check reports the problems of secure mode's flags on s, joined; nothing
// when secure mode is off.
func (sec Secure) check(s *Serve) error {
	if sec.SecureConfig == "" {
		return nil
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
	}
	if s.Server != "" {
		bad("--secure-config configures the embedded server; with --server, configure the server's users (`publisher authconf` prints them) and connect with --creds, --nkey or --user and --password-file")
	}
	c := s.Credentials
	switch {
	case c.Password != "":
		bad("secure mode: --password puts the publisher's password on the command line; use --password-file")
	case c.Creds != "":
		bad("secure mode: the embedded server has no JWT accounts; use --user and --password-file, or --nkey")
	case c.NKey == "" && (c.User == "" || c.PasswordFile == ""):
		bad("secure mode: serve connects as a publisher-role user: give --user and --password-file, or --nkey")
	}
	if _, err := LoadSecureFile(sec.SecureConfig); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

var yamlValue = regexp.MustCompile("`[^`]*`")

// SecureFile is the YAML secure config:
//
//	users:
//	  - {role: publisher, user: publisher, password: "$2a$11$…"}
//	  - {role: harness, user: harness, password: "$2a$11$…"}
//	  - {role: solver, nkey: UD…, durables: [solver-follow]}
//	  - {role: admin, user: admin, password: "$2a$11$…"}
//	solver-head: false
//	tls: {cert: server.pem, key: server-key.pem}
//
// Passwords are bcrypt hashes and nkeys public keys: the file holds no
// secret. String prints no hash.
type SecureFile struct {
	Users []SecureFileUser `yaml:"users"`
	// SolverHead lets solvers ask the ingest service where a chain stands
	// (roompub.v1.head); they may never append through it.
	SolverHead bool           `yaml:"solver-head"`
	TLS        *SecureFileTLS `yaml:"tls"`
}

// SecureFileUser is one user: role, and user with a bcrypt password hash,
// or nkey (public); inbox-prefix optionally gives the user its own inbox.
type SecureFileUser struct {
	Role        string `yaml:"role"`
	User        string `yaml:"user"`
	Password    string `yaml:"password"`
	NKey        string `yaml:"nkey"`
	InboxPrefix string `yaml:"inbox-prefix"`
	// Durables are the durable consumer names a solver may create and
	// use (docs/secure-mode.md, "Roles and their permissions"); none given: one, named
	// after the user.
	Durables []string `yaml:"durables"`
}

// String redacts the password hash.
func (u SecureFileUser) String() string {
	pw := ""
	if u.Password != "" {
		pw = " password=[REDACTED]"
	}
	return fmt.Sprintf("{role=%s user=%q nkey=%q%s inbox-prefix=%q}", u.Role, u.User, u.NKey, pw, u.InboxPrefix)
}

// GoString is String, so %#v prints no hash either.
func (u SecureFileUser) GoString() string { return "config.SecureFileUser" + u.String() }

// SecureFileTLS is the embedded server's TLS; relative paths are relative
// to the secure config file.
type SecureFileTLS struct {
	Cert   string `yaml:"cert"`
	Key    string `yaml:"key"`
	CA     string `yaml:"ca"`
	Verify bool   `yaml:"verify"`
}

// String redacts every user's hash.
func (f SecureFile) String() string {
	users := make([]string, len(f.Users))
	for i, u := range f.Users {
		users[i] = u.String()
	}
	return fmt.Sprintf("SecureFile{users=[%s] solver-head=%v tls=%v}", strings.Join(users, " "), f.SolverHead, f.TLS != nil)
}

// GoString is String.
func (f SecureFile) GoString() string { return f.String() }

// LoadSecureFile reads a secure config: strict YAML (a key that means
// nothing is an error), every user either user+password or nkey. Roles,
// hashes and keys are checked by secure.Options.Check. Errors wrap
// ErrInvalid and never quote a password or hash.
func LoadSecureFile(path string) (*SecureFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --secure-config: %v", ErrInvalid, err)
	}
	var f SecureFile
	var errs []error
	dec := yaml.NewDecoder(bytes.NewReader(yaml12(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		// yaml.v3 quotes the start of a value that has the wrong type in
		// backquotes: drop it, it may be a hash.
		// A type error (an unknown key, a value of the wrong type) leaves
		// the rest decoded: its problems are reported with it, so one
		// edit can fix them all. A syntax error ends the reading.
		var te *yaml.TypeError
		typeErr := errors.As(err, &te)
		err = fmt.Errorf("%w: --secure-config %s: %s%s", ErrInvalid, path, yamlValue.ReplaceAllString(err.Error(), "`…`"), versionHint(err))
		if !typeErr {
			return nil, err
		}
		errs = append(errs, err)
	}
	if err := oneDocument(dec, "--secure-config "+path); err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: --secure-config %s: "+format, append([]any{ErrInvalid, path}, args...)...))
	}
	if len(f.Users) == 0 {
		bad("no users")
	}
	for i, u := range f.Users {
		switch {
		case u.Role == "":
			bad("user %d has no role", i+1)
		case u.NKey != "" && (u.User != "" || u.Password != ""):
			bad("user %d: give user and password, or nkey, not both", i+1)
		case u.NKey == "" && (u.User == "" || u.Password == ""):
			bad("user %d: needs user and password (a bcrypt hash), or nkey", i+1)
		}
	}
	if f.TLS != nil {
		dir := filepath.Dir(path)
		for _, p := range []*string{&f.TLS.Cert, &f.TLS.Key, &f.TLS.CA} {
			if *p != "" && !filepath.IsAbs(*p) {
				*p = filepath.Join(dir, *p)
			}
			if *p != "" {
				if _, err := os.Stat(*p); err != nil {
					bad("tls: %v", err)
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &f, nil
}

// ReadSecretFile returns the first line of a file holding a password,
// without its line ending. The error names the file, never its content.
func ReadSecretFile(flag, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrInvalid, flag, err)
	}
	defer f.Close()
	line, err := bufio.NewReader(io.LimitReader(f, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("%w: %s: cannot read %s", ErrInvalid, flag, path)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("%w: %s: %s holds no password on its first line", ErrInvalid, flag, path)
	}
	return line, nil
}

// checkSecure checks --password-file and --inbox-prefix (nil when fine).
func (c Credentials) checkSecure() error {
	var errs []error
	if c.PasswordFile != "" {
		if c.Password != "" {
			errs = append(errs, fmt.Errorf("%w: --password and --password-file exclude each other", ErrInvalid))
		}
		if c.User == "" {
			errs = append(errs, fmt.Errorf("%w: --password-file needs --user", ErrInvalid))
		}
	}
	if c.InboxPrefix != "" && (strings.ContainsAny(c.InboxPrefix, " \t*>") || strings.HasPrefix(c.InboxPrefix, ".") || strings.HasSuffix(c.InboxPrefix, ".")) {
		errs = append(errs, fmt.Errorf("%w: --inbox-prefix %q is not a subject prefix", ErrInvalid, c.InboxPrefix))
	}
	return errors.Join(errs...)
}

// Identity is the room.IdentityToken of the NATS user these credentials
// connect as: --user's name, --nkey's public key, or the user public key
// of --creds's JWT; room.Anonymous with none of them. The ingest service
// takes requests of that identity on its own subjects, and answers them
// only under room.InboxPrefix of it (docs/secure-mode.md, "Identities and
// replies"). Errors: an unreadable --nkey or --creds file, or one open to
// group or others (ReadKeyFile), wrapping ErrInvalid.
func (c Credentials) Identity() (string, error) {
	switch {
	case c.User != "":
		return room.IdentityToken(c.User), nil
	case c.NKey != "":
		data, err := ReadKeyFile(c.NKey, c.AllowOpenKeyFile)
		if err != nil {
			return "", fmt.Errorf("%w: --nkey: %w", ErrInvalid, err)
		}
		kp, err := nkeys.ParseDecoratedNKey(data)
		if err != nil {
			return "", fmt.Errorf("%w: --nkey %s: not an nkey seed file", ErrInvalid, c.NKey)
		}
		defer kp.Wipe()
		pub, err := kp.PublicKey()
		if err != nil {
			return "", fmt.Errorf("%w: --nkey %s: not an nkey seed file", ErrInvalid, c.NKey)
		}
		return room.IdentityToken(pub), nil
	case c.Creds != "":
		data, err := ReadKeyFile(c.Creds, c.AllowOpenKeyFile)
		if err != nil {
			return "", fmt.Errorf("%w: --creds: %w", ErrInvalid, err)
		}
		token, err := jwt.ParseDecoratedJWT(data)
		if err != nil {
			return "", fmt.Errorf("%w: --creds %s: no user JWT", ErrInvalid, c.Creds)
		}
		claims, err := jwt.DecodeUserClaims(token)
		if err != nil {
			return "", fmt.Errorf("%w: --creds %s: the JWT is not a user's", ErrInvalid, c.Creds)
		}
		return room.IdentityToken(claims.Subject), nil
	}
	return room.Anonymous, nil
}

// password is --password, or the first line of --password-file.
func (c Credentials) password() (string, error) {
	if c.PasswordFile != "" {
		return ReadSecretFile("--password-file", c.PasswordFile)
	}
	return c.Password, nil
}
