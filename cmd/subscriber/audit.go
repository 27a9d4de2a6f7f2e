package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/reader"
)

type auditCmd struct {
	config.Reader
	config.Replay
	publisherTrust
	config.WitnessPolicy
	Rooms       []string  `name:"room" placeholder:"ROOM" help:"Room to audit (repeatable); default every room."`
	FromSeq     uint64    `name:"from-seq" placeholder:"N" help:"Start at stream sequence N (chains are anchored at their first entry seen; attestations and checkpoints are not checked)."`
	Since       time.Time `name:"since" placeholder:"TIME" help:"Start at the first message stored at or after TIME (RFC 3339; attestations and checkpoints are not checked)." format:"2006-01-02T15:04:05Z07:00"`
	JSON        bool      `name:"json" help:"Print the report as one JSON object."`
	StateDir    string    `name:"state-dir" help:"Directory of the subscriber's state: with --trusted-publisher, the last checkpoint verified per room (a room whose newest checkpoint is smaller or not consistent with it is refused as rolled back or forked). Default $XDG_STATE_HOME/roompub, else ~/.local/state/roompub; one directory per deployment (a kept checkpoint signed by a key not trusted, or of another --origin, is ignored and left in place)." placeholder:"DIR" yaml:"state-dir"`
	Checkpoints []string  `name:"checkpoint" type:"existingfile" placeholder:"FILE" help:"A signed checkpoint note obtained elsewhere (repeatable): it must be consistent with its room as read (catches a fork shown to different readers: checkpoint_mismatch). A file that is not a checkpoint note --trusted-publisher verifies, or is of a room not among --room, is refused before the stream is read (exit 2)."`
	AllowEmpty  bool      `name:"allow-empty" help:"Accept an audit that reads no message (of the stream, or of a room given with --room): without it that is the verdict EMPTY, exit 1 (a mistyped room id reads nothing)." yaml:"allow-empty"`
}

func (c *auditCmd) Validate() error {
	var errs []error
	if c.FromSeq > 0 && !c.Since.IsZero() {
		errs = append(errs, fmt.Errorf("%w: --from-seq and --since exclude each other", config.ErrInvalid))
	}
	if len(c.Checkpoints) > 0 && (len(c.TrustedPublishers) == 0 || c.FromSeq > 1 || !c.Since.IsZero()) {
		errs = append(errs, fmt.Errorf("%w: --checkpoint needs --trusted-publisher and a replay from the start", config.ErrInvalid))
	}
	if c.WitnessPolicy.Set() && (c.FromSeq > 1 || !c.Since.IsZero()) {
		errs = append(errs, fmt.Errorf("%w: a witness policy needs a replay from the start", config.ErrInvalid))
	}
	errs = append(errs, checkRooms(c.Rooms), c.publisherTrust.validate(), c.WitnessPolicy.Validate(len(c.TrustedPublishers)))
	return errors.Join(errs...)
}

func (c *auditCmd) Run(s *streams) error {
	t, err := c.trust()
	if err != nil {
		return err
	}
	witnessing, t, err := c.Policy(t)
	if err != nil {
		return err
	}
	var state *reader.CheckpointState
	if c.FromSeq <= 1 && c.Since.IsZero() {
		if state, err = checkpointState(t, c.StateDir); err != nil {
			return err
		}
	}
	external, err := externalCheckpoints(c.Checkpoints, t, c.Rooms)
	if err != nil {
		return err
	}
	nc, js, v, err := open(&c.Reader, "roompub-subscriber-audit", s.err)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var bar *progressbar.ProgressBar
	if f, ok := s.err.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar = progressbar.NewOptions64(-1, progressbar.OptionSetWriter(s.err), progressbar.OptionSetDescription("auditing"),
			progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
	}
	place, err := reader.OpenLayout(ctx, js, room.Layout{Stream: c.Stream, Subjects: room.Subjects{Prefix: c.Prefix}})
	if err != nil {
		return err
	}
	rep, err := reader.AuditDeployment(ctx, js, reader.AuditOptions{
		Stream: c.Stream, Subjects: room.Subjects{Prefix: c.Prefix}, Rooms: c.Rooms, FromSeq: c.FromSeq, Since: c.Since, Validator: v,
		Trust: t, State: state, External: external, Witnessing: witnessing, Read: c.ReadMode(c.Credentials),
		Progress: func(read, last uint64) {
			if bar != nil {
				bar.ChangeMax64(int64(last))
				_ = bar.Set64(int64(read))
			}
		},
	}, place)
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if n := rep.Attestation.StateIgnored; n > 0 {
		fmt.Fprintf(s.err, "subscriber: audit: %s: %d kept checkpoint(s) ignored and left in place (%s), so no rollback of %s is found against them; give each deployment its own --state-dir\n",
			state.Dir, n, keptIgnoredWhy, roomList(rep.Attestation.StateIgnoredRooms))
	}
	if c.JSON {
		_ = rep.WriteJSON(s.out) // as before: the verdict's exit status stands
	} else {
		printAudit(s, rep, c.AllowEmpty)
	}
	if !rep.Clean() {
		empty := ""
		if rep.Empty {
			empty = "; " + emptyWhat(rep)
		}
		return fmt.Errorf("audit: %d message(s) set aside, %d chain(s) broken, %d stream problem(s)%s: %w",
			rep.Totals.SetAside, rep.Totals.ChainsBroken, len(rep.StreamProblems), empty, errRefused)
	}
	if rep.Empty && !c.AllowEmpty {
		return fmt.Errorf("audit: %s (--allow-empty accepts that): %w", emptyWhat(rep), errEmpty)
	}
	return nil
}

// roomList names rooms for people: the first maxNamedRooms, then how many
// more (--json lists them all).
func roomList(rooms []string) string {
	if len(rooms) <= maxNamedRooms {
		return strings.Join(rooms, ", ")
	}
	return fmt.Sprintf("%s and %d more (--json lists each)", strings.Join(rooms[:maxNamedRooms], ", "), len(rooms)-maxNamedRooms)
}

// maxNamedRooms bounds the rooms a line of text names.
const maxNamedRooms = 5

// keptIgnoredWhy says why an audit ignores kept checkpoints
// (reader.AttestationFacts.StateIgnored), for people.
const keptIgnoredWhy = "signed by a key not in --trusted-publisher, or of another deployment than --origin: another deployment's state"

// errEmpty: an audit read no message of what it was asked to audit. It
// exits as a refusal does (ExitRefused): a clean verdict on nothing is no
// evidence, and one mistyped room id must not give an auditor one.
var errEmpty error = emptyError{}

type emptyError struct{}

func (emptyError) Error() string { return "empty" }

func (emptyError) Is(target error) bool { return target == errRefused }

// emptyWhat says what an empty audit read nothing of.
func emptyWhat(rep *reader.AuditReport) string {
	span := fmt.Sprintf("stream seq %d to %d", rep.FromSeq, rep.LastSeq)
	switch {
	case rep.LastSeq == 0:
		span = "the stream holds none"
	case rep.LastSeq < rep.FromSeq:
		span = fmt.Sprintf("the stream ends at seq %d, before %d", rep.LastSeq, rep.FromSeq)
	}
	if len(rep.EmptyRooms) == 0 {
		return fmt.Sprintf("no messages in stream %s (%s)", rep.Stream, span)
	}
	return fmt.Sprintf("no messages in %s (%s)", strings.Join(rep.EmptyRooms, ", "), span)
}

func printAudit(s *streams, rep *reader.AuditReport, allowEmpty bool) {
	w := s.out
	if len(rep.Partitions) > 1 {
		fmt.Fprintf(w, "audit of %d partitions:\n", len(rep.Partitions))
		for _, p := range rep.Partitions {
			fmt.Fprintf(w, "  stream %s, stream seq %d to %d\n", p.Stream, p.FromSeq, p.LastSeq)
		}
	} else {
		fmt.Fprintf(w, "audit of stream %s, stream seq %d to %d\n", rep.Stream, rep.FromSeq, rep.LastSeq)
	}
	switch {
	case rep.ReadWhy != "":
		fmt.Fprintf(w, "  read by %s: %s\n", rep.ReadBy, rep.ReadWhy)
	case rep.ReadBy != "":
		fmt.Fprintf(w, "  read by %s\n", rep.ReadBy)
	}
	for _, p := range rep.StreamProblems {
		fmt.Fprintf(w, "  weak_stream: %s\n", p)
	}
	room := ""
	for _, c := range rep.Chains {
		if c.RoomID != room {
			room = c.RoomID
			fmt.Fprintf(w, "%s\n", room)
		}
		head := c.Head
		if len(head) > 16 {
			head = head[:16] + "…"
		}
		verdict := c.Verdict
		if c.Broken != nil {
			verdict = fmt.Sprintf("broken at stream seq %d: %s", c.Broken.Seq, c.Broken.Code)
		}
		anch := ""
		if c.Anchored {
			anch = " (anchored: start not checked)"
		}
		fmt.Fprintf(w, "  journal %s/%s: %d entries, head %s, %s%s\n", c.Chain.RunID, c.Chain.CapsuleID, c.Entries, head, verdict, anch)
	}
	rooms := make([]string, 0, len(rep.Records))
	for r := range rep.Records {
		rooms = append(rooms, r)
	}
	sort.Strings(rooms)
	for _, r := range rooms {
		fmt.Fprintf(w, "%s\n  execution records: %d verified\n", r, rep.Records[r])
	}
	for _, r := range rep.EmptyRooms {
		fmt.Fprintf(w, "%s\n  no messages\n", r)
	}
	if len(rep.Violations) > 0 {
		fmt.Fprintf(w, "violations:\n")
		printViolations(w, rep.Violations)
		if rep.Omitted > 0 {
			fmt.Fprintf(w, "  … and %d more\n", rep.Omitted)
		}
	}
	printCheckpoints(w, rep)
	printNotices(w, rep.Notices)
	t := rep.Totals
	verdict, empty := "CLEAN", ""
	switch {
	case !rep.Clean():
		verdict = "REFUSED"
	case rep.Empty && !allowEmpty:
		verdict = "EMPTY"
	}
	if rep.Empty {
		empty = "; " + emptyWhat(rep)
	}
	fmt.Fprintf(w, "%s: %d messages, %d entries and %d records verified, %d set aside; %d chains ok, %d broken; stream append-only: %v%s\n",
		verdict, t.Messages, t.Entries, t.Records, t.SetAside, t.ChainsOK, t.ChainsBroken, t.StreamIsSound, empty)
}

// foldRun is the shortest run of set-aside messages printViolations folds.
const foldRun = 3

// printViolations prints the set-aside messages, each on a line, but a
// run of foldRun or more in a row with the same code on the same subject
// and the same reason but for its numbers (most often the rest of an
// atomic batch a damaged store broke: "message 7 of a batch of 1000") as
// its first message's line and a line counting the others, with the span
// of their stream sequences (--json lists each).
func printViolations(w io.Writer, vs []reader.SetAside) {
	same := func(a, b *reader.SetAside) bool {
		return a.Code == b.Code && a.Subject == b.Subject && withoutNumbers(a.Reason) == withoutNumbers(b.Reason)
	}
	for i := 0; i < len(vs); {
		j := i + 1
		for j < len(vs) && same(&vs[j], &vs[i]) {
			j++
		}
		if j-i < foldRun {
			for k := i; k < j; k++ {
				fmt.Fprintf(w, "  %s\n", vs[k].Error())
			}
			i = j
			continue
		}
		lo, hi := vs[i+1].Seq, vs[i+1].Seq
		for _, v := range vs[i+2 : j] {
			lo, hi = min(lo, v.Seq), max(hi, v.Seq)
		}
		fmt.Fprintf(w, "  %s\n  … and %d more %s on %s for the same reason, between stream seq %d and %d (--json lists each)\n",
			vs[i].Error(), j-i-1, vs[i].Code, vs[i].Subject, lo, hi)
		i = j
	}
}

// withoutNumbers is s with each run of decimal digits as one '#', so
// reasons that differ only in a position or sequence compare equal.
func withoutNumbers(s string) string {
	var b strings.Builder
	digits := false
	for _, r := range s {
		d := r >= '0' && r <= '9'
		switch {
		case d && !digits:
			b.WriteByte('#')
		case !d:
			b.WriteRune(r)
		}
		digits = d
	}
	return b.String()
}

// printCheckpoints prints the report's attestation and checkpoint facts.
func printCheckpoints(w io.Writer, rep *reader.AuditReport) {
	a := rep.Attestation
	if !a.Checked {
		fmt.Fprintf(w, "attestations and checkpoints: not checked (%s)\n", a.Why)
		return
	}
	fmt.Fprintf(w, "attestations and checkpoints: checked; trusted publishers %s\n", strings.Join(a.TrustedPublishers, ", "))
	if a.StateIgnored > 0 {
		fmt.Fprintf(w, "state dir: %d kept checkpoint(s) ignored (%s): %s\n", a.StateIgnored, keptIgnoredWhy, roomList(a.StateIgnoredRooms))
	}
	if wf := rep.Witness; wf != nil {
		fmt.Fprintf(w, "deployment log %s (stream %s): %d entries, %d checkpoints verified, %d refused; quorum %s\n",
			wf.Origin, wf.Stream, wf.Entries, wf.Checkpoints, wf.Refused, wf.Quorum)
		if c := wf.Witnessed; c != nil {
			fmt.Fprintf(w, "  witnessed: size %d, root %s, stream seq %d, cosigned by %s\n", c.Size, c.Root, c.Seq, strings.Join(c.Cosigners, ", "))
		} else {
			fmt.Fprintf(w, "  witnessed: none\n")
		}
		if c := wf.Latest; c != nil && (wf.Witnessed == nil || c.Size > wf.Witnessed.Size) {
			fmt.Fprintf(w, "  latest (not witnessed): size %d, stream seq %d, cosigned by %d: %s\n", c.Size, c.Seq, len(c.Cosigners), strings.Join(c.Cosigners, ", "))
		}
	}
	for _, f := range rep.Checkpoints {
		tail := ""
		if f.Tail > 0 {
			tail = " (no checkpoint covers them: their attestations were verified, one signature per batch)"
		}
		fmt.Fprintf(w, "%s\n  checkpoints: %d verified, %d refused; %d admitted messages: %d covered by the latest checkpoint, %d after it%s\n",
			f.RoomID, f.Checkpoints, f.CheckpointsRefused, f.Admitted, f.Covered, f.Tail, tail)
		if l := f.Latest; l != nil {
			fmt.Fprintf(w, "  latest checkpoint: size %d, root %s, signed by %s, stream seq %d\n", l.Size, l.Root, l.Signer, l.Seq)
		}
		fmt.Fprintf(w, "  signatures: %d attestations verified (%d batch signatures), %d messages admitted by a covering checkpoint\n",
			f.AttestationsVerified, f.BatchesVerified, f.AdmittedByCheckpoint)
		if f.LeavesSpilled > 0 {
			fmt.Fprintf(w, "  leaves written to the audit's temporary file while they waited for a checkpoint: %d, %d read back\n", f.LeavesSpilled, f.LeavesReread)
		}
		if f.LeavesSpillFailed != "" {
			fmt.Fprintf(w, "  leaves waiting for a checkpoint kept in memory, unbounded: the temporary file could not be written: %s\n", f.LeavesSpillFailed)
		}
		if st := f.Stored; st != nil {
			verdict := "consistent"
			if !f.StoredConsistent {
				verdict = "NOT consistent"
			}
			fmt.Fprintf(w, "  stored checkpoint (state dir): size %d, root %s: %s\n", st.Size, st.Root, verdict)
		}
		for _, e := range f.External {
			fmt.Fprintf(w, "  checkpoint from elsewhere: size %d, root %s, signed by %s: consistent\n", e.Size, e.Root, e.Signer)
		}
		if rw := f.Witnessed; rw != nil {
			fmt.Fprintf(w, "  witnessed: the checkpoint of size %d, deployment log entry %d\n", rw.Size, rw.Entry)
		}
		if f.Refused != "" {
			fmt.Fprintf(w, "  room refused: %s\n", f.Refused)
		}
	}
}

// printNotices prints the loss notices read: room, who acknowledged what,
// when, and where in the stream.
func printNotices(w io.Writer, notices []reader.Notice) {
	for _, n := range notices {
		by := "not verified (no --trusted-publisher)"
		if n.Verified {
			by = "attested by " + n.Signer
		}
		fmt.Fprintf(w, "loss notice for %s at stream seq %d, noted %s, %s:\n", n.Notice.RoomID, n.Seq, n.Notice.NotedAt, by)
		for _, c := range n.Notice.Chains {
			fmt.Fprintf(w, "  chain %s/%s lost %s: %s\n", c.Chain.RunID, c.Chain.CapsuleID, c.Loss.Tally(), c.Loss)
		}
		if ck := n.Notice.Checkpoint; ck != nil && (ck.Size > 0 || ck.Contradiction == "") {
			fmt.Fprintf(w, "  the room's checkpoint covers %d leaves; the stream held %d\n", ck.Size, ck.Held)
		}
		if ck := n.Notice.Checkpoint; ck != nil && ck.Contradiction != "" {
			fmt.Fprintf(w, "  the room's checkpoint contradicted its messages: %s\n", ck.Contradiction)
		}
		if r := n.Notice.Records; r != nil {
			fmt.Fprintf(w, "  %d records lost before the record at stream seq %d\n", r.Lost, r.Before)
		}
	}
}
