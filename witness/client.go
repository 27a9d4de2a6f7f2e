package witness

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// Limits of an add-checkpoint exchange. litewitness refuses a request body
// of 10 KiB or more (http.MaxBytesHandler); C2SP tlog-witness allows at
// most 63 proof lines. An answer is a few signature lines, so 64 KiB bounds
// what is read of one.
const (
	MaxRequestSize  = 10 << 10
	MaxProofLines   = 63
	maxResponseSize = 64 << 10
	maxErrorBody    = 512
)

// DefaultTimeout bounds one add-checkpoint exchange when the caller's
// context has no earlier deadline.
const DefaultTimeout = 10 * time.Second

// Errors an add-checkpoint exchange returns, each matched with errors.Is.
// The witness's answers map to them per C2SP tlog-witness: 400
// ErrBadRequest, 403 ErrForbidden (no trusted log signature; litewitness
// v0.6.1 also answers 403 for an unknown origin), 404 ErrUnknownLog, 409
// ErrConflict (a *ConflictError when the answer carries the witness's
// size), 422 ErrInconsistent (the consistency proof does not verify).
var (
	ErrBadRequest      = errors.New("witness refused the request as malformed (400)")
	ErrForbidden       = errors.New("witness trusts no signature on the checkpoint (403)")
	ErrUnknownLog      = errors.New("witness does not know the log (404)")
	ErrConflict        = errors.New("witness holds another size or root for the log (409)")
	ErrInconsistent    = errors.New("witness found the consistency proof invalid (422)")
	ErrRequestTooLarge = errors.New("add-checkpoint request too large")
	ErrBadResponse     = errors.New("witness answer malformed")
	ErrBadCosignature  = errors.New("witness answered no valid cosignature of its key")
)

// StatusError is a witness's answer other than 200 and other than a 409
// carrying a size: the HTTP status and the start of the body (at most 512
// bytes). It matches the sentinel of its status with errors.Is.
type StatusError struct {
	URL  string
	Code int
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("witness %s: HTTP %d: %q", e.URL, e.Code, e.Body)
}

// Is matches the sentinel error of the status, if it has one.
func (e *StatusError) Is(target error) bool {
	return statusSentinel(e.Code) == target && target != nil
}

func statusSentinel(code int) error {
	switch code {
	case http.StatusBadRequest:
		return ErrBadRequest
	case http.StatusForbidden:
		return ErrForbidden
	case http.StatusNotFound:
		return ErrUnknownLog
	case http.StatusConflict:
		return ErrConflict
	case http.StatusUnprocessableEntity:
		return ErrInconsistent
	}
	return nil
}

// ConflictError is a 409 answer with Content-Type text/x.tlog.size: the
// size of the latest checkpoint the witness cosigned for the log, which
// differs from the request's old size (C2SP tlog-witness). It matches
// ErrConflict.
type ConflictError struct {
	URL       string
	KnownSize uint64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("witness %s: conflict: it holds size %d", e.URL, e.KnownSize)
}

// Is matches ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// NetworkError is a failure to reach the witness or to read its answer
// (refused connection, timeout, cancelled context); Err is the cause.
type NetworkError struct {
	URL string
	Err error
}

func (e *NetworkError) Error() string { return fmt.Sprintf("witness %s: %v", e.URL, e.Err) }

// Unwrap is the cause.
func (e *NetworkError) Unwrap() error { return e.Err }

// ResponseError is an answer that cannot be used: larger than 64 KiB, not
// signature lines, a 409 whose size does not parse, or (from Cosigner) no
// valid cosignature by the witness's key. It matches ErrBadResponse or
// ErrBadCosignature.
type ResponseError struct {
	URL    string
	Reason string
	Err    error
}

func (e *ResponseError) Error() string {
	return fmt.Sprintf("witness %s: %s: %v", e.URL, e.Reason, e.Err)
}

// Unwrap is ErrBadResponse or ErrBadCosignature.
func (e *ResponseError) Unwrap() error { return e.Err }

// Client submits checkpoints to one witness (C2SP tlog-witness
// add-checkpoint). It is safe for concurrent use.
type Client struct {
	url  string
	base string
	hc   *http.Client
}

// Option configures a Client or a Cosigner.
type Option func(*options)

type options struct {
	hc *http.Client
}

// WithHTTPClient makes requests with hc instead of http.DefaultClient.
func WithHTTPClient(hc *http.Client) Option {
	return func(o *options) { o.hc = hc }
}

// NewClient returns a client of the witness whose submission prefix is
// baseURL (http or https, no query): requests go to
// baseURL + "/add-checkpoint".
func NewClient(baseURL string, opts ...Option) (*Client, error) {
	o := options{hc: http.DefaultClient}
	for _, opt := range opts {
		opt(&o)
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("witness: URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("witness: URL %q: want http(s)://host[/prefix]", baseURL)
	}
	return &Client{
		url:  baseURL,
		base: strings.TrimSuffix(baseURL, "/") + "/add-checkpoint",
		hc:   o.hc,
	}, nil
}

// URL is the witness's submission prefix, as given to NewClient.
func (c *Client) URL() string { return c.url }

// AddCheckpointRequest is the body of an add-checkpoint request (C2SP
// tlog-witness): "old <oldSize>\n", one base64 line per proof hash, an
// empty line, then the signed checkpoint note. It refuses more than 63
// proof hashes, a proof with oldSize 0, and a body of 10 KiB or more
// (wrapping ErrRequestTooLarge).
func AddCheckpointRequest(oldSize uint64, proof [][32]byte, signedNote []byte) ([]byte, error) {
	if len(proof) > MaxProofLines {
		return nil, fmt.Errorf("witness: %d proof hashes, at most %d: %w", len(proof), MaxProofLines, ErrRequestTooLarge)
	}
	if oldSize == 0 && len(proof) > 0 {
		return nil, errors.New("witness: a proof from size 0 must be empty")
	}
	var b bytes.Buffer
	b.WriteString("old ")
	b.WriteString(strconv.FormatUint(oldSize, 10))
	b.WriteByte('\n')
	for _, h := range proof {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.Write(signedNote)
	if b.Len() >= MaxRequestSize {
		return nil, fmt.Errorf("witness: request of %d bytes, limit %d: %w", b.Len(), MaxRequestSize, ErrRequestTooLarge)
	}
	return b.Bytes(), nil
}

// AddCheckpoint asks the witness to cosign signedNote, a checkpoint signed
// by the log, proving it consistent with the size the witness last
// cosigned, oldSize (0 the first time, with an empty proof). It returns
// the signature lines of the 200 answer, unverified (Cosigner and Policy
// verify them). Errors: *ConflictError for a 409 with the witness's size,
// *StatusError for other statuses, *NetworkError when the witness cannot
// be reached or read, *ResponseError for an unusable answer, and
// ErrRequestTooLarge before anything is sent. Without a deadline in ctx
// the exchange is bounded by DefaultTimeout.
func (c *Client) AddCheckpoint(ctx context.Context, oldSize uint64, proof [][32]byte, signedNote []byte) ([]note.Signature, error) {
	body, err := AddCheckpointRequest(oldSize, proof, signedNote)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("witness %s: %w", c.url, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, &NetworkError{URL: c.url, Err: err}
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseSize+1))
	if err != nil {
		return nil, &NetworkError{URL: c.url, Err: err}
	}
	if len(answer) > maxResponseSize {
		return nil, &ResponseError{URL: c.url, Reason: fmt.Sprintf("answer over %d bytes", maxResponseSize), Err: ErrBadResponse}
	}
	switch resp.StatusCode {
	case http.StatusOK:
		sigs, err := parseCosignatures(answer)
		if err != nil {
			return nil, &ResponseError{URL: c.url, Reason: err.Error(), Err: ErrBadResponse}
		}
		return sigs, nil
	case http.StatusConflict:
		mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if mt == "text/x.tlog.size" {
			n, err := parseSize(answer)
			if err != nil {
				return nil, &ResponseError{URL: c.url, Reason: "409 size: " + err.Error(), Err: ErrBadResponse}
			}
			return nil, &ConflictError{URL: c.url, KnownSize: n}
		}
	}
	if len(answer) > maxErrorBody {
		answer = answer[:maxErrorBody]
	}
	return nil, &StatusError{URL: c.url, Code: resp.StatusCode, Body: strings.TrimSpace(string(answer))}
}

// parseSize reads a text/x.tlog.size body: an ASCII decimal without
// leading zeroes, then a newline (C2SP tlog-witness).
func parseSize(b []byte) (uint64, error) {
	s, ok := strings.CutSuffix(string(b), "\n")
	if !ok || s == "" || (len(s) > 1 && s[0] == '0') || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("size %q is not a decimal and a newline", b)
	}
	n, err := strconv.ParseUint(s, 10, 63)
	if err != nil {
		return 0, fmt.Errorf("size %q out of range", s)
	}
	return n, nil
}

// parseCosignatures reads a 200 answer: one or more note signature lines,
// "— <name> <base64(key hash || signature)>\n" (C2SP tlog-witness,
// signed-note), the key hash being 4 bytes followed by at least one byte.
func parseCosignatures(b []byte) ([]note.Signature, error) {
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return nil, errors.New("not newline-terminated signature lines")
	}
	var sigs []note.Signature
	for _, line := range strings.SplitAfter(string(b[:len(b)-1]), "\n") {
		line = strings.TrimSuffix(line, "\n")
		rest, ok := strings.CutPrefix(line, "— ")
		if !ok {
			return nil, fmt.Errorf("line %q is not a signature line", line)
		}
		name, b64, ok := strings.Cut(rest, " ")
		if !ok || !validName(name) {
			return nil, fmt.Errorf("line %q: invalid key name", line)
		}
		raw, err := base64.StdEncoding.Strict().DecodeString(b64)
		if err != nil || len(raw) < 5 {
			return nil, fmt.Errorf("line %q: signature is not base64 of a key hash and a signature", line)
		}
		sigs = append(sigs, note.Signature{Name: name, Hash: binary.BigEndian.Uint32(raw), Base64: b64})
	}
	return sigs, nil
}
