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
	// The compact form: the signature on the last message only.
	sig := strings.Split(hs[11], " ")[1]
	for i, h := range hs {
		want := k.NodeID() + " " + fmt.Sprintf("%d/12", i)
		if i == 11 {
			want = k.NodeID() + " " + sig + " 11/12"
		}
		if h != want {
			t.Fatalf("header %d = %q, want %q", i, h, want)
		}
		if HeaderLen(k.NodeID(), i, 12, FormCompact) != len(h) {
			t.Fatalf("HeaderLen(%d, 12) = %d, header is %d", i, HeaderLen(k.NodeID(), i, 12, FormCompact), len(h))
		}
		a, err := ParseAttestation(h)
		if err != nil || a.Index != i || a.Count != 12 || a.Signer != k.NodeID() || a.Signed != (i == 11) || a.String() != h {
			t.Fatalf("ParseAttestation(%q) = %+v, %v", h, a, err)
		}
	}
	// The every-message form of the same batch.
	every, err := Reform(hs, FormEveryMessage)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range every {
		if want := k.NodeID() + " " + sig + " " + fmt.Sprintf("%d/12", i); h != want {
			t.Fatalf("every-message header %d = %q, want %q", i, h, want)
		}
	}
	if signer, err := mustTrust(t, k.NodeID()).VerifyBatch(every, ss); err != nil || signer != k.NodeID() {
		t.Fatalf("VerifyBatch of the every-message form = %q, %v", signer, err)
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
	every := func(hs []string) []string {
		out, err := Reform(hs, FormEveryMessage)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	ev, otherEv := every(hs), every(other)
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
		{"copied header", []string{ev[0], otherEv[1], ev[2]}, ss, ErrBadAttestation},
		{"another batch's last", []string{hs[0], hs[1], other[2]}, ss, ErrBadAttestation},
		{"two forms", []string{ev[0], hs[1], hs[2]}, ss, ErrBadAttestation},
		{"two forms, compact first", []string{hs[0], ev[1], hs[2]}, ss, ErrBadAttestation},
		{"unsigned last", []string{hs[0], hs[1], k.NodeID() + " 2/3"}, ss, ErrBadAttestation},
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
	// isIncomplete reports whether v refuses its message as part of a
	// batch not read whole, for the reason given.
	isIncomplete := func(v BatchVerdict, why string) bool {
		return v.Signer == "" && errors.Is(v.Err, ErrIncompleteBatch) && strings.Contains(v.Err.Error(), why)
	}
	stray := func(i int) string {
		return fmt.Sprintf("the message before it on the stream is not message %d of that batch", i-1)
	}
	t.Run("out of order", func(t *testing.T) {
		// A batch's messages replayed out of order, at growing stream
		// seqs: a message that claims place i > 0 without following
		// message i-1 is refused at once, and so is the batch message 0
		// opened when the next message is not its message 1.
		c := NewBatchCollector(tr)
		got := collected{}
		order := []int{3, 0, 4, 1, 2}
		for j, i := range order {
			got.take(t, c.Add(uint64(20+j), hs[i], ss[i]))
		}
		if c.Pending() != 0 || len(got) != 5 {
			t.Fatalf("verdicts %+v, pending %d", got, c.Pending())
		}
		for j, i := range order {
			why := stray(i)
			switch i {
			case 0:
				why = "only messages 0 to 0 of it were read, at stream seqs 21 to 21, and the next message, stream seq 22, is not message 1 of it"
			case 3:
				// Read first: nothing was read where 0 to 2 belong.
				why = "messages 0 to 2 of its batch, at stream seqs 17 to 19, were not read"
			}
			if v := got[uint64(20+j)]; !isIncomplete(v, why) {
				t.Fatalf("id %d (message %d): %+v, want %q", 20+j, i, v, why)
			}
		}
		// The same order at the ids of the batch's places (ids that do
		// not grow): nothing is admitted either.
		c = NewBatchCollector(tr)
		got = collected{}
		for _, i := range order {
			got.take(t, c.Add(uint64(20+i), hs[i], ss[i]))
		}
		got.take(t, c.Flush())
		for id, v := range got {
			if !errors.Is(v.Err, ErrIncompleteBatch) {
				t.Fatalf("id %d: %+v", id, v)
			}
		}
		if len(got) != 5 {
			t.Fatalf("verdicts %+v", got)
		}
	})
	t.Run("duplicate index", func(t *testing.T) {
		// Header 1 copied onto another message between messages 1 and 2
		// of a genuine batch: the batch is not at consecutive stream seqs
		// any more, and nothing of it is admitted; the first two are
		// refused as soon as the copy ends their batch.
		c := NewBatchCollector(tr)
		got := collected{}
		got.take(t, c.Add(10, hs[0], ss[0]))
		got.take(t, c.Add(11, hs[1], ss[1]))
		v := c.Add(12, hs[1], ss[2])
		got.take(t, v)
		if len(v) != 3 || v[0].ID != 10 || v[1].ID != 11 || v[2].ID != 12 || !isIncomplete(v[2], stray(1)) ||
			!isIncomplete(v[0], "next message, stream seq 12, is not message 2 of it") || !isIncomplete(v[1], "message 1 of a batch of 5") {
			t.Fatalf("duplicate: %+v", v)
		}
		for i := 2; i < 5; i++ {
			got.take(t, c.Add(uint64(11+i), hs[i], ss[i]))
		}
		if len(got) != 6 || c.Pending() != 0 {
			t.Fatalf("verdicts %+v, pending %d", got, c.Pending())
		}
		for id, v := range got {
			if v.Err == nil || v.Signer != "" {
				t.Fatalf("id %d admitted: %+v", id, v)
			}
		}
		// The same with the genuine message 2 at the copy's id (ids that
		// do not grow, as no stream has them): refused as well.
		c = NewBatchCollector(tr)
		got = collected{}
		got.take(t, c.Add(10, hs[0], ss[0]))
		got.take(t, c.Add(11, hs[1], ss[1]))
		got.take(t, c.Add(12, hs[1], ss[2]))
		for i := 2; i < 5; i++ {
			v := c.Add(uint64(10+i), hs[i], ss[i])
			if len(v) != 1 || !isIncomplete(v[0], stray(i)) {
				t.Fatalf("message %d after the copy: %+v", i, v)
			}
		}
	})
	t.Run("duplicate out of order", func(t *testing.T) {
		c := NewBatchCollector(tr)
		if v := c.Add(1, hs[2], ss[2]); len(v) != 1 || !isIncomplete(v[0], stray(2)) {
			t.Fatalf("message 2 first: %+v", v)
		}
		if v := c.Add(2, hs[0], ss[0]); len(v) != 0 {
			t.Fatalf("message 0: %+v", v)
		}
		if v := c.Add(3, hs[2], ss[2]); len(v) != 2 || v[0].ID != 2 || !errors.Is(v[0].Err, ErrIncompleteBatch) || v[1].ID != 3 || !isIncomplete(v[1], stray(2)) {
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
		// Message 2 is missing: message 3 ends the batch, whose 0 and 1
		// can never be whole, and is refused itself; so is 4. Each names
		// the place not read and its stream seq.
		v := c.Add(3, hs[3], ss[3])
		if len(v) != 3 || c.Pending() != 0 {
			t.Fatalf("message 3: %+v, pending %d", v, c.Pending())
		}
		for j, i := range []uint64{0, 1} {
			if v[j].ID != i || !isIncomplete(v[j], fmt.Sprintf("message %d of a batch of 5 by %s: only messages 0 to 1 of it were read, at stream seqs 0 to 1, and the next message read, stream seq 3, is message 3: "+
				"message 2 of it, at stream seq 2, was not read (the store lost it, or the message there is not of this batch)", i, k.NodeID())) {
				t.Fatalf("verdict %d = %+v", j, v[j])
			}
		}
		notRead := "message 2 of its batch, at stream seq 2, was not read"
		if v[2].ID != 3 || !isIncomplete(v[2], notRead) {
			t.Fatalf("message 3: %+v", v[2])
		}
		if v := c.Add(4, hs[4], ss[4]); len(v) != 1 || v[0].ID != 4 || !isIncomplete(v[0], notRead) {
			t.Fatalf("message 4: %+v", v)
		}
		if f := c.Flush(); len(f) != 0 {
			t.Fatalf("Flush = %+v", f)
		}
	})
	t.Run("gap", func(t *testing.T) {
		// An atomic batch is contiguous: a message at any later id ends
		// the open batch, a batch of one (another subject's record) too.
		c := NewBatchCollector(tr)
		c.Add(100, hs[0], ss[0])
		c.Add(101, hs[1], ss[1])
		one := Attest(k, tRoom, tSubject, RecordPosition(0), ss[0].Content)
		v := c.Add(104, one, Statement{tRoom, tSubject, RecordPosition(0), ss[0].Content})
		if len(v) != 3 || v[0].ID != 100 || v[1].ID != 101 || v[2].ID != 104 ||
			!isIncomplete(v[0], "next message, stream seq 104, is not message 2") || !errors.Is(v[1].Err, ErrIncompleteBatch) || v[2].Err != nil || v[2].Signer != k.NodeID() {
			t.Fatalf("after a gap: %+v", v)
		}
		if c.Pending() != 0 {
			t.Fatalf("Pending = %d", c.Pending())
		}
		// The rest of that batch arriving late is refused at once: nothing
		// was read where its places 0 and 1 belong (106, 107).
		for i := 2; i < 5; i++ {
			if v := c.Add(uint64(106+i), hs[i], ss[i]); len(v) != 1 || !isIncomplete(v[0], "messages 0 to 1 of its batch, at stream seqs 106 to 107, were not read") {
				t.Fatalf("late member: %+v", v)
			}
		}
		if f := c.Flush(); len(f) != 0 {
			t.Fatalf("Flush = %+v", f)
		}
	})
	t.Run("pass", func(t *testing.T) {
		// A message that is no attested member (a checkpoint) ends the
		// open batch at once.
		c := NewBatchCollector(tr)
		c.Add(1, hs[0], ss[0])
		if v := c.Pass(2); len(v) != 1 || v[0].ID != 1 || c.Pending() != 0 ||
			!isIncomplete(v[0], "only messages 0 to 0 of it were read, at stream seqs 1 to 1, and the next message, stream seq 2, is not message 1 of it") {
			t.Fatalf("Pass: %+v, pending %d", v, c.Pending())
		}
		if v := c.Pass(3); len(v) != 0 {
			t.Fatalf("Pass with no batch open: %+v", v)
		}
	})
	t.Run("flush", func(t *testing.T) {
		c := NewBatchCollector(tr)
		c.Add(1, hs[0], ss[0])
		c.Add(2, hs[1], ss[1])
		f := c.Flush()
		if len(f) != 2 || c.Pending() != 0 || f[0].ID != 1 || f[1].ID != 2 ||
			!isIncomplete(f[1], "message 1 of a batch of 5 by "+k.NodeID()+": only messages 0 to 1 of it were read, at stream seqs 1 to 2, and the read ended there") {
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
		if v := c.Add(9, h2[1], ss[1]); len(v) != 2 || v[0].ID != 8 || !errors.Is(v[0].Err, ErrIncompleteBatch) || v[1].ID != 9 || !errors.Is(v[1].Err, ErrIncompleteBatch) {
			t.Fatalf("%+v", v)
		}
		if f := c.Flush(); len(f) != 0 {
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
	if got != 600 || c.Pending() != 0 || len(c.members) != 0 || cap(c.members) > 4 {
		t.Fatalf("verdicts %d, pending %d, members %d (cap %d)", got, c.Pending(), len(c.members), cap(c.members))
	}
}

func TestAttestDigests(t *testing.T) {
	k := testKey(1)
	ss := stmts(7)
	ds := make([][32]byte, len(ss))
	for i := range ss {
		ds[i] = ss[i].Digest()
	}
	a, b := AttestBatch(k, ss), AttestDigests(k, ds, FormCompact)
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("AttestDigests differs from AttestBatch:\n%q\n%q", a, b)
	}
	ds[3][0] ^= 1
	if c := AttestDigests(k, ds, FormCompact); c[6] == a[6] {
		t.Fatal("another digest list, the same signature")
	}
	if AttestDigests(k, nil, FormCompact) != nil {
		t.Fatal("an empty batch got headers")
	}
}
