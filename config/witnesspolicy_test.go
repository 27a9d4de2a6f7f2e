package config

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
)

// TestWitnessPolicyLogKeyPinned: a reader's policy file whose log line
// names a key none of the trusted publishers has is refused, naming the
// key (readers check the deployment log with the keys it names that they
// trust: none would verify nothing); one that names a trusted publisher
// is taken, its origin from the line.
func TestWitnessPolicyLogKeyPinned(t *testing.T) {
	const origin = "evidence.example.org/roompub"
	pinned, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	logKey, err := note.NewEd25519VerifierKey(origin, pinned.Public())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "policy")
	if err := os.WriteFile(p, []byte("log "+logKey+"\nquorum none\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	trustOther, err := checkpoint.NewTrust(other.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = (&WitnessPolicy{WitnessPolicy: p}).Policy(trustOther)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "its log line names the key "+origin+"+") || !strings.Contains(err.Error(), "none of the --trusted-publisher keys") {
		t.Fatalf("a policy pinning an untrusted key: %v", err)
	}
	trustBoth, err := checkpoint.NewTrust(other.NodeID(), pinned.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	w, tr, err := (&WitnessPolicy{WitnessPolicy: p}).Policy(trustBoth)
	if err != nil || w == nil || tr.Origin() != origin {
		t.Fatalf("a policy pinning a trusted key: %v, %v, origin %q", w, err, tr.Origin())
	}
}
