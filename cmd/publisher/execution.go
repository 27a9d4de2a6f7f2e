package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/internal/regularfile"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
)

// executionChunk is how many record files publisher execution reads
// before it ships them (several requests' worth).
const executionChunk = 1024

type executionCmd struct {
	config.Client
	receiptFlags
	JSON  bool     `name:"json" help:"Print one JSON object per file instead of text."`
	Files []string `arg:"" name:"file" help:"Execution record file (JSON); its room is its room/id."`
}

// Validate checks the receipt flags.
func (c *executionCmd) Validate() error { return c.receiptFlags.validate() }

func (c *executionCmd) Run(s *streams) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, stopLoss := withConnectionLoss(ctx)
	defer stopLoss()
	nc, err := c.Connect("roompub-publisher-execution", connectionLossOptions(ctx)...)
	if err != nil {
		if c.JSON { // one object per file, as --json promises
			printSkipped(s.out, c.Files, 0, "not sent: "+err.Error())
		}
		return err
	}
	defer nc.Close()
	id, err := c.Identity()
	if err != nil {
		return err
	}
	cl := client.New(nc, client.Options{Timeout: c.Timeout, Identity: id})
	var refused, failed, unreadable int
	var wants []receiptWant // the records stored, by room, for --receipt
	var hosts []string      // their hosts, trusted by the receipt's reader
	// The gate decides the records in the order given, several per
	// request; the files are read a chunk at a time, so a backlog of any
	// size takes the memory of one chunk.
	for from := 0; from < len(c.Files); from += executionChunk {
		chunk := c.Files[from:min(from+executionChunk, len(c.Files))]
		var raws [][]byte
		sent := make([]int, len(chunk)) // the file's index in raws; -1: unreadable
		readErrs := make([]error, len(chunk))
		for i, f := range chunk {
			if ctx.Err() != nil { // interrupted: this file and the rest are not sent
				for k := i; k < len(chunk); k++ {
					sent[k] = math.MaxInt
				}
				break
			}
			raw, err := readRecordFile(f)
			if err != nil {
				sent[i], readErrs[i] = -1, err
				continue
			}
			sent[i] = len(raws)
			raws = append(raws, raw)
		}
		replies, err := cl.AppendRecords(ctx, raws)
		if err == nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		// Every file of the chunk, in the order given: its reply, its read
		// error, or (from the first record without an answer on) not
		// confirmed. Each item's index is the file's place among the files
		// given.
		var left []string
		for i, f := range chunk {
			var reply room.RecordReply
			switch {
			case sent[i] < 0:
				unreadable++
				reply.Item = room.ItemResult{Outcome: room.OutcomeFailed, Reason: readErrs[i].Error()}
			case sent[i] < len(replies):
				reply = replies[sent[i]]
				switch reply.Item.Outcome {
				case room.OutcomeStored, room.OutcomeDuplicate:
					if c.Receipt != "" {
						if rec, err := events.ParseRecord(raws[sent[i]]); err == nil {
							wants = addWant(wants, rec.RoomID(), rec.ComputedRef())
							if h := rec.HostNodeID(); !slices.Contains(hosts, h) {
								hosts = append(hosts, h)
							}
						}
					}
				case room.OutcomeRefused:
					refused++
				default: // failed, skipped, or one this client does not know: not stored
					failed++
				}
			default:
				left = append(left, f)
				if !c.JSON {
					continue // stderr names them below
				}
				reply.Item = room.ItemResult{Outcome: room.OutcomeSkipped, Reason: notConfirmedReason(err)}
			}
			reply.Item.Index = from + i
			printRecord(s.out, c.JSON, f, reply)
		}
		if err != nil {
			// The rest of the chunk's files read, and every file after the
			// chunk, got no answer (a record the gate did not decide ends
			// the shipment too: nothing after it may land before it).
			rest := c.Files[from+len(chunk):]
			if c.JSON {
				printSkipped(s.out, rest, from+len(chunk), notConfirmedReason(err))
			}
			left = append(left, rest...)
			failed += len(left)
			notConfirmed(s, left, err)
			break
		}
	}
	var parts []string
	if unreadable > 0 {
		parts = append(parts, fmt.Sprintf("%d could not be read", unreadable))
	}
	if failed > 0 {
		parts = append(parts, fmt.Sprintf("%d not stored or not confirmed (run again to resume)", failed))
	}
	if refused > 0 {
		parts = append(parts, fmt.Sprintf("%d refused", refused))
	}
	switch {
	case unreadable+failed > 0:
		return fmt.Errorf("of %d records, %s: %w", len(c.Files), strings.Join(parts, ", "), errExecutionIncomplete)
	case refused > 0:
		return fmt.Errorf("%d of %d records %w", refused, len(c.Files), errRefused)
	case c.Receipt != "" && len(wants) > 0:
		return c.write(ctx, nc, c.Credentials, wants, hosts, s.out, s.err)
	}
	return nil
}

// errExecutionIncomplete: some record file could not be read, or some
// record was not stored or not confirmed (exitUsage).
var errExecutionIncomplete = errors.New("not every record was shipped")

// readRecordFile reads a record file, which must be a regular file: a
// FIFO or a device would block the run (regularfile).
func readRecordFile(name string) ([]byte, error) { return regularfile.ReadFile(name) }

// printSkipped prints the --json object of each of files, the files
// given from index first on, whose records were not sent: skipped, why.
func printSkipped(w io.Writer, files []string, first int, why string) {
	for k, f := range files {
		printRecord(w, true, f, room.RecordReply{Item: room.ItemResult{Index: first + k, Outcome: room.OutcomeSkipped, Reason: why}})
	}
}

// notConfirmedReason is the reason of a record whose request got no
// answer (err).
func notConfirmedReason(err error) string {
	return fmt.Sprintf("not confirmed (%s): %v", runAgain, err)
}

const runAgain = "run again: a record already stored is answered duplicate"

// notConfirmed says on stderr which files' records got no answer (err).
func notConfirmed(s *streams, left []string, err error) {
	switch len(left) {
	case 0:
		fmt.Fprintf(s.err, "publisher: %v\n", err)
	case 1:
		fmt.Fprintf(s.err, "publisher: %s: not confirmed (%s): %v\n", left[0], runAgain, err)
	default:
		fmt.Fprintf(s.err, "publisher: %s and %d more files: not confirmed (%s): %v\n", left[0], len(left)-1, runAgain, err)
	}
}

// printRecord prints the outcome of file's record, its refusal located
// in file (room.RecordReply.InFile).
func printRecord(w io.Writer, asJSON bool, file string, r room.RecordReply) {
	r = r.InFile(file)
	it := r.Item
	if asJSON {
		b, _ := json.Marshal(struct {
			File string `json:"file"`
			OK   bool   `json:"ok"`
			room.RecordReply
		}{file, it.Outcome == room.OutcomeStored || it.Outcome == room.OutcomeDuplicate, r})
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	switch it.Outcome {
	case room.OutcomeStored, room.OutcomeDuplicate:
		if r.RoomID == "" && it.Hash == "" { // a reply cut to outcomes (room.RecordsTrimmedItems)
			fmt.Fprintf(w, "%-9s %s at stream seq %d\n", it.Outcome, file, it.StreamSeq)
			return
		}
		fmt.Fprintf(w, "%-9s %s → %s  %s at stream seq %d\n", it.Outcome, file, r.RoomID, it.Hash, it.StreamSeq)
	case room.OutcomeRefused:
		fmt.Fprintf(w, "REFUSED   %s → %s\n", file, orUnknown(r.RoomID))
		problems := it.Problems
		if len(problems) == 0 {
			// A trimmed reply (room.RecordsTrimmed*) keeps the first problem
			// in the item itself.
			p := events.Problem{Code: it.Code, Reason: it.Reason}
			if it.At != nil {
				p.At = *it.At
			}
			if p.Reason == "" {
				p.Reason = "(the reply was cut to outcomes; `publisher verify " + file + "` lists the problems)"
			}
			problems = []events.Problem{p}
		}
		for _, p := range problems {
			fmt.Fprintf(w, "          %s\n", p.String())
		}
	case room.OutcomeSkipped:
		fmt.Fprintf(w, "SKIPPED   %s: %s\n", file, it.Reason)
	default:
		fmt.Fprintf(w, "FAILED    %s: %s\n", file, it.Reason)
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "(no room)"
	}
	return s
}
