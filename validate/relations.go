package validate

import (
	"fmt"
	"strconv"

	"github.com/roompub/roompub/events"
)

// RecordIndex holds one room's stored execution records for the record
// relation rules of seed 004 (idempotency/key, run/ref, an unknown
// outcome is not consent), in stream order: the gate decides a new record
// against it, a reader judges a stored one. Both apply the rules through
// it, so they cannot disagree (docs/design.md, "Record rules"). Only
// records that passed every other rule are added. The zero value is not
// ready: use NewRecordIndex. Not safe for concurrent use.
type RecordIndex struct {
	digests map[string]uint64 // content digest → stream seq
	keys    map[string]string // idempotency/key → content digest
	runs    map[string]string // run/ref → content digest
	unknown map[string]uint64 // decision/ref with an unknown outcome → stream seq
}

// NewRecordIndex returns an empty index.
func NewRecordIndex() *RecordIndex {
	return &RecordIndex{digests: map[string]uint64{}, keys: map[string]string{}, runs: map[string]string{}, unknown: map[string]uint64{}}
}

// Stored returns the stream sequence of the record with content digest d
// (events.Record.ContentDigest), if the index holds one.
func (x *RecordIndex) Stored(d string) (seq uint64, ok bool) {
	seq, ok = x.digests[d]
	return seq, ok
}

// Add records rec as stored at stream sequence seq. A record already held
// (the same content digest) changes nothing; the first record to claim an
// idempotency/key, a run/ref or an unknown outcome of a decision keeps it.
func (x *RecordIndex) Add(rec *events.Record, seq uint64) {
	d := rec.ContentDigest()
	if _, ok := x.digests[d]; ok {
		return
	}
	x.digests[d] = seq
	if k := rec.IdempotencyKey(); k != "" {
		if _, ok := x.keys[k]; !ok {
			x.keys[k] = d
		}
	}
	if run := rec.RunRef(); run != "" {
		if _, ok := x.runs[run]; !ok {
			x.runs[run] = d
		}
	}
	if rec.Outcome() == "unknown" && rec.DecisionRef() != "" {
		if _, ok := x.unknown[rec.DecisionRef()]; !ok {
			x.unknown[rec.DecisionRef()] = seq
		}
	}
}

// Problems applies the relation rules to rec, a record not yet in the
// index (RelationProblems).
func (x *RecordIndex) Problems(rec *events.Record, at events.Location) []events.Problem {
	var held Held
	if d, ok := x.keys[rec.IdempotencyKey()]; ok {
		held.Key = &HeldBy{Digest: d, Seq: x.digests[d]}
	}
	if d, ok := x.runs[rec.RunRef()]; ok {
		held.Run = &HeldBy{Digest: d, Seq: x.digests[d]}
	}
	held.Unknown = x.unknown[rec.DecisionRef()]
	return RelationProblems(rec, at, held)
}

// HeldBy names the stored record that holds a value: its content digest
// and stream sequence.
type HeldBy struct {
	Digest string
	Seq    uint64
}

// Held is what a room already holds against a new record: the record
// holding its idempotency/key and the one concluding its run/ref (nil:
// none), and the stream sequence of the first record of its decision/ref
// with an unknown outcome (0: none). A RecordIndex or the room's record
// markers (docs/design.md, "Record markers") say it.
type Held struct {
	Key, Run *HeldBy
	Unknown  uint64
}

// RelationProblems applies seed 004's relation rules to rec against what
// the room holds, in the order of docs/design.md, "Refusal codes and their
// order": idempotency_conflict, run_conflict, unknown_not_consent, each at
// its member's JSON pointer under at. None: rec may be stored. The gate and
// every reader word them through here, so they cannot disagree.
func RelationProblems(rec *events.Record, at events.Location, held Held) []events.Problem {
	var ps []events.Problem
	ptr := func(p string) events.Location { l := at; l.Pointer = p; return l }
	if h := held.Key; h != nil {
		ps = append(ps, events.Problem{Code: events.IdempotencyConflict, At: ptr("/idempotency~1key"),
			Reason:   "idempotency/key already names another record in this room (stream seq " + strconv.FormatUint(h.Seq, 10) + ")",
			Expected: h.Digest, Actual: rec.ContentDigest()})
	}
	if h := held.Run; h != nil {
		ps = append(ps, events.Problem{Code: events.RunConflict, At: ptr("/run~1ref"),
			Reason:   "run/ref already concluded in this room (stream seq " + strconv.FormatUint(h.Seq, 10) + ")",
			Expected: h.Digest, Actual: rec.ContentDigest()})
	}
	if held.Unknown != 0 {
		ps = append(ps, events.Problem{Code: events.UnknownNotConsent, At: ptr("/decision~1ref"),
			Reason: "the decision already has an execution with outcome unknown (stream seq " + strconv.FormatUint(held.Unknown, 10) +
				"); an unknown outcome is never consent to run it again"})
	}
	return ps
}

// RoomConflict is the problem of a journal entry whose chain already
// lives in room lives, sent for room asked: a capsule's chain lives in
// one room (docs/design.md, "Chain rules").
func RoomConflict(at events.Location, lives, asked string) events.Problem {
	return events.Problem{Code: events.RoomConflict, At: at,
		Reason: fmt.Sprintf("the capsule's chain already lives in %q", lives), Expected: lives, Actual: asked}
}
