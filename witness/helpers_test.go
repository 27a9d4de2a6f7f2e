package witness_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// testLog is a synthetic log: RFC 6962 leaves in memory and a note signer
// whose key name is the origin.
type testLog struct {
	t      *testing.T
	origin string
	signer note.Signer
	vkey   string
	hashes []tlog.Hash
	size   int64
}

func newTestLog(t *testing.T, origin string) *testLog {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return &testLog{t: t, origin: origin, signer: s, vkey: vkey}
}

func (l *testLog) verifier() note.Verifier {
	v, err := note.NewVerifier(l.vkey)
	if err != nil {
		l.t.Fatal(err)
	}
	return v
}

func (l *testLog) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		out[i] = l.hashes[x]
	}
	return out, nil
}

// grow appends leaves up to size n.
func (l *testLog) grow(n int64) {
	l.t.Helper()
	for ; l.size < n; l.size++ {
		hs, err := tlog.StoredHashes(l.size, fmt.Appendf(nil, "leaf %d", l.size), l)
		if err != nil {
			l.t.Fatal(err)
		}
		l.hashes = append(l.hashes, hs...)
	}
}

func (l *testLog) root(n int64) tlog.Hash {
	l.t.Helper()
	h, err := tlog.TreeHash(n, l)
	if err != nil {
		l.t.Fatal(err)
	}
	return h
}

// text is the checkpoint body at size n (C2SP tlog-checkpoint).
func (l *testLog) text(n int64, root tlog.Hash) string {
	return l.origin + "\n" + strconv.FormatInt(n, 10) + "\n" + base64.StdEncoding.EncodeToString(root[:]) + "\n"
}

// checkpoint is the log's signed checkpoint at size n.
func (l *testLog) checkpoint(n int64) []byte {
	l.t.Helper()
	return l.sign(l.text(n, l.root(n)))
}

func (l *testLog) sign(text string) []byte {
	l.t.Helper()
	b, err := note.Sign(&note.Note{Text: text}, l.signer)
	if err != nil {
		l.t.Fatal(err)
	}
	return b
}

// proof is the consistency proof from old to n.
func (l *testLog) proof(old, n int64) [][32]byte {
	l.t.Helper()
	p, err := tlog.ProveTree(n, old, l)
	if err != nil {
		l.t.Fatal(err)
	}
	out := make([][32]byte, len(p))
	for i, h := range p {
		out[i] = h
	}
	return out
}

// cosigner is an in-test witness key: name, Ed25519 key, its vkey.
type cosigner struct {
	name string
	priv ed25519.PrivateKey
	hash []byte
	vkey string
}

func newCosigner(t *testing.T, name string) cosigner {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	raw := append([]byte{0x04}, pub...)
	h := sha256.Sum256(append([]byte(name+"\n"), raw...))
	vkey := fmt.Sprintf("%s+%08x+%s", name, binary.BigEndian.Uint32(h[:]), base64.StdEncoding.EncodeToString(raw))
	return cosigner{name: name, priv: priv, hash: h[:4], vkey: vkey}
}

// line is a cosignature line over text at time ts (C2SP
// tlog-cosignature), written out here rather than with the package's
// code, so the two check each other.
func (c cosigner) line(text string, ts int64) string {
	msg := fmt.Sprintf("cosignature/v1\ntime %d\n%s", ts, text)
	sig := ed25519.Sign(c.priv, []byte(msg))
	raw := append([]byte{}, c.hash...)
	raw = binary.BigEndian.AppendUint64(raw, uint64(ts))
	raw = append(raw, sig...)
	return "— " + c.name + " " + base64.StdEncoding.EncodeToString(raw) + "\n"
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
