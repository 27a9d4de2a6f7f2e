package witness

import (
	"strconv"
	"strings"
	"testing"
)

func FuzzParseVerifierKey(f *testing.F) {
	f.Add("w.example+00df7ba9+BAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("w.example+00df7ba9+AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("a+b+c")
	f.Fuzz(func(t *testing.T, vkey string) {
		v, err := ParseVerifierKey(vkey)
		if err != nil {
			return
		}
		// What parses is exactly its own encoding.
		if v.String() != vkey {
			t.Fatalf("%q parsed, encodes as %q", vkey, v.String())
		}
	})
}

func FuzzParsePolicy(f *testing.F) {
	const w = "w.example+00df7ba9+BAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	f.Add("witness A " + w + " https://a\nquorum A\n")
	f.Add("witness A " + w + "\ngroup G all A\ngroup H 1 G\nquorum H\n")
	f.Add("# c\n\tquorum none\n")
	f.Fuzz(func(t *testing.T, file string) {
		p, err := ParsePolicy([]byte(file))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "witness: policy line ") && err.Error() != "witness: policy has no quorum line" {
				t.Fatalf("error without a line number: %v", err)
			}
			return
		}
		if p.quorum == nil || len(p.witnesses) > PolicyLimit || len(p.logs) > PolicyLimit {
			t.Fatalf("accepted policy with %d witnesses, %d logs", len(p.witnesses), len(p.logs))
		}
		// No cosignature at all meets only a quorum of none.
		ok := make([]bool, len(p.witnesses))
		if p.quorum.met(ok) != (p.quorum.k == 0 && p.quorum.witness < 0) {
			t.Fatalf("quorum %q met by no witness", p.quorum.name)
		}
	})
}

func FuzzParseCosignatures(f *testing.F) {
	f.Add([]byte("— w.example/w1 CMp+6LWBU0anHGH5aNDTJkH/gj79sG+T6+iP2ThYN5krrDJbR1HDnucjL39QsZTSvVjyQLrdk3DXDqI5G2HgLatVs0pWh6Up69HVOw==\n"))
	f.Add([]byte("— a AAAAAAA=\n— b AAAAAAA=\n"))
	f.Add([]byte("not a line\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		sigs, err := parseCosignatures(body)
		if err != nil {
			return
		}
		var b strings.Builder
		for _, s := range sigs {
			if !validName(s.Name) {
				t.Fatalf("invalid name %q accepted", s.Name)
			}
			b.WriteString("— " + s.Name + " " + s.Base64 + "\n")
		}
		if b.String() != string(body) {
			t.Fatalf("%q parsed, re-encodes as %q", body, b.String())
		}
	})
}

func FuzzParseSize(f *testing.F) {
	f.Add([]byte("0\n"))
	f.Add([]byte("20852014\n"))
	f.Add([]byte("007\n"))
	f.Add([]byte("-1\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := parseSize(body)
		if err != nil {
			return
		}
		if got := strconv.FormatUint(n, 10) + "\n"; got != string(body) {
			t.Fatalf("%q parsed as %d", body, n)
		}
	})
}

func FuzzCheckpointText(f *testing.F) {
	f.Add([]byte("o\n12\nAAAA\n\n— o AAAAAAA=\n"))
	f.Add([]byte("o\n012\nAAAA\n\n— o AAAAAAA=\n"))
	f.Fuzz(func(t *testing.T, signed []byte) {
		text, size, err := checkpointText(signed)
		if err != nil {
			return
		}
		if got := strings.Split(string(text), "\n")[1]; got != strconv.FormatUint(size, 10) {
			t.Fatalf("size line %q read as %d", got, size)
		}
	})
}
