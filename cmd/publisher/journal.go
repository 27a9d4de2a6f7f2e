package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/internal/regularfile"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/validate"
)

// errShipFailed: some capsule could not be shipped (no service, no
// answer, no capsule directory, an unreadable file): exitUsage; what was
// stored is printed.
var errShipFailed = errors.New("could not be shipped")

// runAgainToResume ends the message of an error a rerun can get past
// (client.Retryable), and only of those.
const runAgainToResume = "run again to resume"

type journalCmd struct {
	config.Client
	receiptFlags
	Room   string   `name:"room" required:"" placeholder:"ROOM" help:"Room to ship into: room: and non-space characters."`
	Follow bool     `name:"follow" help:"Keep shipping what the harness appends until interrupted."`
	JSON   bool     `name:"json" help:"Print one JSON object per capsule instead of text."`
	Dirs   []string `arg:"" name:"capsule-dir" help:"Capsule directory: capsule.json + journal.ndjson."`
}

// Validate checks the room id before anything is sent (exit 2, not 1):
// its form, and that its subject token fits once encoded (ids of mostly
// non-ASCII characters may not; the service would answer bad_request).
func (c *journalCmd) Validate() error {
	if c.Receipt != "" && c.Follow {
		return fmt.Errorf("%w: --receipt and --follow exclude each other (a receipt is of what one run shipped)", config.ErrInvalid)
	}
	if err := c.receiptFlags.validate(); err != nil {
		return err
	}
	if err := validate.CheckRoomID(c.Room); err != nil {
		return fmt.Errorf("%w: --room %q: %v", config.ErrInvalid, c.Room, err)
	}
	if err := (room.Subjects{}).CheckRoom(c.Room); err != nil {
		return fmt.Errorf("%w: --room %s: %v", config.ErrInvalid, shortID(c.Room), err)
	}
	return nil
}

// shortID quotes a room id for a message, cut to its first 40 characters.
func shortID(id string) string {
	if r := []rune(id); len(r) > 40 {
		return strconv.Quote(string(r[:40])) + "…"
	}
	return strconv.Quote(id)
}

func (c *journalCmd) Run(s *streams) error {
	// A signal ends the shipment with what the stream holds reported and
	// the signal's status (130 for SIGINT); a second one ends it at once.
	ctx, stop := config.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var extra []nats.Option
	if !c.Follow {
		// One shot: a server that goes away ends the shipment now (exit 2,
		// with what was stored) rather than after --timeout; --follow
		// reconnects and rides it out instead.
		ctx, stop = withConnectionLoss(ctx)
		defer stop()
		extra = connectionLossOptions(ctx)
	}
	out := &shipPrinter{w: s.out, json: c.JSON}
	connect := c.Connect
	if c.Follow {
		// A follower waits for its server as it rides out a restart, so a
		// harness need not start it after the server.
		connect = func(name string, extra ...nats.Option) (*nats.Conn, error) {
			return c.ConnectWaiting(name, func(err error) {
				fmt.Fprintf(s.err, "publisher: no server at %s yet (%v): waiting for one\n", config.RedactURL(c.Server), errors.Unwrap(err))
			}, extra...)
		}
	}
	nc, err := connect("roompub-publisher-journal", extra...)
	if err != nil {
		if c.JSON { // one object per capsule, as --json promises
			for _, dir := range c.Dirs {
				out.print(client.ShipResult{Dir: dir, RoomID: c.Room}, fmt.Errorf("not sent: %w", err))
			}
		}
		return err
	}
	defer nc.Close()
	id, err := c.Identity()
	if err != nil {
		return err
	}
	cl := client.New(nc, client.Options{Timeout: c.Timeout, Identity: id})
	var refused, failed int
	var mu sync.Mutex
	var heads []string // each capsule's chain head after the run, for --receipt
	note := func(res client.ShipResult, err error) {
		mu.Lock()
		defer mu.Unlock()
		out.print(res, err)
		if res.Head.StreamSeq > 0 && res.Head.RoomID == c.Room && !slices.Contains(heads, res.Head.Head) {
			heads = append(heads, res.Head.Head)
		}
		if res.Refused != nil {
			refused++
		}
		if err != nil {
			failed++
			if client.Retryable(err) {
				fmt.Fprintf(s.err, "publisher: %s: %v (%s)\n", res.Dir, err, runAgainToResume)
			} else {
				fmt.Fprintf(s.err, "publisher: %s: %v\n", res.Dir, err)
			}
		}
	}
	if c.Follow {
		var wg sync.WaitGroup
		for _, dir := range c.Dirs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var lastPrinted int
				res, err := client.FollowCapsule(ctx, cl, dir, c.Room, client.ShipOptions{}, func(r client.ShipResult) {
					if r.Stored+r.Duplicates != lastPrinted || r.Refused != nil {
						lastPrinted = r.Stored + r.Duplicates
						note(r, nil)
					}
				})
				if err != nil {
					note(res, err)
				}
			}()
		}
		wg.Wait()
	} else {
		for i, dir := range c.Dirs {
			if ctx.Err() != nil {
				left := c.Dirs[i:]
				failed += len(left)
				notSent(s, out, left, c.Room, context.Cause(ctx))
				break
			}
			bar := newBar(s.err, dir)
			res, err := client.ShipCapsule(ctx, cl, dir, c.Room, client.ShipOptions{Progress: bar.update})
			bar.finish()
			note(res, err)
		}
	}
	var sig *config.SignalError
	switch {
	case failed > 0 && !c.Follow && errors.As(context.Cause(ctx), &sig):
		// Its status is the signal's (config.Run); a follower ends on a
		// signal as it should, with 0.
		return fmt.Errorf("%w: %d of %d capsules %w", sig, failed, len(c.Dirs), errShipFailed)
	case failed > 0:
		return fmt.Errorf("%d of %d capsules %w", failed, len(c.Dirs), errShipFailed)
	case refused > 0:
		return fmt.Errorf("%d of %d capsules %w", refused, len(c.Dirs), errRefused)
	case c.Receipt != "" && len(heads) > 0:
		return c.write(ctx, nc, c.Credentials, []receiptWant{{room: c.Room, entries: heads}}, nil, s.out, s.err)
	}
	return nil
}

// notSent reports the capsules dirs, not sent because cause (a signal,
// a lost connection) ended the run: with --json an object each, as
// --json promises; in text one line on stderr.
func notSent(s *streams, out *shipPrinter, dirs []string, roomID string, cause error) {
	if out.json {
		for _, dir := range dirs {
			out.print(client.ShipResult{Dir: dir, RoomID: roomID}, fmt.Errorf("not sent: %w", cause))
		}
	}
	more := ""
	if len(dirs) > 1 {
		more = fmt.Sprintf(" and %d more capsules", len(dirs)-1)
	}
	fmt.Fprintf(s.err, "publisher: %s%s: not sent: %v (%s)\n", dirs[0], more, cause, runAgainToResume)
}

// lossKey carries the cancel function that a lost connection calls.
type lossKey struct{}

// withConnectionLoss returns a context that connectionLossOptions cancels
// when the connection is lost.
func withConnectionLoss(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	ctx = context.WithValue(ctx, lossKey{}, cancel)
	return ctx, func() { cancel(nil) }
}

// connectionLossOptions makes a lost connection cancel ctx with the cause
// "connection to NATS lost" (client.ErrUnavailable: a rerun may get past
// it), and turns reconnecting off.
func connectionLossOptions(ctx context.Context) []nats.Option {
	cancel, _ := ctx.Value(lossKey{}).(context.CancelCauseFunc)
	lost := func(_ *nats.Conn, err error) {
		if cancel != nil {
			why := "the server closed it" // a clean close carries no error
			if err != nil {
				why = err.Error()
			}
			cancel(fmt.Errorf("%w: connection to NATS lost (%s): the requests in flight may have landed; run again to find out", client.ErrUnavailable, why))
		}
	}
	return []nats.Option{nats.NoReconnect(), nats.DisconnectErrHandler(lost)}
}

// shipPrinter prints ship results as text or JSON lines.
type shipPrinter struct {
	w    io.Writer
	json bool
}

func (p *shipPrinter) print(res client.ShipResult, err error) {
	if p.json {
		line := struct {
			client.ShipResult
			OK    bool   `json:"ok"`
			Error string `json:"error,omitempty"`
		}{ShipResult: res, OK: err == nil && res.Refused == nil}
		if err != nil {
			line.Error = err.Error()
		}
		b, _ := json.Marshal(line)
		fmt.Fprintf(p.w, "%s\n", b)
		return
	}
	status := "ok"
	var sig *config.SignalError
	switch {
	case errors.As(err, &sig):
		status = "STOPPED" // interrupted: what the stream holds is printed
	case err != nil:
		status = "FAILED"
	case res.Refused != nil:
		status = "REFUSED"
	}
	chain := ""
	if res.Chain.RunID != "" {
		chain = "  chain " + res.Chain.RunID + "/" + res.Chain.CapsuleID + ":"
	}
	fmt.Fprintf(p.w, "%-8s %s → %s%s %d stored, %d duplicate, %d already stored",
		status, res.Dir, res.RoomID, chain, res.Stored, res.Duplicates, res.Skipped)
	if res.Stored == 0 && res.Refused == nil && err == nil {
		fmt.Fprint(p.w, " (nothing new)")
	}
	if res.Head.StreamSeq > 0 && res.Head.RoomID == res.RoomID {
		fmt.Fprintf(p.w, "; head seq %d %s at stream seq %d", res.Head.Next-1, short(res.Head.Head), res.Head.StreamSeq)
	}
	fmt.Fprintln(p.w)
	if res.Refused != nil {
		fmt.Fprintf(p.w, "         %s\n", res.Refused.Problem.String())
		for _, q := range res.Refused.Problems[min(1, len(res.Refused.Problems)):] {
			fmt.Fprintf(p.w, "         %s\n", q.String())
		}
		switch {
		case res.Refused.Resent && res.Head.RoomID == res.RoomID:
			fmt.Fprintf(p.w, "         it repeats an entry, and the gate took it for a resend: lines before it are in the room, and so are the lines after it that continue the chain, up to seq %d\n", res.Head.Next-1)
		case res.Refused.Resent:
			fmt.Fprintf(p.w, "         it repeats an entry, and the gate took it for a resend: lines before it are in the room, and lines after it that continue the chain may be too\n")
		case res.Stored+res.Duplicates+res.Skipped > 0:
			fmt.Fprintf(p.w, "         lines before it are in the room; it and every later line are not\n")
		}
	}
	if res.PartialTail {
		fmt.Fprintf(p.w, "         the last line has no newline yet: not sent (the harness may still be writing it)\n")
	}
}

func short(h string) string {
	if len(h) > 16 {
		return h[:16] + "…"
	}
	return h
}

// bar is a progress bar on a terminal, and nothing otherwise.
type bar struct {
	pb *progressbar.ProgressBar
}

func newBar(w io.Writer, dir string) *bar {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return &bar{}
	}
	total := countLines(dir)
	return &bar{pb: progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("shipping "+dir),
		progressbar.OptionShowCount(),
		progressbar.OptionSetItsString("entries"),
		progressbar.OptionShowIts(),
		progressbar.OptionClearOnFinish(),
	)}
}

func (b *bar) update(r client.ShipResult) {
	if b.pb != nil {
		_ = b.pb.Set(r.Skipped + r.Stored + r.Duplicates)
	}
}

func (b *bar) finish() {
	if b.pb != nil {
		_ = b.pb.Finish()
	}
}

func countLines(dir string) int {
	f, err := regularfile.Open(filepath.Join(dir, validate.JournalFile))
	if err != nil {
		return -1
	}
	defer f.Close()
	n, buf := 0, make([]byte, 256<<10)
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if err != nil {
			if err != io.EOF {
				return -1
			}
			return n
		}
	}
}
