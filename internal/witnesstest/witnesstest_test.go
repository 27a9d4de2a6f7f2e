package witnesstest

import (
	"crypto/rand"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

// TestStartStopRestart: a witness answers once started, logs the verifier
// key computed here, stops for good on Stop (its port refuses) and comes
// back on Start with the logs its database holds.
func TestStartStopRestart(t *testing.T) {
	_, vkey, err := note.GenerateKey(rand.Reader, "log.roompub.test/a")
	if err != nil {
		t.Fatal(err)
	}
	ws := Start(t, 1, Log{Origin: "log.roompub.test/a", VKey: vkey})
	w := ws[0]
	if w.Name != "witness-1.roompub.test" || !strings.HasPrefix(w.URL, "http://127.0.0.1:") {
		t.Fatalf("name %q url %q", w.Name, w.URL)
	}
	if !strings.HasPrefix(w.VKey, "witness-1.roompub.test+") || loggedVKey(w.Log()) != w.VKey {
		t.Fatalf("vkey %q, logged %q", w.VKey, loggedVKey(w.Log()))
	}
	index := func() string {
		resp, err := http.Get(w.URL + "/")
		if err != nil {
			return "error: " + err.Error()
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return b.String()
	}
	if got := index(); !strings.Contains(got, "log.roompub.test/a") || !strings.Contains(got, "size 0") {
		t.Fatalf("index before restart:\n%s", got)
	}
	w.Stop()
	if w.Running() {
		t.Fatal("running after Stop")
	}
	if got := index(); !strings.HasPrefix(got, "error: ") {
		t.Fatalf("a stopped witness answered:\n%s", got)
	}
	_, vkey2, _ := note.GenerateKey(rand.Reader, "log.roompub.test/b")
	w.AddLog(Log{Origin: "log.roompub.test/b", VKey: vkey2})
	w.Start()
	got := index()
	if !strings.Contains(got, "log.roompub.test/a") || !strings.Contains(got, "log.roompub.test/b") {
		t.Fatalf("index after restart:\n%s", got)
	}
}

func TestCosignatureVKey(t *testing.T) {
	// A fixed key: the name, then SHA-256("w.example\n" || 0x04 || 32
	// zero bytes)[:4], then base64 of the 33 bytes.
	got := cosignatureVKey("w.example", make([]byte, 32))
	const want = "w.example+00df7ba9+BAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
