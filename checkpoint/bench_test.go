package checkpoint

import "testing"

// BenchmarkAttest is the gate's cost per appended message (one Ed25519
// signature over the batch attestation message).
func BenchmarkAttest(b *testing.B) {
	k := testKey(1)
	c := ContentHash([]byte("entry"))
	for b.Loop() {
		_ = Attest(k, tRoom, tSubject, JournalPosition(42), c)
	}
}

// BenchmarkVerifyAttestation is a reader's cost per message it cannot
// leave to a checkpoint (optimistic verification).
func BenchmarkVerifyAttestation(b *testing.B) {
	k := testKey(1)
	trust := mustTrust(b, k.NodeID())
	c := ContentHash([]byte("entry"))
	h := Attest(k, tRoom, tSubject, JournalPosition(42), c)
	for b.Loop() {
		if _, err := trust.VerifyAttestation(h, tRoom, tSubject, JournalPosition(42), c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAttestationSigner is the optimistic path's header check.
func BenchmarkAttestationSigner(b *testing.B) {
	k := testKey(1)
	trust := mustTrust(b, k.NodeID())
	h := Attest(k, tRoom, tSubject, JournalPosition(42), ContentHash([]byte("entry")))
	for b.Loop() {
		if _, err := trust.AttestationSigner(h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLeafHash is the per-message leaf cost.
func BenchmarkLeafHash(b *testing.B) {
	c := ContentHash([]byte("entry"))
	for b.Loop() {
		_ = LeafHash(tRoom, tSubject, c)
	}
}

// BenchmarkTreeAppend is the per-message tree cost (amortised: one
// HashChildren per leaf on average).
func BenchmarkTreeAppend(b *testing.B) {
	tr := NewTree()
	leaf := leafN(tRoom, 1)
	for b.Loop() {
		tr.Append(leaf)
	}
}

// BenchmarkInclusionProof and BenchmarkVerifyInclusion: one proof in a
// tree of 2^20 leaves (`subscriber prove`, `verify-proof`).
func BenchmarkInclusionProof(b *testing.B) {
	tr := treeOf(tRoom, 1<<20)
	b.ResetTimer()
	for i := uint64(0); b.Loop(); i++ {
		if _, err := tr.InclusionProof(i*7919%(1<<20-3), 1<<20-3); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyInclusion(b *testing.B) {
	tr := treeOf(tRoom, 1<<20)
	const size = 1<<20 - 3
	path, _ := tr.InclusionProof(12345, size)
	root, _ := tr.RootAt(size)
	leaf := leafN(tRoom, 12345)
	for b.Loop() {
		if err := VerifyInclusion(leaf, 12345, size, path, root); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSignCheckpoint and BenchmarkParseCheckpoint: one checkpoint.
func BenchmarkSignCheckpoint(b *testing.B) {
	s := mustSigner(b, testKey(1))
	root := leafN(tRoom, 0)
	for b.Loop() {
		if _, err := Sign(s, tRoom, 1000, root); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseCheckpoint(b *testing.B) {
	k := testKey(1)
	trust := mustTrust(b, k.NodeID())
	n, _ := Sign(mustSigner(b, k), tRoom, 1000, leafN(tRoom, 0))
	for b.Loop() {
		if _, err := Parse(n, tRoom, trust); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAttestBatch1000 is the gate's cost per atomic batch of 1,000
// journal entries (one signature, 1,000 statement digests and headers).
func BenchmarkAttestBatch1000(b *testing.B) {
	k := testKey(1)
	ss := stmts(1000)
	for b.Loop() {
		_ = AttestBatch(k, ss)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/entry")
}

// BenchmarkBatchCollector1000 is a reader's cost per batch of 1,000 it
// verifies (collecting, digests, one signature check).
func BenchmarkBatchCollector1000(b *testing.B) {
	k := testKey(1)
	trust := mustTrust(b, k.NodeID())
	ss := stmts(1000)
	hs := AttestBatch(k, ss)
	id := uint64(0)
	for b.Loop() {
		c := NewBatchCollector(trust)
		n := 0
		for i := range ss {
			id++
			n += len(c.Add(id, hs[i], ss[i]))
		}
		if n != 1000 {
			b.Fatal(n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/entry")
}

// BenchmarkLeanTreeCheckpoint is what a lean tree costs a checkpoint that
// covers 10,000 new leaves, as a reader or the checkpointer checks and
// accepts it: the root at its size, the consistency proof from the
// previous checkpoint's size, and folding the leaves into the compact
// range; reported per leaf covered.
func BenchmarkLeanTreeCheckpoint(b *testing.B) {
	const per = 10000
	lt := NewLeanTree()
	n := 0
	for b.Loop() {
		b.StopTimer()
		base := lt.Size()
		for range per {
			lt.Append(leafN(tRoom, n))
			n++
		}
		b.StartTimer()
		if _, err := lt.RootAt(lt.Size()); err != nil {
			b.Fatal(err)
		}
		if _, err := lt.ConsistencyProof(base, lt.Size()); err != nil {
			b.Fatal(err)
		}
		if err := lt.Advance(lt.Size()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*per), "ns/leaf")
}

// BenchmarkLedgerCheckpoint is a checkpoint covering 10,000 new leaves
// checked and accepted by a lean Ledger (the checkpointer's and a
// reader's per-checkpoint cost), reported per leaf covered.
func BenchmarkLedgerCheckpoint(b *testing.B) {
	const per = 10000
	l, full := NewLedger(), NewTree()
	n := 0
	seq := uint64(0)
	for b.Loop() {
		b.StopTimer()
		for range per {
			leaf := leafN(tRoom, n)
			l.Append(leaf)
			full.Append(leaf)
			n++
		}
		c := &Checkpoint{Room: tRoom, Size: full.Size(), Root: full.Root()}
		seq++
		b.StartTimer()
		if err := l.Check(c); err != nil {
			b.Fatal(err)
		}
		if err := l.Accept(c, seq); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*per), "ns/leaf")
}

// BenchmarkLeanTreeAppendUncovered is a reader's cost per leaf no
// checkpoint covers (a checkpointer far behind): unbounded, a slice
// append; bounded (LeafBounds' defaults), also its share of a chunk's
// hash and of a 32 KiB write to the file.
func BenchmarkLeanTreeAppendUncovered(b *testing.B) {
	for _, bounded := range []bool{false, true} {
		name := "unbounded"
		if bounded {
			name = "bounded"
		}
		b.Run(name, func(b *testing.B) {
			t := NewLeanTree()
			if bounded {
				if err := t.Bound(LeafBounds{Dir: b.TempDir()}); err != nil {
					b.Fatal(err)
				}
				defer t.Close()
			}
			leaf := leafOf(1)
			for b.Loop() {
				t.Append(leaf)
			}
		})
	}
}
