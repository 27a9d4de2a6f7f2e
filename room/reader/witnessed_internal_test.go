package reader

import (
	"crypto/rand"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/witness"
)

// TestDeploymentLogKeysPinned: with a policy whose log line names key A,
// a deployment checkpoint signed by another trusted publisher B is not
// the log the witnesses vouch for (CheckWith refuses it), and A's is; a
// policy without log lines takes every trusted publisher under the
// origin.
func TestDeploymentLogKeysPinned(t *testing.T) {
	const origin = "evidence.example.org/roompub"
	a, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	trust, err := checkpoint.NewTrust(a.NodeID(), b.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	if trust, err = trust.WithOrigin(origin); err != nil {
		t.Fatal(err)
	}
	vkey, err := note.NewEd25519VerifierKey(origin, a.Public())
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := witness.ParsePolicy([]byte("log " + vkey + "\nquorum none\n"))
	if err != nil {
		t.Fatal(err)
	}
	open, err := witness.ParsePolicy([]byte("quorum none\n"))
	if err != nil {
		t.Fatal(err)
	}
	signedBy := func(k *events.HostKey) []byte {
		s, err := checkpoint.NewNamedNoteSigner(k, origin)
		if err != nil {
			t.Fatal(err)
		}
		n, err := checkpoint.Sign(s, origin, 1, [32]byte{1})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct {
		name   string
		p      *witness.Policy
		signer *events.HostKey
		ok     bool
	}{
		{"pinned, its key", pinned, a, true},
		{"pinned, another trusted publisher", pinned, b, false},
		{"no log line, either", open, b, true},
	} {
		keys, pinned := DeploymentLogKeys(c.p, trust)
		_, err := c.p.CheckWith(signedBy(c.signer), keys)
		if (err == nil) != c.ok || !pinned {
			t.Errorf("%s: %v (pinned %v), want accepted %v", c.name, err, pinned, c.ok)
		}
	}
}
