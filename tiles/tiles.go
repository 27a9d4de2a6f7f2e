// Package tiles serves a transparency log over HTTP as C2SP tlog-tiles
// (docs/tiles.md): the signed checkpoint, the RFC 6962 Merkle tree as hash
// tiles and the entries as entry bundles, so that any tlog client can read
// and verify a room's log, or the deployment's log of room checkpoints,
// without roompub's software.
//
// A log is a Source: its latest checkpoint and its entries. Hash tiles are
// computed from the entries (level 0) and from full tiles one level down
// (level 1 and above); full tiles and full bundles are kept in a Cache
// bounded in bytes, so memory does not grow with the logs.
//
// Like checkpoint, it imports no NATS and no other roompub package.
package tiles

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The shapes of C2SP tlog-tiles.
const (
	// TileWidth is how many hashes a full tile holds, and how many
	// entries a full bundle holds.
	TileWidth = 256
	// HashSize is the size of a hash in a tile: SHA-256, in bytes.
	HashSize = 32
	// MaxLevel is the highest tile level a path may name.
	MaxLevel = 63
	// MaxEntrySize is the largest entry a bundle can carry, in bytes: its
	// length prefix is a big-endian uint16.
	MaxEntrySize = 1<<16 - 1
)

// The Cache-Control values served (C2SP tlog-tiles: the checkpoint is
// mutable and SHOULD not be cached beyond a few seconds; tiles and bundles
// are immutable).
const (
	// CacheImmutable is sent with full tiles and full bundles.
	CacheImmutable = "public, max-age=31536000, immutable"
	// CachePartial is sent with partial tiles and bundles: their bytes
	// never change, but a full tile supersedes them and a log may stop
	// serving them, so caches keep them only a minute.
	CachePartial = "public, max-age=60"
	// CacheNone is sent with the checkpoint and with every error, so a
	// 404 for a tile the log has not reached yet is not remembered.
	CacheNone = "no-store"
)

// Errors a Handler reports to Options.OnError (the client sees only a
// status) and a Resolver returns.
var (
	// ErrUnknownLog is what a Resolver returns (possibly wrapped) for a
	// name that is no log: the Mux answers 404.
	ErrUnknownLog = errors.New("tiles: unknown log")
	// ErrEntryTooLarge: the source gave an entry longer than
	// MaxEntrySize, which no bundle can carry; its tiles answer 500.
	ErrEntryTooLarge = errors.New("tiles: entry longer than 65535 bytes")
	// ErrSourceShort: the source gave fewer or more entries than asked.
	ErrSourceShort = errors.New("tiles: source returned the wrong number of entries")
	// ErrBadCheckpoint: the source's checkpoint size is negative or its
	// note empty.
	ErrBadCheckpoint = errors.New("tiles: source returned a bad checkpoint")
)

// Source is one append-only log, as the Handler reads it. The Handler
// serves tiles only up to the size of the checkpoint Checkpoint returns at
// the time of each request, so the entries below that size must never
// change, and a name under a Mux must always name the same log (its full
// tiles are cached under that name). Methods are called concurrently.
type Source interface {
	// Checkpoint returns the latest signed checkpoint (a C2SP
	// tlog-checkpoint signed note, as served) and the tree size it
	// commits to, in entries.
	Checkpoint(ctx context.Context) (note []byte, size int64, err error)
	// Entries returns the entries [start, end), end-start of them, each
	// the leaf data whose RFC 6962 leaf hash is SHA-256(0x00 || entry).
	// The Handler asks only below the checkpoint's size, at most
	// TileWidth at a time. The Handler does not modify them.
	Entries(ctx context.Context, start, end int64) ([][]byte, error)
}

// Options configure a Handler or a Mux; the zero value (or nil) means the
// defaults.
type Options struct {
	// Cache keeps full tiles; nil means a cache of DefaultCacheBytes of
	// the Handler's or the Mux's own.
	Cache *Cache
	// OnError, if set, is told of each error answered with a 5xx, for
	// logging; the client sees only the status.
	OnError func(r *http.Request, err error)
}

// owners numbers Handlers and Muxes, so that they can share a Cache.
var owners atomic.Uint64

type server struct {
	owner   uint64
	cache   *Cache
	onError func(*http.Request, error)
}

func newServer(opts *Options) server {
	s := server{owner: owners.Add(1)}
	if opts != nil {
		s.cache, s.onError = opts.Cache, opts.OnError
	}
	if s.cache == nil {
		s.cache = NewCache(DefaultCacheBytes)
	}
	return s
}

// Handler serves one log's C2SP tlog-tiles resources at paths relative to
// where it is mounted (use http.StripPrefix for a prefix):
//
//	/checkpoint                       text/plain; charset=utf-8, no-store
//	/tile/<L>/<N>[.p/<W>]             application/octet-stream, 32*W bytes
//	/tile/entries/<N>[.p/<W>]         application/octet-stream, uint16-prefixed entries
//
// It answers GET and HEAD (405 otherwise), 400 to a tile path that breaks
// the spec's syntax (non-canonical included), 404 to any other path and to
// a tile beyond the current checkpoint's size, and 500 when the source
// fails (nothing is cached then).
type Handler struct {
	server
	src Source
}

// NewHandler returns a Handler serving src; opts may be nil.
func NewHandler(src Source, opts *Options) *Handler {
	return &Handler{server: newServer(opts), src: src}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/")
	if !ok {
		h.fail(w, r, http.StatusNotFound, nil)
		return
	}
	h.serve(w, r, &logView{src: h.src, cache: h.cache, owner: h.owner}, rest)
}

// Resolver returns the log named by a path segment below a Mux: the raw
// segment, still percent-encoded as the request spelled it (decode it with
// url.PathUnescape if names need it). It returns an error wrapping
// ErrUnknownLog, or a nil Source, for a name that is no log (404); any
// other error answers 500.
type Resolver func(ctx context.Context, segment string) (Source, error)

// Mux serves many logs, each under its own path segment:
// /<segment>/checkpoint, /<segment>/tile/..., with the responses of
// Handler. The segment is given to the Resolver as is; an empty segment is
// 404.
type Mux struct {
	server
	resolve Resolver
}

// NewMux returns a Mux serving the logs resolve finds; opts may be nil.
// All logs share one Cache, so its bound holds for all of them together.
func NewMux(resolve Resolver, opts *Options) *Mux {
	return &Mux{server: newServer(opts), resolve: resolve}
}

// ServeHTTP implements http.Handler.
func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok := strings.CutPrefix(r.URL.EscapedPath(), "/")
	seg, rest, found := strings.Cut(p, "/")
	if !ok || !found || seg == "" {
		m.fail(w, r, http.StatusNotFound, nil)
		return
	}
	if !allowed(w, r) {
		return
	}
	src, err := m.resolve(r.Context(), seg)
	switch {
	case errors.Is(err, ErrUnknownLog):
		m.fail(w, r, http.StatusNotFound, nil)
		return
	case err != nil:
		m.fail(w, r, http.StatusInternalServerError, err)
		return
	case src == nil:
		m.fail(w, r, http.StatusNotFound, nil)
		return
	}
	m.serve(w, r, &logView{src: src, cache: m.cache, owner: m.owner, name: seg}, rest)
}

// allowed answers 405 to a method other than GET and HEAD.
func allowed(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	w.Header().Set("Cache-Control", CacheNone)
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}

// serve answers rest, the path below the log's prefix without its leading
// slash.
func (s *server) serve(w http.ResponseWriter, r *http.Request, l *logView, rest string) {
	if !allowed(w, r) {
		return
	}
	ctx := r.Context()
	if rest == "checkpoint" {
		note, _, err := checkpointOf(ctx, l.src)
		if err != nil {
			s.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		write(w, r, "text/plain; charset=utf-8", CacheNone, note, false)
		return
	}
	tp, ok := strings.CutPrefix(rest, "tile/")
	if !ok {
		s.fail(w, r, http.StatusNotFound, nil)
		return
	}
	ref, err := parseTilePath(tp)
	switch {
	case errors.Is(err, errOutOfRange):
		s.fail(w, r, http.StatusNotFound, nil)
		return
	case err != nil:
		s.fail(w, r, http.StatusBadRequest, nil)
		return
	}
	_, size, err := checkpointOf(ctx, l.src)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if !within(ref, size) {
		s.fail(w, r, http.StatusNotFound, nil)
		return
	}
	var body []byte
	if ref.level == entriesLevel {
		body, err = l.bundle(ctx, ref)
	} else {
		body, err = l.hashTile(ctx, ref)
	}
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	cc := CacheImmutable
	if ref.width < TileWidth {
		cc = CachePartial
	}
	write(w, r, "application/octet-stream", cc, body, ref.level == entriesLevel)
}

func checkpointOf(ctx context.Context, src Source) ([]byte, int64, error) {
	note, size, err := src.Checkpoint(ctx)
	if err != nil {
		return nil, 0, err
	}
	if size < 0 || len(note) == 0 {
		return nil, 0, ErrBadCheckpoint
	}
	return note, size, nil
}

// gzips reuses gzip writers: a new one allocates some 800 KiB.
var gzips = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return zw
}}

// write sends body, gzipped when compress is set and the client accepts
// gzip (C2SP tlog-tiles: entry bundles SHOULD be compressed at the HTTP
// layer).
func write(w http.ResponseWriter, r *http.Request, ctype, cc string, body []byte, compress bool) {
	hd := w.Header()
	hd.Set("Content-Type", ctype)
	hd.Set("Cache-Control", cc)
	if compress {
		hd.Set("Vary", "Accept-Encoding")
		if acceptsGzip(r.Header.Values("Accept-Encoding")) {
			var b bytes.Buffer
			zw := gzips.Get().(*gzip.Writer)
			zw.Reset(&b)
			zw.Write(body)
			zw.Close()
			gzips.Put(zw)
			body = b.Bytes()
			hd.Set("Content-Encoding", "gzip")
		}
	}
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}

// acceptsGzip reports whether Accept-Encoding lists gzip (or *) with a
// nonzero quality (RFC 9110, section 12.5.3).
func acceptsGzip(values []string) bool {
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			coding, params, _ := strings.Cut(part, ";")
			coding = strings.ToLower(strings.TrimSpace(coding))
			if coding != "gzip" && coding != "*" {
				continue
			}
			q := 1.0
			for _, p := range strings.Split(params, ";") {
				k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(k, "q") {
					f, err := strconv.ParseFloat(v, 64)
					if err != nil {
						f = 0
					}
					q = f
				}
			}
			if q > 0 {
				return true
			}
		}
	}
	return false
}

// fail answers status with no caching; err, if any, goes to OnError.
func (s *server) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	if err != nil && s.onError != nil {
		s.onError(r, err)
	}
	w.Header().Set("Cache-Control", CacheNone)
	http.Error(w, http.StatusText(status), status)
}
