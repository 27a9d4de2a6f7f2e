package checkpoint

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// stmts returns n statements of journal entries 0..n-1 of the test room.
func stmts(n int) []Statement {
	out := make([]Statement, n)
	for i := range out {
		out[i] = Statement{Room: tRoom, Subject: tSubject, Position: JournalPosition(int64(i)), Content: ContentHash([]byte{byte(i)})}
	}
	return out
}

func TestAttestBatchRoundTrip(t *testing.T) {
	k := testKey(1)
	ss := stmts(12)
	hs := AttestBatch(k, ss)
	if len(hs) != 12 {
		t.Fatalf("%d headers for 12 statements", len(hs))
	}
	var msg strings.Builder
	msg.WriteString("roompub-attestation/v1\n12\n")
	for _, s := range ss {
		text := s.Room + "\n" + s.Subject + "\n" + s.Position + "\n" + hex.EncodeToString(s.Content[:]) + "\n"
		d := sha256.Sum256([]byte(text))
		if s.Digest() != d {
			t.Fatalf("Digest of %+v is not SHA-256 of %q", s, text)
		}
		msg.WriteString(hex.EncodeToString(d[:]) + "\n")
	}
	sig := strings.Split(hs[0], " ")[1]
	for i, h := range hs {
		want := k.NodeID() + " " + sig + " " + fmt.Sprintf("%d/12", i)
		if h != want {
			t.Fatalf("header %d = %q, want %q", i, h, want)
		}
		if HeaderLen(k.NodeID(), i, 12) != len(h) {
			t.Fatalf("HeaderLen(%d, 12) = %d, header is %d", i, HeaderLen(k.NodeID(), i, 12), len(h))
		}
		a, err := ParseAttestation(h)
		if err != nil || a.Index != i || a.Count != 12 || a.Signer != k.NodeID() || a.String() != h {
			t.Fatalf("ParseAttestation(%q) = %+v, %v", h, a, err)
		}
	}
	raw, _ := base64.RawURLEncoding.DecodeString(sig)
	if !ed25519.Verify(k.Public(), []byte(msg.String()), raw) {
		t.Fatal("signature is not Ed25519 over the attested batch message")
	}
	tr := mustTrust(t, k.NodeID())
	if signer, err := tr.VerifyBatch(hs, ss); err != nil || signer != k.NodeID() {
		t.Fatalf("VerifyBatch = %q, %v", signer, err)
	}
	for i, h := range hs {
		if got, err := tr.AttestationSigner(h); err != nil || got != k.NodeID() {
			t.Fatalf("AttestationSigner(header %d) = %q, %v", i, got, err)
		}
		// One message of a batch cannot be verified alone.
		if _, err := tr.VerifyAttestation(h, ss[i].Room, ss[i].Subject, ss[i].Position, ss[i].Content); !errors.Is(err, ErrIncompleteBatch) {
			t.Fatalf("VerifyAttestation(header %d) err = %v, want ErrIncompleteBatch", i, err)
		}
	}
	if AttestBatch(k, nil) != nil {
		t.Fatal("an empty batch got headers")
	}
	// A batch of one is what Attest writes.
	one := AttestBatch(k, ss[3:4])
	if len(one) != 1 || one[0] != Attest(k, ss[3].Room, ss[3].Subject, ss[3].Position, ss[3].Content) || !strings.HasSuffix(one[0], " 0/1") {
		t.Fatalf("batch of one %q", one)
	}
}

func TestVerifyBatchBindsEveryStatement(t *testing.T) {
	k := testKey(1)
	tr := mustTrust(t, k.NodeID())
	ss := stmts(4)
	hs := AttestBatch(k, ss)
	for i := range ss {
		for _, tc := range []struct {
			name string
			edit func(*Statement)
		}{
			{"room", func(s *Statement) { s.Room += "x" }},
			{"subject", func(s *Statement) { s.Subject += ".x" }},
			{"position", func(s *Statement) { s.Position = JournalPosition(int64(i) + 1) }},
			{"position kind", func(s *Statement) { s.Position = RecordPosition(uint64(i)) }},
			{"content", func(s *Statement) { s.Content[31] ^= 1 }},
			{"newline", func(s *Statement) { s.Room, s.Subject = tRoom+"\n"+tSubject, "" }},
		} {
			t.Run(fmt.Sprintf("%s of %d", tc.name, i), func(t *testing.T) {
				edited := append([]Statement(nil), ss...)
				tc.edit(&edited[i])
				if _, err := tr.VerifyBatch(hs, edited); !errors.Is(err, ErrBadAttestation) {
					t.Fatalf("err = %v, want ErrBadAttestation", err)
				}
			})
		}
	}
	// Two messages swapped, with or without their headers.
	swapped := append([]Statement(nil), ss...)
	swapped[1], swapped[2] = swapped[2], swapped[1]
	if _, err := tr.VerifyBatch(hs, swapped); !errors.Is(err, ErrBadAttestation) {
		t.Fatalf("statements swapped: err = %v", err)
	}
	hsw := append([]string(nil), hs...)
	hsw[1], hsw[2] = hsw[2], hsw[1]
	if _, err := tr.VerifyBatch(hsw, swapped); !errors.Is(err, ErrBadAttestation) {
		t.Fatalf("messages swapped: err = %v", err)
	}
}

func TestVerifyBatchTampering(t *testing.T) {
	k := testKey(1)
	tr := mustTrust(t, k.NodeID())
	ss := stmts(3)
	hs := AttestBatch(k, ss)
	other := AttestBatch(k, stmts(4)[1:]) // another batch of 3
	withSuffix := func(h, suffix string) string { return h[:strings.LastIndexByte(h, ' ')+1] + suffix }
	for _, tc := range []struct {
		name    string
		headers []string
		stmts   []Statement
		want    error
	}{
		{"index edited", []string{hs[0], withSuffix(hs[1], "2/3"), hs[2]}, ss, ErrBadAttestation},
		{"count edited", []string{withSuffix(hs[0], "0/2"), withSuffix(hs[1], "1/2")}, ss[:2], ErrBadAttestation},
		{"count edited on one", []string{hs[0], withSuffix(hs[1], "1/4"), hs[2]}, ss, ErrBadAttestation},
		{"copied header", []string{hs[0], other[1], hs[2]}, ss, ErrBadAttestation},
		{"missing message", hs[:2], ss[:2], ErrBadAttestation},
		{"missing header", hs[:2], ss, ErrBadAttestation},
		{"extra message", append(append([]string(nil), hs...), hs[2]), append(append([]Statement(nil), ss...), ss[2]), ErrBadAttestation},
		{"no headers", nil, nil, ErrBadAttestation},
		{"one empty header", []string{hs[0], "", hs[2]}, ss, ErrNoAttestation},
		{"other batch whole", other, ss, ErrBadAttestation},
		{"other signer", AttestBatch(testKey(2), ss), ss, ErrUntrustedPublisher},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tr.VerifyBatch(tc.headers, tc.stmts); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	// A header naming a trusted key with another key's signature.
	forged := AttestBatch(testKey(2), ss)
	for i := range forged {
		forged[i] = k.NodeID() + forged[i][strings.IndexByte(forged[i], ' '):]
	}
	if _, err := tr.VerifyBatch(forged, ss); !errors.Is(err, ErrBadAttestation) {
		t.Fatalf("forged signer: err = %v", err)
	}
}

// collect adds each message and returns the verdicts by id, failing on a
// second verdict for one id.
type collected map[uint64]BatchVerdict

func (c collected) take(t *testing.T, vs []BatchVerdict) {
	t.Helper()
	for _, v := range vs {
		if _, dup := c[v.ID]; dup {
			t.Fatalf("second verdict for id %d", v.ID)
		}
		c[v.ID] = v
	}
}

func TestBatchCollector(t *testing.T) {
	k := testKey(1)
	tr := mustTrust(t, k.NodeID())
	ss := stmts(5)
	hs := AttestBatch(k, ss)

	t.Run("in order", func(t *testing.T) {
		c := NewBatchCollector(tr)
		for i := range 4 {
			if v := c.Add(uint64(10+i), hs[i], ss[i]); len(v) != 0 {
				t.Fatalf("verdict before the batch is whole: %+v", v)
			}
			if c.Pending() != i+1 {
				t.Fatalf("Pending = %d, want %d", c.Pending(), i+1)
			}
		}
		v := c.Add(14, hs[4], ss[4])
		if len(v) != 5 || c.Pending() != 0 {
			t.Fatalf("verdicts %+v, pending %d", v, c.Pending())
		}
		for i, x := range v {
			if x.ID != uint64(10+i) || x.Err != nil || x.Signer != k.NodeID() {
				t.Fatalf("verdict %d = %+v", i, x)
			}
		}
		if f := c.Flush(); len(f) != 0 {
			t.Fatalf("Flush after a whole batch: %+v", f)
		}
	})
	t.Run("out of order", func(t *testing.T) {
		// A batch's messages replayed out of order: each message that is
		// not the one after the previous, at the next id, is refused at
		// once; the rest can never complete.
		c := NewBatchCollector(tr)
		got := collected{}
		for _, i := range []int{3, 0, 4, 1, 2} {
			got.take(t, c.Add(uint64(20+i), hs[i], ss[i]))
		}
		for _, id := range []uint64{20, 21, 22} {
			if v := got[id]; v.Err == nil || !errors.Is(v.Err, ErrBadAttestation) || !strings.Contains(v.Err.Error(), "does not follow message") {
				t.Fatalf("id %d: %+v", id, v)
			}
		}
		got.take(t, c.Flush())
		if len(got) != 5 || !errors.Is(got[23].Err, ErrIncompleteBatch) || !errors.Is(got[24].Err, ErrIncompleteBatch) {
			t.Fatalf("verdicts %+v", got)
		}
	})
	t.Run("duplicate index", func(t *testing.T) {
		c := NewBatchCollector(tr)
		c.Add(10, hs[0], ss[0])
		c.Add(11, hs[1], ss[1])
		// Header 1 copied onto another message (ids may repeat: they grow
		// by at most one per message).
		v := c.Add(12, hs[1], ss[2])
		if len(v) != 1 || v[0].ID != 12 || !errors.Is(v[0].Err, ErrBadAttestation) || v[0].Signer != "" {
			t.Fatalf("duplicate: %+v", v)
		}
		// The first message per index wins: the genuine batch still completes.
		got := collected{}
		for i := 2; i < 5; i++ {
			got.take(t, c.Add(uint64(10+i), hs[i], ss[i]))
		}
		if len(got) != 5 || got[11].Err != nil || got[14].Err != nil || got[11].Signer != k.NodeID() {
			t.Fatalf("verdicts %+v", got)
		}
	})
	t.Run("duplicate out of order", func(t *testing.T) {
		c := NewBatchCollector(tr)
		c.Add(1, hs[2], ss[2])
		c.Add(2, hs[0], ss[0])
		if v := c.Add(3, hs[2], ss[2]); len(v) != 1 || !errors.Is(v[0].Err, ErrBadAttestation) {
			t.Fatalf("duplicate: %+v", v)
		}
	})
	t.Run("missing message", func(t *testing.T) {
		c := NewBatchCollector(tr)
		for _, i := range []int{0, 1} {
			if v := c.Add(uint64(i), hs[i], ss[i]); len(v) != 0 {
				t.Fatalf("verdict %+v", v)
			}
		}
		// Message 2 is missing: 3 and 4 do not follow 1 and are refused
		// at once; 0 and 1 can never complete.
		for _, i := range []int{3, 4} {
			if v := c.Add(uint64(i), hs[i], ss[i]); len(v) != 1 || v[0].ID != uint64(i) || !errors.Is(v[0].Err, ErrBadAttestation) {
				t.Fatalf("message %d: %+v", i, v)
			}
		}
		f := c.Flush()
		if len(f) != 2 || c.Pending() != 0 {
			t.Fatalf("Flush = %+v, pending %d", f, c.Pending())
		}
		for j, i := range []uint64{0, 1} {
			if f[j].ID != i || !errors.Is(f[j].Err, ErrIncompleteBatch) || !strings.Contains(f[j].Err.Error(), "2 of 5") {
				t.Fatalf("Flush[%d] = %+v", j, f[j])
			}
		}
	})
	t.Run("window", func(t *testing.T) {
		// An atomic batch is contiguous: once an id past first+n is seen,
		// an incomplete batch is refused.
		c := NewBatchCollector(tr)
		c.Add(100, hs[0], ss[0])
		c.Add(101, hs[1], ss[1])
		one := Attest(k, tRoom, tSubject, RecordPosition(0), ss[0].Content)
		v := c.Add(104, one, Statement{tRoom, tSubject, RecordPosition(0), ss[0].Content})
		if len(v) != 1 || v[0].ID != 104 || v[0].Err != nil {
			t.Fatalf("inside the window: %+v", v)
		}
		v = c.Add(105, one, Statement{tRoom, tSubject, RecordPosition(0), ss[0].Content})
		if len(v) != 3 || v[0].ID != 100 || v[1].ID != 101 || v[2].ID != 105 ||
			!errors.Is(v[0].Err, ErrIncompleteBatch) || !errors.Is(v[1].Err, ErrIncompleteBatch) || v[2].Err != nil {
			t.Fatalf("past the window: %+v", v)
		}
		if c.Pending() != 0 {
			t.Fatalf("Pending = %d", c.Pending())
		}
		// The rest of that batch arriving late starts a new group that
		// cannot complete.
		for i := 2; i < 5; i++ {
			if v := c.Add(uint64(106+i), hs[i], ss[i]); len(v) != 0 {
				t.Fatalf("late member: %+v", v)
			}
		}
		if f := c.Flush(); len(f) != 3 || !errors.Is(f[0].Err, ErrIncompleteBatch) {
			t.Fatalf("Flush = %+v", f)
		}
	})
	t.Run("copied header after the batch", func(t *testing.T) {
		c := NewBatchCollector(tr)
		got := collected{}
		for i := range 5 {
			got.take(t, c.Add(uint64(i), hs[i], ss[i]))
		}
		got.take(t, c.Add(5, hs[4], Statement{tRoom, tSubject, JournalPosition(5), ContentHash([]byte("forged"))}))
		for i := 6; i < 11; i++ {
			s := Statement{tRoom, tSubject, RecordPosition(uint64(i)), ss[0].Content}
			got.take(t, c.Add(uint64(i), Attest(k, s.Room, s.Subject, s.Position, s.Content), s))
		}
		got.take(t, c.Flush())
		for id := range uint64(11) {
			if v := got[id]; (v.Err == nil) != (id != 5) {
				t.Fatalf("id %d: %+v", id, v)
			}
		}
		if !errors.Is(got[5].Err, ErrIncompleteBatch) {
			t.Fatalf("copied header: %+v", got[5])
		}
	})
	t.Run("bad signature refuses the whole batch", func(t *testing.T) {
		c := NewBatchCollector(tr)
		edited := append([]Statement(nil), ss...)
		edited[2].Content[0] ^= 1
		got := collected{}
		for i := range 5 {
			got.take(t, c.Add(uint64(i), hs[i], edited[i]))
		}
		if len(got) != 5 {
			t.Fatalf("%d verdicts", len(got))
		}
		for id, v := range got {
			if !errors.Is(v.Err, ErrBadAttestation) || v.Signer != "" {
				t.Fatalf("id %d: %+v", id, v)
			}
		}
	})
	t.Run("refused at once", func(t *testing.T) {
		c := NewBatchCollector(tr)
		other := AttestBatch(testKey(2), ss)
		for _, tc := range []struct {
			header string
			st     Statement
			want   error
		}{
			{"", ss[0], ErrNoAttestation},
			{"junk", ss[0], ErrBadAttestation},
			{other[0], ss[0], ErrUntrustedPublisher},
			{hs[0], Statement{tRoom + "\n", tSubject, "seq:0", ss[0].Content}, ErrBadAttestation},
			{Attest(k, tRoom, tSubject, "seq:9", ss[0].Content), ss[0], ErrBadAttestation},
		} {
			v := c.Add(7, tc.header, tc.st)
			if len(v) != 1 || v[0].ID != 7 || !errors.Is(v[0].Err, tc.want) {
				t.Fatalf("Add(%q) = %+v, want %v", tc.header, v, tc.want)
			}
		}
		if c.Pending() != 0 {
			t.Fatalf("Pending = %d", c.Pending())
		}
	})
	t.Run("nil trust", func(t *testing.T) {
		c := NewBatchCollector(nil)
		if v := c.Add(1, hs[0], ss[0]); len(v) != 1 || !errors.Is(v[0].Err, ErrUntrustedPublisher) {
			t.Fatalf("%+v", v)
		}
	})
	t.Run("two signers", func(t *testing.T) {
		tr2 := mustTrust(t, k.NodeID(), testKey(2).NodeID())
		c := NewBatchCollector(tr2)
		h2 := AttestBatch(testKey(2), ss[:2])
		got := collected{}
		got.take(t, c.Add(1, h2[0], ss[0]))
		got.take(t, c.Add(2, h2[1], ss[1]))
		if len(got) != 2 || got[1].Signer != testKey(2).NodeID() || got[2].Err != nil {
			t.Fatalf("%+v", got)
		}
		for i := range 5 {
			got.take(t, c.Add(uint64(3+i), hs[i], ss[i]))
		}
		if len(got) != 7 || got[3].Signer != k.NodeID() || got[7].Err != nil {
			t.Fatalf("%+v", got)
		}
		// The same statements signed by the other key are another batch:
		// its headers do not complete the first one.
		c.Add(8, hs[0], ss[0])
		if v := c.Add(9, h2[1], ss[1]); len(v) != 0 {
			t.Fatalf("%+v", v)
		}
		if f := c.Flush(); len(f) != 2 || !errors.Is(f[0].Err, ErrIncompleteBatch) || !errors.Is(f[1].Err, ErrIncompleteBatch) {
			t.Fatalf("Flush = %+v", f)
		}
	})
}

// TestBatchCollectorManyBatches: 200 batches of 3 at consecutive ids (a
// stream's sequences) are each verified once, and what is held stays
// bounded.
func TestBatchCollectorManyBatches(t *testing.T) {
	k := testKey(1)
	c := NewBatchCollector(mustTrust(t, k.NodeID()))
	got := 0
	id := uint64(1)
	for b := range 200 {
		ss := stmts(3)
		ss[0].Position = RecordPosition(uint64(b))
		hs := AttestBatch(k, ss)
		for i := range 3 {
			for _, v := range c.Add(id, hs[i], ss[i]) {
				if v.Err != nil {
					t.Fatalf("%+v", v)
				}
				got++
			}
			id++
		}
	}
	if got != 600 || c.Pending() != 0 || len(c.order) > 64 {
		t.Fatalf("verdicts %d, pending %d, order %d", got, c.Pending(), len(c.order))
	}
}

func TestAttestDigests(t *testing.T) {
	k := testKey(1)
	ss := stmts(7)
	ds := make([][32]byte, len(ss))
	for i := range ss {
		ds[i] = ss[i].Digest()
	}
	a, b := AttestBatch(k, ss), AttestDigests(k, ds)
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("AttestDigests differs from AttestBatch:\n%q\n%q", a, b)
	}
	ds[3][0] ^= 1
	if c := AttestDigests(k, ds); c[0] == a[0] {
		t.Fatal("another digest list, the same signature")
	}
	if AttestDigests(k, nil) != nil {
		t.Fatal("an empty batch got headers")
	}
}
