//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// TestOpenKeyFilesRefused: every private key file the publisher reads
// (sign's --key, serve's --publisher-key, an --nkey seed) is refused, exit
// 2, when group or others may read it, with the file, its mode and the fix
// named; --allow-open-key-file takes it. keygen and nkeygen write 0600
// files, which are taken as they are.
func TestOpenKeyFilesRefused(t *testing.T) {
	dir := t.TempDir()
	key, seed := filepath.Join(dir, "host.pem"), filepath.Join(dir, "user.nk")
	for _, args := range [][]string{{"keygen", "--out", key}, {"nkeygen", "--out", seed}} {
		if status, _, stderr := invoke(t, args...); status != exitOK {
			t.Fatalf("%v: %s", args, stderr)
		}
		if fi, err := os.Stat(args[2]); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%v wrote %v, %v; want mode 0600", args, fi.Mode(), err)
		}
	}
	record := samples + "/records/verified.json"
	if status, _, stderr := invoke(t, "sign", "--key", key, record); status != exitOK {
		t.Fatalf("sign with a 0600 key: %s", stderr)
	}
	for _, f := range []string{key, seed} {
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Secure mode reads serve's own --nkey to tell its role; with a
	// --store-dir that is a file, serve fails right after that, it never
	// serves.
	secure := filepath.Join(dir, "secure.yaml")
	if err := os.WriteFile(secure, []byte("users:\n  - {role: publisher, nkey: "+nkeyPublic(t, seed)+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// With --server, a serve that took the key would fail to connect, not
	// start a server of its own.
	serve := []string{"serve", "--server", "nats://127.0.0.1:1", "--store-dir", filepath.Join(dir, "store")}
	for _, tc := range []struct {
		name string
		args []string
		file string
	}{
		{"sign --key", []string{"sign", "--key", key, record}, key},
		{"serve --publisher-key", append(serve, "--publisher-key", key), key},
		{"serve --secure-config --nkey", []string{"serve", "--listen", "127.0.0.1:-1", "--store-dir", secure, "--secure-config", secure, "--nkey", seed}, seed},
		{"execution --nkey", []string{"execution", "--nkey", seed, "--server", "nats://127.0.0.1:1", record}, seed},
		{"journal --nkey", []string{"journal", "--room", "room:x", "--nkey", seed, "--server", "nats://127.0.0.1:1", samples + "/capsules/csv-dedupe"}, seed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, stdout, stderr := invoke(t, tc.args...)
			want := tc.file + ": permissions 0644 are too open: a private key file must be accessible by its owner only (run chmod 600 " + tc.file + ", or pass --allow-open-key-file)"
			if status != exitUsage || !strings.Contains(stderr, want) {
				t.Errorf("status %d, stderr %q; want %d and %q", status, stderr, exitUsage, want)
			}
			if strings.Contains(stdout+stderr, "PRIVATE KEY") || strings.Contains(stdout, "stored") {
				t.Errorf("stdout %q", stdout)
			}
		})
	}
	status, stdout, stderr := invoke(t, "sign", "--allow-open-key-file", "--key", key, record)
	if status != exitOK || !strings.Contains(stdout, `"host/node-id"`) {
		t.Errorf("sign --allow-open-key-file: status %d, stderr %s", status, stderr)
	}
	// Taken, the key or seed goes on to the connection, which finds no
	// server.
	for _, args := range [][]string{
		{"execution", "--allow-open-key-file", "--nkey", seed, "--server", "nats://127.0.0.1:1", record},
		append(serve, "--publisher-key", key, "--allow-open-key-file"),
	} {
		status, _, stderr = invoke(t, args...)
		if status != exitUsage || strings.Contains(stderr, "too open") || !strings.Contains(stderr, "connect nats://127.0.0.1:1") {
			t.Errorf("%s --allow-open-key-file: status %d, stderr %s", args[0], status, stderr)
		}
	}
}

// nkeyPublic is the public key of the nkey seed in file.
func nkeyPublic(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}
