package reader

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/validate"
)

// ErrReader is wrapped by Audit, Follow, Prove and ParseReadMode for
// options they cannot work with (no validator, no durable name, a read
// mode that is none of auto, consumer and direct, ...): nothing was read.
var ErrReader = errors.New("reader")

// StreamMsg is one message read from the room stream.
type StreamMsg struct {
	Subject string
	Seq     uint64 // stream sequence
	Data    []byte
	Time    time.Time
	// Attestation is the message's checkpoint.AttestationHeader value
	// ("" when it has none; several values joined by ", ", which no
	// attestation accepts).
	Attestation string
	// Owner is the message's HeaderOwner value: the identity token of the
	// owner of a journal entry's chain ("" for the anonymous identity).
	Owner string
}

// Event is a verified message, as handed to the application.
type Event struct {
	RoomID  string    `json:"room"`
	Kind    room.Kind `json:"kind"` // KindJournal or KindExecution
	Seq     uint64    `json:"stream_seq"`
	Subject string    `json:"subject"`
	Time    time.Time `json:"time"`

	// Journal entries.
	Chain     *events.ChainKey `json:"chain,omitempty"`
	Position  *int64           `json:"seq,omitempty"` // chain position (the entry's seq)
	EntryHash string           `json:"entry_hash,omitempty"`
	// Owner is the identity token of the chain's owner (HeaderOwner), ""
	// for the anonymous identity: every entry of a chain the reader
	// serves has its first entry's owner.
	Owner string        `json:"owner,omitempty"`
	Entry *events.Entry `json:"-"`

	// Execution records.
	Ref      string         `json:"ref,omitempty"`      // execution/ref
	Digest   string         `json:"digest,omitempty"`   // content digest of the canonical bytes
	Instance string         `json:"instance,omitempty"` // environment/ref
	Outcome  string         `json:"outcome,omitempty"`
	Record   *events.Record `json:"-"`

	// Reexamined marks an event Follow served from its set-aside list
	// (FollowOptions.Reexamine): set aside and acknowledged by an earlier
	// run, it passes now. Its stream seq is below those served before it.
	Reexamined bool `json:"reexamined,omitempty"`

	// A trusting reader's leaf: index in the room's tree and
	// content hash; leafOK is false without trusted publishers.
	leafOK  bool
	leaf    uint64
	content [32]byte
	// The stored bytes, attestation header and attested position of a
	// trusting reader's leaf (Export's bundles; data is the read's
	// buffer: copy it to keep it).
	data        []byte
	attestation string
	position    string
}

// SetAside is a message that failed verification: it is not served, and
// it is reported with its code, stream sequence and reason.
type SetAside struct {
	RoomID   string           `json:"room,omitempty"`
	Kind     room.Kind        `json:"kind,omitempty"`
	Seq      uint64           `json:"stream_seq"`
	Subject  string           `json:"subject"`
	Time     time.Time        `json:"time"`
	Chain    *events.ChainKey `json:"chain,omitempty"`
	Code     events.Code      `json:"code"`
	Reason   string           `json:"reason"`
	Problems []events.Problem `json:"problems,omitempty"`
	// Reexamined marks a message of Follow's set-aside list decided again
	// (FollowOptions.Reexamine) and set aside again.
	Reexamined bool `json:"reexamined,omitempty"`

	passesNow bool // keepListed's: a listed message kept aside that passes now
}

// Error renders the set-aside message like a refusal.
func (s *SetAside) Error() string {
	return fmt.Sprintf("%s at stream seq %d (%s): %s", s.Code, s.Seq, s.Subject, s.Reason)
}

// chainView is a reader's state of one chain: bounded, whatever the
// chain's length.
type chainView struct {
	roomID   string
	cv       *events.ChainVerifier
	entries  int64
	firstSeq uint64
	lastSeq  uint64
	broken   *SetAside // the first failure; nil while the chain is whole
	anchored bool      // the chain was first seen mid-way (audit from a point)
	owner    string    // HeaderOwner of the chain's first entry read
	// unadmitted is the stream seq of the entry at the chain's next
	// position that was set aside before the chain's rules saw it (its
	// attestation refused: not in the room); 0 when none. A later entry
	// then finds that position missing, and its gap says why.
	unadmitted uint64
}

// Reader re-verifies room messages in stream order with the same code as
// the offline verifier and the gate: every journal entry (schema, canonical
// form, hash, chain position and link, metadata, subject) and every
// execution record (schema, ref, digests, host, signature, host trust,
// foreign evidence, and the room's relation rules). Its state is per chain
// and per room, not per message. It is not safe for concurrent use.
type Reader struct {
	v        *validate.Validator
	subjects room.Subjects
	chains   map[events.ChainKey]*chainView
	rooms    map[string]*validate.RecordIndex
	evidence *EvidenceIndex // nil: not kept (Audit)
	scratch  Event          // decide's event when not full
	// markers counts the record markers decide skipped (Audit's
	// AuditTotals.Markers).
	markers uint64
	// unadmitted is chainView.unadmitted of the chains not met yet: the
	// stream seq of the first entry at position 0, set aside before the
	// chain's rules saw it (nil until one is).
	unadmitted map[events.ChainKey]uint64
	// Anchor, when set, starts a chain at the first entry seen for it
	// instead of at position 0: for audits that start mid-stream.
	Anchor bool
	// chainHome, when set (a reader of some rooms: chainHomes), names the
	// room a chain met for the first time lives in; "" when unknown.
	chainHome func(key events.ChainKey, roomID string) string

	// Attestations and checkpoints (attested.go), for Audit and Follow: with trust set (at
	// least one key), attestations and checkpoints are checked, each room
	// keeping a ledger, and verdicts go through feed's queue. eager
	// verifies every batch once whole (Follow's live delivery), maxRun
	// bounds its batches then (0: no bound); run is the batch being read.
	trust     *checkpoint.Trust
	eager     bool
	maxRun    int
	run       checkpoint.BatchRun
	runLedger *ledger // the open batch's room
	fullTrees bool    // keep every tree node (Prove, checkpoints from elsewhere)
	// leafBounds bounds the leaves after each room's latest checkpoint
	// kept in memory (the zero value: checkpoint's defaults).
	leafBounds checkpoint.LeafBounds
	// leafFail is why a checkpoint could not be checked: the spilled
	// leaves it needed could not be read back (checkpoint.ErrLeafSpill).
	leafFail   error
	ledgers    map[string]*ledger
	queue      []*prepared // verdicts waiting, in stream order, from qhead
	qhead      int
	qbytes     int                          // message data in the queue
	free       []*prepared                  // spent queue elements, for reuse
	onVerified func(*checkpoint.Checkpoint) // called on every checkpoint verified
	onAside    func(*prepared, *SetAside)   // called on every message feed sets aside (Prove, Export)
	deployment *deploymentView              // the deployment log as an audit with Witnessing read it
	// keptIgnored are the rooms whose kept checkpoint (the state
	// directory's) another trust verified (loadFloors): not checked
	// against, and not replaced.
	keptIgnored map[string]bool

	// notices are the loss notices read, in stream order (notice.go).
	notices []Notice
}

// trustPublishers makes r check attestations and checkpoints with t (no
// keys: nothing is checked).
func (r *Reader) trustPublishers(t *checkpoint.Trust) {
	if t.Len() == 0 {
		return
	}
	r.trust, r.ledgers = t, map[string]*ledger{}
}

// NewReader returns a reader that verifies with v (which should check
// host trust: a record from a host not trusted here is refused here, what
// ever the publisher accepted).
func NewReader(v *validate.Validator, subjects room.Subjects) *Reader {
	return &Reader{v: v, subjects: subjects, chains: map[events.ChainKey]*chainView{}, rooms: map[string]*validate.RecordIndex{}, evidence: NewEvidenceIndex()}
}

// Evidence is the index of the verified execution records read so far.
func (r *Reader) Evidence() *EvidenceIndex { return r.evidence }

// Verify checks one message, which must come after every message given
// before it in stream order. It returns the verified event, or the reason
// the message is set aside.
func (r *Reader) Verify(m StreamMsg) (*Event, *SetAside) {
	var x prepared
	r.prepare(&x, m, nil)
	return r.apply(&x)
}

// prepared is one message with the part of its verification that needs no
// reader state done ahead: the subject taken apart, a journal line parsed
// and checked against the entry rules alone, a record parsed and checked
// alone (schema, digests, signature, host trust). Messages of one stream
// can be prepared in parallel; apply then decides them in stream order.
type prepared struct {
	m       StreamMsg
	p       room.Parsed
	subjErr error

	// Journal entries.
	e          *events.Entry
	parse      []events.Problem // events.ParseLine's (e is nil then)
	rules      []events.Problem // the validator's entry rules
	otherChain bool             // e names another run or capsule than its subject

	// Execution records.
	rec    *events.Record
	recErr error

	// Loss notices: the notice, or why it is none; signer and sigErr are
	// a trusting reader's verdict on its attestation.
	notice    *room.LossNotice
	noticeErr error
	signer    string
	sigErr    error

	// A trusting reader's (attestations and checkpoints).
	att attestation

	// Follow's rebuild, for a message its set-aside list holds: listed is
	// the code it was set aside with. Unless reexamine, decide keeps it
	// set aside even if it passes now (keepListed); with it, the message
	// is decided as any other, its event in full.
	listed    events.Code
	reexamine bool
}

// prepare does x's stateless work for m. It reads only the reader's
// validator and subjects, so any number of goroutines may prepare
// messages at once while none applies. subjects, when not nil, caches
// subjects taken apart (one cache per goroutine).
func (r *Reader) prepare(x *prepared, m StreamMsg, subjects subjectCache) {
	*x = prepared{m: m}
	x.p, x.subjErr = subjects.parse(r.subjects, m.Subject)
	if x.subjErr != nil {
		return
	}
	at := events.Location{Seq: m.Seq}
	switch x.p.Kind {
	case room.KindExecution:
		x.rec, x.recErr = r.v.Record(m.Data, at)
	case room.KindNotice:
		x.notice, x.noticeErr = room.ParseLossNotice(m.Data, x.p.RoomID)
	case room.KindJournal:
		if events.IsBlank(m.Data) {
			// A message, not a journal's line: it holds no entry at all,
			// as an empty record message is empty_input.
			x.parse = []events.Problem{{Code: events.EmptyInput, At: at, Reason: "no JSON value: the message holds no entry"}}
			break
		}
		x.e, x.parse = events.ParseLine(m.Data, at)
		if x.e == nil {
			break
		}
		x.rules = r.v.CheckEntry(x.e, at)
		if x.e.RunID() != x.p.Chain.RunID || x.e.CapsuleID() != x.p.Chain.CapsuleID {
			// Another chain's entry, or no entry (its rules name why).
			x.otherChain = true
		}
	}
	if r.trust != nil {
		r.prepareAttestation(x)
	}
}

// subjectCache maps subjects to what Subjects.Parse made of them; it is
// cleared when it reaches subjectCacheSize. A stream has one subject per
// chain and one per room.
type subjectCache map[string]room.Parsed

const subjectCacheSize = 4096

func (c subjectCache) parse(s room.Subjects, subject string) (room.Parsed, error) {
	if p, ok := c[subject]; ok {
		return p, nil
	}
	p, err := s.Parse(subject)
	if err == nil && c != nil {
		if len(c) >= subjectCacheSize {
			clear(c)
		}
		c[subject] = p
	}
	return p, err
}

// apply decides a prepared message against the reader's state, which
// must be the state after every message before it in stream order.
func (r *Reader) apply(x *prepared) (*Event, *SetAside) { return r.decide(x, true) }

// decide is apply. Without full, a verified message's event is the
// reader's own, valid until the next call, with only Kind, RoomID and Seq
// set (Audit counts; it builds no event per entry). A checkpoint message
// gives neither an event nor a set-aside unless a trusting reader refused
// it; a message such a reader did not admit is set aside before any other
// rule sees it (it is not in the room, so it touches no chain or index).
func (r *Reader) decide(x *prepared, full bool) (*Event, *SetAside) {
	full = full || x.reexamine
	if x.subjErr != nil {
		return nil, r.aside(x.m, room.Parsed{}, nil, []events.Problem{{Code: events.BadSubject, At: events.Location{Seq: x.m.Seq}, Reason: x.subjErr.Error()}})
	}
	if x.att.state == attRefused {
		return nil, r.refusedAttestation(x)
	}
	switch x.p.Kind {
	case room.KindCheckpoint:
		return nil, nil
	case room.KindMarker:
		// A marker is the server's index of the room's records, no
		// leaf: the record rules are judged on the records themselves.
		r.markers++
		return nil, nil
	case room.KindNotice:
		return nil, r.takeNotice(x)
	case room.KindJournal:
		return r.verifyEntry(x, full)
	}
	return r.verifyRecord(x, full)
}

func (r *Reader) aside(m StreamMsg, p room.Parsed, chain *events.ChainKey, problems []events.Problem) *SetAside {
	ref := events.NewRefusal(problems)
	return &SetAside{RoomID: p.RoomID, Kind: p.Kind, Seq: m.Seq, Subject: m.Subject, Time: m.Time, Chain: chain,
		Code: ref.Code, Reason: ref.Reason, Problems: ref.Problems}
}

func (r *Reader) verifyEntry(x *prepared, full bool) (*Event, *SetAside) {
	m, p, e := x.m, x.p, x.e
	at := events.Location{Seq: m.Seq}
	key := p.Chain
	if x.otherChain {
		// Not this chain's entry at all: set aside without touching (or
		// creating) the chain; as what it is when it is no entry (no
		// run_id, say), as another chain's when it is one.
		if len(x.rules) > 0 {
			return nil, r.aside(m, p, &key, x.rules)
		}
		return nil, r.aside(m, p, &key, []events.Problem{{Code: events.WrongRoom, At: at,
			Reason:   "the entry names another run or capsule than its subject",
			Expected: key.RunID + "/" + key.CapsuleID, Actual: e.RunID() + "/" + e.CapsuleID()}})
	}
	c := r.chains[key]
	if c == nil {
		home := p.RoomID
		if r.chainHome != nil {
			if h := r.chainHome(key, p.RoomID); h != "" {
				home = h // another room's: every entry read here is room_conflict
			}
		}
		c = &chainView{roomID: home, cv: r.v.NewChain(nil), firstSeq: m.Seq, unadmitted: r.unadmitted[key]}
		delete(r.unadmitted, key)
		r.chains[key] = c
	}
	if c.roomID != p.RoomID {
		return nil, r.aside(m, p, &key, []events.Problem{validate.RoomConflict(at, c.roomID, p.RoomID)})
	}
	if c.broken != nil {
		return nil, r.aside(m, p, &key, []events.Problem{{Code: events.ChainBroken, At: at,
			Reason: fmt.Sprintf("the chain is broken at stream seq %d (%s): later entries are not served", c.broken.Seq, c.broken.Code)}})
	}
	if c.entries == 0 && !c.anchored {
		c.owner = m.Owner
	} else if m.Owner != c.owner {
		s := r.aside(m, p, &key, []events.Problem{{Code: events.NotChainOwner, At: at,
			Reason:   "the entry names another owner than the chain's first entry: only the identity that started a chain extends it",
			Expected: room.IdentityName(c.owner), Actual: room.IdentityName(m.Owner)}})
		c.broken = s
		return nil, s
	}
	if e != nil && r.Anchor && c.entries == 0 && !c.anchored {
		if pos, ok := e.Seq(); ok && pos > 0 {
			c.cv.Resume(pos, e.ParentHash(), e.Metadata())
			c.anchored = true
		}
	}
	if e != nil {
		// A negative seq claims no chain position (no fork, no gap): the
		// entry rules below refuse it, as the file verdict does.
		if pos, ok := e.Seq(); ok && pos >= 0 && pos != c.cv.Next() {
			var ps []events.Problem
			switch {
			case pos < c.cv.Next() && pos == c.cv.Next()-1 && e.EntryHash() == c.cv.Head() && e.EntryHash() == e.ComputedHash() && bytes.Equal(m.Data, e.Canonical()):
				return nil, r.aside(m, p, &key, []events.Problem{{Code: events.Replayed, At: at,
					Reason: "the entry repeats the chain's head, byte for byte"}})
			case pos < c.cv.Next():
				ps = []events.Problem{{Code: events.Fork, At: withPtr(at, "/seq"),
					Reason: "chain position " + strconv.FormatInt(pos, 10) + " is already held by an earlier entry: the first one stored wins"}}
			default:
				why := " is missing"
				if c.unadmitted != 0 {
					why = fmt.Sprintf(" is not in the room: its entry at stream seq %d was set aside (%s)", c.unadmitted, events.CheckpointMismatch)
				}
				ps = []events.Problem{{Code: events.Gap, At: withPtr(at, "/seq"),
					Reason:   "chain position " + strconv.FormatInt(c.cv.Next(), 10) + why,
					Expected: strconv.FormatInt(c.cv.Next(), 10), Actual: strconv.FormatInt(pos, 10)}}
			}
			s := r.aside(m, p, &key, ps)
			c.broken = s
			return nil, s
		}
	}
	problems := x.parse
	if e != nil {
		// The entry rules ran in prepare (x.rules is v.CheckEntry's).
		problems = c.cv.CheckLineChecked(e, m.Data, at, x.rules)
	}
	if len(problems) > 0 {
		s := r.aside(m, p, &key, problems)
		c.broken = s
		return nil, s
	}
	if x.listed != "" && !x.reexamine {
		s := r.keepListed(x, &key)
		if x.listed != events.CheckpointMismatch {
			// Set aside, the entry broke its chain: it still does, so the
			// chain's later entries are not served without it.
			c.broken = s
		}
		return nil, s
	}
	c.cv.Accept(e)
	c.unadmitted = 0
	c.entries++
	c.lastSeq = m.Seq
	if !full {
		r.scratch = Event{RoomID: p.RoomID, Kind: room.KindJournal, Seq: m.Seq}
		return &r.scratch, nil
	}
	pos, _ := e.Seq()
	return &Event{RoomID: p.RoomID, Kind: room.KindJournal, Seq: m.Seq, Subject: m.Subject, Time: m.Time,
		Chain: &key, Position: &pos, EntryHash: e.EntryHash(), Owner: c.owner, Entry: e}, nil
}

// keepListed is the verdict on a message of Follow's set-aside list that
// passes now but is not re-examined: set aside again with the code it was
// listed with, and left out of the reader's state as it was when it was
// set aside (a message attested by no trusted publisher was not in the
// room; any other journal entry broke its chain, which the caller breaks
// again).
func (r *Reader) keepListed(x *prepared, chain *events.ChainKey) *SetAside {
	s := r.aside(x.m, x.p, chain, []events.Problem{{Code: x.listed, At: events.Location{Seq: x.m.Seq},
		Reason: "set aside before (" + string(x.listed) + ", in the set-aside list) and not re-examined; it passes now"}})
	s.passesNow = true
	return s
}

func withPtr(at events.Location, ptr string) events.Location {
	at.Pointer = ptr
	return at
}

func (r *Reader) verifyRecord(x *prepared, full bool) (*Event, *SetAside) {
	m, p := x.m, x.p
	at := events.Location{Seq: m.Seq}
	rec, err := x.rec, x.recErr
	if err != nil {
		var ref *events.Refusal
		if errors.As(err, &ref) {
			return nil, r.aside(m, p, nil, ref.Problems)
		}
		return nil, r.aside(m, p, nil, []events.Problem{{Code: events.MalformedJSON, At: at, Reason: err.Error()}})
	}
	if !bytes.Equal(m.Data, rec.Canonical()) {
		// The gate stores records in their RFC 8785 form (docs/design.md,
		// "Identity, order and duplicates").
		return nil, r.aside(m, p, nil, []events.Problem{{Code: events.NonCanonical, At: at,
			Reason: "the stored record is not byte-equal to its RFC 8785 canonical form"}})
	}
	if rec.RoomID() != p.RoomID {
		return nil, r.aside(m, p, nil, []events.Problem{{Code: events.WrongRoom, At: withPtr(at, "/room~1id"),
			Reason: "the record names another room than its subject", Expected: p.RoomID, Actual: rec.RoomID()}})
	}
	rs := r.rooms[p.RoomID]
	if rs == nil {
		rs = validate.NewRecordIndex()
		r.rooms[p.RoomID] = rs
	}
	if seq, ok := rs.Stored(rec.ContentDigest()); ok {
		return nil, r.aside(m, p, nil, []events.Problem{{Code: events.Replayed, At: at,
			Reason: "the record repeats, byte for byte, the one at stream seq " + strconv.FormatUint(seq, 10)}})
	}
	if ps := rs.Problems(rec, at); len(ps) > 0 {
		return nil, r.aside(m, p, nil, ps)
	}
	if x.listed != "" && !x.reexamine {
		return nil, r.keepListed(x, nil)
	}
	rs.Add(rec, m.Seq)
	if r.evidence != nil {
		r.evidence.Add(p.RoomID, rec, m.Seq)
	}
	if !full {
		r.scratch = Event{RoomID: p.RoomID, Kind: room.KindExecution, Seq: m.Seq}
		return &r.scratch, nil
	}
	env, _ := rec.EnvironmentRef()
	return &Event{RoomID: p.RoomID, Kind: room.KindExecution, Seq: m.Seq, Subject: m.Subject, Time: m.Time,
		Ref: rec.ComputedRef(), Digest: rec.ContentDigest(), Instance: env, Outcome: rec.Outcome(), Record: rec}, nil
}

// ChainSummary describes one chain as a reader has seen it.
type ChainSummary struct {
	RoomID string          `json:"room"`
	Chain  events.ChainKey `json:"chain"`
	// Owner is the identity token of the chain's owner (HeaderOwner of
	// its first entry), "" for the anonymous identity.
	Owner string `json:"owner,omitempty"`
	// Entries is how many entries were verified and served.
	Entries int64 `json:"entries"`
	// Head is the entry_hash of the last verified entry.
	Head     string `json:"head"`
	FirstSeq uint64 `json:"first_stream_seq"`
	LastSeq  uint64 `json:"last_stream_seq,omitempty"`
	// Verdict is "ok", or "broken" with Broken naming the first failure.
	Verdict string    `json:"verdict"`
	Broken  *SetAside `json:"broken,omitempty"`
	// Anchored chains were first seen mid-way: their start is unchecked.
	Anchored bool `json:"anchored,omitempty"`
}

// Chains summarises every chain seen, in no particular order.
func (r *Reader) Chains() []ChainSummary {
	out := make([]ChainSummary, 0, len(r.chains))
	for k, c := range r.chains {
		s := ChainSummary{RoomID: c.roomID, Chain: k, Owner: c.owner, Entries: c.entries, Head: c.cv.Head(), FirstSeq: c.firstSeq, LastSeq: c.lastSeq,
			Verdict: "ok", Broken: c.broken, Anchored: c.anchored}
		if c.broken != nil {
			s.Verdict = "broken"
		}
		out = append(out, s)
	}
	return out
}
