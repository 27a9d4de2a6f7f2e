package config

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/witness"
)

// TestLoadWitnesses: serve takes a policy file only when it is about its
// deployment (log lines named by the origin, one of them its key) and its
// submission URLs are http or https.
func TestLoadWitnesses(t *testing.T) {
	const origin = "evidence.example.org/roompub"
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	wpub, _, _ := ed25519.GenerateKey(rand.Reader)
	logKey, _ := note.NewEd25519VerifierKey(origin, pub)
	otherKey, _ := note.NewEd25519VerifierKey(origin, otherPub)
	elsewhere, _ := note.NewEd25519VerifierKey("elsewhere.example/roompub", pub)
	wkey, err := witness.NewVerifierKey("w1.example", wpub)
	if err != nil {
		t.Fatal(err)
	}
	file := func(text string) string {
		p := filepath.Join(t.TempDir(), "p")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := file("log " + logKey + "\nwitness w1 " + wkey + " http://127.0.0.1:7380\nquorum w1\n")
	ws, err := LoadWitnesses(ok, origin, pub)
	if err != nil || len(ws) != 1 || ws[0].URL != "http://127.0.0.1:7380" || ws[0].Name != "w1" {
		t.Fatalf("a good policy: %+v %v", ws, err)
	}
	for _, c := range []struct{ text, want string }{
		{"log " + elsewhere + "\nwitness w1 " + wkey + " http://127.0.0.1:7380\nquorum w1\n", `names log "elsewhere.example/roompub", not --origin`},
		{"log " + otherKey + "\nwitness w1 " + wkey + " http://127.0.0.1:7380\nquorum w1\n", "no log line has the publisher key"},
		{"witness w1 " + wkey + " ftp://127.0.0.1:7380\nquorum w1\n", `submission URL "ftp://127.0.0.1:7380" is not an http or https URL`},
		{"witness w1 " + wkey + " not-a-url\nquorum w1\n", "is not an http or https URL"},
	} {
		if _, err := LoadWitnesses(file(c.text), origin, pub); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.text, err, c.want)
		}
	}
}
