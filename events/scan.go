package events

import (
	"crypto/sha256"
	"encoding/json"
	"hash"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// Kind is the JSON type of a Field's value.
type Kind uint8

// The kinds of value a Field holds.
const (
	KindString Kind = iota + 1 // Text is the decoded string
	KindNumber                 // Text is the number as written, which is its RFC 8785 form (a json.Number's text)
	KindBool                   // Text is "true" or "false"
	KindNull                   // Text is ""
	KindObject                 // Members holds the object's members
)

// Field is one member of an entry in the representation the fast path
// builds (see Entry.Fields): the key, the value's kind, and the value as
// text or, for an object, its members in canonical order. It holds exactly
// what Entry.Object holds for the same member: Text is what the string or
// json.Number there holds.
type Field struct {
	Key     string
	Kind    Kind
	Text    string
	Members []Field // KindObject only, in RFC 8785 order
}

// maxFastDepth is the deepest object the fast path represents: the entry
// and objects directly inside it (the envelope's payload). Deeper nesting
// and arrays take the general path.
const maxFastDepth = 2

// scanner recognises one journal line that is already in RFC 8785
// canonical form and has the envelope's simple shape: an object of scalars
// and objects of scalars, with ASCII keys written without escapes. It never
// says more than "this line is canonical and here are its members"; any
// line it does not recognise goes to the general path (jcs and
// encoding/json), which decides what is wrong with it, if anything. It
// checks UTF-8 as it goes, in strings, the only place a byte of 0x80 and
// above may be (keys are printable ASCII): a line it takes is valid UTF-8,
// so the caller checks the encoding only of a line it declines.
type scanner struct {
	src string
	i   int
	// The span of the top-level "entry_hash" member, key to end of value;
	// hashStart is -1 when there is none.
	hashStart, hashEnd int
	// arena, when not nil, receives the members in place (entryArena);
	// without one each object's members get an allocation of their own.
	arena *entryArena
	// envelope: the members are EnvelopeKeys in order, read by
	// envelopeObject; hexHashes counts its hashes read by hexString.
	envelope  bool
	hexHashes int
	// lazyHash: envelopeObject takes entry_hash's 64 bytes between its
	// quotes without reading them, and sets hashUnread when it did
	// (parseCanonical reads them when they are not the digest).
	lazyHash, hashUnread bool
	// known[k] is the index of top-level member knownKeys[k], -1 for none
	// (Entry.known), found as the members are scanned.
	known [numKnown]int32
}

// envelopeTokens are EnvelopeKeys as a canonical line of the envelope's
// members writes them: each preceded by the '{' or ',' before it,
// quoted, followed by ':' and by the first byte of its value when that
// is a string ('"') or the payload ('{'). A line of the envelope's members
// is read by comparing each with the bytes where the member must start
// (envelopeObject): the name's byte class, its order after the previous
// name, its index in knownKeys (envelopeKnown), the separator before it
// and its value's kind are then known instead of read.
var envelopeTokens = func() (t [len(EnvelopeKeys)]token) {
	for i, k := range EnvelopeKeys {
		sep, open := ",", `"`
		if i == 0 {
			sep = "{"
		}
		switch envelopeReads[i] {
		case readObject:
			open = "{"
		case readValue:
			open = ""
		}
		t[i] = newToken(sep + `"` + k + `":` + open)
	}
	return t
}()

// envelopeRead is how envelopeObject reads the value of a member of the
// envelope, after its token.
type envelopeRead uint8

const (
	readString     envelopeRead = iota // a string (str)
	readRepeated                       // a string every line of a capsule repeats (entryArena.repeated)
	readEntryHash                      // entry_hash: 64 bytes taken unread (scanner.lazyHash), or as parent_hash
	readParentHash                     // 64 hex digits (hexString), or a string
	readObject                         // the payload
	readValue                          // seq: any value (value), an integer being the envelope's
)

// envelopeReads says how each of EnvelopeKeys is read: by the kind the
// envelope schema gives it (strings but for the payload and seq), and for
// the members every line of a capsule repeats (its metadata, and
// schema's constant) and the hashes, as those.
var envelopeReads = func() (t [len(EnvelopeKeys)]envelopeRead) {
	for i, k := range EnvelopeKeys {
		switch k {
		case "payload":
			t[i] = readObject
		case "seq":
			t[i] = readValue
		case "capsule_id", "harness_version", "run_id", "schema", "task_family":
			t[i] = readRepeated
		case "entry_hash":
			t[i] = readEntryHash
		case "parent_hash":
			t[i] = readParentHash
		}
	}
	return t
}()

// token is a string of 5 to 24 bytes compared as three words, each
// masked to the token's bytes in it (a word past its end masked whole),
// without a branch on its length.
type token struct {
	s    string
	word [3]uint64 // the token's bytes, eight a word, zero past its end
	mask [3]uint64 // all ones over the token's bytes in each word
}

func newToken(t string) token {
	if len(t) < 5 || len(t) > 24 {
		panic("events: token length out of range: " + t)
	}
	k := token{s: t}
	padded := t + strings.Repeat("\x00", 24-len(t))
	for w := range k.word {
		if n := min(max(len(t)-8*w, 0), 8); n > 0 {
			k.mask[w] = ^uint64(0) >> (64 - 8*n)
		}
		k.word[w] = wordAt(padded, 8*w) & k.mask[w]
	}
	return k
}

// at reports whether src starts with the token.
func (k *token) at(src string) bool {
	if len(src) < 24 {
		return strings.HasPrefix(src, k.s)
	}
	src = src[:24]
	return (wordAt(src, 0)^k.word[0])&k.mask[0]|(wordAt(src, 8)^k.word[1])&k.mask[1]|(wordAt(src, 16)^k.word[2])&k.mask[2] == 0
}

// envelopeKnown is Entry.known of an entry whose members are
// EnvelopeKeys, in that order.
var envelopeKnown = func() (t [numKnown]int32) {
	t = noneKnown
	for i, k := range EnvelopeKeys {
		if j := knownIndex(k); j >= 0 {
			t[j] = int32(i)
		}
	}
	return t
}()

// The index of entry_hash, parent_hash and the metadata in EnvelopeKeys.
var (
	envelopeHash      = int(envelopeKnown[knownEntryHash])
	envelopeParent    = int(envelopeKnown[knownParentHash])
	envelopeRunID     = int(envelopeKnown[knownRunID])
	envelopeCapsuleID = int(envelopeKnown[knownCapsuleID])
	envelopeHarness   = int(envelopeKnown[knownHarnessVersion])
	envelopeFamily    = int(envelopeKnown[knownTaskFamily])
)

// scanCanonicalEntry returns the fields of line when line is the RFC 8785
// form of an object of the simple shape; ok is false otherwise (the line
// may still be canonical, or not JSON at all: the general path decides).
// The fields are taken from arena when it is not nil. With lazyHash, an
// envelope line's entry_hash of 64 bytes between quotes is taken without
// being read (scanner.hashUnread; parseCanonical reads it when it is
// not the digest). A line that fails after such an entry_hash fails
// read in full too: the quote 65 bytes on ends a string either way, so
// the bytes after it are read alike, and a member name expected there
// and not found sends the line to be read by name.
func scanCanonicalEntry(src string, arena *entryArena, lazyHash bool) (s scanner, fields []Field, ok bool) {
	s = scanner{src: src, hashStart: -1, arena: arena, known: noneKnown, lazyHash: lazyHash}
	if len(src) < 2 || src[0] != '{' {
		return s, nil, false
	}
	fields, ok, decided := s.envelopeObject()
	if !decided {
		// Other members, or the envelope's with a value of another kind:
		// read by name.
		s = scanner{src: src, hashStart: -1, arena: arena, known: noneKnown}
		fields, ok = s.object(1)
		if ok {
			s.envelopeByName(fields)
		}
	}
	if !ok || s.i != len(src) {
		return s, nil, false
	}
	return s, fields, true
}

// envelopeByName sets s.envelope and s.hexHashes for fields read by name,
// as envelopeObject sets them: a line whose members are EnvelopeKeys but
// whose value of one is of another kind than the envelope gives it is
// read by name, and its members are still the envelope's.
func (s *scanner) envelopeByName(fields []Field) {
	if len(fields) != len(EnvelopeKeys) {
		return
	}
	for i := range fields {
		if fields[i].Key != EnvelopeKeys[i] {
			return
		}
	}
	s.envelope = true
	for _, i := range [...]int{envelopeHash, envelopeParent} {
		if f := &fields[i]; f.Kind == KindString && IsHex64(f.Text) {
			s.hexHashes++
		}
	}
}

// envelopeObject scans the entry when its members are EnvelopeKeys, in
// order, with values of the kinds the envelope gives them: each member's
// start compared whole with the one expected next (envelopeTokens), the
// members scanned into slots taken at once. decided is false when a name,
// a separator, a value's kind or the number of members differs: the line
// is then scanned again by name. A value that is not canonical decides (ok
// false): scanning by name would meet the same names and then the same
// value.
func (s *scanner) envelopeObject() (fields []Field, ok, decided bool) {
	if s.arena != nil {
		fields = s.arena.take(len(EnvelopeKeys))
	} else {
		fields = make([]Field, len(EnvelopeKeys))
	}
	fields = fields[:len(EnvelopeKeys)]
	src := s.src
	i := 0
	for n := range len(EnvelopeKeys) {
		tok := &envelopeTokens[n]
		if !tok.at(src[i:]) {
			return nil, false, false
		}
		start := i + 1 // the name's opening quote
		i += len(tok.s)
		f := &fields[n]
		f.Key = EnvelopeKeys[n]
		s.i = i - 1 // the value's first byte
		switch envelopeReads[n] {
		case readString:
			if !s.strField(f) {
				return nil, false, true
			}
		case readRepeated:
			if s.arena == nil {
				if !s.strField(f) {
					return nil, false, true
				}
				break
			}
			// The same bytes, from the opening quote to the closing one,
			// scan to the same string.
			r, q := &s.arena.repeated[n], s.i
			if r.raw != "" && len(src)-q >= len(r.raw) && src[q:q+len(r.raw)] == r.raw {
				f.Kind, f.Text, f.Members = KindString, r.text, nil
				s.i = q + len(r.raw)
				break
			}
			if !s.strField(f) {
				return nil, false, true
			}
			r.raw, r.text = src[q:s.i], f.Text
		case readEntryHash:
			if s.lazyHash && len(src)-s.i >= 64+2 && src[s.i+64+1] == '"' {
				// Taken unread: it is compared with the digest, which
				// it can equal only as 64 hex digits, and read when it
				// does not (parseCanonical).
				f.Kind, f.Text, f.Members = KindString, src[s.i+1:s.i+64+1], nil
				s.i += 64 + 2
				s.hexHashes++
				s.hashUnread = true
				break
			}
			fallthrough
		case readParentHash:
			if s.hexString(f) {
				s.hexHashes++
			} else if !s.strField(f) {
				return nil, false, true
			}
		case readObject:
			f.Kind, f.Text = KindObject, ""
			if f.Members, ok = s.object(2); !ok {
				return nil, false, true
			}
		default:
			s.i = i
			if !s.value(f, 1) {
				return nil, false, true
			}
		}
		i = s.i
		if n == envelopeHash {
			s.hashStart, s.hashEnd = start, i
		}
	}
	if i >= len(src) || src[i] != '}' {
		return nil, false, false
	}
	s.i = i + 1
	s.known, s.envelope = envelopeKnown, true
	return fields, true, true
}

// hexString scans the string at s.i into f when it is 64 hex digits
// (IsHex64), as str would scan it; false, and nothing scanned, when it is
// anything else.
func (s *scanner) hexString(f *Field) bool {
	const n = 64
	if len(s.src)-s.i < n+2 || s.src[s.i] != '"' || s.src[s.i+n+1] != '"' || !IsHex64(s.src[s.i+1:s.i+n+1]) {
		return false
	}
	f.Kind, f.Text, f.Members = KindString, s.src[s.i+1:s.i+n+1], nil
	s.i += n + 2
	return true
}

// strField scans the string at s.i into f.
func (s *scanner) strField(f *Field) bool {
	var ok bool
	f.Kind, f.Members = KindString, nil
	f.Text, ok = s.str()
	return ok
}

// object scans an object starting at s.i ('{'); depth is 1 for the entry.
// Members are gathered on the stack and returned in one exact allocation,
// or scanned into s.arena.
func (s *scanner) object(depth int) ([]Field, bool) {
	s.i++ // '{'
	if s.i < len(s.src) && s.src[s.i] == '}' {
		s.i++
		return []Field{}, true
	}
	if s.arena != nil {
		return s.arenaObject(depth)
	}
	var buf [24]Field
	var more []Field // all the members, once there are more than buf holds
	prev := ""
	for n := 0; ; n++ {
		// The member is scanned into its slot, not copied there.
		var f *Field
		switch {
		case more != nil:
			more = append(more, Field{})
			f = &more[n]
		case n < len(buf):
			f = &buf[n]
		default:
			more = append(append(make([]Field, 0, 2*len(buf)), buf[:]...), Field{})
			f = &more[n]
		}
		last, ok := s.member(f, depth, n, &prev)
		switch {
		case !ok:
			return nil, false
		case !last:
		case more != nil:
			return more, true
		default:
			return append([]Field(nil), buf[:n+1]...), true
		}
	}
}

// arenaObject is object's loop over the members, scanning each into
// s.arena.
func (s *scanner) arenaObject(depth int) ([]Field, bool) {
	open := &s.arena.open[depth-1]
	start := len(*open)
	prev := ""
	for n := 0; ; n++ {
		var f *Field
		f, start = s.arena.next(depth, start)
		last, ok := s.member(f, depth, n, &prev)
		switch {
		case !ok:
			return nil, false
		case last:
			return (*open)[start:len(*open):len(*open)], true
		}
	}
}

// member scans the member at index n of an object at depth into f, and
// the ',' or '}' after it; last is true after '}'. prev is the previous
// member's key, which this one's must follow.
func (s *scanner) member(f *Field, depth, n int, prev *string) (last, ok bool) {
	start := s.i
	key, ok := s.key()
	if !ok || n > 0 && !after(key, *prev) {
		// Not ASCII, escaped, out of RFC 8785 order or duplicated.
		return false, false
	}
	*prev = key
	if s.i >= len(s.src) || s.src[s.i] != ':' {
		return false, false
	}
	s.i++
	f.Key = key
	if !s.value(f, depth) {
		return false, false
	}
	if depth == 1 {
		if k := knownIndex(key); k >= 0 {
			s.known[k] = int32(n)
			if k == knownEntryHash {
				s.hashStart, s.hashEnd = start, s.i
			}
		}
	}
	if s.i >= len(s.src) {
		return false, false
	}
	c := s.src[s.i]
	s.i++
	switch c {
	case '}':
		return true, true
	case ',':
		return false, true
	}
	return false, false
}

// after reports whether key sorts after prev in byte order, deciding
// most pairs of an object's keys by their first bytes without a call.
func after(key, prev string) bool {
	if len(key) > 0 && len(prev) > 0 && key[0] != prev[0] {
		return key[0] > prev[0]
	}
	return key > prev
}

// entryArena holds the entries the fast path parses from many lines, and
// their members, in chunks: each member is scanned into place, instead of
// gathered and copied into an allocation per object. One object is open
// at each depth at a time (the entry, its payload), so each depth has a
// chunk of its own. A slot is not cleared when it is taken: the scan
// writes every part of each member (a slot of a line that failed stays
// unused, whatever it holds). An entry keeps its chunks alive, so an arena
// is for entries that live briefly: a journal batch's, until they are
// linked; reset then hands every chunk back for the next batch, so that
// a long journal allocates none after its first batches. It is not safe
// for concurrent use.
type entryArena struct {
	open    [maxFastDepth][]Field   // per depth, the chunk being filled: its length is taken
	full    [maxFastDepth][][]Field // per depth, the chunks filled since reset
	spare   [maxFastDepth][][]Field // per depth, chunks to fill again
	entries []Entry                 // the chunk of entries being filled
	fullE   [][]Entry               // entry chunks filled since reset
	spareE  [][]Entry               // entry chunks to fill again
	hash    hash.Hash               // the preimage's SHA-256, reset for each entry
	// repeated: for each member read as readRepeated, the last envelope
	// line's value as written (quotes included) and as decoded: a line
	// whose bytes there are the same is not scanned there again
	// (envelopeObject). They are parts of lines of the arena's batch, so
	// reset forgets them.
	repeated [len(EnvelopeKeys)]struct{ raw, text string }
}

// Chunk sizes of an entryArena: 2,048 members (128 KiB, about a hundred
// entries' members) and 256 entries.
const (
	arenaChunk        = 2048
	arenaEntriesChunk = 256
)

// entry returns a zero Entry.
func (a *entryArena) entry() *Entry {
	if len(a.entries) == cap(a.entries) {
		if a.entries != nil {
			a.fullE = append(a.fullE, a.entries)
		}
		if n := len(a.spareE); n > 0 {
			a.entries, a.spareE = a.spareE[n-1][:0], a.spareE[:n-1]
		} else {
			a.entries = make([]Entry, 0, arenaEntriesChunk)
		}
	}
	a.entries = a.entries[:len(a.entries)+1]
	e := &a.entries[len(a.entries)-1]
	*e = Entry{} // a chunk filled before reset holds an old entry
	return e
}

// reset makes every chunk spare: no entry or member taken from the arena
// may be used after it.
func (a *entryArena) reset() {
	a.repeated = [len(EnvelopeKeys)]struct{ raw, text string }{}
	for d := range a.open {
		if a.open[d] != nil {
			a.full[d] = append(a.full[d], a.open[d])
			a.open[d] = nil
		}
		for _, c := range a.full[d] {
			a.spare[d] = append(a.spare[d], c[:0])
		}
		clear(a.full[d])
		a.full[d] = a.full[d][:0]
	}
	if a.entries != nil {
		a.fullE = append(a.fullE, a.entries)
		a.entries = nil
	}
	for _, c := range a.fullE {
		a.spareE = append(a.spareE, c[:0])
	}
	clear(a.fullE)
	a.fullE = a.fullE[:0]
}

// sha256 returns the arena's SHA-256, reset.
func (a *entryArena) sha256() hash.Hash {
	if a.hash == nil {
		a.hash = sha256.New()
	}
	a.hash.Reset()
	return a.hash
}

// next returns a slot for the next member of the object open at
// depth, whose members so far start at start in its chunk, and where they
// start now: in another chunk when this one is full (the object's members
// so far are copied there, so that they stay contiguous).
func (a *entryArena) next(depth, start int) (*Field, int) {
	c := &a.open[depth-1]
	if len(*c) == cap(*c) {
		members := (*c)[start:]
		var fresh []Field
		if n := len(a.spare[depth-1]); n > 0 && cap(a.spare[depth-1][n-1]) >= 2*len(members) {
			fresh, a.spare[depth-1] = a.spare[depth-1][n-1][:len(members)], a.spare[depth-1][:n-1]
		} else {
			fresh = make([]Field, len(members), max(arenaChunk, 2*len(members)))
		}
		copy(fresh, members)
		if *c != nil {
			a.full[depth-1] = append(a.full[depth-1], *c)
		}
		*c, start = fresh, 0
	}
	*c = (*c)[:len(*c)+1]
	f := &(*c)[len(*c)-1]
	// Not cleared: member writes every part of it (value).
	return f, start
}

// take returns n slots in a row for the members of an entry (depth
// 1) whose number is known beforehand; those of a line that failed stay
// unused.
func (a *entryArena) take(n int) []Field {
	c := &a.open[0]
	if cap(*c)-len(*c) < n {
		if *c != nil {
			a.full[0] = append(a.full[0], *c)
		}
		if k := len(a.spare[0]); k > 0 && cap(a.spare[0][k-1]) >= n {
			*c, a.spare[0] = a.spare[0][k-1][:0], a.spare[0][:k-1]
		} else {
			*c = make([]Field, 0, max(arenaChunk, n))
		}
	}
	m := len(*c)
	*c = (*c)[:m+n]
	f := (*c)[m : m+n : m+n]
	// Not cleared: envelopeObject writes every part of each (value).
	return f
}

// key scans a member name: printable ASCII other than '"' and '\\', so
// that the name is written exactly as it is and its UTF-16 order is its
// byte order. Eight bytes at a time, as str reads a string, to the first
// byte that is not printable ASCII or is '"', '\\' or DEL, which must
// be the closing quote.
func (s *scanner) key() (string, bool) {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	src := s.src
	if s.i >= len(src) || src[s.i] != '"' {
		return "", false
	}
	start := s.i + 1
	i := start
	for {
		if len(src)-i < 8 {
			for i < len(src) && keyByte[src[i]] {
				i++
			}
			break
		}
		// The high bit of a lane is set for a byte of 0x80 and above, a
		// control (x-0x20 borrows), and a '"', '\\' or DEL (zero after
		// the xor); the lowest lane set is the first such byte (a borrow
		// never reaches a lower lane).
		x := wordAt(src, i)
		q, b, d := x^(ones*'"'), x^(ones*'\\'), x^(ones*0x7f)
		if m := (x | (x - ones*0x20) | (q-ones)&^q | (b-ones)&^b | (d-ones)&^d) & highs; m != 0 {
			i += bits.TrailingZeros64(m) >> 3
			break
		}
		i += 8
	}
	if i >= len(src) || src[i] != '"' {
		return "", false
	}
	s.i = i + 1
	return src[start:i], true
}

// keyByte is true for the bytes key takes in a name: printable ASCII but
// '"' and '\\'.
var keyByte = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// value scans the value at s.i into f (whose Key is set), writing its
// Kind, Text and Members: f may be a slot an old member filled.
func (s *scanner) value(f *Field, depth int) bool {
	if s.i >= len(s.src) {
		return false
	}
	f.Text, f.Members = "", nil
	var ok bool
	switch c := s.src[s.i]; {
	case c == '"':
		f.Kind = KindString
		f.Text, ok = s.str()
	case c == '{':
		if depth >= maxFastDepth {
			return false
		}
		f.Kind = KindObject
		f.Members, ok = s.object(depth + 1)
	case c == 't':
		f.Kind, f.Text, ok = KindBool, "true", s.literal("true")
	case c == 'f':
		f.Kind, f.Text, ok = KindBool, "false", s.literal("false")
	case c == 'n':
		f.Kind, ok = KindNull, s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		f.Kind = KindNumber
		f.Text, ok = s.number()
	}
	return ok
}

func (s *scanner) literal(lit string) bool {
	if len(s.src)-s.i < len(lit) || s.src[s.i:s.i+len(lit)] != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// str scans a string in canonical form (RFC 8785 §3.2.2.2: only '"', '\'
// and controls escaped, controls as \b \t \n \f \r or \u00xx in lower
// case) and valid UTF-8, and returns its decoded value.
func (s *scanner) str() (string, bool) {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	src := s.src
	start := s.i + 1
	for i := start; ; {
		// Eight bytes at a time (the strings are most of an entry's
		// bytes) to the first that needs a look. The high bit of a lane
		// is set for a byte of 0x80 and above, a byte below 0x20 (x-0x20
		// borrows), and a '"' or '\\' (zero after the xor). A borrow may
		// set higher lanes too, never a lower one, so the lowest lane set
		// is exactly the first such byte.
		for len(src)-i >= 8 {
			x := wordAt(src, i)
			q, b := x^(ones*'"'), x^(ones*'\\')
			if m := (x | (x - ones*0x20) | (q-ones)&^q | (b-ones)&^b) & highs; m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		for i < len(src) && plainByte[src[i]] {
			i++
		}
		if i >= len(src) {
			return "", false
		}
		switch c := src[i]; {
		case c == '"':
			s.i = i + 1
			return src[start:i], true
		case c == '\\':
			return s.escapedStr(start, i)
		case c < 0x20:
			return "", false
		}
		n, ok := utf8Char(src[i:])
		if !ok {
			return "", false
		}
		i += n
	}
}

// utf8Char returns the length of the UTF-8 character s starts with (whose
// first byte is 0x80 or above), and false when it is not one: what
// utf8.Valid refuses (a stray continuation byte, an overlong form, a
// surrogate, beyond U+10FFFF, a cut sequence).
func utf8Char(s string) (int, bool) {
	if len(s) >= 2 && 0xc2 <= s[0] && s[0] <= 0xdf && s[1]&0xc0 == 0x80 {
		return 2, true // the two-byte form (U+0080 to U+07FF), decoded by no call
	}
	if len(s) >= 3 && 0xe1 <= s[0] && s[0] <= 0xec && s[1]&0xc0 == 0x80 && s[2]&0xc0 == 0x80 {
		return 3, true // three bytes from U+1000 to U+CFFF: neither overlong nor a surrogate
	}
	r, n := utf8.DecodeRuneInString(s)
	return n, r != utf8.RuneError || n > 1
}

// plainByte is true for the bytes a string holds as they are and str
// passes: printable ASCII and DEL but '"' and '\\'.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// escapedStr continues str from the first backslash at i, decoding.
func (s *scanner) escapedStr(start, i int) (string, bool) {
	buf := make([]byte, 0, 2*(i-start)+16)
	buf = append(buf, s.src[start:i]...)
	for i < len(s.src) {
		c := s.src[i]
		switch {
		case c == '"':
			s.i = i + 1
			return string(buf), true
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			n, ok := utf8Char(s.src[i:])
			if !ok {
				return "", false
			}
			buf = append(buf, s.src[i:i+n]...)
			i += n
			continue
		case c != '\\':
			buf = append(buf, c)
			i++
			continue
		}
		if i+1 >= len(s.src) {
			return "", false
		}
		if s.src[i+1] == 'u' {
			v, ok := controlEscape(s.src[i+2:])
			if !ok {
				return "", false
			}
			buf = append(buf, v)
			i += 6
			continue
		}
		b, ok := shortEscape(s.src[i+1])
		if !ok || b == '/' { // RFC 8785 never writes \/
			return "", false
		}
		buf = append(buf, b)
		i += 2
	}
	return "", false
}

// controlEscape reads the four hex digits of a canonical \u escape, which
// RFC 8785 uses only for controls without a short escape, in lower case.
func controlEscape(hex string) (byte, bool) {
	if len(hex) < 4 || hex[0] != '0' || hex[1] != '0' || hex[2] != '0' && hex[2] != '1' {
		return 0, false
	}
	lo := hex[3]
	var v byte
	switch {
	case '0' <= lo && lo <= '9':
		v = lo - '0'
	case 'a' <= lo && lo <= 'f':
		v = lo - 'a' + 10
	default:
		return 0, false
	}
	v += (hex[2] - '0') << 4
	switch v {
	case '\b', '\t', '\n', '\f', '\r':
		return 0, false // these have short escapes
	}
	return v, true
}

// number scans a number and accepts it only in its RFC 8785 form, the
// ECMAScript Number.prototype.toString of its IEEE 754 value.
func (s *scanner) number() (string, bool) {
	start := s.i
	i := start
	// An integer of 1 to 15 digits without a leading zero (or 0 itself),
	// and a fraction plainDecimal takes, are their own RFC 8785 form
	// (canonicalNumber): read in one pass when nothing of a number
	// follows their digits.
	if i < len(s.src) && s.src[i] == '-' {
		i++
	}
	digits := i
	for i < len(s.src) && '0' <= s.src[i] && s.src[i] <= '9' {
		i++
	}
	if n := i - digits; n > 0 && n <= 15 && (s.src[digits] != '0' || n == 1) {
		switch {
		case i == len(s.src) || !numberByte[s.src[i]]:
			if s.src[digits] != '0' || digits == start { // not -0
				s.i = i
				return s.src[start:i], true
			}
		case s.src[i] == '.':
			frac := i + 1
			j := frac
			for j < len(s.src) && '0' <= s.src[j] && s.src[j] <= '9' {
				j++
			}
			if j > frac && s.src[j-1] != '0' && (j == len(s.src) || !numberByte[s.src[j]]) {
				significant := n + j - frac
				if s.src[digits] == '0' { // 0.x: the fraction's leading zeros are not significant
					z := frac
					for s.src[z] == '0' {
						z++
					}
					significant = j - z
					if z-frac > 5 { // below 1e-6: exponent notation
						significant = 16
					}
				}
				if significant <= 15 {
					s.i = j
					return s.src[start:j], true
				}
			}
		}
	}
	for i = start; i < len(s.src) && numberByte[s.src[i]]; i++ {
	}
	tok := s.src[start:i]
	if !canonicalNumber(tok) {
		return "", false
	}
	s.i = i
	return tok, true
}

// numberByte is true for the bytes number reads as part of a number.
var numberByte = func() (t [256]bool) {
	for _, c := range "0123456789+-.eE" {
		t[c] = true
	}
	return t
}()

// canonicalNumber reports whether tok is the RFC 8785 text of its value.
// Integers of at most 15 digits without a leading zero are (they are exact
// in a double and ECMAScript prints them as they are). A value from 1e-6 up
// to 1e21 (not included) is printed as jcs's ES6 formatter prints it, the
// shortest round-trip digits in plain notation, into a stack buffer (no
// allocation); anything else is decided by that formatter itself,
// the one the general path uses. FuzzCanonicalNumber holds the rule to jcs.
func canonicalNumber(tok string) bool {
	digits := tok
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if n := len(digits); n > 0 && n <= 15 && (digits[0] != '0' || tok == "0") {
		allDigits := true
		for j := 0; j < n; j++ {
			if digits[j] < '0' || digits[j] > '9' {
				allDigits = false
				break
			}
		}
		if allDigits {
			return true
		}
	}
	if plainDecimal(digits) {
		return true
	}
	f, err := strconv.ParseFloat(tok, 64)
	if err != nil {
		return false
	}
	if a := math.Abs(f); a >= 1e-6 && a < 1e21 {
		var buf [40]byte // 1e-6 <= |f| < 1e21: at most 6 zeros before 17 digits, and a sign
		return string(strconv.AppendFloat(buf[:0], f, 'f', -1, 64)) == tok
	}
	out, err := jcs.NumberToJSON(f)
	return err == nil && out == tok
}

// plainDecimal reports whether digits (a number without its sign) is a
// fraction written as RFC 8785 writes it, decided without a float: an
// integer part without a leading zero, a fraction without a trailing one,
// at most 15 significant digits, at least 1e-6. A double keeps 15 decimal
// digits (DBL_DIG), so no other decimal of at most 15 digits, shorter or
// not, parses to the same double: these digits are the shortest that
// round-trip, which ECMAScript prints in plain notation from 1e-6 to 1e21.
func plainDecimal(digits string) bool {
	dot := strings.IndexByte(digits, '.')
	if dot < 1 || dot == len(digits)-1 || digits[len(digits)-1] == '0' {
		return false
	}
	whole, frac := digits[:dot], digits[dot+1:]
	if len(whole) > 1 && whole[0] == '0' {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if i != dot && (digits[i] < '0' || digits[i] > '9') {
			return false
		}
	}
	significant := len(whole) + len(frac)
	if whole == "0" {
		zeros := len(frac) - len(strings.TrimLeft(frac, "0"))
		if zeros > 5 { // below 1e-6: exponent notation
			return false
		}
		significant = len(frac) - zeros
	}
	return significant <= 15
}

// hashCut returns the bytes to cut from the line for the entry_hash
// preimage, [cut, end): the member and one comma next to it. Removing one
// member of a canonical object leaves it canonical (the other members keep
// their order and their bytes), so line[:cut] followed by line[end:] is
// CanonicalWithout(obj, "entry_hash"). Without the member, cut = end.
func (s *scanner) hashCut() (cut, end int) {
	if s.hashStart < 0 {
		return len(s.src), len(s.src)
	}
	cut, end = s.hashStart, s.hashEnd
	switch {
	case s.src[cut-1] == ',': // not the first member: drop the comma before it
		cut--
	case s.src[end] == ',': // the first of several: drop the comma after it
		end++
	}
	return cut, end
}

// maxTreeDepth bounds the nesting the tree scanner follows; deeper
// documents take the general path (jcs allows 10,000 levels).
const maxTreeDepth = 64

// span is where one top-level member is: its key's opening quote to the
// end of its value.
type span struct {
	key        string
	start, end int
}

// scanCanonicalTree decodes src when it is the RFC 8785 form of a JSON
// object whose keys (at every depth) are printable ASCII without escapes,
// nested at most maxTreeDepth deep; the values are what encoding/json
// decodes with UseNumber. It also returns where each top-level member is.
// ok is false for anything else, which the general path decides.
func scanCanonicalTree(src string) (obj map[string]any, members []span, ok bool) {
	s := scanner{src: src, hashStart: -1}
	if len(src) < 2 || src[0] != '{' {
		return nil, nil, false
	}
	obj, ok = s.treeObject(1, &members)
	if !ok || s.i != len(src) {
		return nil, nil, false
	}
	return obj, members, true
}

// treeObject scans an object at s.i ('{'); members, if not nil, receives
// the spans of its members.
func (s *scanner) treeObject(depth int, members *[]span) (map[string]any, bool) {
	s.i++ // '{'
	obj := map[string]any{}
	if s.i < len(s.src) && s.src[s.i] == '}' {
		s.i++
		return obj, true
	}
	prev := ""
	for first := true; ; first = false {
		start := s.i
		key, ok := s.key()
		if !ok || !first && key <= prev {
			return nil, false
		}
		prev = key
		if s.i >= len(s.src) || s.src[s.i] != ':' {
			return nil, false
		}
		s.i++
		v, ok := s.treeValue(depth)
		if !ok {
			return nil, false
		}
		obj[key] = v
		if members != nil {
			*members = append(*members, span{key: key, start: start, end: s.i})
		}
		if s.i >= len(s.src) {
			return nil, false
		}
		c := s.src[s.i]
		s.i++
		switch c {
		case '}':
			return obj, true
		case ',':
		default:
			return nil, false
		}
	}
}

func (s *scanner) treeArray(depth int) ([]any, bool) {
	s.i++ // '['
	arr := []any{}
	if s.i < len(s.src) && s.src[s.i] == ']' {
		s.i++
		return arr, true
	}
	for {
		v, ok := s.treeValue(depth)
		if !ok {
			return nil, false
		}
		arr = append(arr, v)
		if s.i >= len(s.src) {
			return nil, false
		}
		c := s.src[s.i]
		s.i++
		switch c {
		case ']':
			return arr, true
		case ',':
		default:
			return nil, false
		}
	}
}

// treeValue scans one value inside a container at depth.
func (s *scanner) treeValue(depth int) (any, bool) {
	if s.i >= len(s.src) {
		return nil, false
	}
	switch c := s.src[s.i]; {
	case c == '"':
		return s.str()
	case c == '{' || c == '[':
		if depth >= maxTreeDepth {
			return nil, false
		}
		if c == '{' {
			return s.treeObject(depth+1, nil)
		}
		return s.treeArray(depth + 1)
	case c == 't':
		return true, s.literal("true")
	case c == 'f':
		return false, s.literal("false")
	case c == 'n':
		return nil, s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		tok, ok := s.number()
		return json.Number(tok), ok
	}
	return nil, false
}

// cutMembers returns the canonical object src without the named top-level
// members, given where its members are: removing members of a canonical
// object leaves it canonical, so this is CanonicalWithout of its decoding.
func cutMembers(src string, members []span, omit ...string) []byte {
	out := make([]byte, 0, len(src))
	out = append(out, '{')
	n := 0
	for _, m := range members {
		if slices.Contains(omit, m.key) {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, src[m.start:m.end]...)
		n++
	}
	return append(out, '}')
}

// shortEscape returns the byte a two-character JSON string escape \c
// stands for (RFC 8259, section 7): \" \\ \/ \b \f \n \r \t; false for
// any other c, \u included.
func shortEscape(c byte) (byte, bool) {
	switch c {
	case '"', '\\', '/':
		return c, true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	}
	return 0, false
}
