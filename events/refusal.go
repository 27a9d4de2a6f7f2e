package events

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Code is a refusal code from the shared vocabulary (docs/design.md,
// "Refusal codes and their order"; the table is docs/refusal-codes.md). One code
// has one meaning everywhere: CLI output, service replies, logs and audits.
//
// Code implements error so that callers can write
// errors.Is(err, events.BrokenLink) against any error that wraps a *Refusal.
type Code string

// Journal codes, kept from the upstream eval harness (seed 000 and
// reference/capsule-journals/README.md).
const (
	TruncatedTail    Code = "truncated_tail"    // the journal does not end in a newline
	CorruptEntry     Code = "corrupt_entry"     // a line is not strict JSON (I-JSON, RFC 7493)
	InvalidEntry     Code = "invalid_entry"     // an entry breaks the envelope rules or its entry_hash
	Reordered        Code = "reordered"         // seq is not the entry's position in the chain
	BrokenLink       Code = "broken_link"       // parent_hash is not the previous entry_hash
	NonCanonical     Code = "non_canonical"     // a line is not byte-equal to its RFC 8785 form, or not UTF-8
	MetadataMismatch Code = "metadata_mismatch" // run_id, capsule_id, harness_version or task_family differ
)

// Execution record codes (seed 004 and the design brief), in the order they are
// checked; the first failure is a record's code.
const (
	MalformedJSON       Code = "malformed_json"       // not JSON, duplicate keys, invalid UTF-8 or lone surrogates
	SchemaInvalid       Code = "schema_invalid"       // fails the execution record v1 JSON Schema
	RefMismatch         Code = "ref_mismatch"         // execution/ref is not the hash of the record
	DigestMismatch      Code = "digest_mismatch"      // X/digest does not match X/ref
	HostMismatch        Code = "host_mismatch"        // host/node-id is not the signing key
	SignatureInvalid    Code = "signature_invalid"    // the ed25519+domain-v1 signature does not verify
	ForeignEvidence     Code = "foreign_evidence"     // evidence names another instance, or a record without one has evidence
	UntrustedHost       Code = "untrusted_host"       // the signing host is not trusted here
	IdempotencyConflict Code = "idempotency_conflict" // other bytes under a stored idempotency/key
	RunConflict         Code = "run_conflict"         // a run/ref that already concluded
	UnknownNotConsent   Code = "unknown_not_consent"  // the decision already has an unknown outcome
)

// Codes shared by both kinds and by readers (the design brief).
const (
	TooLarge     Code = "too_large"     // over the size the server accepts
	RoomConflict Code = "room_conflict" // a capsule already shipped into another room
	Fork         Code = "fork"          // two different entries claim one chain position
	Gap          Code = "gap"           // a chain position is missing
	WrongRoom    Code = "wrong_room"    // content names another room or capsule than its subject
)

// Codes added by roompub where the shared vocabulary had none (the design
// brief allows this: docs/design.md, "Departures from the brief"; each has
// exactly one meaning).
const (
	// InvalidCapsule: capsule.json is missing or breaks the upstream's
	// metadata rules (CheckCapsule; the upstream calls it
	// metadata_invalid). It describes the capsule, not an entry.
	InvalidCapsule Code = "invalid_capsule"
	// EmptyInput: a file or message holds no JSON value at all.
	EmptyInput Code = "empty_input"
	// ChainBroken: a reader sets aside an entry of a chain that is already
	// broken at an earlier position (fork, gap or a refused entry); the
	// first entry stored at a position wins and the chain is broken from
	// the first failure (docs/design.md, "Chain rules").
	ChainBroken Code = "chain_broken"
	// Replayed: a message repeats, byte for byte, one already in the room.
	// The gate never stores the same bytes twice, so a reader sets the
	// copy aside rather than serve it twice.
	Replayed Code = "replayed"
	// BadSubject: a message under the stream's prefix on a subject that
	// is not a room subject (rooms.<room>.journal.<run>.<capsule> or
	// rooms.<room>.exec).
	BadSubject Code = "bad_subject"
	// WeakStream: the room stream is not append-only (a limit, TTL,
	// rollup, deletes allowed, messages deleted); reported by audits.
	WeakStream Code = "weak_stream"
	// BadRequest: an ingest request that cannot be processed at all (no
	// room, a room id that is not "room:" + non-space characters, an
	// empty body); no item in it was looked at.
	BadRequest Code = "bad_request"
	// CheckpointMismatch: a reader that trusts publisher keys
	// finds a room message without a valid attestation by a trusted
	// publisher (no header, an untrusted key, a bad signature: the message
	// was not admitted, e.g. a well-formed continuation written straight
	// into the stream), or a checkpoint that does not cover the room's
	// admitted messages as it says (untrusted signature, another origin,
	// a size beyond what was read, another root, smaller than or
	// inconsistent with an earlier checkpoint), or a room whose newest
	// checkpoint is not consistent with one verified before (a rolled
	// back or forked copy of the stream).
	CheckpointMismatch Code = "checkpoint_mismatch"
	// ReplyNotAllowed: an ingest request whose reply subject is not under
	// the requesting identity's own inbox prefix (docs/secure-mode.md,
	// "Identities and replies"). The service sends no answer at all: a reply there could
	// act on the JetStream API or a room in the service's name. It is
	// logged and counted, never answered.
	ReplyNotAllowed Code = "reply_not_allowed"
	// NotChainOwner: a journal request on a chain that another identity
	// started; only the identity that stored a chain's first entry may
	// extend it or claim its chain id (docs/secure-mode.md, "Chains belong to the identity that starts them").
	NotChainOwner Code = "not_chain_owner"
	// StreamReplaced: the room stream serve last saw is gone or was
	// created anew (another creation time, or fewer messages than it
	// held); serve refuses to start until an operator acts
	// (docs/secure-mode.md, "The stream").
	StreamReplaced Code = "stream_replaced"
	// OverQuota: the requesting identity already has its share of the
	// ingest service in use (requests or bytes waiting); nothing in the
	// request was looked at, and it may be sent again once earlier
	// requests are answered (docs/secure-mode.md, "Fair ingest").
	OverQuota Code = "over_quota"
	// StoreLost: the chain (or room) the item would extend no longer holds
	// positions the store acknowledged (a damaged block file the server
	// dropped on restart, say). An append would build on the hole, so the
	// chain stays closed; the reason names the lost positions and the
	// stream sequences around them (docs/reliability.md, "When the store
	// loses what it acknowledged").
	StoreLost Code = "store_lost"
	// WitnessQuorum: a reader with a witness policy finds a checkpoint
	// that does not count as verified because fewer witnesses than the
	// policy's quorum validly cosigned it: the deployment log's latest
	// checkpoint, a room none of whose checkpoints a witnessed deployment
	// checkpoint covers, or a deployment without a deployment log
	// (docs/witnesses.md, "What readers check"; C2SP tlog-witness).
	WitnessQuorum Code = "witness_quorum"
)

// Error makes a Code usable as an errors.Is target.
func (c Code) Error() string { return string(c) }

// Location says where a problem is. Any field may be empty; String prints
// the ones that are set, as file:line, JSON pointer (RFC 6901) and stream
// sequence.
type Location struct {
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`    // 1-based line in File
	Pointer string `json:"pointer,omitempty"` // JSON pointer into the entry or record; "" is the whole document
	Seq     uint64 `json:"seq,omitempty"`     // JetStream stream sequence
}

// String renders the location as "file:line /pointer stream seq N".
func (l Location) String() string {
	var parts []string
	switch {
	case l.File != "" && l.Line > 0:
		parts = append(parts, l.File+":"+strconv.Itoa(l.Line))
	case l.File != "":
		parts = append(parts, l.File)
	case l.Line > 0:
		parts = append(parts, "line "+strconv.Itoa(l.Line))
	}
	if l.Pointer != "" {
		parts = append(parts, l.Pointer)
	}
	if l.Seq > 0 {
		parts = append(parts, "stream seq "+strconv.FormatUint(l.Seq, 10))
	}
	return strings.Join(parts, " ")
}

// Problem is one failed rule: its code, where, why, and when the rule
// compares two values, the expected and the actual one. In JSON, a
// problem with no location (about a whole record, as the gate finds it)
// has no "at" member, not "at":{}.
type Problem struct {
	Code     Code     `json:"code"`
	At       Location `json:"at,omitzero"`
	Reason   string   `json:"reason"`
	Expected string   `json:"expected,omitempty"`
	Actual   string   `json:"actual,omitempty"`
}

// String renders "code at where: reason (expected E, got A)".
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(string(p.Code))
	if at := p.At.String(); at != "" {
		b.WriteString(" at ")
		b.WriteString(at)
	}
	b.WriteString(": ")
	b.WriteString(p.Reason)
	switch {
	case p.Expected != "" && p.Actual != "":
		fmt.Fprintf(&b, " (expected %s, got %s)", quoteShort(p.Expected), quoteShort(p.Actual))
	case p.Actual != "":
		fmt.Fprintf(&b, " (got %s)", quoteShort(p.Actual)) // e.g. untrusted_host: no one value is expected
	case p.Expected != "":
		fmt.Fprintf(&b, " (expected %s)", quoteShort(p.Expected))
	}
	return b.String()
}

// quoteShort quotes s, cut to 80 bytes so a hostile value cannot flood a log.
func quoteShort(s string) string {
	const limit = 80
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "…"
	}
	return strconv.Quote(s)
}

// MaxProblems caps how many problems one Refusal lists; Omitted counts the
// rest. A hostile million-line file cannot make a refusal unbounded.
const MaxProblems = 100

// Refusal is the error every check returns: the first failing problem in
// the order of docs/design.md, "Refusal codes and their order", decides the
// Code, and Problems lists every problem found
// (up to MaxProblems; Omitted counts those left out).
type Refusal struct {
	Problem
	Problems []Problem `json:"problems"`
	Omitted  int       `json:"omitted,omitempty"`
}

// MaxTextBytes bounds a problem's Reason, Expected and Actual, so that a
// hostile input (90,000 unknown keys, a megabyte-long value) cannot make a
// refusal, a reply or a log line unbounded.
const MaxTextBytes = 1024

func clipText(s string) string {
	if len(s) <= MaxTextBytes {
		return s
	}
	cut := MaxTextBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d bytes more)", len(s)-cut)
}

func clip(p Problem) Problem {
	p.Reason, p.Expected, p.Actual = clipText(p.Reason), clipText(p.Expected), clipText(p.Actual)
	p.At.Pointer = clipText(p.At.Pointer)
	return p
}

// NewRefusal returns a Refusal for problems, or nil when there are none.
// problems must be in check order: problems[0] becomes the refusal's code.
// Texts are clipped to MaxTextBytes and the list to MaxProblems.
func NewRefusal(problems []Problem) *Refusal {
	if len(problems) == 0 {
		return nil
	}
	r := &Refusal{}
	if len(problems) > MaxProblems {
		r.Omitted = len(problems) - MaxProblems
		problems = problems[:MaxProblems]
	}
	r.Problems = make([]Problem, len(problems))
	for i, p := range problems {
		r.Problems[i] = clip(p)
	}
	r.Problem = r.Problems[0]
	return r
}

// Error renders the first problem, and how many more there are.
func (r *Refusal) Error() string {
	s := r.Problem.String()
	if more := len(r.Problems) - 1 + r.Omitted; more > 0 {
		s += fmt.Sprintf(" (and %d more problem(s))", more)
	}
	return s
}

// Is reports whether target is the refusal's Code, so errors.Is(err,
// events.SchemaInvalid) works through any wrapping.
func (r *Refusal) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == r.Code
}

// Has reports whether any listed problem carries code c.
func (r *Refusal) Has(c Code) bool {
	for _, p := range r.Problems {
		if p.Code == c {
			return true
		}
	}
	return false
}

// Problems collects problems in check order with a bound on memory.
type Problems struct {
	list    []Problem
	omitted int
}

// Add records p, counting instead of storing it past MaxProblems.
func (ps *Problems) Add(p Problem) {
	if len(ps.list) >= MaxProblems {
		ps.omitted++
		return
	}
	ps.list = append(ps.list, p)
}

// Len is the number of problems recorded, including omitted ones.
func (ps *Problems) Len() int { return len(ps.list) + ps.omitted }

// Refusal returns the collected problems as a *Refusal, or nil if none.
func (ps *Problems) Refusal() *Refusal {
	r := NewRefusal(ps.list)
	if r != nil {
		r.Omitted += ps.omitted
	}
	return r
}

// IsBlank reports whether data holds nothing but JSON's white space
// (jsonSpace, RFC 8259 section 2): no value at all. A form feed or U+00A0
// is no white space there, so a document of them is malformed, not
// empty.
func IsBlank(data []byte) bool { return len(bytes.Trim(data, jsonSpace)) == 0 }

// DocumentCode is the code of a JSON document that is not of its form (a
// proof or an evidence bundle, refused before anything it says is
// checked): empty_input when data holds nothing but JSON's white space,
// malformed_json when it is not strict JSON (Canonicalize: a syntax error,
// a member named twice, a byte order mark), schema_invalid when it is
// strict JSON of another form (not an object; a member missing, null,
// unknown or of another type; a value out of its format). A document
// over its size limit is too_large, which the caller knows before
// parsing. docs/refusal-codes.md lists the three for documents.
func DocumentCode(data []byte) Code {
	switch {
	case IsBlank(data):
		return EmptyInput
	case HasBOM(data):
		return MalformedJSON
	}
	if _, err := Canonicalize(data); err != nil {
		return MalformedJSON
	}
	return SchemaInvalid
}
