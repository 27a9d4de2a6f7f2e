package integration

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStoreLossReported: a copy of the v0.1.0 store whose block file lost
// its second half while serve was stopped is served; the server drops the
// lost messages as deleted, and serve says so: an error line, the metric
// roompub_store_lost_messages, and /healthz not ok with the reason. The
// undamaged store shows 0 (TestStoreV010).
func TestStoreLossReported(t *testing.T) {
	t.Parallel()
	store := filepath.Join(t.TempDir(), "store")
	copyTree(t, filepath.Join(root, v010Dir, "store"), store)
	blk := filepath.Join(store, "jetstream", "$G", "streams", "ROOMS", "msgs", "1.blk")
	if err := os.Truncate(blk, 50_000); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, store, true, "--listen", "127.0.0.1:-1", "--store-dir", store, "--trusted-host", v010Host, "--http", "127.0.0.1:0")

	want := map[string]string{"roompub_store_lost_messages": wantLost}
	if got := scrapeMetrics(t, srv.log.String(), want); got["roompub_store_lost_messages"] != wantLost {
		t.Errorf("roompub_store_lost_messages = %q, want %s\n%s", got["roompub_store_lost_messages"], wantLost, srv.log)
	}
	status, body := getHealth(t, srv.log.String())
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "the store lost acknowledged messages: "+wantLost+" messages between stream seqs") {
		t.Errorf("/healthz: %d %q, want 503 naming %s lost messages", status, body, wantLost)
	}
	found := false
	for _, l := range logLines(t, srv.log.String()) {
		if l.Level == "error" && strings.HasPrefix(l.Msg, "room stream: the store lost acknowledged messages") {
			found = true
		}
	}
	if !found {
		t.Errorf("serve logged no error naming the loss:\n%s", srv.log)
	}
}

// wantLost is how many messages nats-server drops from the v0.1.0 store's
// block when it is cut at 50,000 of its 100,814 bytes.
const wantLost = "51"

// getHealth reads serve's /healthz (its address from the "publisher
// serving" log line): the status and the body.
func getHealth(t *testing.T, log string) (int, string) {
	t.Helper()
	addr := ""
	for _, l := range logLines(t, log) {
		if l.Msg == "publisher serving" {
			addr = l.HTTP
		}
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
