package witness_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roompub/roompub/internal/witnesstest"
	"github.com/roompub/roompub/witness"
	"golang.org/x/mod/sumdb/note"
)

// TestLitewitness runs one log's checkpoints past three litewitness
// processes, in order: each step depends on what the witnesses recorded
// in the steps before.
func TestLitewitness(t *testing.T) {
	lg := newTestLog(t, "log.roompub.test/deploy-1")
	ws := witnesstest.Start(t, 3, witnesstest.Log{Origin: lg.origin, VKey: lg.vkey})
	var members []witness.Witness
	for _, w := range ws {
		v, err := witness.ParseVerifierKey(w.VKey)
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		if v.Name() != w.Name || !v.PublicKey().Equal(w.PublicKey) {
			t.Fatalf("vkey %q parsed to %s", w.VKey, v.Name())
		}
		members = append(members, witness.Witness{Name: w.Name, Verifier: v, URL: w.URL})
	}
	cos, err := witness.NewCosigner(members)
	if err != nil {
		t.Fatal(err)
	}
	quorum2, err := witness.NewPolicy(members, 2)
	if err != nil {
		t.Fatal(err)
	}
	quorum3, err := witness.NewPolicy(members, 3)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)

	// asked records the old sizes each round's proofs were asked from.
	var mu sync.Mutex
	var asked []uint64
	prove := func(n int64) witness.ProveFunc {
		return func(_ context.Context, old uint64) ([][32]byte, error) {
			mu.Lock()
			asked = append(asked, old)
			mu.Unlock()
			return lg.proof(int64(old), n), nil
		}
	}
	round := func(n int64) ([]byte, []witness.Result) {
		t.Helper()
		mu.Lock()
		asked = nil
		mu.Unlock()
		cp := lg.checkpoint(n)
		rs, err := cos.Cosign(ctx, cp, prove(n))
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 3 {
			t.Fatalf("%d results", len(rs))
		}
		return cp, rs
	}
	// withCosignatures is the checkpoint with the round's cosignature
	// lines appended, as a reader receives it.
	withCosignatures := func(cp []byte, rs []witness.Result) []byte {
		out := slices.Clone(cp)
		for _, r := range rs {
			if r.Err == nil {
				out = append(out, "— "+r.Cosignature.Name+" "+r.Cosignature.Base64+"\n"...)
			}
		}
		return out
	}
	checkCosigned := func(rs []witness.Result, which ...int) {
		t.Helper()
		for _, i := range which {
			r := rs[i]
			if r.Err != nil {
				t.Fatalf("%s: %v", r.Witness, r.Err)
			}
			if r.Witness != ws[i].Name || r.Cosignature.Name != ws[i].Name || r.Cosignature.Hash != members[i].Verifier.KeyHash() {
				t.Fatalf("result %d: witness %q, line of %q %08x", i, r.Witness, r.Cosignature.Name, r.Cosignature.Hash)
			}
			if d := time.Since(r.Time); d < -2*time.Second || d > time.Minute {
				t.Fatalf("%s: cosignature time %v, now %v", r.Witness, r.Time, time.Now())
			}
		}
	}

	// The first checkpoint goes with old 0 and no proof.
	lg.grow(5)
	cp5, rs := round(5)
	checkCosigned(rs, 0, 1, 2)
	if len(asked) != 0 {
		t.Fatalf("proofs asked from %v for a first checkpoint", asked)
	}
	for _, w := range ws {
		if got := cos.Size(w.Name); got != 5 {
			t.Fatalf("%s acknowledged %d, want 5", w.Name, got)
		}
	}
	// The cosignature verifies as a plain note signature with the key.
	full := withCosignatures(cp5, rs)
	n, err := note.Open(full, note.VerifierList(lg.verifier(), members[0].Verifier, members[1].Verifier, members[2].Verifier))
	if err != nil || len(n.Sigs) != 4 {
		t.Fatalf("note.Open: %v (%d signatures)", err, len(n.Sigs))
	}
	if got, err := quorum3.Check(full, lg.verifier()); err != nil || len(got) != 3 {
		t.Fatalf("3-of-3: %v %v", got, err)
	}

	// Growth with a consistency proof from 5.
	lg.grow(12)
	_, rs = round(12)
	checkCosigned(rs, 0, 1, 2)
	if !slices.Equal(asked, []uint64{5, 5, 5}) {
		t.Fatalf("proofs asked from %v, want 5 three times", asked)
	}

	cl, err := witness.NewClient(ws[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	// Same size, another root: C2SP tlog-witness asks for 409, litewitness
	// v0.6.1 answers 422 (its proof check fails for an empty proof between
	// equal sizes of different roots).
	fork := lg.root(12)
	fork[0] ^= 1
	_, err = cl.AddCheckpoint(ctx, 12, nil, lg.sign(lg.text(12, fork)))
	var se *witness.StatusError
	if !errors.As(err, &se) || se.Code != 422 || !errors.Is(err, witness.ErrInconsistent) {
		t.Fatalf("fork at size 12: %v", err)
	}
	// A proof that is not from 12: 422.
	lg.grow(20)
	_, err = cl.AddCheckpoint(ctx, 12, lg.proof(11, 20), lg.checkpoint(20))
	if !errors.As(err, &se) || se.Code != 422 || !errors.Is(err, witness.ErrInconsistent) {
		t.Fatalf("bad proof: %v", err)
	}
	// A stale old size: 409 with the size the witness holds.
	_, err = cl.AddCheckpoint(ctx, 5, lg.proof(5, 20), lg.checkpoint(20))
	var ce *witness.ConflictError
	if !errors.As(err, &ce) || ce.KnownSize != 12 || !errors.Is(err, witness.ErrConflict) {
		t.Fatalf("stale old size: %v", err)
	}
	// An old size above the checkpoint's: 400.
	_, err = cl.AddCheckpoint(ctx, 21, nil, lg.checkpoint(20))
	if !errors.As(err, &se) || se.Code != 400 || !errors.Is(err, witness.ErrBadRequest) {
		t.Fatalf("old above size: %v", err)
	}
	// An origin the witness does not know: 403 (C2SP says 404).
	other := newTestLog(t, "log.roompub.test/unknown")
	other.grow(1)
	_, err = cl.AddCheckpoint(ctx, 0, nil, other.checkpoint(1))
	if !errors.As(err, &se) || se.Code != 403 || !errors.Is(err, witness.ErrForbidden) {
		t.Fatalf("unknown origin: %v", err)
	}
	// The right origin signed by another key: 403.
	impostor := newTestLog(t, lg.origin)
	impostor.hashes, impostor.size = lg.hashes, lg.size
	_, err = cl.AddCheckpoint(ctx, 12, lg.proof(12, 20), impostor.checkpoint(20))
	if !errors.As(err, &se) || se.Code != 403 {
		t.Fatalf("checkpoint signed by another key: %v", err)
	}

	// The round recovers from a stale size: witness 1 is thought to be at
	// 5, answers 409 with 12, and is proved to from 12.
	cos.SetSize(ws[0].Name, 5)
	_, rs = round(20)
	checkCosigned(rs, 0, 1, 2)
	slices.Sort(asked)
	if !slices.Equal(asked, []uint64{5, 12, 12, 12}) {
		t.Fatalf("proofs asked from %v, want 5 then 12 for witness 1, 12 for the others", asked)
	}
	// A witness ahead of the checkpoint is a conflict reported, not
	// retried: they all hold 20 and are offered 12.
	fresh, err := witness.NewCosigner(members)
	if err != nil {
		t.Fatal(err)
	}
	rs, err = fresh.Cosign(ctx, lg.checkpoint(12), prove(12))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if !errors.As(r.Err, &ce) || ce.KnownSize != 20 {
			t.Fatalf("witness %d offered 12 while at 20: %v", i+1, r.Err)
		}
		if got := fresh.Size(ws[i].Name); got != 20 {
			t.Fatalf("witness %d remembered at %d, want 20", i+1, got)
		}
	}

	// Witness 3 stops: a network error, the other two cosign, 2 of 3 is
	// the quorum.
	ws[2].Stop()
	lg.grow(25)
	cp25, rs := round(25)
	checkCosigned(rs, 0, 1)
	var ne *witness.NetworkError
	if !errors.As(rs[2].Err, &ne) || ne.URL != ws[2].URL {
		t.Fatalf("stopped witness: %v", rs[2].Err)
	}
	full = withCosignatures(cp25, rs)
	got, err := quorum2.Check(full, lg.verifier())
	if err != nil || !slices.Equal(got, []string{ws[0].Name, ws[1].Name}) {
		t.Fatalf("2-of-3 with two cosignatures: %v %v", got, err)
	}
	got, err = quorum3.Check(full, lg.verifier())
	var qe *witness.QuorumError
	if !errors.As(err, &qe) || len(qe.Cosigned) != 2 || qe.Witnesses != 3 || len(got) != 2 {
		t.Fatalf("3-of-3 with two cosignatures: %v %v", got, err)
	}
	if cos.Size(ws[2].Name) != 20 {
		t.Fatalf("stopped witness remembered at %d, want 20", cos.Size(ws[2].Name))
	}

	// Restarted on its database it still holds 20, after a SIGTERM.
	ws[2].Start()
	cl3, err := witness.NewClient(ws[2].URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl3.AddCheckpoint(ctx, 0, nil, lg.checkpoint(25))
	if !errors.As(err, &ce) || ce.KnownSize != 20 {
		t.Fatalf("restarted witness: %v", err)
	}
	_, rs = round(25)
	checkCosigned(rs, 0, 1, 2)
	if cos.Size(ws[2].Name) != 25 {
		t.Fatalf("witness 3 at %d, want 25", cos.Size(ws[2].Name))
	}

	// A log registered later, on a running witness.
	second := newTestLog(t, "log.roompub.test/deploy-2")
	ws[0].AddLog(witnesstest.Log{Origin: second.origin, VKey: second.vkey})
	second.grow(3)
	sigs, err := cl.AddCheckpoint(ctx, 0, nil, second.checkpoint(3))
	if err != nil || len(sigs) != 1 || sigs[0].Name != ws[0].Name {
		t.Fatalf("second log: %v %v", sigs, err)
	}
	if !strings.Contains(ws[0].Log(), "verifier key") {
		t.Fatalf("witness 1 log after restart:\n%s", ws[0].Log())
	}
}
