//go:build unix

package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/roompub/roompub/config"
)

// writeKey writes data to a file of mode perm (whatever the umask) and
// returns its path.
func writeKey(t *testing.T, name string, data []byte, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReadKeyFileMode: a private key file any of whose group or other
// permission bits is set is refused as ssh refuses it (naming the file,
// its mode and chmod 600), unless allowed; the owner's bits alone are
// fine.
func TestReadKeyFileMode(t *testing.T) {
	for _, tt := range []struct {
		perm os.FileMode
		open bool
	}{
		{0o600, false}, {0o400, false}, {0o700, false},
		{0o640, true}, {0o604, true}, {0o620, true}, {0o602, true}, {0o644, true}, {0o666, true},
	} {
		t.Run(fmt.Sprintf("%04o", tt.perm), func(t *testing.T) {
			p := writeKey(t, "key.pem", []byte("secret\n"), tt.perm)
			data, err := config.ReadKeyFile(p, false)
			cerr := config.CheckKeyFile(p, false)
			if !tt.open {
				if err != nil || string(data) != "secret\n" || cerr != nil {
					t.Fatalf("ReadKeyFile %q, %v; CheckKeyFile %v", data, err, cerr)
				}
				return
			}
			for _, e := range []error{err, cerr} {
				if !errors.Is(e, config.ErrOpenKeyFile) {
					t.Fatalf("error %v, want ErrOpenKeyFile", e)
				}
				msg := e.Error()
				for _, want := range []string{p + ": ", fmt.Sprintf("permissions %04o are too open", tt.perm), "chmod 600 " + p, "--allow-open-key-file"} {
					if !strings.Contains(msg, want) {
						t.Errorf("error %q lacks %q", msg, want)
					}
				}
				if strings.Contains(msg, "secret") {
					t.Errorf("error %q quotes the key", msg)
				}
			}
			if data != nil {
				t.Errorf("refused, yet read %q", data)
			}
			if data, err := config.ReadKeyFile(p, true); err != nil || string(data) != "secret\n" || config.CheckKeyFile(p, true) != nil {
				t.Errorf("allowed: %q, %v", data, err)
			}
		})
	}
	if _, err := config.ReadKeyFile(filepath.Join(t.TempDir(), "none"), false); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestCredentialsRefuseOpenKeyFiles: --nkey and --creds files open to
// group or others are refused where roompub reads them (Identity) and
// before nats.go reads them (Options), unless AllowOpenKeyFile.
func TestCredentialsRefuseOpenKeyFiles(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	for _, c := range []config.Credentials{
		{NKey: writeKey(t, "user.nk", seed, 0o644)},
		{Creds: writeKey(t, "user.creds", []byte("-----BEGIN NATS USER JWT-----\nx\n------END NATS USER JWT------\n"), 0o640)},
	} {
		if _, err := c.Identity(); !errors.Is(err, config.ErrOpenKeyFile) || !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%v: Identity: %v, want ErrInvalid and ErrOpenKeyFile", c, err)
		}
		if _, err := c.Options(); !errors.Is(err, config.ErrOpenKeyFile) || !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%v: Options: %v, want ErrInvalid and ErrOpenKeyFile", c, err)
		}
	}
	c := config.Credentials{NKey: writeKey(t, "user.nk", seed, 0o644), AllowOpenKeyFile: true}
	if id, err := c.Identity(); err != nil || !strings.Contains(id, pub) {
		t.Errorf("allowed: Identity %q, %v; want the token of %s", id, err, pub)
	}
	if _, err := c.Options(); err != nil {
		t.Errorf("allowed: Options: %v", err)
	}
}
