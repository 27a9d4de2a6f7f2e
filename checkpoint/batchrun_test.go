package checkpoint

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// att is an attestation of place i in a batch of n by signer k's key,
// with signature byte s, in the every-message form.
func att(k byte, s byte, i, n int) Attestation {
	a := Attestation{Signer: testKey(k).NodeID(), Index: i, Count: n, Signed: true}
	a.Sig[0] = s
	return a
}

// attCompact is att in the compact form: only the batch's last message
// carries the signature.
func attCompact(k byte, s byte, i, n int) Attestation {
	a := att(k, s, i, n)
	if i < n-1 {
		a.Sig, a.Signed = [64]byte{}, false
	}
	return a
}

// TestBatchRun: each rule of the batch reassembly, with the place and the
// batch ended of every message.
func TestBatchRun(t *testing.T) {
	type msg struct {
		seq    uint64
		room   string
		a      Attestation
		member bool
		place  Place
		first  uint64 // BatchStep.First
		ended  string // "first-last" of the batch the message ends, or ""
	}
	a3 := func(i int) Attestation { return att(1, 1, i, 3) }
	b3 := func(i int) Attestation { return att(1, 2, i, 3) } // another batch of 3
	for _, tc := range []struct {
		name string
		msgs []msg
	}{
		{"a whole batch", []msg{
			{10, "r", a3(0), true, Opens, 10, ""},
			{11, "r", a3(1), true, Joins, 10, ""},
			{12, "r", a3(2), true, Completes, 10, ""},
			{13, "r", att(1, 3, 0, 1), true, Alone, 13, ""},
		}},
		{"a whole compact batch", []msg{
			{10, "r", attCompact(1, 1, 0, 3), true, Opens, 10, ""},
			{11, "r", attCompact(1, 1, 1, 3), true, Joins, 10, ""},
			{12, "r", attCompact(1, 1, 2, 3), true, Completes, 10, ""},
		}},
		{"two forms in one batch", []msg{
			{10, "r", attCompact(1, 1, 0, 3), true, Opens, 10, ""},
			{11, "r", a3(1), true, Stray, 0, "10-10"},
			{12, "r", a3(0), true, Opens, 12, ""},
			{13, "r", attCompact(1, 1, 1, 3), true, Stray, 0, "12-12"},
		}},
		{"another compact batch's message", []msg{
			// Unsigned places of two batches by one key of one size are
			// alike: the batch's signature, on its last, tells them apart.
			{10, "r", attCompact(1, 1, 0, 3), true, Opens, 10, ""},
			{11, "r", attCompact(1, 2, 1, 3), true, Joins, 10, ""},
			{12, "r", attCompact(1, 2, 2, 3), true, Completes, 10, ""},
			{13, "r", attCompact(1, 3, 0, 2), true, Opens, 13, ""},
			{14, "r", attCompact(2, 3, 1, 2), true, Stray, 0, "13-13"},
		}},
		{"a batch of one between others", []msg{
			{1, "r", att(1, 3, 0, 1), true, Alone, 1, ""},
			{2, "r", att(1, 4, 0, 1), true, Alone, 2, ""},
		}},
		{"a gap in stream seqs", []msg{
			{10, "r", a3(0), true, Opens, 10, ""},
			{12, "r", a3(1), true, Stray, 0, "10-10"},
			{13, "r", a3(2), true, Stray, 0, ""},
		}},
		{"a message that is no member", []msg{
			{10, "r", a3(0), true, Opens, 10, ""},
			{11, "r", a3(1), true, Joins, 10, ""},
			{12, "r", Attestation{}, false, NotMember, 0, "10-11"},
			{13, "r", a3(2), true, Stray, 0, ""},
		}},
		{"another batch's message", []msg{
			{10, "r", a3(0), true, Opens, 10, ""},
			{11, "r", b3(1), true, Stray, 0, "10-10"},
			{12, "r", b3(0), true, Opens, 12, ""},
			{13, "r", b3(1), true, Joins, 12, ""},
			{14, "r", b3(2), true, Completes, 12, ""},
		}},
		{"the same place twice", []msg{
			{10, "r", a3(0), true, Opens, 10, ""},
			{11, "r", a3(0), true, Opens, 11, "10-10"},
			{12, "r", a3(1), true, Joins, 11, ""},
			{13, "r", a3(1), true, Stray, 0, "11-12"},
		}},
		{"a batch whole after a part of it", []msg{
			{10, "r", a3(0), true, Opens, 10, ""},
			{11, "r", a3(1), true, Joins, 10, ""},
			{12, "r", a3(0), true, Opens, 12, "10-11"},
			{13, "r", a3(1), true, Joins, 12, ""},
			{14, "r", a3(2), true, Completes, 12, ""},
		}},
		{"another room", []msg{
			{10, "r", a3(0), true, Opens, 10, ""},
			{11, "s", a3(1), true, Stray, 0, "10-10"},
		}},
		{"another signer, size or place", []msg{
			{10, "r", a3(0), true, Opens, 10, ""},
			{11, "r", att(2, 1, 1, 3), true, Stray, 0, "10-10"},
			{12, "r", a3(0), true, Opens, 12, ""},
			{13, "r", att(1, 1, 1, 4), true, Stray, 0, "12-12"},
			{14, "r", a3(0), true, Opens, 14, ""},
			{15, "r", a3(2), true, Stray, 0, "14-14"},
		}},
		{"a copied header first", []msg{
			{10, "r", a3(1), true, Stray, 0, ""},
			{11, "r", a3(2), true, Stray, 0, ""},
		}},
		{"a place not read", []msg{
			{10, "r", att(1, 1, 0, 4), true, Opens, 10, ""},
			{12, "r", att(1, 1, 2, 4), true, Stray, 0, "10-10"},
			{13, "r", att(1, 1, 3, 4), true, Stray, 0, ""},
			{14, "r", a3(0), true, Opens, 14, ""},
		}},
		{"the first places not read", []msg{
			{5, "r", Attestation{}, false, NotMember, 0, ""},
			{10, "r", att(1, 1, 2, 4), true, Stray, 0, ""},
			{11, "r", att(1, 1, 3, 4), true, Stray, 0, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b BatchRun
			for _, m := range tc.msgs {
				s := b.Next(m.seq, m.room, m.a, m.member)
				ended := ""
				if s.Ended.Count() > 0 {
					ended = fmt.Sprintf("%d-%d", s.Ended.First, s.Ended.Last)
				}
				if s.Place != m.place || ended != m.ended || (m.place != Stray && m.place != NotMember && s.First != m.first) {
					t.Fatalf("seq %d: place %d first %d ended %q, want %d %d %q", m.seq, s.Place, s.First, ended, m.place, m.first, m.ended)
				}
				if open := m.place == Opens || m.place == Joins; b.Open() != open {
					t.Fatalf("seq %d: open %v", m.seq, b.Open())
				} else if open && (b.First() != m.first || b.Last() != m.seq || b.Room() != m.room || b.Read() != m.a.Index+1 || !b.Attestation().SameBatch(m.a)) {
					t.Fatalf("seq %d: open batch %d..%d of %q, %d read", m.seq, b.First(), b.Last(), b.Room(), b.Read())
				}
				if err := s.Err(m.a); (err != nil) != (m.place == Stray) {
					t.Fatalf("seq %d: Err %v", m.seq, err)
				}
			}
		})
	}
}

// TestBatchRunErrors: the refusals name the message's place, what was
// read and why, and wrap ErrIncompleteBatch.
func TestBatchRunErrors(t *testing.T) {
	k := testKey(1).NodeID()
	var b BatchRun
	b.Next(7, "r", att(1, 1, 0, 5), true)
	b.Next(8, "r", att(1, 1, 1, 5), true)
	s := b.Next(9, "r", att(1, 1, 3, 5), true)
	if s.Place != Stray || s.Ended.Count() != 2 || !s.Ended.Holds(7) || !s.Ended.Holds(8) || s.Ended.Holds(9) || s.Ended.Room != "r" {
		t.Fatalf("step %+v", s)
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{s.Ended.Err(att(1, 1, 1, 5)), "incomplete batch: message 1 of a batch of 5 by " + k +
			": only messages 0 to 1 of it were read, at stream seqs 7 to 8, and the next message, stream seq 9, is not message 2 of it (an atomic batch is stored whole, its messages consecutive)"},
		{s.Err(att(1, 1, 3, 5)), "incomplete batch: message 3 of a batch of 5 by " + k +
			": the message before it on the stream is not message 2 of that batch: a copied header, or a batch not stored whole (an atomic batch is stored whole, its messages consecutive)"},
	} {
		var ie *IncompleteBatchError
		if !errors.Is(tc.err, ErrIncompleteBatch) || !errors.As(tc.err, &ie) || tc.err.Error() != tc.want {
			t.Errorf("err %v\nwant %s", tc.err, tc.want)
		}
	}
	// The places between two messages read were not read: the refusals
	// name them and their stream seqs, for every later message too.
	b.Next(30, "r", att(1, 1, 0, 5), true)
	gap := b.Next(33, "r", att(1, 1, 3, 5), true)
	after := b.Next(34, "r", att(1, 1, 4, 5), true)
	// Nothing read at the first places: the same.
	b.Next(40, "r", Attestation{}, false)
	first := b.Next(43, "r", att(1, 2, 1, 3), true)
	firstAfter := b.Next(44, "r", att(1, 2, 2, 3), true)
	// Something else read there: a copied header, as before.
	copied := b.Next(45, "r", att(1, 3, 1, 3), true)
	for _, tc := range []struct {
		err  error
		want string
	}{
		{gap.Ended.Err(att(1, 1, 0, 5)), "only messages 0 to 0 of it were read, at stream seqs 30 to 30, and the next message read, stream seq 33, is message 3: " +
			"messages 1 to 2 of it, at stream seqs 31 to 32, were not read (the store lost them, or the messages there are not of this batch)"},
		{gap.Err(att(1, 1, 3, 5)), "message 3 of a batch of 5 by " + k + ": messages 1 to 2 of its batch, at stream seqs 31 to 32, were not read (the store lost them, or the messages there are not of this batch)"},
		{after.Err(att(1, 1, 4, 5)), "message 4 of a batch of 5 by " + k + ": messages 1 to 2 of its batch, at stream seqs 31 to 32, were not read"},
		{first.Err(att(1, 2, 1, 3)), "message 1 of a batch of 3 by " + k + ": message 0 of its batch, at stream seq 42, was not read (the store lost it, or the message there is not of this batch)"},
		{firstAfter.Err(att(1, 2, 2, 3)), "message 2 of a batch of 3 by " + k + ": message 0 of its batch, at stream seq 42, was not read"},
		{copied.Err(att(1, 3, 1, 3)), "message 1 of a batch of 3 by " + k + ": the message before it on the stream is not message 0 of that batch: a copied header"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("err %v\nwant it to hold %s", tc.err, tc.want)
		}
	}
	if gap.Place != Stray || gap.Ended.Count() != 1 || after.Place != Stray || first.Place != Stray || firstAfter.Place != Stray || copied.Place != Stray {
		t.Errorf("places %d %d %d %d %d, ended %d", gap.Place, after.Place, first.Place, firstAfter.Place, copied.Place, gap.Ended.Count())
	}

	if _, ok := b.Break("x"); ok {
		t.Fatal("Break with no batch open")
	}
	b.Next(20, "r", att(1, 1, 0, 5), true)
	e, ok := b.Break("the read ended there")
	if !ok || b.Open() || e.Count() != 1 || !strings.HasSuffix(e.Err(att(1, 1, 0, 5)).Error(), "only messages 0 to 0 of it were read, at stream seqs 20 to 20, and the read ended there (an atomic batch is stored whole, its messages consecutive)") {
		t.Fatalf("Break: %+v %v", e, ok)
	}
	if (BrokenBatch{}).Count() != 0 || (BrokenBatch{}).Holds(0) {
		t.Fatal("the zero BrokenBatch holds messages")
	}
}

// TestBatchRunNoAllocs: placing a message allocates nothing (every
// reader and the checkpointer place every message).
func TestBatchRunNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	var b BatchRun
	a := att(1, 1, 0, 1000)
	seq := uint64(0)
	n := testing.AllocsPerRun(10000, func() {
		seq++
		if s := b.Next(seq, "room:x", a, true); s.Place == Completes {
			a.Index = 0
		} else {
			a.Index++
		}
	})
	if n != 0 {
		t.Fatalf("Next: %v allocations", n)
	}
}

// TestBatchCollectorVouch: a batch whose every message the caller vouches
// for is admitted without its signature; a batch with others' messages
// is verified, a vouched journal entry's position computed from it; a
// batch not read whole is refused whoever vouched.
func TestBatchCollectorVouch(t *testing.T) {
	k := testKey(1)
	tr := mustTrust(t, k.NodeID())
	ss := stmts(3)
	hs := AttestBatch(k, ss)
	bad := append([]Statement(nil), ss...)
	for i := range bad {
		bad[i].Content[0] ^= 1 // what the signature does not cover
	}
	sig := lastSig(t, hs)
	t.Run("all vouched", func(t *testing.T) {
		c := NewBatchCollector(tr)
		var vs []BatchVerdict
		for i := range 3 {
			vs = append(vs, c.Vouch(uint64(i+1), hs[i], bad[i], nil, "", sig)...)
		}
		if len(vs) != 3 || vs[0].Err != nil || vs[2].Signer != k.NodeID() {
			t.Fatalf("%+v", vs)
		}
	})
	t.Run("vouched in two batches", func(t *testing.T) {
		// Messages 0 and 1 of one announced batch and message 2 of
		// another of the same key and size, stored as one: the compact
		// form's unsigned headers are alike, so only the signature the
		// messages were vouched with tells them apart, and the batch's
		// signature is checked, and fails.
		other := stmts(4)[1:]
		ho := AttestBatch(k, other)
		if hs[0] != ho[0] || hs[1] != ho[1] {
			t.Fatalf("the unsigned headers differ: %q %q", hs[:2], ho[:2])
		}
		c := NewBatchCollector(tr)
		c.Vouch(1, hs[0], ss[0], nil, "", sig)
		c.Vouch(2, hs[1], ss[1], nil, "", sig)
		vs := c.Vouch(3, ho[2], other[2], nil, "", lastSig(t, ho))
		if len(vs) != 3 || !errors.Is(vs[0].Err, ErrBadAttestation) || !errors.Is(vs[2].Err, ErrBadAttestation) {
			t.Fatalf("%+v", vs)
		}
	})
	t.Run("mixed", func(t *testing.T) {
		// Entry data whose position is seq:i, content as the statement's.
		entry := func(i int) []byte {
			es := testEntries(t, 3)
			return es[i]
		}
		es := testEntries(t, 3)
		sts := make([]Statement, 3)
		for i := range sts {
			sts[i] = Statement{Room: tRoom, Subject: tSubject, Position: JournalPosition(int64(i)), Content: ContentHash(es[i])}
		}
		h := AttestBatch(k, sts)
		noPos := sts[0]
		noPos.Position = ""
		c := NewBatchCollector(tr)
		c.Vouch(1, h[0], noPos, entry(0), "", lastSig(t, h))
		c.Add(2, h[1], sts[1])
		if vs := c.Add(3, h[2], sts[2]); len(vs) != 3 || vs[0].Err != nil || vs[1].Err != nil || vs[2].Err != nil {
			t.Fatalf("genuine, one vouched: %+v", vs)
		}
		c.Vouch(4, h[0], noPos, entry(0), "owner:x", lastSig(t, h)) // another position: the signature fails
		c.Add(5, h[1], sts[1])
		if vs := c.Add(6, h[2], sts[2]); len(vs) != 3 || !errors.Is(vs[0].Err, ErrBadAttestation) {
			t.Fatalf("a vouched message at another position: %+v", vs)
		}
		c.Vouch(7, h[0], noPos, nil, "", lastSig(t, h)) // no entry to work it out from
		c.Add(8, h[1], sts[1])
		if vs := c.Add(9, h[2], sts[2]); len(vs) != 3 || !errors.Is(vs[0].Err, ErrBadAttestation) || !strings.Contains(vs[0].Err.Error(), "position of message 0") {
			t.Fatalf("a vouched message without a position: %+v", vs)
		}
	})
	t.Run("incomplete", func(t *testing.T) {
		c := NewBatchCollector(tr)
		c.Vouch(1, hs[0], ss[0], nil, "", sig)
		c.Vouch(2, hs[1], ss[1], nil, "", sig)
		vs := c.Pass(3)
		if len(vs) != 2 || !errors.Is(vs[0].Err, ErrIncompleteBatch) || !errors.Is(vs[1].Err, ErrIncompleteBatch) {
			t.Fatalf("%+v", vs)
		}
	})
}

// lastSig is the signature the last of a batch's headers carries.
func lastSig(t testing.TB, hs []string) [64]byte {
	t.Helper()
	a, err := ParseAttestation(hs[len(hs)-1])
	if err != nil || !a.Signed {
		t.Fatalf("the batch's last header %q: %+v %v", hs[len(hs)-1], a, err)
	}
	return a.Sig
}

// testEntries returns n journal lines whose seqs are 0..n-1 (what
// EntryPosition reads of them).
func testEntries(t *testing.T, n int) [][]byte {
	t.Helper()
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"kind":"tool.call","seq":%d}`, i)
		if pos, err := EntryPosition(out[i], ""); err != nil || pos != JournalPosition(int64(i)) {
			t.Fatalf("EntryPosition(%s) = %q, %v", out[i], pos, err)
		}
	}
	return out
}

func TestEntryPosition(t *testing.T) {
	es := testEntries(t, 3)
	if pos, err := EntryPosition(es[2], "alice"); err != nil || pos != "seq:2 owner:alice" {
		t.Fatalf("owned: %q %v", pos, err)
	}
	for _, bad := range []string{`{"kind":"x"}`, `{"seq":"2"}`, `not json`, ``} {
		if pos, err := EntryPosition([]byte(bad), ""); err == nil {
			t.Errorf("EntryPosition(%q) = %q", bad, pos)
		}
	}
}

// TestBatchCollectorNoAllocs: what the checkpointer does for its own
// appends read from the stream (Vouch of whole batches: records, one by
// one, and batches of 3) allocates nothing per message, and verifying
// another publisher's batch of 1,000 allocates a bounded number of times
// per batch, not per message.
func TestBatchCollectorNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	k := testKey(1)
	c := NewBatchCollector(mustTrust(t, k.NodeID()))
	one := stmts(1)
	h1 := AttestBatch(k, one)
	s1 := lastSig(t, h1)
	id := uint64(0)
	if n := testing.AllocsPerRun(1000, func() {
		id++
		if v := c.Vouch(id, h1[0], one[0], nil, "", s1); len(v) != 1 || v[0].Err != nil {
			t.Fatalf("%+v", v)
		}
	}); n != 0 {
		t.Errorf("Vouch of a batch of one: %v allocations", n)
	}
	three := stmts(3)
	h3 := AttestBatch(k, three)
	s3 := lastSig(t, h3)
	if n := testing.AllocsPerRun(1000, func() {
		for i := range 3 {
			id++
			c.Vouch(id, h3[i], three[i], nil, "", s3)
		}
	}); n != 0 {
		t.Errorf("Vouch of a batch of 3: %v allocations", n)
	}
	big := stmts(1000)
	hb := AttestBatch(k, big)
	if n := testing.AllocsPerRun(20, func() {
		for i := range big {
			id++
			if v := c.Add(id, hb[i], big[i]); i == len(big)-1 && (len(v) != len(big) || v[0].Err != nil) {
				t.Fatalf("%d verdicts, %+v", len(v), v[0])
			}
		}
	}); n > 10 {
		t.Errorf("Add of a batch of 1,000: %v allocations", n)
	}
}
