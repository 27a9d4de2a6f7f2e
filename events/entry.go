package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// EntrySchema is the value of "schema" in every capsule envelope v1 entry
// (seed 000).
const EntrySchema = "capsule-envelope/v1"

// EnvelopeKeys are the members of a capsule envelope v1 entry, in RFC 8785
// (byte) order: the envelope schema's 13 required members, and with its
// additionalProperties false its only ones (seed 000).
var EnvelopeKeys = [...]string{"capsule_id", "effect_class", "entry_hash", "harness_version", "kind", "lineage",
	"parent_hash", "payload", "run_id", "schema", "seq", "task_family", "ts"}

// ZeroHash is the parent_hash of the first entry of a chain: 64 zeros
// (seed 000, "parent_hash" description).
var ZeroHash = strings.Repeat("0", 64)

// Entry is one parsed journal entry (capsule envelope v1). It is built only
// by ParseEntry or NewEntry, which compute its canonical bytes and its
// entry_hash preimage digest, so the two can never be out of step with the
// content. An Entry is immutable and safe for concurrent reads.
//
// A line already in RFC 8785 form with the envelope's simple shape (see
// Fields) is parsed in one pass without a map; Object builds the map on
// first use. A line that may hold a surrogate escape is parsed as the
// upstream's JSON.parse reads it (parseStringified), so lone surrogates
// are kept: in the canonical bytes and the hash as the upstream writes
// them (\udxxx), in the string accessors (RunID, Metadata, ...) as WTF-8
// (the three bytes of the surrogate's code point), so strings that differ
// in them differ. Any other line takes the general path (jcs,
// encoding/json).
type Entry struct {
	canonical []byte
	computed  [sha256.Size]byte // SHA-256 of the canonical entry without entry_hash
	fast      bool              // fields is the entry's content (the fast path)
	// indexed: fields and known hold the members the accessors read
	// (always when fast; for a line with surrogate escapes, fields holds
	// only the known members, strings as WTF-8).
	indexed bool
	fields  []Field // top-level members in canonical order, when indexed
	// known[k] is the index in fields of member knownKeys[k], -1 when the
	// entry has none (when indexed): the accessors the gate calls many
	// times per entry look it up once, at parse.
	known [numKnown]int32
	// envelope: fast, and the members are EnvelopeKeys in order.
	envelope bool
	// hexHashes: fast, and entry_hash and parent_hash were read as 64
	// hex digits each (IsHex64).
	hexHashes bool
	// hashKnown: hashOK says whether entry_hash is a string equal to
	// ComputedHash (the fast path compares them once, at parse).
	hashKnown, hashOK bool

	objOnce sync.Once
	obj     map[string]any
}

// ParseEntry parses one journal line (without its newline). It checks only
// that the line is strict JSON holding an object; the envelope rules are
// checked by package validate. Strict JSON is I-JSON (RFC 7493) except
// that strings may hold lone surrogates, as the upstream's JSON.stringify
// writes them (\udxxx). Errors wrap ErrNotJSON, or ErrNotObject for a line
// that is JSON but not an object.
func ParseEntry(line []byte) (*Entry, error) {
	e, valid, err := parseText(line, string(line), false, nil)
	if !valid {
		_, err = Canonicalize(line) // the general path's error
	}
	return e, err
}

// parseText parses line, whose bytes the caller also has as text (a
// journal batch's, converted once for all its lines): by the fast path,
// which checks the line's UTF-8 as it reads it, or, when that declines
// the line, by the general path if the line is valid UTF-8 (valid is
// false, and e nil, when it is not). With owned the entry may keep line
// as its canonical bytes, and no one may change it; with arena the fast
// path's entry and members are taken from there.
func parseText(line []byte, text string, owned bool, arena *entryArena) (e *Entry, valid bool, err error) {
	if e := parseCanonical(line, text, owned, arena); e != nil {
		return e, true, nil
	}
	if !utf8.Valid(line) {
		return nil, false, nil
	}
	e, err = parseGeneral(line)
	return e, true, err
}

// parseCanonical is the fast path: it returns nil unless line is canonical
// and of the simple shape, and then an entry equal to what the general
// path builds (FuzzEntryFastPath holds the two side by side). src is line
// as a string; the entry's strings point into it. With owned, the entry
// keeps line itself as its canonical bytes; with arena, the entry, its
// members and its hash are taken from there.
func parseCanonical(line []byte, src string, owned bool, arena *entryArena) *Entry {
	return parseCanonicalHash(line, src, owned, arena, true)
}

// parseCanonicalHash is parseCanonical, with entry_hash taken unread by
// the scan when lazyHash (scanCanonicalEntry): when it is then neither
// the digest nor 64 hex digits, the line is parsed again reading it.
func parseCanonicalHash(line []byte, src string, owned bool, arena *entryArena, lazyHash bool) *Entry {
	s, fields, ok := scanCanonicalEntry(src, arena, lazyHash)
	if !ok {
		return nil
	}
	cut, end := s.hashCut()
	var h hash.Hash
	var e *Entry
	if arena != nil {
		h, e = arena.sha256(), arena.entry()
	} else {
		h, e = sha256.New(), &Entry{}
	}
	h.Write(line[:cut])
	h.Write(line[end:])
	canonical := line[:len(line):len(line)] // an append to it must not write into the caller's next bytes
	if !owned {
		canonical = []byte(src)
	}
	e.canonical, e.fast, e.indexed, e.fields = canonical, true, true, fields
	e.known, e.envelope, e.hexHashes = s.known, s.envelope, s.hexHashes == 2
	h.Sum(e.computed[:0])
	claimed, ok := e.strOK(knownEntryHash)
	e.hashKnown, e.hashOK = true, ok && e.hashIs(claimed)
	if s.hashUnread && !e.hashOK && !IsHex64(claimed) {
		return parseCanonicalHash(line, src, owned, arena, false)
	}
	return e
}

// parseGeneral is the general path: canonical form by jcs, decoding by
// encoding/json, the preimage re-serialised from the map. A line that may
// hold a surrogate escape is parsed by parseSurrogates instead: its map
// may hold U+FFFD for a lone surrogate, so nothing may be made from it.
func parseGeneral(line []byte) (*Entry, error) {
	if mayHoldSurrogateEscape(line) {
		return parseSurrogates(line)
	}
	obj, canon, err := DecodeObject(line)
	if err != nil {
		return nil, err
	}
	return newEntry(obj, canon)
}

// parseSurrogates parses a line as the upstream's JSON.parse reads it,
// lone surrogates kept, and writes its canonical form and entry_hash
// preimage as the upstream's JSON.stringify writes them. The accessors
// read the known members with their strings as WTF-8, so that strings
// that differ only in their lone surrogates stay different (in Object,
// decoded by encoding/json from the canonical bytes, each is U+FFFD).
func parseSurrogates(line []byte) (*Entry, error) {
	root, _, err := parseStringified(line)
	if err != nil {
		return nil, err
	}
	canon := appendStringified(make([]byte, 0, len(line)), &root, "")
	if err := objectRequired(canon); err != nil {
		return nil, err
	}
	pre := appendStringified(make([]byte, 0, len(canon)), &root, "entry_hash")
	e := &Entry{canonical: canon, computed: sha256.Sum256(pre), indexed: true}
	for _, m := range root.members {
		if !slices.Contains(knownKeys[:], m.key) {
			continue
		}
		// Only a string's and a number's text is read; other kinds are
		// told apart for what they are, an array is left without one.
		f := Field{Key: m.key}
		switch t := m.value.text; m.value.kind {
		case jsString:
			f.Kind, f.Text = KindString, t
		case jsObject:
			f.Kind = KindObject
		case jsScalar:
			switch t {
			case "true", "false":
				f.Kind = KindBool
			case "null":
				f.Kind = KindNull
			default:
				f.Kind, f.Text = KindNumber, t
			}
		}
		e.fields = append(e.fields, f)
	}
	e.indexKnown()
	return e, nil
}

func newEntry(obj map[string]any, canon []byte) (*Entry, error) {
	pre, err := CanonicalWithout(obj, "entry_hash")
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(pre)
	return &Entry{obj: obj, canonical: canon, computed: sum}, nil
}

// NewEntry builds an entry from its members, setting entry_hash to the
// hash of the rest (any entry_hash given is replaced). Values must be what
// encoding/json produces (string, json.Number or float64, nil, maps). It is
// how writers of journals, and tests, make entries that verify.
func NewEntry(members map[string]any) (*Entry, error) {
	obj := make(map[string]any, len(members)+1)
	for k, v := range members {
		obj[k] = v
	}
	delete(obj, "entry_hash")
	pre, err := CanonicalWithout(obj)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(pre)
	obj["entry_hash"] = hex.EncodeToString(sum[:])
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode entry: %w", err)
	}
	return ParseEntry(raw)
}

// Canonical returns the entry's RFC 8785 bytes: a valid journal line holds
// exactly these bytes followed by "\n". The slice must not be modified.
func (e *Entry) Canonical() []byte { return e.canonical }

// Object returns the decoded entry (numbers as json.Number). It is shared:
// callers must not modify it. For an entry parsed by the fast path, or
// with surrogate escapes, it is decoded from the canonical bytes on first
// use, once, by encoding/json, which makes each lone surrogate U+FFFD: the
// map is for the schema and the secret canaries, which U+FFFD passes as a
// lone surrogate would; no hash or stored byte is made from it.
func (e *Entry) Object() map[string]any {
	e.objOnce.Do(func() {
		if e.obj != nil {
			return
		}
		obj, err := decodeCanonical(e.canonical)
		if err != nil {
			obj = map[string]any{} // cannot happen: the bytes are canonical JSON
		}
		e.obj = obj
	})
	return e.obj
}

// Fields returns the entry's top-level members in RFC 8785 order, and true,
// when the entry was parsed by the fast path: its line was canonical, every
// key printable ASCII without escapes, and every value a string, number,
// boolean, null or an object of those. Otherwise it returns nil, false and
// Object is the only representation. The slice is shared: callers must not
// modify it.
func (e *Entry) Fields() ([]Field, bool) {
	if !e.fast {
		return nil, false
	}
	return e.fields, true
}

// HasEnvelopeKeys reports whether the entry was parsed by the fast path
// (Fields) and its members are exactly EnvelopeKeys, in that order: their
// names were matched whole as the line was read, so a check of the
// envelope's shape need not compare them again.
func (e *Entry) HasEnvelopeKeys() bool { return e.envelope }

// ComputedHash is the lowercase hex SHA-256 of the canonical entry without
// entry_hash: what entry_hash must be (seed 000).
func (e *Entry) ComputedHash() string { return hex.EncodeToString(e.computed[:]) }

// HashesHex reports whether the fast path read the entry's entry_hash
// and parent_hash as 64 lower-case hex digits each (IsHex64): as it
// reads a line of the envelope's members (HasEnvelopeKeys), it checks
// them for that pattern instead of only for what a string may hold, so
// that the envelope check need not read them again. false says nothing.
func (e *Entry) HashesHex() bool { return e.hexHashes }

// IsHex64 reports whether s matches ^[0-9a-f]{64}$, the pattern of
// entry_hash and parent_hash (seed 000), eight bytes at a time: the
// words' verdicts are gathered and tested once, not a branch for each.
func IsHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	s = s[:64]
	bad := notHex(wordAt(s, 0)) | notHex(wordAt(s, 8)) | notHex(wordAt(s, 16)) | notHex(wordAt(s, 24)) |
		notHex(wordAt(s, 32)) | notHex(wordAt(s, 40)) | notHex(wordAt(s, 48)) | notHex(wordAt(s, 56))
	return bad == 0
}

// notHex is zero exactly when each byte of x is in [0-9a-f]. For a word
// of bytes below 0x80, adding 0x80-c to a byte sets its high bit exactly
// when it is c or more, and never carries into the next byte; a word
// with a byte of 0x80 or above is not hex whatever its other lanes say.
func notHex(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	digit := (x + ones*(0x80-'0')) &^ (x + ones*(0x80-'9'-1))
	letter := (x + ones*(0x80-'a')) &^ (x + ones*(0x80-'f'-1))
	return (x | ^(digit | letter)) & highs
}

// HashMatches reports whether the entry's entry_hash is a string equal
// to ComputedHash: the entry_hash rule holds, and entry_hash is then 64
// lower-case hex digits.
func (e *Entry) HashMatches() bool {
	if e.hashKnown {
		return e.hashOK
	}
	claimed, ok := e.strOK(knownEntryHash)
	return ok && e.hashIs(claimed)
}

// hashIs reports whether claimed is ComputedHash, without making it:
// four bytes of the digest at a time spread to a 16-bit lane each,
// written as eight hex digits in a word (hexWord8) and compared with
// eight bytes of claimed; the differences gathered and tested once.
func (e *Entry) hashIs(claimed string) bool {
	if len(claimed) != 2*sha256.Size {
		return false
	}
	claimed = claimed[:2*sha256.Size]
	d := &e.computed
	var diff uint64
	for i := 0; i < sha256.Size; i += 4 {
		v := uint64(d[i]) | uint64(d[i+1])<<8 | uint64(d[i+2])<<16 | uint64(d[i+3])<<24
		v = (v | v<<16) & 0x0000ffff0000ffff
		v = (v | v<<8) & 0x00ff00ff00ff00ff
		diff |= hexWord8(v) ^ wordAt(claimed, 2*i)
	}
	return diff == 0
}

// hexWord8 writes four bytes, one in the low byte of each 16-bit lane of
// v, as their eight lower-case hex digits, the first digit in the low
// byte (the order of a string read little-endian). Each nibble moves to
// a byte of its own; a nibble of 10 or more carries into bit 4 when 6 is
// added, which picks 'a'-10 over '0' for it. No lane carries into the
// next.
func hexWord8(v uint64) uint64 {
	const ones, nib = 0x0101010101010101, 0x000f000f000f000f
	n := (v>>4)&nib | (v&nib)<<8
	letter := (n + 6*ones) >> 4 & ones
	return n + '0'*ones + letter*('a'-'0'-10)
}

// wordAt is the eight bytes of s from i, little-endian.
func wordAt(s string, i int) uint64 {
	w := s[i : i+8]
	return uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
}

// EntryHash is the entry_hash the entry claims ("" if absent or not a string).
func (e *Entry) EntryHash() string { return e.str(knownEntryHash) }

// ParentHash is the claimed parent_hash ("" if absent or not a string).
func (e *Entry) ParentHash() string { return e.str(knownParentHash) }

// RunID is run_id ("" if absent or not a string).
func (e *Entry) RunID() string { return e.str(knownRunID) }

// CapsuleID is capsule_id ("" if absent or not a string).
func (e *Entry) CapsuleID() string { return e.str(knownCapsuleID) }

// The members the chain rules read of every entry (seed 000), indexed at
// parse in Entry.known.
const (
	knownEntryHash = iota
	knownParentHash
	knownRunID
	knownCapsuleID
	knownHarnessVersion
	knownTaskFamily
	knownSeq
	numKnown
)

// knownKeys names the members of Entry.known.
var knownKeys = [numKnown]string{"entry_hash", "parent_hash", "run_id", "capsule_id", "harness_version", "task_family", "seq"}

// noneKnown is Entry.known before any member is indexed.
var noneKnown = func() (t [numKnown]int32) {
	for k := range t {
		t[k] = -1
	}
	return t
}()

// indexKnown fills e.known from e.fields, in one pass (the fast path
// fills it as it scans).
func (e *Entry) indexKnown() {
	e.known = noneKnown
	for i, f := range e.fields {
		if k := knownIndex(f.Key); k >= 0 {
			e.known[k] = int32(i)
		}
	}
}

// knownIndex is the index of key in knownKeys, -1 if it is not there: a
// switch, so that the other members cost one comparison or two, not
// seven (TestKnownIndex holds it to knownKeys).
func knownIndex(key string) int {
	switch key {
	case "entry_hash":
		return knownEntryHash
	case "parent_hash":
		return knownParentHash
	case "run_id":
		return knownRunID
	case "capsule_id":
		return knownCapsuleID
	case "harness_version":
		return knownHarnessVersion
	case "task_family":
		return knownTaskFamily
	case "seq":
		return knownSeq
	}
	return -1
}

// knownField returns known member k of an indexed entry, nil if it has
// none.
func (e *Entry) knownField(k int) *Field {
	i := e.known[k]
	if i < 0 {
		return nil
	}
	return &e.fields[i]
}

// Seq is the entry's claimed chain position; ok is false when seq is
// absent or not an integer that fits an int64.
func (e *Entry) Seq() (seq int64, ok bool) {
	var text string
	if e.indexed {
		f := e.knownField(knownSeq)
		if f == nil || f.Kind != KindNumber {
			return 0, false
		}
		text = f.Text
	} else {
		n, isNum := e.obj["seq"].(json.Number)
		if !isNum {
			return 0, false
		}
		text = string(n)
	}
	if v, ok := smallNatural(text); ok {
		return v, true
	}
	v, err := strconv.ParseInt(text, 10, 64) // json.Number.Int64
	if err != nil {
		return 0, false
	}
	return v, true
}

// smallNatural reads text when it is 1 to 18 decimal digits, which
// strconv.ParseInt reads as the same int64 (18 digits cannot overflow),
// without its generality: the seq of every entry.
func smallNatural(text string) (int64, bool) {
	if len(text) == 0 || len(text) > 18 {
		return 0, false
	}
	var v int64
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// Metadata returns the four members that must agree across a capsule.
func (e *Entry) Metadata() CapsuleMeta {
	if e.envelope {
		// Where EnvelopeKeys has them, without a look-up each.
		f := (*[len(EnvelopeKeys)]Field)(e.fields)
		run, capsule, harness, family := &f[envelopeRunID], &f[envelopeCapsuleID], &f[envelopeHarness], &f[envelopeFamily]
		if run.Kind == KindString && capsule.Kind == KindString && harness.Kind == KindString && family.Kind == KindString {
			return CapsuleMeta{RunID: run.Text, CapsuleID: capsule.Text, HarnessVersion: harness.Text, TaskFamily: family.Text}
		}
	}
	return CapsuleMeta{
		RunID:          e.RunID(),
		CapsuleID:      e.CapsuleID(),
		HarnessVersion: e.str(knownHarnessVersion),
		TaskFamily:     e.str(knownTaskFamily),
	}
}

func (e *Entry) str(k int) string {
	s, _ := e.strOK(k)
	return s
}

// strOK returns known member k and whether it is a string.
func (e *Entry) strOK(k int) (string, bool) {
	if e.indexed {
		f := e.knownField(k)
		if f == nil || f.Kind != KindString {
			return "", false
		}
		return f.Text, true
	}
	s, ok := e.obj[knownKeys[k]].(string)
	return s, ok
}

// ChainKey names one chain: a journal is one chain per (run_id, capsule_id)
// (seed 000).
type ChainKey struct {
	RunID     string `json:"run_id"`
	CapsuleID string `json:"capsule_id"`
}

// CapsuleMeta is the metadata every entry of a capsule repeats, as
// capsule.json states it.
type CapsuleMeta struct {
	RunID          string `json:"run_id"`
	CapsuleID      string `json:"capsule_id"`
	HarnessVersion string `json:"harness_version"`
	TaskFamily     string `json:"task_family"`
}

// Key returns the chain the metadata names.
func (m CapsuleMeta) Key() ChainKey { return ChainKey{RunID: m.RunID, CapsuleID: m.CapsuleID} }

// MetaField is a member of the capsule metadata two CapsuleMeta differ
// in: its key, and its value in each.
type MetaField struct{ Key, Want, Have string }

// Differences lists the members in which have differs from m, in the
// envelope's order (run_id, capsule_id, harness_version, task_family),
// Want being m's value: the metadata_mismatch of an entry against its
// chain, or of a capsule.json against a stored chain.
func (m CapsuleMeta) Differences(have CapsuleMeta) []MetaField {
	var out []MetaField
	for _, f := range [...]MetaField{
		{"run_id", m.RunID, have.RunID},
		{"capsule_id", m.CapsuleID, have.CapsuleID},
		{"harness_version", m.HarnessVersion, have.HarnessVersion},
		{"task_family", m.TaskFamily, have.TaskFamily},
	} {
		if f.Want != f.Have {
			out = append(out, f)
		}
	}
	return out
}

// ErrInvalidCapsule is wrapped by ParseCapsule.
var ErrInvalidCapsule = errors.New("invalid capsule.json")

// ParseCapsule reads capsule metadata as a journal request carries it
// (room's Roompub-Capsule header): a strict JSON object whose run_id,
// capsule_id, harness_version and task_family are non-empty strings; other
// members are allowed. It checks only what the gate compares entries
// against; a capsule directory's capsule.json is checked in full by
// CheckCapsule. Errors wrap ErrInvalidCapsule.
func ParseCapsule(raw []byte) (CapsuleMeta, error) {
	obj, _, err := DecodeObject(raw)
	if err != nil {
		return CapsuleMeta{}, fmt.Errorf("%w: %v", ErrInvalidCapsule, err)
	}
	var m CapsuleMeta
	var errs []error
	for _, f := range []struct {
		key string
		dst *string
	}{{"run_id", &m.RunID}, {"capsule_id", &m.CapsuleID}, {"harness_version", &m.HarnessVersion}, {"task_family", &m.TaskFamily}} {
		s, ok := obj[f.key].(string)
		if !ok || s == "" {
			errs = append(errs, fmt.Errorf("%w: %q must be a non-empty string", ErrInvalidCapsule, f.key))
			continue
		}
		*f.dst = s
	}
	return m, errors.Join(errs...)
}
