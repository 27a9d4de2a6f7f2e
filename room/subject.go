package room

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/roompub/roompub/events"
)

// ErrBadToken is wrapped by DecodeToken and Subjects.Parse.
var ErrBadToken = errors.New("not a roompub subject token")

// DefaultPrefix is the first token of every room subject.
const DefaultPrefix = "rooms"

// RoomIDPrefix starts every room id ("room:" + non-space characters,
// at most 512; seed 004's room/id).
const RoomIDPrefix = "room:"

// tokenSafe reports whether b stands for itself in a token. Everything
// else, including '.', '*', '>', '/', white space, '~' and every byte of
// a non-ASCII character, is written as "~XX" (upper-case hex).
func tokenSafe(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_' || b == ':'
}

const hexDigits = "0123456789ABCDEF"

// EncodeToken encodes id as one NATS subject token: bytes in [A-Za-z0-9_:-]
// stand for themselves and every other byte is "~" and two upper-case hex
// digits. The encoding is injective and DecodeToken reverses it; an empty
// id encodes to "~" (no id of a valid record or entry is empty).
func EncodeToken(id string) string {
	if id == "" {
		return "~"
	}
	var b strings.Builder
	b.Grow(len(id))
	for i := 0; i < len(id); i++ {
		c := id[i]
		if tokenSafe(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('~')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xF])
	}
	return b.String()
}

// DecodeToken reverses EncodeToken. It accepts only tokens EncodeToken can
// produce (upper-case hex, no byte escaped that needs no escape), so every
// id has exactly one token. Errors wrap ErrBadToken.
func DecodeToken(tok string) (string, error) {
	if tok == "~" {
		return "", nil
	}
	if tok == "" {
		return "", fmt.Errorf("%w: empty token", ErrBadToken)
	}
	var b strings.Builder
	b.Grow(len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if tokenSafe(c) {
			b.WriteByte(c)
			continue
		}
		if c != '~' || i+2 >= len(tok) {
			return "", fmt.Errorf("%w: byte %d of %q", ErrBadToken, i, tok)
		}
		hi, lo := strings.IndexByte(hexDigits, tok[i+1]), strings.IndexByte(hexDigits, tok[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("%w: bad escape at byte %d of %q", ErrBadToken, i, tok)
		}
		v := byte(hi<<4 | lo)
		if tokenSafe(v) {
			return "", fmt.Errorf("%w: needless escape at byte %d of %q", ErrBadToken, i, tok)
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), nil
}

// MaxRoomTokenBytes bounds a room id's subject token. Every room id of the
// schema's form fits its subjects into a NATS control line (4 KiB by
// default) once encoded, except ids of mostly non-ASCII characters, whose
// bytes take three each: those are refused (CheckRoom) rather than sent,
// since a publish over the control line costs the connection.
const MaxRoomTokenBytes = 2048

// ErrSubjectTooLong is wrapped by CheckRoom.
var ErrSubjectTooLong = errors.New("room id too long for a subject once encoded")

// CheckRoom reports whether roomID's subjects fit (MaxRoomTokenBytes).
func (s Subjects) CheckRoom(roomID string) error {
	if n := len(RoomToken(roomID)); n > MaxRoomTokenBytes {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrSubjectTooLong, n, MaxRoomTokenBytes)
	}
	return nil
}

// Subjects builds and parses the subjects of one stream layout. The zero
// value uses DefaultPrefix.
type Subjects struct {
	// Prefix is the first token of every subject; it must be a valid
	// subject token without wildcards. "" means DefaultPrefix.
	Prefix string
}

func (s Subjects) prefix() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// RoomToken is a room's subject token: its id without the "room:"
// prefix every room id has (subjects stay short and readable), encoded
// with EncodeToken.
func RoomToken(roomID string) string { return EncodeToken(strings.TrimPrefix(roomID, RoomIDPrefix)) }

// All is the stream's subject filter: every subject under the prefix.
func (s Subjects) All() string { return s.prefix() + ".>" }

// Root is the prefix in use: Prefix, or DefaultPrefix when it is empty.
func (s Subjects) Root() string { return s.prefix() }

// Room is the filter for every subject of one room.
func (s Subjects) Room(roomID string) string { return s.prefix() + "." + RoomToken(roomID) + ".>" }

// Journal is the subject of one chain in one room.
func (s Subjects) Journal(roomID string, key events.ChainKey) string {
	return s.prefix() + "." + RoomToken(roomID) + ".journal." + EncodeToken(key.RunID) + "." + EncodeToken(key.CapsuleID)
}

// ChainAnyRoom is the filter for one chain in every room: the subject over
// which the gate expects the chain's last sequence, so a capsule can never
// land in two rooms (room_conflict) even with racing publishers.
func (s Subjects) ChainAnyRoom(key events.ChainKey) string {
	return s.prefix() + ".*.journal." + EncodeToken(key.RunID) + "." + EncodeToken(key.CapsuleID)
}

// Records is the subject of one room's execution records.
func (s Subjects) Records(roomID string) string {
	return s.prefix() + "." + RoomToken(roomID) + ".exec"
}

// Checkpoint is the subject of one room's signed checkpoints:
// C2SP tlog-checkpoint notes over the room's tree of admitted messages.
// It is under Room's filter but never a leaf of the tree.
func (s Subjects) Checkpoint(roomID string) string {
	return s.prefix() + "." + RoomToken(roomID) + ".checkpoint"
}

// Notice is the subject of one room's loss notices: what an operator
// acknowledged the store lost of the room, signed by a publisher
// (LossNotice; docs/reliability.md, "Loss notices"). Like Checkpoint, it
// is under Room's filter but never a leaf of the tree.
func (s Subjects) Notice(roomID string) string {
	return s.prefix() + "." + RoomToken(roomID) + ".notice"
}

// MarkerKind names the rule a record marker serves (docs/design.md,
// "Record markers"): one of the Marker constants.
type MarkerKind string

// Record marker kinds. A marker of MarkKey, MarkRun or MarkDecision is
// stored in one atomic batch with the record it names; MarkFormat once per
// room, with the room's first record.
const (
	// MarkKey: the record holding an idempotency/key (one per key: the
	// marker is appended with an expected last subject sequence of 0).
	MarkKey MarkerKind = "key"
	// MarkRun: the record concluding a run/ref (one per run/ref).
	MarkRun MarkerKind = "run"
	// MarkDecision: the latest record of a decision/ref, with its
	// outcome (an unknown outcome ends the decision).
	MarkDecision MarkerKind = "decision"
	// MarkInstance: a record observed on an environment/ref, so a reader
	// finds one instance's records without reading the room's.
	MarkInstance MarkerKind = "instance"
	// MarkFormat: every record of the room has its markers.
	MarkFormat MarkerKind = "format"
)

// MarkerToken is the subject token of a marked value: the unpadded
// base64url SHA-256 of its bytes (43 characters), so a marker subject is
// short and safe whatever the value holds.
func MarkerToken(value string) string {
	h := sha256.Sum256([]byte(value))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// Marker is the subject of the record marker of kind k for value in a
// room: rooms.<room>.mark.<kind>.<MarkerToken(value)>. For MarkFormat,
// value is ignored: rooms.<room>.mark.format.
func (s Subjects) Marker(roomID string, k MarkerKind, value string) string {
	if k == MarkFormat {
		return s.prefix() + "." + RoomToken(roomID) + ".mark.format"
	}
	return s.prefix() + "." + RoomToken(roomID) + ".mark." + string(k) + "." + MarkerToken(value)
}

// InstanceMarkers is the filter for the instance markers of one
// environment/ref: in one room, or in every room when roomID is "".
func (s Subjects) InstanceMarkers(roomID, instance string) string {
	tok := "*"
	if roomID != "" {
		tok = RoomToken(roomID)
	}
	return s.prefix() + "." + tok + ".mark." + string(MarkInstance) + "." + MarkerToken(instance)
}

// Kind is what a room subject carries: one of the Kind constants
// (docs/design.md, "Subjects and room ids").
type Kind string

// Subject kinds returned by Parse.
const (
	KindJournal    Kind = "journal"
	KindExecution  Kind = "execution"
	KindCheckpoint Kind = "checkpoint"
	KindNotice     Kind = "notice"
	// KindMarker is a record marker: an index of the room's records kept
	// by the server, never a leaf (docs/design.md, "Record markers").
	KindMarker Kind = "marker"
)

// Leaf reports whether messages of kind k are leaves of the room's tree
// (journal entries and execution records), as checkpoints, loss notices
// and record markers are not.
func (k Kind) Leaf() bool { return k == KindJournal || k == KindExecution }

// Parsed is a subject taken apart.
type Parsed struct {
	Kind   Kind // KindJournal, KindExecution, KindCheckpoint, KindNotice or KindMarker
	RoomID string
	Chain  events.ChainKey // journal subjects only
	// Marker and MarkerToken: marker subjects only (MarkerToken is "" for
	// MarkFormat).
	Marker      MarkerKind
	MarkerToken string
}

// Parse takes a room subject apart. Errors wrap ErrBadToken.
func (s Subjects) Parse(subject string) (Parsed, error) {
	toks := strings.Split(subject, ".")
	if len(toks) < 3 || toks[0] != s.prefix() {
		return Parsed{}, fmt.Errorf("%w: %q is not under %q", ErrBadToken, subject, s.prefix())
	}
	room, err := DecodeToken(toks[1])
	if err != nil {
		return Parsed{}, err
	}
	p := Parsed{RoomID: RoomIDPrefix + room}
	switch {
	case len(toks) == 3 && toks[2] == "exec":
		p.Kind = KindExecution
	case len(toks) == 3 && toks[2] == "checkpoint":
		p.Kind = KindCheckpoint
	case len(toks) == 3 && toks[2] == "notice":
		p.Kind = KindNotice
	case len(toks) == 5 && toks[2] == "journal":
		p.Kind = KindJournal
		if p.Chain.RunID, err = DecodeToken(toks[3]); err != nil {
			return Parsed{}, err
		}
		if p.Chain.CapsuleID, err = DecodeToken(toks[4]); err != nil {
			return Parsed{}, err
		}
	case len(toks) == 4 && toks[2] == "mark" && toks[3] == string(MarkFormat):
		p.Kind, p.Marker = KindMarker, MarkFormat
	case len(toks) == 5 && toks[2] == "mark" && knownMarker(MarkerKind(toks[3])) && validMarkerToken(toks[4]):
		p.Kind, p.Marker, p.MarkerToken = KindMarker, MarkerKind(toks[3]), toks[4]
	default:
		return Parsed{}, fmt.Errorf("%w: %q has no known layout", ErrBadToken, subject)
	}
	return p, nil
}

func knownMarker(k MarkerKind) bool {
	return k == MarkKey || k == MarkRun || k == MarkDecision || k == MarkInstance
}

// validMarkerToken reports whether tok is a MarkerToken: 43 base64url
// characters whose last one carries no stray bits (one spelling per hash).
func validMarkerToken(tok string) bool {
	if len(tok) != 43 {
		return false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(tok)
	return err == nil && len(b) == sha256.Size
}
