package ingest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// Scrubbing (docs/reliability.md, "Scrubbing"): a server that kept its
// state file across a damaged block counts messages it can no longer read,
// and nothing but a read of them shows it: no deletion, no short count,
// and a checkpointer resumed after them never reads them again. A scrub
// reads every message of the stream once, in stream order, and names the
// stream seqs the server counts but did not return.

// ScrubResult is what one Scrub read.
type ScrubResult struct {
	// FirstSeq and LastSeq are the stream's, when the scrub began: what
	// it read.
	FirstSeq, LastSeq uint64
	// Read is how many messages it got; Deleted how many the stream
	// shows deleted in that span (the stream guard reports those).
	Read, Deleted uint64
	// Unreadable counts the stream seqs neither read nor deleted;
	// UnreadableSeqs names the first ten.
	Unreadable     uint64
	UnreadableSeqs []uint64
}

// Err is nil when every message counted was read; otherwise an error
// wrapping room.ErrStoreLost that names the unreadable stream seqs.
func (r ScrubResult) Err() error {
	if r.Unreadable == 0 {
		return nil
	}
	seqs := make([]string, len(r.UnreadableSeqs))
	for i, s := range r.UnreadableSeqs {
		seqs[i] = strconv.FormatUint(s, 10)
	}
	more := ""
	if r.Unreadable > uint64(len(r.UnreadableSeqs)) {
		more = " …"
	}
	return fmt.Errorf("%w: the server counts %d messages it can no longer read (stream seqs %s%s, read by the scrub of stream seqs %d to %d; a damaged block whose state file it kept)",
		room.ErrStoreLost, r.Unreadable, strings.Join(seqs, ", "), more, r.FirstSeq, r.LastSeq)
}

// scrubBatch is how many messages one direct get of a scrub asks for.
const scrubBatch = 1000

// Scrub reads every message of the room stream from its first sequence to
// its last at the call, in batches of 1,000 direct gets on the survey's
// connection, holding none of them, and returns what it found. Unreadable
// stream seqs are kept by the gate: a chain whose messages span them is
// read when next judged (as for deleted ones), and every chain is judged
// again (Recheck); Survey then finds the damaged chains. It reads the
// whole stream each time: about the work of a replay without its checks.
// Errors: a read that failed (what was found so far is not kept).
func (g *Gate) Scrub(ctx context.Context) (ScrubResult, error) {
	u, err := jsapi.ReadAll(ctx, g.surveyNC, g.streamName(), jsapi.WholeStream, scrubBatch, g.timeout)
	res := ScrubResult{FirstSeq: u.FirstSeq, LastSeq: u.LastSeq, Read: u.Read, Deleted: u.Deleted, Unreadable: u.Unreadable, UnreadableSeqs: u.UnreadableSeqs}
	if err != nil {
		return res, fmt.Errorf("scrub: %w", err)
	}
	if res.Unreadable > 0 {
		g.lossMu.Lock()
		if g.unreadable.lo == 0 || u.Lo < g.unreadable.lo {
			g.unreadable.lo = u.Lo
		}
		g.unreadable.hi = max(g.unreadable.hi, u.Hi)
		g.lossMu.Unlock()
		g.Recheck()
		g.log.Error("scrub: the store cannot read messages it counts; chains spanning them are read when next judged",
			zap.String("stream", g.streamName()), zap.Uint64("unreadable", res.Unreadable), zap.Uint64s("first_stream_seqs", slices.Clone(res.UnreadableSeqs)))
	}
	return res, nil
}
