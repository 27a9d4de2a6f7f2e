package witness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// Witness is one witness: Name is how roompub refers to it (a policy
// file's witness name), Verifier its cosignature key, URL its submission
// prefix (C2SP tlog-witness), empty when the witness is only checked,
// never asked.
type Witness struct {
	Name     string
	Verifier *Verifier
	URL      string
}

// ProveFunc returns the consistency proof (RFC 6962 section 2.1.2) from
// oldSize to the size of the checkpoint being cosigned; oldSize is never 0
// and never above that size. A Cosigner calls it for each witness that
// needs a proof, possibly concurrently.
type ProveFunc func(ctx context.Context, oldSize uint64) ([][32]byte, error)

// Result is one witness's part in a cosigning round: its cosignature line,
// the time that cosignature states, and Err nil; or Err, one of the
// errors of Client.AddCheckpoint, *ResponseError wrapping
// ErrBadCosignature, or the ProveFunc's error.
type Result struct {
	Witness     string
	Cosignature note.Signature
	Time        time.Time
	Err         error
}

// Cosigner runs cosigning rounds over a set of witnesses with URLs and
// remembers, per witness, the size it last acknowledged, the old size of
// its next request. Memory only: a new Cosigner starts from 0 (or what
// SetSize seeds) and learns a witness's size from its 409. It is safe for
// concurrent use, though rounds of one log should not overlap.
type Cosigner struct {
	witnesses []Witness
	clients   []*Client

	mu    sync.Mutex
	sizes map[string]uint64
}

// NewCosigner returns a Cosigner of witnesses, each with a distinct Name,
// a Verifier and a URL.
func NewCosigner(witnesses []Witness, opts ...Option) (*Cosigner, error) {
	c := &Cosigner{sizes: map[string]uint64{}}
	seen := map[string]bool{}
	for _, w := range witnesses {
		if w.Name == "" || seen[w.Name] {
			return nil, fmt.Errorf("witness: witness name %q empty or repeated", w.Name)
		}
		seen[w.Name] = true
		if w.Verifier == nil {
			return nil, fmt.Errorf("witness: witness %s has no verifier key", w.Name)
		}
		cl, err := NewClient(w.URL, opts...)
		if err != nil {
			return nil, fmt.Errorf("witness %s: %w", w.Name, err)
		}
		c.witnesses = append(c.witnesses, w)
		c.clients = append(c.clients, cl)
	}
	return c, nil
}

// SetSize seeds the size witness last acknowledged, so the next round
// sends it as the old size.
func (c *Cosigner) SetSize(witness string, size uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sizes[witness] = size
}

// Size is the size witness last acknowledged (or told in a 409), 0 if
// none is known.
func (c *Cosigner) Size(witness string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sizes[witness]
}

// Cosign submits signedNote, a checkpoint signed by the log, to every
// witness at once and returns one Result per witness, in the order
// NewCosigner was given them. A witness answering 409 with a size at most
// the checkpoint's is asked once more with a proof from that size; a size
// above the checkpoint's, or a second 409, is reported as the
// *ConflictError, never retried further. A witness's cosignature counts
// only if one of its lines verifies with its key over the checkpoint.
func (c *Cosigner) Cosign(ctx context.Context, signedNote []byte, prove ProveFunc) ([]Result, error) {
	text, size, err := checkpointText(signedNote)
	if err != nil {
		return nil, err
	}
	results := make([]Result, len(c.witnesses))
	var wg sync.WaitGroup
	for i := range c.witnesses {
		wg.Go(func() {
			results[i] = c.one(ctx, i, text, size, signedNote, prove)
		})
	}
	wg.Wait()
	return results, nil
}

func (c *Cosigner) one(ctx context.Context, i int, text []byte, size uint64, signedNote []byte, prove ProveFunc) Result {
	w, cl := c.witnesses[i], c.clients[i]
	r := Result{Witness: w.Name}
	old := c.Size(w.Name)
	for attempt := 0; ; attempt++ {
		if old > size {
			r.Err = &ConflictError{URL: cl.URL(), KnownSize: old}
			return r
		}
		var proof [][32]byte
		if old > 0 {
			if proof, r.Err = prove(ctx, old); r.Err != nil {
				r.Err = fmt.Errorf("witness %s: proof from size %d: %w", w.Name, old, r.Err)
				return r
			}
		}
		sigs, err := cl.AddCheckpoint(ctx, old, proof, signedNote)
		var ce *ConflictError
		if errors.As(err, &ce) {
			c.SetSize(w.Name, ce.KnownSize)
			if attempt == 0 && ce.KnownSize <= size {
				old = ce.KnownSize
				continue
			}
		}
		if err != nil {
			r.Err = err
			return r
		}
		for _, s := range sigs {
			if w.Verifier.verifyLine(text, s) {
				r.Cosignature = s
				r.Time, _ = w.Verifier.Timestamp(s)
				c.SetSize(w.Name, size)
				return r
			}
		}
		r.Err = &ResponseError{URL: cl.URL(), Reason: fmt.Sprintf("%d lines, none a valid cosignature of %s", len(sigs), w.Verifier.Name()), Err: ErrBadCosignature}
		return r
	}
}

// checkpointText splits a signed note's text from its signatures and reads
// the checkpoint's size, its second line (C2SP tlog-checkpoint).
func checkpointText(signedNote []byte) ([]byte, uint64, error) {
	i := bytes.LastIndex(signedNote, []byte("\n\n"))
	if i < 0 {
		return nil, 0, errors.New("witness: not a signed note")
	}
	text := signedNote[:i+1]
	lines := strings.SplitN(string(text), "\n", 4)
	if len(lines) < 4 || lines[0] == "" {
		return nil, 0, errors.New("witness: note is not a checkpoint")
	}
	n := lines[1]
	size, err := strconv.ParseUint(n, 10, 63)
	if err != nil || (len(n) > 1 && n[0] == '0') || n[0] == '+' {
		return nil, 0, fmt.Errorf("witness: checkpoint size %q", n)
	}
	return text, size, nil
}
