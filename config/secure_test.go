package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testHash = "$2a$10$OincencboskQLBNIINdUO.2xrl/7tYo/z7e5rLgUKpWxYJMMHj7Yu"

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadSecureFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "cert.pem", "x")
	writeFile(t, dir, "key.pem", "x")
	good := writeFile(t, dir, "good.yaml", `users:
  - {role: publisher, user: publisher, password: "`+testHash+`"}
  - {role: auditor, nkey: UACDWCYDZU2Z4Q4YUXLLMDVJMEBZ6R6XNFN7YMWLB3FZFQAK2QLYQNA6, inbox-prefix: _INBOX_solver}
solver-head: true
tls: {cert: cert.pem, key: key.pem}
`)
	f, err := LoadSecureFile(good)
	if err != nil {
		t.Fatal(err)
	}
	// The same under a %YAML 1.2 directive, which the YAML library alone refuses.
	raw, _ := os.ReadFile(good)
	if _, err := LoadSecureFile(writeFile(t, dir, "v12.yaml", "%YAML 1.2\n---\n"+string(raw))); err != nil {
		t.Errorf("with %%YAML 1.2: %v", err)
	}
	if len(f.Users) != 2 || !f.SolverHead || f.TLS.Cert != filepath.Join(dir, "cert.pem") || f.Users[1].InboxPrefix != "_INBOX_solver" {
		t.Fatalf("%+v", f)
	}
	for _, s := range []string{f.String(), fmt.Sprintf("%v %+v %#v", f, f, f), fmt.Sprintf("%v %#v", f.Users[0], f.Users[0])} {
		if strings.Contains(s, testHash) {
			t.Errorf("printed a hash: %s", s)
		}
	}

	for name, c := range map[string]struct{ yaml, want string }{
		"unknown key": {"users:\n  - {role: harness, user: h, pasword: x}\n", "field pasword not found"},
		// The type error and what the rest of the file lacks, at once.
		"unknown key and more": {"users:\n  - {role: harness, user: h, pasword: x}\n  - {user: s, password: y}\ntls: {cert: nope.pem}\n",
			"field pasword not found in type config.SecureFileUser\n" +
				"invalid configuration: --secure-config " + filepath.Join(dir, "bad.yaml") + ": user 1: needs user and password (a bcrypt hash), or nkey\n" +
				"invalid configuration: --secure-config " + filepath.Join(dir, "bad.yaml") + ": user 2 has no role\n" +
				"invalid configuration: --secure-config " + filepath.Join(dir, "bad.yaml") + ": tls: stat " + filepath.Join(dir, "nope.pem") + ": no such file or directory"},
		"no users":        {"solver-head: false\n", "no users"},
		"both":            {"users:\n  - {role: harness, user: h, password: x, nkey: U}\n", "not both"},
		"neither":         {"users:\n  - {role: harness, user: h}\n", "needs user and password"},
		"no role":         {"users:\n  - {user: h, password: x}\n", "has no role"},
		"missing tls":     {"users:\n  - {role: harness, user: h, password: x}\ntls: {cert: nope.pem, key: key.pem}\n", "nope.pem"},
		"hash as value":   {"users: []\nsolver-head: \"" + testHash + "\"\n", "cannot unmarshal"},
		"YAML 2.0":        {"%YAML 2.0\n---\nusers: []\n", "found incompatible YAML document (a config file may start with %YAML 1.1 or 1.2, or no %YAML line)"},
		"second document": {"users:\n  - {role: harness, user: h, password: x}\n---\nusers: []\n", "bad.yaml:3: a second YAML document starts here"},
	} {
		p := writeFile(t, dir, "bad.yaml", c.yaml)
		_, err := LoadSecureFile(p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), testHash[:12]) {
			t.Errorf("%s: the error quotes a hash: %v", name, err)
		}
	}
}

func TestSecureServeFlags(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "secure.yaml", "users:\n  - {role: publisher, user: publisher, password: \""+testHash+"\"}\n")
	pw := writeFile(t, dir, "pw", "the password\n")
	serve := func(mod func(*Serve)) error {
		s := &Serve{Listen: "127.0.0.1:4222", StoreDir: "data", Stream: "ROOMS", Prefix: "rooms", Partitions: 1, Secure: Secure{SecureConfig: cfg}}
		mod(s)
		return s.Validate()
	}
	if err := serve(func(s *Serve) { s.User, s.PasswordFile = "publisher", pw }); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		mod  func(*Serve)
		want string
	}{
		"password value": {func(s *Serve) { s.User, s.Password = "publisher", "secret-value" }, "use --password-file"},
		"no identity":    {func(*Serve) {}, "give --user and --password-file, or --nkey"},
		"with --server":  {func(s *Serve) { s.Server, s.User, s.PasswordFile = "nats://x:4222", "publisher", pw }, "configures the embedded server"},
		"creds":          {func(s *Serve) { s.Creds = pw }, "no JWT accounts"},
		"both passwords": {func(s *Serve) { s.User, s.Password, s.PasswordFile = "publisher", "secret-value", pw }, "exclude each other"},
		// The endpoint would give anyone what secure mode gives readers.
		"tiles": {func(s *Serve) {
			s.User, s.PasswordFile, s.Tiles, s.HTTP, s.Origin, s.PublisherKey = "publisher", pw, true, "127.0.0.1:9090", "example.org/log", pw
		}, "--tiles is refused in secure mode"},
	} {
		err := serve(c.mod)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret-value") {
			t.Errorf("%s: the error quotes the password: %v", name, err)
		}
	}
	// Outside secure mode nothing changes: --user and --password still go.
	s := &Serve{Listen: "127.0.0.1:4222", StoreDir: "data", Stream: "ROOMS", Prefix: "rooms", Partitions: 1}
	s.User, s.Password = "u", "p"
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestPasswordFile(t *testing.T) {
	dir := t.TempDir()
	c := Credentials{User: "harness", PasswordFile: writeFile(t, dir, "pw", "s3cret pass\r\nsecond line\n")}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if pw, err := c.password(); err != nil || pw != "s3cret pass" {
		t.Fatalf("%q %v", pw, err)
	}
	if _, err := c.Options(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(c.String(), "s3cret") {
		t.Fatal(c.String())
	}
	c.PasswordFile = writeFile(t, dir, "empty", "\n")
	if _, err := c.Options(); err == nil || !strings.Contains(err.Error(), "no password") {
		t.Fatalf("empty password file: %v", err)
	}
	c = Credentials{PasswordFile: c.PasswordFile}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--password-file needs --user") {
		t.Fatalf("%v", err)
	}
	c = Credentials{InboxPrefix: "_INBOX.>"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--inbox-prefix") {
		t.Fatalf("%v", err)
	}
}
