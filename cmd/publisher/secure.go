package main

import (
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

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
	so, err := loadSecure(s.SecureConfig, s.Stream, s.Prefix, s.Partitions)
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
func loadSecure(path, stream, prefix string, partitions int) (secure.Options, error) {
	f, err := config.LoadSecureFile(path)
	if err != nil {
		return secure.Options{}, err
	}
	so := secure.Options{Stream: stream, Subjects: room.Subjects{Prefix: prefix}, Partitions: partitions, SolverHead: f.SolverHead}
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
