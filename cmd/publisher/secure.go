package main

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/term"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/secure"
)

// secureConnect returns serve's connection options and, in secure mode
// (--secure-config), the embedded server's configuration: its users and
// permissions, and TLS. In secure mode serve connects as the publisher
// user named by --user and --password-file, or --nkey, and it checks
// that this identity has the publisher role before it starts anything.
func secureConnect(s *config.Serve) ([]nats.Option, func(*server.Options), error) {
	if s.SecureConfig == "" {
		opts, err := s.Credentials.Options()
		return opts, nil, err
	}
	so, err := loadSecure(s.SecureConfig, s.Stream, s.Prefix)
	if err != nil {
		return nil, nil, err
	}
	configure, err := so.Configure()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: --secure-config %s: %w", config.ErrInvalid, s.SecureConfig, err)
	}
	creds := s.Credentials
	var who secure.User
	if creds.NKey != "" {
		data, err := config.ReadKeyFile(creds.NKey, creds.AllowOpenKeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: --nkey: %w", config.ErrInvalid, err)
		}
		kp, err := nkeys.ParseDecoratedNKey(data)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: --nkey %s: not an nkey seed file", config.ErrInvalid, creds.NKey)
		}
		pub, err := kp.PublicKey()
		kp.Wipe()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: --nkey %s: not an nkey seed file", config.ErrInvalid, creds.NKey)
		}
		who, err = so.IdentifyNKey(pub)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: --nkey %s: %w", config.ErrInvalid, creds.NKey, err)
		}
	} else {
		pw, err := config.ReadSecretFile("--password-file", creds.PasswordFile)
		if err != nil {
			return nil, nil, err
		}
		who, err = so.IdentifyPassword(creds.User, pw)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: --user %s --password-file %s: %w", config.ErrInvalid, creds.User, creds.PasswordFile, err)
		}
	}
	switch {
	case creds.InboxPrefix == "":
		creds.InboxPrefix = who.Inbox()
	case creds.InboxPrefix != who.Inbox():
		return nil, nil, fmt.Errorf("%w: --inbox-prefix %q is not the inbox prefix of %s, %s", config.ErrInvalid, creds.InboxPrefix, who.ID(), who.Inbox())
	}
	if so.TLS.Cert != "" && creds.TLSCA == "" {
		// Serve trusts its own server: the CA if there is one, else the
		// (self-signed) certificate itself.
		creds.TLSCA = so.TLS.CA
		if creds.TLSCA == "" {
			creds.TLSCA = so.TLS.Cert
		}
	}
	if so.TLS.Verify && creds.TLSCert == "" {
		return nil, nil, fmt.Errorf("%w: the secure config's tls verifies client certificates: give serve its own with --tlscert and --tlskey", config.ErrInvalid)
	}
	opts, err := creds.Options()
	return opts, configure, err
}

// loadSecure reads a secure config file into secure.Options for the
// given stream and subject prefix.
func loadSecure(path, stream, prefix string) (secure.Options, error) {
	f, err := config.LoadSecureFile(path)
	if err != nil {
		return secure.Options{}, err
	}
	so := secure.Options{Stream: stream, Subjects: room.Subjects{Prefix: prefix}, SolverHead: f.SolverHead}
	for _, u := range f.Users {
		so.Users = append(so.Users, secure.User{Role: secure.Role(u.Role), Name: u.User, PasswordHash: u.Password, NKey: u.NKey, InboxPrefix: u.InboxPrefix, Durables: u.Durables})
	}
	if f.TLS != nil {
		so.TLS = secure.TLS{Cert: f.TLS.Cert, Key: f.TLS.Key, CA: f.TLS.CA, Verify: f.TLS.Verify}
	}
	if err := so.Check(); err != nil {
		return so, fmt.Errorf("%w: --secure-config %s: %w", config.ErrInvalid, path, err)
	}
	return so, nil
}

type passwdCmd struct {
	Cost  int    `name:"cost" help:"bcrypt cost (10 to 16)." default:"11"`
	Out   string `name:"out" placeholder:"FILE" help:"Generate a random password and write it to FILE (mode 0600) instead of reading one."`
	Force bool   `name:"force" help:"Replace FILE if it exists."`
}

func (c *passwdCmd) Validate() error {
	if c.Cost < 10 || c.Cost > 16 {
		return fmt.Errorf("%w: --cost must be 10 to 16", config.ErrInvalid)
	}
	if c.Force && c.Out == "" {
		return fmt.Errorf("%w: --force needs --out", config.ErrInvalid)
	}
	return nil
}

// Run prints the bcrypt hash of a password for a secure config. The
// password is read from the terminal (twice, not echoed) or from the first
// line of stdin (s.in), or generated with --out; it is never an argument.
func (c *passwdCmd) Run(s *streams) error {
	var pw []byte
	switch {
	case c.Out != "":
		raw := make([]byte, 24)
		if _, err := rand.Read(raw); err != nil {
			return err
		}
		pw = []byte(base64.RawURLEncoding.EncodeToString(raw))
		if err := writeSecretFile(c.Out, append(append([]byte(nil), pw...), '\n'), c.Force); err != nil {
			return err
		}
	case isTerminal(s.in):
		fd := int(s.in.(*os.File).Fd())
		fmt.Fprint(s.err, "Password: ")
		p1, err := term.ReadPassword(fd)
		fmt.Fprintln(s.err)
		if err != nil {
			return err
		}
		fmt.Fprint(s.err, "Again: ")
		p2, err := term.ReadPassword(fd)
		fmt.Fprintln(s.err)
		if err != nil {
			return err
		}
		if string(p1) != string(p2) {
			return fmt.Errorf("%w: the passwords differ", config.ErrInvalid)
		}
		pw = p1
	default:
		line, err := bufio.NewReader(io.LimitReader(s.in, 4096)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		pw = []byte(strings.TrimRight(line, "\r\n"))
	}
	if len(pw) < 8 {
		return fmt.Errorf("%w: the password is shorter than 8 bytes", config.ErrInvalid)
	}
	hash, err := bcrypt.GenerateFromPassword(pw, c.Cost)
	if err != nil {
		// ErrPasswordTooLong names no password.
		return fmt.Errorf("%w: %v", config.ErrInvalid, err)
	}
	_, err = fmt.Fprintln(s.out, string(hash))
	return err
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

type nkeygenCmd struct {
	Out   string `name:"out" required:"" placeholder:"FILE" help:"File to write the user nkey seed to (mode 0600)."`
	Force bool   `name:"force" help:"Replace FILE if it exists."`
}

// Run writes a new user nkey seed and prints its public key, the value a
// secure config's nkey names.
func (c *nkeygenCmd) Run(s *streams) error {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return err
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return err
	}
	if err := writeSecretFile(c.Out, append(seed, '\n'), c.Force); err != nil {
		return err
	}
	_, err = fmt.Fprintln(s.out, pub)
	return err
}

type authconfCmd struct {
	Account string `name:"account" placeholder:"NAME" help:"Put the users into this account (with JetStream enabled) instead of the default account's authorization block."`
	Stream  string `name:"stream" help:"Room stream name." default:"ROOMS"`
	Prefix  string `name:"subject-prefix" help:"First token of every room subject." default:"rooms"`
	File    string `arg:"" name:"secure-config" help:"The secure config (YAML) serve uses with --secure-config."`
}

// Run prints the nats-server configuration block that gives an existing
// server or cluster the same users and permissions as secure mode.
func (c *authconfCmd) Run(s *streams) error {
	so, err := loadSecure(c.File, c.Stream, c.Prefix)
	if err != nil {
		return err
	}
	conf, err := so.AuthorizationConf(c.Account)
	if err != nil {
		return fmt.Errorf("%w: %w", config.ErrInvalid, err)
	}
	_, err = io.WriteString(s.out, conf)
	return err
}
