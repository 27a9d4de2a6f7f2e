package witness_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/roompub/roompub/witness"
)

// TestClientAnswers: answers litewitness does not give, from a stand-in
// server, and the request limits checked before sending.
func TestClientAnswers(t *testing.T) {
	var requests int
	answer := func(code int, ctype, body string) *witness.Client {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			requests++
			if r.Method != http.MethodPost || r.URL.Path != "/prefix/add-checkpoint" {
				http.Error(w, "wrong request", 500)
				return
			}
			if ctype != "" {
				w.Header().Set("Content-Type", ctype)
			}
			w.WriteHeader(code)
			w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		c, err := witness.NewClient(srv.URL + "/prefix/")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx := ctxT(t)
	cp := []byte("o\n1\nAAAA\n\n— o AAAAAAA=\n")
	var re *witness.ResponseError
	if _, err := answer(200, "", strings.Repeat("x", 70<<10)).AddCheckpoint(ctx, 0, nil, cp); !errors.As(err, &re) || !errors.Is(err, witness.ErrBadResponse) || !strings.Contains(err.Error(), "over 65536 bytes") {
		t.Fatalf("oversized answer: %v", err)
	}
	if _, err := answer(200, "", "— w AAAA\n").AddCheckpoint(ctx, 0, nil, cp); !errors.Is(err, witness.ErrBadResponse) {
		t.Fatalf("short signature: %v", err)
	}
	if _, err := answer(409, "text/x.tlog.size", "012\n").AddCheckpoint(ctx, 0, nil, cp); !errors.Is(err, witness.ErrBadResponse) {
		t.Fatalf("409 size with a leading zero: %v", err)
	}
	var se *witness.StatusError
	if _, err := answer(409, "text/plain", "12\n").AddCheckpoint(ctx, 0, nil, cp); !errors.As(err, &se) || se.Code != 409 || !errors.Is(err, witness.ErrConflict) {
		t.Fatalf("409 without a size: %v", err)
	}
	if _, err := answer(404, "", "unknown\n").AddCheckpoint(ctx, 0, nil, cp); !errors.As(err, &se) || se.Code != 404 || !errors.Is(err, witness.ErrUnknownLog) || se.Body != "unknown" {
		t.Fatalf("404: %v", err)
	}
	if _, err := answer(503, "", "busy").AddCheckpoint(ctx, 0, nil, cp); !errors.As(err, &se) || se.Code != 503 || se.Body != "busy" || errors.Is(err, witness.ErrConflict) {
		t.Fatalf("503: %v", err)
	}
	sigs, err := answer(200, "", "— w.example/a AAAAAAA=\n— w.example/b AQIDBAU=\n").AddCheckpoint(ctx, 0, nil, cp)
	if err != nil || len(sigs) != 2 || sigs[1].Name != "w.example/b" || sigs[1].Hash != 0x01020304 {
		t.Fatalf("two lines: %v %v", sigs, err)
	}

	before := requests
	c := answer(200, "", "")
	if _, err := c.AddCheckpoint(ctx, 0, nil, append(cp, strings.Repeat("x", 10<<10)...)); !errors.Is(err, witness.ErrRequestTooLarge) {
		t.Fatalf("oversized request: %v", err)
	}
	if _, err := c.AddCheckpoint(ctx, 1, make([][32]byte, 64), cp); !errors.Is(err, witness.ErrRequestTooLarge) {
		t.Fatalf("64 proof lines: %v", err)
	}
	if requests != before {
		t.Fatalf("%d requests sent past the limits", requests-before)
	}
	body, err := witness.AddCheckpointRequest(5, [][32]byte{{1}}, cp)
	want := "old 5\nAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\n" + string(cp)
	if err != nil || string(body) != want {
		t.Fatalf("request body %q, want %q", body, want)
	}
}
