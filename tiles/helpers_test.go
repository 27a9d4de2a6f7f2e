package tiles

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

const testOrigin = "example.com/roompub/tiles-test"

// entryAt is the test logs' entry i: sizes vary from empty to
// MaxEntrySize, contents differ from entry to entry.
func entryAt(i int64) []byte {
	var n int
	switch {
	case i == 0:
		n = 0
	case i == 1:
		n = MaxEntrySize
	case i%4099 == 7:
		n = 1000 + int(i%3000)
	default:
		n = int(i*7919) % 61
	}
	e := make([]byte, n)
	var seed [8]byte
	binary.BigEndian.PutUint64(seed[:], uint64(i))
	for j := range e {
		e[j] = seed[j%8] ^ byte(j)
	}
	return e
}

// memLog is a log in memory: its entries, every RFC 6962 stored hash as
// golang.org/x/mod/sumdb/tlog computes them, and a signer.
type memLog struct {
	entries [][]byte
	hashes  []tlog.Hash
	signer  note.Signer
	vkey    string
}

var (
	sharedLogs   = map[int64]*memLog{}
	sharedLogsMu sync.Mutex
)

// newMemLog returns a log of n entries (entryAt), shared between tests
// since a large one takes a while to hash.
func newMemLog(t testing.TB, n int64) *memLog {
	t.Helper()
	sharedLogsMu.Lock()
	defer sharedLogsMu.Unlock()
	if l, ok := sharedLogs[n]; ok {
		return l
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, testOrigin)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	l := &memLog{signer: signer, vkey: vkey}
	l.hashes = make([]tlog.Hash, 0, tlog.StoredHashCount(n))
	for i := int64(0); i < n; i++ {
		e := entryAt(i)
		l.entries = append(l.entries, e)
		hs, err := tlog.StoredHashes(i, e, l)
		if err != nil {
			t.Fatal(err)
		}
		l.hashes = append(l.hashes, hs...)
	}
	sharedLogs[n] = l
	return l
}

// ReadHashes makes a memLog a tlog.HashReader.
func (l *memLog) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		if x < 0 || x >= int64(len(l.hashes)) {
			return nil, fmt.Errorf("no stored hash %d", x)
		}
		out[i] = l.hashes[x]
	}
	return out, nil
}

// tree returns the tree of the first n entries.
func (l *memLog) tree(t testing.TB, n int64) tlog.Tree {
	t.Helper()
	h, err := tlog.TreeHash(n, l)
	if err != nil {
		t.Fatal(err)
	}
	return tlog.Tree{N: n, Hash: h}
}

// checkpoint returns the C2SP tlog-checkpoint of the first n entries,
// signed.
func (l *memLog) checkpoint(t testing.TB, n int64) []byte {
	t.Helper()
	tr := l.tree(t, n)
	text := fmt.Sprintf("%s\n%d\n%s\n", testOrigin, n, base64.StdEncoding.EncodeToString(tr.Hash[:]))
	msg, err := note.Sign(&note.Note{Text: text}, l.signer)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// verifier verifies the log's checkpoints.
func (l *memLog) verifier(t testing.TB) note.Verifiers {
	t.Helper()
	v, err := note.NewVerifier(l.vkey)
	if err != nil {
		t.Fatal(err)
	}
	return note.VerifierList(v)
}

// view is a Source over a memLog at one checkpoint, counting the entries
// asked for and failing when told to.
type view struct {
	log  *memLog
	mu   sync.Mutex
	note []byte
	size int64

	entryCalls atomic.Int64
	failNext   atomic.Pointer[error]                   // next Entries call fails with it
	failCkpt   atomic.Pointer[error]                   // Checkpoint fails with it while set
	mangle     atomic.Pointer[func([][]byte) [][]byte] // rewrites what Entries returns
}

func newView(t testing.TB, l *memLog, size int64) *view {
	v := &view{log: l}
	v.publish(t, size)
	return v
}

// publish makes the checkpoint of the first size entries the latest.
func (v *view) publish(t testing.TB, size int64) {
	n := v.log.checkpoint(t, size)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.note, v.size = n, size
}

func (v *view) Checkpoint(ctx context.Context) ([]byte, int64, error) {
	if err := v.failCkpt.Load(); err != nil {
		return nil, 0, *err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.note, v.size, nil
}

func (v *view) Entries(ctx context.Context, start, end int64) ([][]byte, error) {
	v.entryCalls.Add(1)
	if err := v.failNext.Swap(nil); err != nil {
		return nil, *err
	}
	v.mu.Lock()
	size := v.size
	v.mu.Unlock()
	if start < 0 || end > size || start > end {
		return nil, fmt.Errorf("entries [%d, %d) asked beyond size %d", start, end, size)
	}
	es := v.log.entries[start:end]
	if m := v.mangle.Load(); m != nil {
		es = (*m)(es)
	}
	return es, nil
}

// rawClient neither asks for nor undoes compression.
var rawClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// get fetches path from srv with method and no transparent decompression,
// returning the status, headers and body.
func get(t testing.TB, method, url string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

// serve starts a test server for h, closed with the test.
func serve(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
