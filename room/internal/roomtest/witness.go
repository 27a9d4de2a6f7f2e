package roomtest

import (
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/internal/witnesstest"
	"github.com/roompub/roompub/witness"
)

// Deployment is the deployment origin the tests of witnessed rooms use.
const Deployment = "evidence.example.org/roompub"

// DeploymentVKey is the log key witnesses know the deployment log by: the
// publisher key named by the deployment origin (C2SP signed-note).
func DeploymentVKey(t testing.TB, key *events.HostKey) string {
	t.Helper()
	vkey, err := note.NewEd25519VerifierKey(Deployment, key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return vkey
}

// StartWitnesses starts n real litewitness processes that know the
// deployment log of key (witnesstest.Start) and returns them with the
// checkpointer's and the readers' view of them.
func StartWitnesses(t testing.TB, n int, key *events.HostKey) ([]*witnesstest.Witness, []witness.Witness) {
	t.Helper()
	ws := witnesstest.Start(t, n, witnesstest.Log{Origin: Deployment, VKey: DeploymentVKey(t, key)})
	return ws, WitnessesOf(t, ws)
}

// WitnessesOf turns the harness's witnesses into witness.Witness values.
func WitnessesOf(t testing.TB, ws []*witnesstest.Witness) []witness.Witness {
	t.Helper()
	var out []witness.Witness
	for _, w := range ws {
		v, err := witness.ParseVerifierKey(w.VKey)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, witness.Witness{Name: w.Name, Verifier: v, URL: w.URL})
	}
	return out
}

// Policy is a k-of-all policy over ws.
func Policy(t testing.TB, ws []witness.Witness, k int) *witness.Policy {
	t.Helper()
	p, err := witness.NewPolicy(ws, k)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
