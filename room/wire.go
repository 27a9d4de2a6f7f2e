package room

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/roompub/roompub/events"
)

// Ingest service subjects and headers (docs/wire.md). The wire
// format is part of the product: harnesses in other languages speak it.
const (
	// ServiceName is the micro service name, as `nats micro ls` shows it.
	ServiceName = "roompub-ingest"
	// DefaultServicePrefix prefixes every endpoint subject.
	DefaultServicePrefix = "roompub.v1"

	// HeaderRoom names the room of a journal request (entries name none).
	HeaderRoom = "Roompub-Room"
	// HeaderCapsule optionally carries the capsule's capsule.json (one line
	// of JSON) so the gate checks every entry's metadata against it.
	HeaderCapsule = "Roompub-Capsule"
	// HeaderPipelined marks a journal request sent while the request of
	// the same chain ahead of it is still in flight (ShipOptions.Pipeline);
	// its value is the seq of that request's last line (a decimal
	// integer). The gate waits a while for the chain to get past that
	// line (the request ahead may be on another gate process), then
	// decides; if the chain did not get there and the first line is ahead
	// of it, it answers OutcomeAhead instead of refusing it.
	HeaderPipelined = "Roompub-Pipelined"
	// HeaderReply, with the value ReplyBrief, asks for a journal reply
	// whose stored and duplicate items carry only their index and outcome
	// (refused, failed, skipped and ahead items stay whole): a client that
	// needs no more (ShipCapsule) gets about 33 bytes per stored line to
	// decode instead of 225, which the service encodes and the server
	// carries. Any other value, or none: every item whole.
	HeaderReply = "Roompub-Reply"
	// ReplyBrief is HeaderReply's value for brief replies.
	ReplyBrief = "brief"
	// HeaderOwner, on a stored journal entry, is the identity token
	// (IdentityToken) of the chain's owner: the identity that stored the
	// chain's first entry, the only one that may extend it. Absent: the
	// anonymous identity's chain (docs/secure-mode.md, "Chains belong to
	// the identity that starts them"). The gate sets it; a request's own
	// header of that name is ignored.
	HeaderOwner = "Roompub-Owner"
)

// MaxBatchLines bounds the journal lines of one request, so every reply
// fits in a message; a longer shipment is sent as several requests.
const MaxBatchLines = 1000

// MaxBatchRecords bounds the records of one records request. Client
// sends at most DefaultRecordsPerRequest.
const MaxBatchRecords = 1000

// DefaultRecordsPerRequest is how many records Client.AppendRecords puts
// in one request: a reply of that many refused records, each with a few
// problems, still fits in the default 1 MiB max payload; each request
// takes about as long as that many synchronous stores.
const DefaultRecordsPerRequest = 256

// Outcome is what the gate did with one item of a request, as a reply's
// items give it (docs/wire.md): one of the Outcome constants.
type Outcome string

// Item outcomes in a reply.
const (
	OutcomeStored    Outcome = "stored"    // appended now, at StreamSeq
	OutcomeDuplicate Outcome = "duplicate" // the same bytes are already stored, at StreamSeq; nothing new stored
	OutcomeRefused   Outcome = "refused"   // not stored, never will be as it is: see Code
	OutcomeSkipped   Outcome = "skipped"   // not looked at: an earlier item of the batch was refused or failed
	OutcomeFailed    Outcome = "failed"    // not decided: the server could not be reached in time; retry
	// OutcomeAhead: not decided: the first line of a pipelined request
	// (HeaderPipelined) is ahead of the chain, which did not get past the
	// request ahead of it (its next seq is in Reason); send it again once
	// the request ahead of it is answered.
	OutcomeAhead Outcome = "ahead"
)

// ItemResult is the outcome of one journal entry or record.
type ItemResult struct {
	// Index is the item's position in the request, from 0 (the line).
	Index   int     `json:"index"`
	Outcome Outcome `json:"outcome"`
	// Seq is the entry's chain position, when it could be read.
	Seq *int64 `json:"seq,omitempty"`
	// Hash is the entry_hash (journals) or execution/ref (records).
	Hash      string           `json:"hash,omitempty"`
	StreamSeq uint64           `json:"stream_seq,omitempty"`
	Subject   string           `json:"subject,omitempty"`
	Code      events.Code      `json:"code,omitempty"`
	At        *events.Location `json:"at,omitempty"`
	Reason    string           `json:"reason,omitempty"`
	Problems  Problems         `json:"problems,omitempty"`
}

// Problems are a refused item's problems. Their JSON leaves out the "at"
// of a problem without a location (events.Problem's omitzero), also when
// segmentio/encoding/json, which knows no omitzero, writes the reply.
type Problems []events.Problem

// MarshalJSON encodes ps with encoding/json, which honours omitzero.
func (ps Problems) MarshalJSON() ([]byte, error) {
	return json.Marshal([]events.Problem(ps))
}

// ChainHead is where a chain stands in the stream.
type ChainHead struct {
	RoomID string          `json:"room,omitempty"` // the room the chain lives in; "" when it has no entry
	Chain  events.ChainKey `json:"chain"`
	// Next is the chain position the next entry must have (entries stored).
	Next int64 `json:"next"`
	// Head is the entry_hash of the last stored entry (64 zeros for none).
	Head string `json:"head"`
	// StreamSeq is the stream sequence of the last stored entry (0 for none).
	StreamSeq uint64 `json:"stream_seq"`
	// Owner names the identity that started the chain, as IdentityName
	// gives it (its token, or "(anonymous)" for the anonymous identity and
	// for entries stored before chains had owners); "" while the chain has
	// no entry, and from a service older than owners. Only the owner
	// extends the chain (docs/secure-mode.md, "Chains belong to the
	// identity that starts them"), so a shipper of another identity must
	// not count its stored lines as its own.
	Owner string `json:"owner,omitempty"`
	// Lost, when set, says the store no longer holds chain positions below
	// Next that it acknowledged: the chain is closed (every append to it is
	// refused events.StoreLost; docs/reliability.md, "When the store loses
	// what it acknowledged").
	Lost *ChainLoss `json:"lost,omitempty"`
}

// ChainLoss is what the store lost of one chain: positions below the
// chain's next one that no stored entry holds any more.
type ChainLoss struct {
	// Count is how many positions are missing; Stored how many of the
	// chain's Next positions the stream still holds (Count + Stored = Next).
	Count  int64 `json:"count"`
	Stored int64 `json:"stored"`
	// Missing lists the missing positions as runs, in chain order.
	Missing []LostRun `json:"missing"`
}

// LostRun is a run of missing chain positions From..To (inclusive), and
// where in the stream they were: after stream sequence After and before
// Before, the sequences of the stored entries around the run (After 0:
// the run starts the chain; Before 0: no stored entry follows it, the
// chain's end was lost).
type LostRun struct {
	From   int64  `json:"from"`
	To     int64  `json:"to"`
	After  uint64 `json:"after_stream_seq"`
	Before uint64 `json:"before_stream_seq"`
}

// String names the runs as chain positions with the stream sequences
// around them, for reasons and logs: "positions 5-9 (between stream seqs
// 12 and 18), 40 (between stream seqs 50 and 52)", "0-3 (before stream seq
// 7)", "126-199 (after stream seq 126)"; at most 10 runs, then how many
// more.
func (l ChainLoss) String() string {
	var b strings.Builder
	b.WriteString("positions ")
	for i, r := range l.Missing {
		if i == 10 {
			fmt.Fprintf(&b, ", and %d more runs", len(l.Missing)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		if r.From == r.To {
			fmt.Fprintf(&b, "%d", r.From)
		} else {
			fmt.Fprintf(&b, "%d-%d", r.From, r.To)
		}
		switch {
		case r.After > 0 && r.Before > 0:
			fmt.Fprintf(&b, " (between stream seqs %d and %d)", r.After, r.Before)
		case r.Before > 0:
			fmt.Fprintf(&b, " (before stream seq %d)", r.Before)
		case r.After > 0:
			fmt.Fprintf(&b, " (after stream seq %d)", r.After)
		}
	}
	return b.String()
}

// EndLost reports whether the chain's end was lost (its last run has no
// stored entry after it): entries the store acknowledged after those it
// can still see of the chain, lost with them, leave no trace, so Count
// and Count+Stored are then lower bounds.
func (l ChainLoss) EndLost() bool {
	return len(l.Missing) > 0 && l.Missing[len(l.Missing)-1].Before == 0
}

// Lost is Count for a report: "4", or "at least 4" when the chain's end
// was lost (EndLost), since entries acknowledged after it left no trace.
func (l ChainLoss) Lost() string {
	if l.EndLost() {
		return fmt.Sprintf("at least %d", l.Count)
	}
	return strconv.FormatInt(l.Count, 10)
}

// Tally says how many of how many acknowledged entries the store lost:
// "3 of the chain's 10 acknowledged entries", or, when its end was lost
// (EndLost), "at least 3 of the chain's 10 or more acknowledged entries
// (…)": for reasons and logs.
func (l ChainLoss) Tally() string {
	if l.EndLost() {
		return fmt.Sprintf("at least %d of the chain's %d or more acknowledged entries (its end was lost: entries acknowledged after it, lost with it, leave no trace)",
			l.Count, l.Count+l.Stored)
	}
	return fmt.Sprintf("%d of the chain's %d acknowledged entries", l.Count, l.Count+l.Stored)
}

// JournalReply answers a journal request: one result per line, in order.
type JournalReply struct {
	RoomID string          `json:"room"`
	Chain  events.ChainKey `json:"chain"`
	Items  []ItemResult    `json:"items"`
	// Head is the chain's head after the request.
	Head     ChainHead `json:"head"`
	Stored   int       `json:"stored"`
	Dupes    int       `json:"duplicates"`
	Refused  int       `json:"refused"`
	Skipped  int       `json:"skipped"`
	Failures int       `json:"failed"`
	Ahead    int       `json:"ahead,omitempty"` // 1 when the first line is OutcomeAhead
}

// RecordReply answers an execution request.
type RecordReply struct {
	RoomID string     `json:"room,omitempty"`
	Item   ItemResult `json:"item"`
}

// InFile returns r with file as the File of its refusal's location and of
// every problem's, the record's own file (the gate's locations of a record
// are a JSON pointer into it, or the whole of it: no file, no line), as
// publisher verify and journal give theirs. A refused item without a
// location, as a reply cut to outcomes has it, gets the file alone. The
// problems are copied: r's are not changed.
func (r RecordReply) InFile(file string) RecordReply {
	if r.Item.At != nil || r.Item.Outcome == OutcomeRefused {
		at := events.Location{File: file}
		if r.Item.At != nil {
			at = *r.Item.At
			at.File = file
		}
		r.Item.At = &at
	}
	if r.Item.Problems != nil {
		ps := make([]events.Problem, len(r.Item.Problems))
		for i, p := range r.Item.Problems {
			p.At.File = file
			ps[i] = p
		}
		r.Item.Problems = ps
	}
	return r
}

// RecordsReply answers a records request: one RecordReply per record of
// the body, in order (Item.Index is the record's line, from 0), then the
// counts of each outcome. A reply that would exceed the server's max
// payload whole is sent in the first RecordsTrimmed form that fits, named
// by Trimmed ("" for whole).
type RecordsReply struct {
	Records  []RecordReply `json:"records"`
	Stored   int           `json:"stored"`
	Dupes    int           `json:"duplicates"`
	Refused  int           `json:"refused"`
	Skipped  int           `json:"skipped"`
	Failures int           `json:"failed"`
	Trimmed  string        `json:"trimmed,omitempty"`
}

// The forms of a RecordsReply too long to send whole, each applied on top
// of the one before: every form keeps each item's index, outcome, stream
// sequence and code.
const (
	// RecordsTrimmedProblems: refused items carry their first problem
	// (Item.Code, Item.At, Item.Reason) and no Problems list.
	RecordsTrimmedProblems = "problems"
	// RecordsTrimmedTexts: and their reason and JSON pointer are cut to
	// 160 bytes.
	RecordsTrimmedTexts = "texts"
	// RecordsTrimmedItems: every item keeps only its index, outcome,
	// stream sequence and code (no room, hash, subject, reason or place).
	RecordsTrimmedItems = "items"
)

// HeadRequest asks where a chain stands; the reply (ChainHead) names the
// room it lives in, if any.
type HeadRequest struct {
	RunID     string `json:"run_id"`
	CapsuleID string `json:"capsule_id"`
}

// ErrorReply is the body of a request-level error (status header
// Nats-Service-Error-Code 400, 429, 500 or 503): the request as a whole
// could not be processed, so no item was looked at. Code is absent for an
// error that is no refusal (the server unreachable, the service stopping).
type ErrorReply struct {
	Code   events.Code `json:"code,omitempty"`
	Reason string      `json:"reason"`
}

// RefusedItem is the reply item of the item at idx refused for problems
// (in check order, at least one): its code, location and reason are the
// first problem's, and every problem is listed.
func RefusedItem(idx int, problems []events.Problem) ItemResult {
	ref := events.NewRefusal(problems)
	it := ItemResult{Index: idx, Outcome: OutcomeRefused, Code: ref.Code, Reason: ref.Reason, Problems: ref.Problems}
	if ref.At != (events.Location{}) {
		at := ref.At
		it.At = &at // a refusal of the whole record has none, not "at":{}
	}
	return it
}

// RecordsReplyOverhead is how many bytes of a records reply are not its
// items (the counts and brackets around them): a client sizes its
// requests so that the reply fits the server's max payload.
const RecordsReplyOverhead = 256

// LossNoticeSchema is the schema of a LossNotice.
const LossNoticeSchema = "roompub-loss-notice/v1"

// LossNotice is an operator's recorded acknowledgement that the store lost
// acknowledged messages of one room: published on the room's Notice
// subject by `publisher serve --acknowledge-loss`, attested by its
// publisher key at checkpoint.NoticePosition (docs/reliability.md, "Loss
// notices"). Once a notice covers a room's damage, the room's other and
// new chains go on; the damaged chains stay closed.
type LossNotice struct {
	Schema string `json:"schema"` // LossNoticeSchema
	RoomID string `json:"room"`
	// NotedAt is when the notice was written (RFC 3339, UTC).
	NotedAt string `json:"noted_at"`
	// Publisher is the node id of the publisher that wrote and attested it.
	Publisher string `json:"publisher"`
	// Chains are the room's damaged chains and what each lost.
	Chains []NoticedChain `json:"chains,omitempty"`
	// Checkpoint, when set, is the room's damage its latest checkpoint
	// shows: it covers Size leaves, the stream holds Held.
	Checkpoint *NoticedCheckpoint `json:"checkpoint,omitempty"`
	// Records, when set, says the room's record subject lost records.
	Records *NoticedRecords `json:"records,omitempty"`
}

// NoticedRecords is a room's record loss a LossNotice acknowledges: Lost
// records before the record at stream seq Before (its attested ordinal is
// Lost above the one the stream gives it).
type NoticedRecords struct {
	Lost   uint64 `json:"lost"`
	Before uint64 `json:"before_stream_seq"`
}

// NoticedChain is one damaged chain a LossNotice acknowledges.
type NoticedChain struct {
	Chain events.ChainKey `json:"chain"`
	Loss  ChainLoss       `json:"loss"`
}

// NoticedCheckpoint is a room's checkpoint damage a LossNotice
// acknowledges: the latest checkpoint covers Size leaves, the stream held
// Held of them.
type NoticedCheckpoint struct {
	Size uint64 `json:"size"`
	Held uint64 `json:"held"`
	// Contradiction, when set, is how the room's latest checkpoint
	// contradicts the messages the stream holds (a message the server
	// can no longer read, or one changed), as the checkpointer found it.
	Contradiction string `json:"contradiction,omitempty"`
}

// ParseLossNotice parses a loss notice of roomID (LossNotice): strict
// JSON in its RFC 8785 form, schema LossNoticeSchema, the room named
// the room of its subject. Errors say which rule failed.
func ParseLossNotice(data []byte, roomID string) (*LossNotice, error) {
	canon, err := events.Canonicalize(data)
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if !bytes.Equal(canon, data) {
		return nil, fmt.Errorf("not in its canonical form (RFC 8785)")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var n LossNotice
	if err := dec.Decode(&n); err != nil {
		return nil, fmt.Errorf("not a loss notice: %w", err)
	}
	switch {
	case n.Schema != LossNoticeSchema:
		return nil, fmt.Errorf("schema %q, want %q", n.Schema, LossNoticeSchema)
	case n.RoomID != roomID:
		return nil, fmt.Errorf("names room %q on the subject of %q", n.RoomID, roomID)
	case len(n.Chains) == 0 && n.Checkpoint == nil && n.Records == nil:
		return nil, fmt.Errorf("acknowledges nothing")
	case n.Checkpoint != nil && n.Checkpoint.Held > n.Checkpoint.Size:
		return nil, fmt.Errorf("its checkpoint's held %d is more than its size %d", n.Checkpoint.Held, n.Checkpoint.Size)
	}
	for _, c := range n.Chains {
		// Count + Stored is the chain's Next: neither negative, nor past
		// int64 together (canonical JSON keeps both under 2^53 already).
		if l := c.Loss; l.Count < 0 || l.Stored < 0 || l.Count > math.MaxInt64-l.Stored {
			return nil, fmt.Errorf("chain %s/%s: count %d and stored %d are no chain's positions", c.Chain.RunID, c.Chain.CapsuleID, l.Count, l.Stored)
		}
	}
	return &n, nil
}
