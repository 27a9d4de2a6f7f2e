package room

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
)

// MetadataRecordMarkers is the room stream's metadata key that turns
// record markers on; MarkersV1 its value (docs/design.md, "Record
// markers"). A stream without it keeps the relation rules in the gate's
// memory: readers of v0.2.0 and before would set a marker aside as
// bad_subject, so StreamConfig does not set it; an administrator adds it
// once every serve and reader knows markers (docs/operations.md, "Record
// markers").
const (
	MetadataRecordMarkers = "roompub-record-markers"
	MarkersV1             = "v1"
)

// RecordMarkers reports whether cfg turns record markers on.
func RecordMarkers(cfg jetstream.StreamConfig) bool {
	return cfg.Metadata[MetadataRecordMarkers] == MarkersV1
}

// MetadataAttestation is the room stream's metadata key that sets the
// form of the gate's attestations; AttestationCompact its one value,
// checkpoint.FormCompact (docs/checkpoints.md, "Two forms"). A stream
// without it gets checkpoint.FormEveryMessage, which readers of v0.3.0
// and before need, so StreamConfig sets it on the streams it makes only;
// an administrator adds it once every serve and reader knows the compact
// form (docs/operations.md, "The attestation's compact form").
const (
	MetadataAttestation = "roompub-attestation"
	AttestationCompact  = "compact"
)

// CompactAttestations reports whether cfg sets the compact form.
func CompactAttestations(cfg jetstream.StreamConfig) bool {
	return cfg.Metadata[MetadataAttestation] == AttestationCompact
}

// Marker is the body of a record marker: which record of the room it
// stands for. Markers are stored in one atomic batch (ADR-50) after their
// record, so the record's stream sequence is the marker's minus Offset.
// Its JSON is one line with the members in this order.
type Marker struct {
	// Record is the record's content digest (events.Record.ContentDigest).
	Record string `json:"record"`
	// Offset is how many messages after its record the marker was
	// stored: at least 1.
	Offset uint64 `json:"offset"`
	// Outcome is the record's outcome, on MarkDecision markers only.
	Outcome string `json:"outcome,omitempty"`
	// Position is the record's place among the messages on its record
	// subject (0 for the first; checkpoint.RecordPosition), on
	// MarkInstance markers only: a reader that finds the record through
	// the marker checks its attestation there without counting the room.
	Position *uint64 `json:"position,omitempty"`
}

// maxMarkerBytes bounds a marker's body: a digest, a number and an
// outcome fit in far less.
const maxMarkerBytes = 512

// Encode is m's JSON.
func (m Marker) Encode() []byte {
	b, _ := json.Marshal(m) // strings and a number: cannot fail
	return b
}

// ParseMarker reads a marker body, in the one form Encode writes: anything
// else (another spelling, unknown members, an offset of 0) is an error, so
// a marker read back is one the gate wrote or a forgery that says so.
func ParseMarker(data []byte) (Marker, error) {
	var m Marker
	if len(data) > maxMarkerBytes {
		return m, fmt.Errorf("marker of %d bytes, at most %d", len(data), maxMarkerBytes)
	}
	// Unknown members and other spellings of the names pass Unmarshal:
	// Encode would not write them, so the comparison below refuses them.
	if err := json.Unmarshal(data, &m); err != nil {
		return Marker{}, fmt.Errorf("marker: %w", err)
	}
	if m.Offset == 0 || m.Record == "" || !bytes.Equal(m.Encode(), data) {
		return Marker{}, fmt.Errorf("marker %q is not in its one form (record, offset >= 1, outcome)", data)
	}
	return m, nil
}

// MaxBatchMarkers is the most markers a record's batch holds after it:
// key, run, decision, instance and format.
const MaxBatchMarkers = 5

// NextMsg returns the first message on subject subj at stream seq or
// after it (a direct get with next_by_subj): its sequence and data, ok
// false when there is none.
type NextMsg func(seq uint64, subj string) (at uint64, data []byte, ok bool, err error)

// FormatMarked reports whether a room's format marker is stored: a
// message on formatSubj naming the room's first record on recordsSubj by
// its content digest (events.ContentDigestOf of the stored, canonical
// bytes) and stored inside that record's batch, at most MaxBatchMarkers
// messages after it. A message written around the gate can name the
// record but cannot be stored inside a batch stored before it, so it
// does not turn a room whose records predate markers over to the markers'
// rules (docs/design.md, "Record markers"). Only the messages of that
// window are read. The gate and evidence both decide with it.
func FormatMarked(next NextMsg, recordsSubj, formatSubj string) (bool, error) {
	first, data, ok, err := next(1, recordsSubj)
	if err != nil || !ok {
		return false, err
	}
	digest := events.ContentDigestOf(data)
	for seq := first + 1; ; {
		at, data, ok, err := next(seq, formatSubj)
		if err != nil || !ok || at > first+MaxBatchMarkers {
			return false, err
		}
		if m, err := ParseMarker(data); err == nil && m.Record == digest && m.RecordSeq(at) == first {
			return true, nil
		}
		seq = at + 1
	}
}

// RecordSeq is the stream sequence of the record a marker stored at seq
// names; 0 when the offset points before the stream's start.
func (m Marker) RecordSeq(seq uint64) uint64 {
	if m.Offset >= seq {
		return 0
	}
	return seq - m.Offset
}

// MarkerOffset is the offset a marker of kind k has in its record's
// batch, as the gate stores it (record, then key, run and decision
// markers): key 1, run 2, decision 3; 0 for the other kinds, whose offset
// no rule reads. A key, run or decision marker at another offset was not
// written by the gate (docs/design.md, "Record markers").
func MarkerOffset(k MarkerKind) uint64 {
	switch k {
	case MarkKey:
		return 1
	case MarkRun:
		return 2
	case MarkDecision:
		return 3
	}
	return 0
}

// MarkedValue is the value of rec a marker of kind k stands for: its
// idempotency/key, run/ref, decision/ref or environment/ref; "" for
// MarkFormat or a value rec lacks.
func MarkedValue(rec *events.Record, k MarkerKind) string {
	switch k {
	case MarkKey:
		return rec.IdempotencyKey()
	case MarkRun:
		return rec.RunRef()
	case MarkDecision:
		return rec.DecisionRef()
	case MarkInstance:
		env, _ := rec.EnvironmentRef()
		return env
	}
	return ""
}

// Names reports whether rec, the record at m's offset, is the one m, a
// marker of kind k for value, stands for: it has m's content digest and
// holds value, and for a decision the outcome m says. With a record that
// passed its own rules in its room, that makes m genuine (docs/design.md,
// "Record markers"); a marker written around the gate names none.
func (m Marker) Names(rec *events.Record, k MarkerKind, value string) bool {
	if rec.ContentDigest() != m.Record || MarkedValue(rec, k) != value {
		return false
	}
	return k != MarkDecision || rec.Outcome() == m.Outcome
}
