package tiles_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/roompub/roompub/tiles"
)

// oneEntry is a log of one entry, its checkpoint unsigned for brevity (a
// real source serves a signed C2SP tlog-checkpoint note).
type oneEntry struct{}

func (oneEntry) Checkpoint(context.Context) ([]byte, int64, error) {
	return []byte("example.com/log\n1\nbase64-root=\n"), 1, nil
}

func (oneEntry) Entries(_ context.Context, start, end int64) ([][]byte, error) {
	return [][]byte{[]byte("hello")}[start:end], nil
}

// Logs under /logs/<name>/, with one cache of 16 MiB for all of them: an
// entry bundle of one 5-byte entry is 7 bytes, a hash tile of width 1 is 32
// bytes, a tile beyond the checkpoint and an unknown log are 404.
func ExampleNewMux() {
	mux := tiles.NewMux(func(ctx context.Context, name string) (tiles.Source, error) {
		if name == "room-1" {
			return oneEntry{}, nil
		}
		return nil, tiles.ErrUnknownLog
	}, &tiles.Options{Cache: tiles.NewCache(16 << 20)})
	srv := httptest.NewServer(http.StripPrefix("/logs", mux))
	defer srv.Close()

	for _, p := range []string{"room-1/tile/entries/000.p/1", "room-1/tile/0/000.p/1", "room-1/tile/0/000.p/2", "room-2/checkpoint"} {
		resp, err := http.Get(srv.URL + "/logs/" + p)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(p, resp.StatusCode, len(body))
	}
	// Output:
	// room-1/tile/entries/000.p/1 200 7
	// room-1/tile/0/000.p/1 200 32
	// room-1/tile/0/000.p/2 404 10
	// room-2/checkpoint 404 10
}
