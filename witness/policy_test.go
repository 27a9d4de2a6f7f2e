package witness_test

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roompub/roompub/witness"
	"golang.org/x/mod/sumdb/note"
)

func TestParseVerifierKey(t *testing.T) {
	c := newCosigner(t, "witness.example/w1")
	v, err := witness.ParseVerifierKey(c.vkey)
	if err != nil {
		t.Fatal(err)
	}
	if v.Name() != c.name || v.String() != c.vkey || !v.PublicKey().Equal(c.priv.Public()) {
		t.Fatalf("parsed %s %08x %s", v.Name(), v.KeyHash(), v)
	}
	// A fixed key: name, SHA-256("w.example\n" || 0x04 || 32 zero
	// bytes)[:4], base64 of the 33 bytes.
	const fixed = "w.example+00df7ba9+BAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	if v, err := witness.ParseVerifierKey(fixed); err != nil || v.KeyHash() != 0x00df7ba9 {
		t.Fatalf("%s: %v", fixed, err)
	}
	if got, err := witness.NewVerifierKey("w.example", make([]byte, 32)); err != nil || got != fixed {
		t.Fatalf("NewVerifierKey: %q %v", got, err)
	}

	_, logKey, err := note.GenerateKey(rand.Reader, "log.example")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := witness.ParseVerifierKey(logKey); !errors.Is(err, witness.ErrNotCosignatureKey) || !strings.Contains(err.Error(), "0x01") {
		t.Fatalf("log key: %v", err)
	}
	name, rest, _ := strings.Cut(c.vkey, "+")
	hash, b64, _ := strings.Cut(rest, "+")
	raw, _ := base64.StdEncoding.DecodeString(b64)
	for _, bad := range []struct{ vkey, want string }{
		{"", "want name+hash+key"},
		{name + "+" + hash, "want name+hash+key"},
		{"a b+" + hash + "+" + b64, "invalid key name"},
		{"+" + hash + "+" + b64, "invalid key name"},
		{"other.example+" + hash + "+" + b64, "does not match"},
		{strings.ToUpper(fixed[:18]) + fixed[18:], "lowercase hex"},
		{name + "+" + hash[:7] + "+" + b64, "lowercase hex"},
		{name + "+" + hash + "+" + b64[:len(b64)-1], "not base64"},
		{name + "+" + hash + "+" + b64[:len(b64)-4], "30 bytes"},
		{name + "+" + hash + "+" + base64.StdEncoding.EncodeToString(append(raw, 0)), "34 bytes"},
		{name + "+" + hash + "+" + base64.StdEncoding.EncodeToString(append([]byte{0x02}, raw[1:]...)), "type 0x02"},
	} {
		if _, err := witness.ParseVerifierKey(bad.vkey); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.vkey, err, bad.want)
		}
	}
}

func TestVerifierTimestamp(t *testing.T) {
	c := newCosigner(t, "witness.example/w1")
	v, _ := witness.ParseVerifierKey(c.vkey)
	text := "log.example\n1\n" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n"
	line := c.line(text, 1700000000)
	n, err := note.Open([]byte(text+"\n"+line), note.VerifierList(v))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := v.Timestamp(n.Sigs[0])
	if err != nil || !ts.Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("timestamp %v %v", ts, err)
	}
	// The time is signed: another time over the same signature fails.
	if n, err := note.Open([]byte(text+"\n"+strings.Replace(line, line[len(line)-20:], "AAAAAAAAAAAAAAAAAAA\n", 1)), note.VerifierList(v)); err == nil {
		t.Fatalf("altered cosignature verified: %v", n.Sigs)
	}
	if _, err := v.Timestamp(note.Signature{Name: "other", Hash: v.KeyHash(), Base64: n.Sigs[0].Base64}); err == nil {
		t.Fatal("timestamp of another key's line")
	}
}

// policyFixture: three in-test witnesses, a log, a checkpoint text and
// its log-signed note.
type policyFixture struct {
	lg   *testLog
	cs   []cosigner
	ws   []witness.Witness
	text string
	note string
}

func newPolicyFixture(t *testing.T) *policyFixture {
	f := &policyFixture{lg: newTestLog(t, "log.roompub.test/p")}
	f.lg.grow(7)
	f.text = f.lg.text(7, f.lg.root(7))
	f.note = string(f.lg.sign(f.text))
	for i := range 3 {
		c := newCosigner(t, fmt.Sprintf("w%d.roompub.test", i+1))
		v, err := witness.ParseVerifierKey(c.vkey)
		if err != nil {
			t.Fatal(err)
		}
		f.cs = append(f.cs, c)
		f.ws = append(f.ws, witness.Witness{Name: fmt.Sprintf("W%d", i+1), Verifier: v})
	}
	return f
}

func TestPolicyCheck(t *testing.T) {
	f := newPolicyFixture(t)
	now := time.Now().Unix()
	otherText := f.lg.text(7, f.lg.root(6))
	forged := func(c cosigner) string {
		// The key's name and hash over garbage: 4+8+64 bytes.
		raw := append(append([]byte{}, c.hash...), make([]byte, 72)...)
		rand.Read(raw[12:])
		return "— " + c.name + " " + base64.StdEncoding.EncodeToString(raw) + "\n"
	}
	for _, tc := range []struct {
		name    string
		lines   []string
		revoke  []int
		k       int
		want    []string
		quorumK bool // whether the quorum is met
	}{
		{"all three", []string{f.cs[0].line(f.text, now), f.cs[1].line(f.text, now), f.cs[2].line(f.text, now)}, nil, 2, []string{"W1", "W2", "W3"}, true},
		{"two of three", []string{f.cs[0].line(f.text, now), f.cs[2].line(f.text, now)}, nil, 2, []string{"W1", "W3"}, true},
		{"one of three", []string{f.cs[1].line(f.text, now)}, nil, 2, []string{"W2"}, false},
		{"none", nil, nil, 2, nil, false},
		{"none needed", nil, nil, 0, nil, true},
		{"revoked key", []string{f.cs[0].line(f.text, now), f.cs[1].line(f.text, now)}, []int{1}, 2, []string{"W1"}, false},
		{"forged line", []string{f.cs[0].line(f.text, now), forged(f.cs[1])}, nil, 2, []string{"W1"}, false},
		{"duplicate lines", []string{f.cs[0].line(f.text, now), f.cs[0].line(f.text, now-1), f.cs[0].line(f.text, now-2)}, nil, 2, []string{"W1"}, false},
		{"other checkpoint", []string{f.cs[0].line(f.text, now), f.cs[1].line(otherText, now)}, nil, 2, []string{"W1"}, false},
		{"three of three", []string{f.cs[2].line(f.text, now), f.cs[1].line(f.text, now), f.cs[0].line(f.text, now)}, nil, 3, []string{"W1", "W2", "W3"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := witness.NewPolicy(f.ws, tc.k)
			if err != nil {
				t.Fatal(err)
			}
			for _, i := range tc.revoke {
				if err := p.Revoke(f.cs[i].vkey); err != nil {
					t.Fatal(err)
				}
			}
			got, err := p.Check([]byte(f.note+strings.Join(tc.lines, "")), f.lg.verifier())
			if !slices.Equal(got, tc.want) {
				t.Fatalf("cosigned %v, want %v", got, tc.want)
			}
			var qe *witness.QuorumError
			if tc.quorumK {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.As(err, &qe) || !slices.Equal(qe.Cosigned, tc.want) || qe.Witnesses != 3 || qe.Quorum != fmt.Sprintf("%d-of-3", tc.k) {
				t.Fatalf("err %v", err)
			}
		})
	}
	// The log's own signature must verify.
	p, _ := witness.NewPolicy(f.ws, 1)
	impostor := newTestLog(t, f.lg.origin)
	if _, err := p.Check(impostor.sign(f.text), f.lg.verifier()); err == nil || errors.As(err, new(*witness.QuorumError)) {
		t.Fatalf("checkpoint of another key: %v", err)
	}
	if _, err := p.Check([]byte(f.note), nil); err == nil {
		t.Fatal("no log key, no error")
	}
}

func TestParsePolicy(t *testing.T) {
	f := newPolicyFixture(t)
	file := fmt.Sprintf(`# roompub deployment
log %s https://log.roompub.test/

witness W1 %s https://w1.roompub.test
	witness	W2 %s
witness W3 %s
group two 2 W1 W2 W3
group w3 any W3
group both all two w3
quorum both
`, f.lg.vkey, f.cs[0].vkey, f.cs[1].vkey, f.cs[2].vkey)
	p, err := witness.ParsePolicy([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	ws := p.Witnesses()
	if len(ws) != 3 || ws[0].URL != "https://w1.roompub.test" || ws[1].URL != "" || ws[1].Verifier.String() != f.cs[1].vkey || len(p.Logs()) != 1 {
		t.Fatalf("witnesses %v logs %d", ws, len(p.Logs()))
	}
	now := time.Now().Unix()
	check := func(lines ...string) ([]string, error) {
		return p.Check([]byte(f.note+strings.Join(lines, "")), nil)
	}
	// both = (2 of W1 W2 W3) and W3.
	if got, err := check(f.cs[0].line(f.text, now), f.cs[2].line(f.text, now)); err != nil || !slices.Equal(got, []string{"W1", "W3"}) {
		t.Fatalf("W1 W3: %v %v", got, err)
	}
	if got, err := check(f.cs[0].line(f.text, now), f.cs[1].line(f.text, now)); err == nil || !slices.Equal(got, []string{"W1", "W2"}) {
		t.Fatalf("W1 W2 without W3: %v %v", got, err)
	}
	if _, err := check(f.cs[2].line(f.text, now)); err == nil {
		t.Fatal("W3 alone met the quorum")
	}

	none, err := witness.ParsePolicy([]byte("quorum none\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := none.Check([]byte(f.note), f.lg.verifier()); err != nil || len(got) != 0 {
		t.Fatalf("quorum none: %v %v", got, err)
	}

	w := func(name string, i int) string { return "witness " + name + " " + f.cs[i].vkey + "\n" }
	for _, bad := range []struct{ file, want string }{
		{"", "no quorum line"},
		{w("A", 0) + "quorum B\n", "line 2: quorum \"B\" not defined"},
		{"quorum A\n" + w("A", 0), "line 1: quorum \"A\" not defined"},
		{w("A", 0) + w("A", 1) + "quorum A\n", "line 2: name \"A\" already defined"},
		{w("A", 0) + w("B", 0) + "quorum A\n", "line 2: witness: witnesses \"A\" and \"B\" have the same key"},
		{w("A", 0) + "quorum A\nquorum A\n", "line 3: second quorum line"},
		{w("A", 0) + "group G 2 A\nquorum G\n", "line 2: threshold \"2\""},
		{w("A", 0) + "group G 0 A\nquorum G\n", "line 2: threshold \"0\""},
		{w("A", 0) + "group G 01 A\nquorum G\n", "line 2: threshold \"01\""},
		{w("A", 0) + "group G any A A\nquorum G\n", "line 2: group member \"A\" listed twice"},
		{w("A", 0) + "group G any\nquorum G\n", "line 2: want group"},
		{w("A", 0) + "group G any B\n", "line 2: group member \"B\" not defined"},
		{"witness A " + f.lg.vkey + "\nquorum A\n", "line 1: witness: verifier key"},
		{"log " + f.cs[0].vkey + "\nquorum none\n", "line 1: log key"},
		{"log " + f.lg.vkey + "\nlog " + f.lg.vkey + "\nquorum none\n", "line 2: log key repeated"},
		{"witness none " + f.cs[0].vkey + "\nquorum none\n", "line 1: name \"none\""},
		{"\n\nquorum none\r\n", "line 3: control character 0x0d"},
		{"# ok\nwitnesses A\n", "line 2: unknown keyword \"witnesses\""},
		{w("A", 0) + "quorum A B\n", "line 2: want quorum <name>"},
		{"witness A\n", "line 1: want witness"},
		{"\ufeffquorum none\n", "line 1: the file starts with a UTF-8 byte order mark (bytes EF BB BF): a policy file is UTF-8 without one"},
	} {
		if _, err := witness.ParsePolicy([]byte(bad.file)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.file, err, bad.want)
		}
	}
}

// TestPolicyWitnessKeyRotation: a witness rotating its key is one member
// of the quorum while both keys are trusted (a tlog-policy group "any" of
// the two), so a cosignature by either counts once and both together
// still once; once the rotation ends the old key is revoked and its
// cosignatures no longer count.
func TestPolicyWitnessKeyRotation(t *testing.T) {
	f := newPolicyFixture(t)
	now := time.Now().Unix()
	w2new := newCosigner(t, "w2.roompub.test")
	file := fmt.Sprintf("log %s\nwitness W1 %s\nwitness W2old %s\nwitness W2new %s\nwitness W3 %s\ngroup W2 any W2old W2new\ngroup q 2 W1 W2 W3\nquorum q\n",
		f.lg.vkey, f.cs[0].vkey, f.cs[1].vkey, w2new.vkey, f.cs[2].vkey)
	p, err := witness.ParsePolicy([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	check := func(lines ...string) ([]string, error) {
		t.Helper()
		return p.Check([]byte(f.note+strings.Join(lines, "")), nil)
	}
	// W1 and W2's old key, or W1 and its new key: 2 members of 3.
	for _, l := range []string{f.cs[1].line(f.text, now), w2new.line(f.text, now)} {
		if _, err := check(f.cs[0].line(f.text, now), l); err != nil {
			t.Fatalf("W1 and one of W2's keys: %v", err)
		}
	}
	// Both of W2's keys are one member: with nobody else, no quorum.
	if got, err := check(f.cs[1].line(f.text, now), w2new.line(f.text, now)); !errors.As(err, new(*witness.QuorumError)) || len(got) != 2 {
		t.Fatalf("W2's two keys alone: %v %v", got, err)
	}
	// The rotation ends: the old key is revoked.
	if err := p.Revoke(f.cs[1].vkey); err != nil {
		t.Fatal(err)
	}
	if got, err := check(f.cs[0].line(f.text, now), f.cs[1].line(f.text, now)); !errors.As(err, new(*witness.QuorumError)) || !slices.Equal(got, []string{"W1"}) {
		t.Fatalf("W1 and W2's revoked key: %v %v", got, err)
	}
	if _, err := check(f.cs[0].line(f.text, now), w2new.line(f.text, now)); err != nil {
		t.Fatalf("W1 and W2's new key: %v", err)
	}
}
