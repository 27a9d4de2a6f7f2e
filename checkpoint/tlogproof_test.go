package checkpoint

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// specProof is the example of C2SP tlog-proof (signatures shortened as
// the spec shortens them: ParseTlogProof does not open the checkpoint).
const specProof = `c2sp.org/tlog-proof@v1
extra YWdlLXYxLjIuMS1kYXJ3aW4tYXJtNjQudGFyLmd6
index 73894
gSKyXoYZUgZ6jduWYrkDOARinOMGJveXjgMkBTcdPlQ=
B95lDa8R83lS8n0eG+o0buTxRKQTYFi//1U8anccXmA=

example.com/fancylog
109482
sFodV/vSp5O8n9a8QpW6PRY97tfOSW5bsc2Xl/EQi08=

— example.com/fancylog hI2DJw1roloI=
— witness1.example mJirIklj=
`

func TestTlogProofSpecExample(t *testing.T) {
	p, err := ParseTlogProof([]byte(specProof))
	if err != nil {
		t.Fatal(err)
	}
	if string(p.Extra) != "age-v1.2.1-darwin-arm64.tar.gz" || p.Index != 73894 || len(p.Path) != 2 || p.Path[0][0] != 0x81 ||
		!strings.HasPrefix(string(p.Checkpoint), "example.com/fancylog\n109482\n") || !strings.HasSuffix(string(p.Checkpoint), "mJirIklj=\n") {
		t.Fatalf("parsed %q %d %x %q", p.Extra, p.Index, p.Path, p.Checkpoint)
	}
	if got := p.Marshal(); string(got) != specProof {
		t.Fatalf("marshal gives\n%s", got)
	}
}

// TestTlogProofVerify: a proof from a real tree and a signed checkpoint
// verifies at its index only, and against its own checkpoint only.
func TestTlogProofVerify(t *testing.T) {
	k := testKey(1)
	tr := treeOf(tRoom, 11)
	note, err := Sign(mustSigner(t, k), tRoom, 11, tr.Root())
	if err != nil {
		t.Fatal(err)
	}
	path, err := tr.InclusionProof(6, 11)
	if err != nil {
		t.Fatal(err)
	}
	text := (&TlogProof{Index: 6, Path: path, Checkpoint: note}).Marshal()
	p, err := ParseTlogProof(text)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(p.Checkpoint, tRoom, mustTrust(t, k.NodeID()))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(leafN(tRoom, 6), c); err != nil {
		t.Fatalf("valid proof: %v", err)
	}
	if err := p.Verify(leafN(tRoom, 7), c); !errors.Is(err, ErrBadProof) || !strings.Contains(err.Error(), "inclusion of leaf 6 at size 11") {
		t.Fatalf("another leaf: %v", err)
	}
	p.Index = 7
	if err := p.Verify(leafN(tRoom, 6), c); !errors.Is(err, ErrBadProof) {
		t.Fatalf("another index: %v", err)
	}
	other, _ := Sign(mustSigner(t, k), tRoom, 10, tr.Root())
	c2, _ := Parse(other, tRoom, mustTrust(t, k.NodeID()))
	p.Index = 6
	if err := p.Verify(leafN(tRoom, 6), c2); !errors.Is(err, ErrBadProof) || !strings.Contains(err.Error(), "not the proof's") {
		t.Fatalf("another checkpoint: %v", err)
	}
}

func TestTlogProofRefused(t *testing.T) {
	h := "gSKyXoYZUgZ6jduWYrkDOARinOMGJveXjgMkBTcdPlQ=\n"
	ck := "o\n1\nsFodV/vSp5O8n9a8QpW6PRY97tfOSW5bsc2Xl/EQi08=\n\n— o x=\n"
	for _, c := range []struct{ name, text, want string }{
		{"header", "c2sp.org/tlog-proof@v2\nindex 0\n\n" + ck, "line 1: want"},
		{"no index", "c2sp.org/tlog-proof@v1\n" + h + "\n" + ck, "line 2: want \"index <N>\""},
		{"leading zero", "c2sp.org/tlog-proof@v1\nindex 01\n\n" + ck, "line 2: index \"01\""},
		{"sign", "c2sp.org/tlog-proof@v1\nindex +1\n\n" + ck, "line 2: index"},
		{"overflow", "c2sp.org/tlog-proof@v1\nindex 18446744073709551616\n\n" + ck, "line 2: index"},
		{"empty extra", "c2sp.org/tlog-proof@v1\nextra \nindex 0\n\n" + ck, "line 2: extra"},
		{"extra unpadded", "c2sp.org/tlog-proof@v1\nextra YQ\nindex 0\n\n" + ck, "line 2: extra"},
		{"extra after index", "c2sp.org/tlog-proof@v1\nindex 0\nextra YQ==\n\n" + ck, "line 3: not the canonical base64"},
		{"short hash", "c2sp.org/tlog-proof@v1\nindex 0\nYQ==\n\n" + ck, "line 3: not the canonical base64 of a 32-byte hash"},
		{"url base64", "c2sp.org/tlog-proof@v1\nindex 0\ngSKyXoYZUgZ6jduWYrkDOARinOMGJveXjgMkBTcdPlQ\n\n" + ck, "line 3"},
		{"65 hashes", "c2sp.org/tlog-proof@v1\nindex 0\n" + strings.Repeat(h, 65) + "\n" + ck, "line 67: more than 64 hashes"},
		{"no empty line", "c2sp.org/tlog-proof@v1\nindex 0\n" + h, "line 4: want a hash line or the empty line"},
		{"no checkpoint", "c2sp.org/tlog-proof@v1\nindex 0\n\n", "line 4: the checkpoint is empty"},
		{"no final newline", "c2sp.org/tlog-proof@v1\nindex 0\n\n" + strings.TrimSuffix(ck, "\n"), "line 4: the checkpoint is empty or does not end with a newline"},
		{"crlf", "c2sp.org/tlog-proof@v1\r\nindex 0\n\n" + ck, "line 1: want"},
	} {
		_, err := ParseTlogProof([]byte(c.text))
		if !errors.Is(err, ErrBadProof) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	p, err := ParseTlogProof([]byte("c2sp.org/tlog-proof@v1\nindex 0\n" + strings.Repeat(h, 64) + "\n" + ck))
	if err != nil || len(p.Path) != 64 || p.Index != 0 || string(p.Checkpoint) != ck {
		t.Fatalf("64 hashes: %v", err)
	}
}

// FuzzParseTlogProof: ParseTlogProof never panics, its errors wrap
// ErrBadProof, and what it accepts Marshal writes back byte for byte
// (one proof, one text).
func FuzzParseTlogProof(f *testing.F) {
	f.Add([]byte(specProof))
	f.Add([]byte("c2sp.org/tlog-proof@v1\nindex 0\n\nx\n"))
	f.Add([]byte("c2sp.org/tlog-proof@v1\nextra YQ==\nindex 18446744073709551615\n\n\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		p, err := ParseTlogProof(text)
		if err != nil {
			if !errors.Is(err, ErrBadProof) {
				t.Fatalf("error %v does not wrap ErrBadProof", err)
			}
			return
		}
		if got := p.Marshal(); !bytes.Equal(got, text) {
			t.Fatalf("accepted %q, which marshals as %q", text, got)
		}
	})
}
