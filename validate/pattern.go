package validate

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file translates the JSON Schema "pattern" expressions that a
// linear-time engine can match with exactly regexp2's meaning into Go
// regexp (RE2) syntax, so that their verdict never depends on a wall-clock
// budget (regexp2's MatchTimeout) and so on machine load.
//
// The oracle is regexp2 v2.13.0 compiled with ECMAScript|Unicode (how
// ecmaEngine.compile configures it), matching by code point, unanchored. The
// accepted class (anything else returns ok == false and stays on regexp2):
//
//   - literal code points other than ^ $ \ . * + ? ( ) [ ] { } |
//   - . : every code point except U+000A, U+000D, U+2028, U+2029
//     (regexp2's ECMAAnyClass)
//   - escapes \d \D \w \W \s \S; \t \n \v \f \r; \xHH; \uHHHH outside
//     U+D800–U+DFFF; \ followed by one of ^ $ \ . * + ? ( ) [ ] { } | /
//     \d = [0-9], \w = [0-9A-Za-z_] (no i flag), \s = regexp2's ecmaSpace:
//     U+0009–U+000D, U+0020, U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029,
//     U+202F, U+205F, U+3000, U+FEFF (not U+0085, not U+180E)
//   - classes [...] and [^...] holding single atoms (a code point or one of
//     the escapes above, plus \- ), ranges a-b of two single code points
//     with a <= b, and - first or last; not [] or [^], no [ inside, no \b,
//     no - right after a range but before ]
//   - ^ and $ (no m flag: start and end of the input only)
//   - groups (?:...) and (...) nested at most 100 deep, alternation |
//   - quantifiers * + ? {n} {n,} {n,m} (n <= m <= 1000) and their lazy
//     forms, on an atom or group (never on ^ or $, never doubled)
//
// and Go's regexp must compile the translation. Captures and laziness
// change which match is found, never whether one exists, and MatchString
// only asks the latter. The translation writes every atom as a Go class of
// explicit code points (\x{...}), so no escape or class means anything
// in Go that it was not given. Patterns of the shape ^ item… $ with a
// forced split run on seqMatcher (below) instead of Go's regexp.

// maxLinearRepeat is the largest count Go's regexp/syntax accepts in a
// {n,m} repetition.
const maxLinearRepeat = 1000

// maxLinearDepth bounds group nesting in the translator.
const maxLinearDepth = 100

// rng is an inclusive code point range.
type rng struct{ lo, hi rune }

var (
	digitSet = []rng{{'0', '9'}}
	wordSet  = []rng{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
	// spaceSet is regexp2 v2.13.0's ecmaSpace (syntax/charclass.go), which
	// ECMAScript mode uses for \s with or without the Unicode option.
	spaceSet = []rng{{0x09, 0x0d}, {0x20, 0x20}, {0xa0, 0xa0}, {0x1680, 0x1680},
		{0x2000, 0x200a}, {0x2028, 0x2029}, {0x202f, 0x202f}, {0x205f, 0x205f},
		{0x3000, 0x3000}, {0xfeff, 0xfeff}}
	// lineTerminators is what . does not match (regexp2's ECMAAnyClass).
	lineTerminators = []rng{{0x0a, 0x0a}, {0x0d, 0x0d}, {0x2028, 0x2029}}
)

// linearMatcher is a compiled pattern of the linear class.
type linearMatcher interface{ MatchString(s string) bool }

// compileLinear returns a linear-time matcher equal to the ECMAScript
// pattern expr (regexp2, ECMAScript|Unicode), or ok == false when expr is
// outside the class documented above or Go's regexp cannot compile the
// translation. The matcher is a *seqMatcher when expr has that shape, else
// the *regexp.Regexp of the translation.
func compileLinear(expr string) (linearMatcher, bool) {
	t, ok := translate(expr)
	if !ok {
		return nil, false
	}
	re, err := regexp.Compile(t.out.String())
	if err != nil {
		return nil, false
	}
	if m, ok := t.seqMatcher(); ok {
		return m, true
	}
	return re, true
}

// translateECMA returns the Go regexp syntax equal to expr, or ok == false.
func translateECMA(expr string) (string, bool) {
	t, ok := translate(expr)
	if !ok {
		return "", false
	}
	return t.out.String(), true
}

func translate(expr string) (*translator, bool) {
	if !utf8.ValidString(expr) {
		return nil, false
	}
	t := &translator{src: []rune(expr)}
	if !t.disjunction(0) || t.i != len(t.src) {
		return nil, false
	}
	return t, true
}

type translator struct {
	src []rune
	i   int
	out strings.Builder
	// terms lists the top-level terms for seqMatcher: each atom's set
	// with its repetition; anchors as items with anchor set. notSeq is
	// set by any group or alternation.
	terms  []seqItem
	notSeq bool
}

func (t *translator) peek() (rune, bool) {
	if t.i < len(t.src) {
		return t.src[t.i], true
	}
	return 0, false
}

// disjunction: alternative ( | alternative )*. Stops before ")" or the end.
func (t *translator) disjunction(depth int) bool {
	if depth > maxLinearDepth {
		return false
	}
	for {
		if !t.alternative(depth) {
			return false
		}
		c, ok := t.peek()
		if !ok || c == ')' {
			return true
		}
		// alternative stops only at | ) or the end.
		t.i++
		t.out.WriteByte('|')
		t.notSeq = true
	}
}

// alternative: term*, up to | ) or the end.
func (t *translator) alternative(depth int) bool {
	for {
		c, ok := t.peek()
		if !ok || c == '|' || c == ')' {
			return true
		}
		switch c {
		case '^', '$':
			t.i++
			t.out.WriteRune(c) // Go without (?m): \A and \z, as ECMA without m
			t.terms = append(t.terms, seqItem{anchor: c})
			if q, ok := t.peek(); ok && isQuantifierStart(q) {
				return false // quantified assertion: a u-mode syntax error
			}
			continue
		}
		if !t.atom(depth) {
			return false
		}
		if !t.quantifier() {
			return false
		}
	}
}

func isQuantifierStart(c rune) bool { return c == '*' || c == '+' || c == '?' || c == '{' }

// atom translates one atom: a code point, an escape, a class, a group, or .
func (t *translator) atom(depth int) bool {
	c := t.src[t.i]
	switch c {
	case '*', '+', '?', '{', '}', ']':
		return false // nothing to repeat, or a lone brace/bracket (u-mode errors)
	case '.':
		t.i++
		t.writeSet(negate(lineTerminators))
		return true
	case '[':
		t.i++
		set, ok := t.class()
		if !ok {
			return false
		}
		t.writeSet(set)
		return true
	case '(':
		t.i++
		if c, ok := t.peek(); ok && c == '?' {
			if t.i+1 >= len(t.src) || t.src[t.i+1] != ':' {
				return false // lookaround, named group, flags
			}
			t.i += 2
		}
		t.out.WriteString("(?:")
		t.notSeq = true
		if !t.disjunction(depth + 1) {
			return false
		}
		if c, ok := t.peek(); !ok || c != ')' {
			return false
		}
		t.i++
		t.out.WriteByte(')')
		return true
	case '\\':
		t.i++
		set, single, ok := t.escape(false)
		if !ok {
			return false
		}
		if set == nil {
			set = []rng{{single, single}}
		}
		t.writeSet(set)
		return true
	}
	t.i++
	t.writeSet([]rng{{c, c}})
	return true
}

// quantifier translates an optional quantifier after an atom.
func (t *translator) quantifier() bool {
	c, ok := t.peek()
	if !ok {
		return true
	}
	switch c {
	case '*', '+', '?':
		t.i++
		t.out.WriteRune(c)
		switch c {
		case '*':
			t.repeat([2]int{0, -1})
		case '+':
			t.repeat([2]int{1, -1})
		default:
			t.repeat([2]int{0, 1})
		}
	case '{':
		t.i++
		n, ok := t.number()
		if !ok {
			return false
		}
		m, bounded := n, true
		if c, _ := t.peek(); c == ',' {
			t.i++
			if c, _ := t.peek(); c == '}' {
				bounded = false
			} else if m, ok = t.number(); !ok {
				return false
			}
		}
		if c, _ := t.peek(); c != '}' {
			return false
		}
		t.i++
		if n > maxLinearRepeat || m > maxLinearRepeat || n > m {
			return false
		}
		if bounded {
			t.repeat([2]int{n, m})
		} else {
			t.repeat([2]int{n, -1})
		}
		switch {
		case !bounded:
			fmt.Fprintf(&t.out, "{%d,}", n)
		case m == n:
			fmt.Fprintf(&t.out, "{%d}", n)
		default:
			fmt.Fprintf(&t.out, "{%d,%d}", n, m)
		}
	default:
		return true
	}
	if c, ok := t.peek(); ok && c == '?' {
		t.i++
		t.out.WriteByte('?') // lazy: same verdict
	}
	if c, ok := t.peek(); ok && isQuantifierStart(c) {
		return false // a** and the like: u-mode syntax errors
	}
	return true
}

// number reads decimal digits (at most 4, so at most 9999).
func (t *translator) number() (int, bool) {
	start := t.i
	for t.i < len(t.src) && '0' <= t.src[t.i] && t.src[t.i] <= '9' {
		t.i++
	}
	if t.i == start || t.i-start > 4 {
		return 0, false
	}
	n, err := strconv.Atoi(string(t.src[start:t.i]))
	return n, err == nil
}

// escape reads the escape after a backslash: a set (\d, \s …) or a single
// code point. inClass allows \- .
func (t *translator) escape(inClass bool) (set []rng, single rune, ok bool) {
	c, ok := t.peek()
	if !ok {
		return nil, 0, false
	}
	t.i++
	switch c {
	case 'd':
		return digitSet, 0, true
	case 'D':
		return negate(digitSet), 0, true
	case 'w':
		return wordSet, 0, true
	case 'W':
		return negate(wordSet), 0, true
	case 's':
		return spaceSet, 0, true
	case 'S':
		return negate(spaceSet), 0, true
	case 't':
		return nil, '\t', true
	case 'n':
		return nil, '\n', true
	case 'v':
		return nil, '\v', true
	case 'f':
		return nil, '\f', true
	case 'r':
		return nil, '\r', true
	case 'x':
		v, ok := t.hex(2)
		return nil, v, ok
	case 'u':
		v, ok := t.hex(4)
		if !ok || 0xd800 <= v && v <= 0xdfff {
			return nil, 0, false
		}
		return nil, v, true
	case '^', '$', '\\', '.', '*', '+', '?', '(', ')', '[', ']', '{', '}', '|', '/':
		return nil, c, true
	case '-':
		return nil, c, inClass
	}
	return nil, 0, false
}

// hex reads exactly n hex digits.
func (t *translator) hex(n int) (rune, bool) {
	if t.i+n > len(t.src) {
		return 0, false
	}
	var v rune
	for _, c := range t.src[t.i : t.i+n] {
		var d rune
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | d
	}
	t.i += n
	return v, true
}

// classAtom reads one class atom: a set or a single code point.
func (t *translator) classAtom() (set []rng, single rune, ok bool) {
	c := t.src[t.i]
	switch c {
	case '[':
		return nil, 0, false // .NET subtraction in regexp2; literal in ECMA
	case '\\':
		t.i++
		if c, ok := t.peek(); ok && c == 'b' {
			return nil, 0, false // backspace in ECMA; not checked in regexp2
		}
		return t.escape(true)
	}
	t.i++
	return nil, c, true
}

// class reads a class after "[" through its "]" and returns its code
// points (negated classes complemented).
func (t *translator) class() ([]rng, bool) {
	neg := false
	if c, ok := t.peek(); ok && c == '^' {
		neg = true
		t.i++
	}
	if c, ok := t.peek(); !ok || c == ']' {
		return nil, false // [] and [^]: not in the class
	}
	var set []rng
	first := true
	for {
		c, ok := t.peek()
		if !ok {
			return nil, false
		}
		if c == ']' {
			t.i++
			break
		}
		if c == '-' && !first {
			// Only a - right before ] is taken as literal here.
			if t.i+1 < len(t.src) && t.src[t.i+1] == ']' {
				t.i++
				set = append(set, rng{'-', '-'})
				continue
			}
			return nil, false
		}
		first = false
		aset, a, ok := t.classAtom()
		if !ok {
			return nil, false
		}
		if c, _ := t.peek(); c == '-' && t.i+1 < len(t.src) && t.src[t.i+1] != ']' {
			t.i++
			bset, b, ok := t.classAtom()
			if !ok || aset != nil || bset != nil || a > b {
				return nil, false
			}
			set = append(set, rng{a, b})
			if c, _ := t.peek(); c == '-' && t.i+1 < len(t.src) && t.src[t.i+1] != ']' {
				return nil, false // [a-b-c]: left out
			}
			continue
		}
		if aset != nil {
			set = append(set, aset...)
		} else {
			set = append(set, rng{a, a})
		}
	}
	set = normalize(set)
	if neg {
		set = negate(set)
	}
	return set, true
}

// normalize sorts and merges ranges.
func normalize(set []rng) []rng {
	s := slices.Clone(set)
	slices.SortFunc(s, func(a, b rng) int { return int(a.lo - b.lo) })
	var out []rng
	for _, r := range s {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// negate returns the code points of U+0000–U+10FFFF not in set.
func negate(set []rng) []rng {
	var out []rng
	next := rune(0)
	for _, r := range normalize(set) {
		if r.lo > next {
			out = append(out, rng{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, rng{next, utf8.MaxRune})
	}
	return out
}

// repeat sets the repetition (min, max; max < 0: unbounded) of the last
// term.
func (t *translator) repeat(mm [2]int) {
	if n := len(t.terms); n > 0 {
		t.terms[n-1].min, t.terms[n-1].max = mm[0], mm[1]
	}
}

// writeSet writes set as a Go class of explicit code points; the empty set
// as a class that matches nothing.
func (t *translator) writeSet(set []rng) {
	t.terms = append(t.terms, newSeqItem(set))
	if len(set) == 0 {
		t.out.WriteString(`[^\x{0}-\x{10FFFF}]`)
		return
	}
	t.out.WriteByte('[')
	for _, r := range set {
		fmt.Fprintf(&t.out, `\x{%X}`, r.lo)
		if r.hi != r.lo {
			fmt.Fprintf(&t.out, `-\x{%X}`, r.hi)
		}
	}
	t.out.WriteByte(']')
}

// seqItem is one set repeated min to max times (max < 0: unbounded), or an
// anchor (^ or $) when anchor != 0.
type seqItem struct {
	set      []rng // normalized
	ascii    [2]uint64
	min, max int
	anchor   rune
}

func newSeqItem(set []rng) seqItem {
	it := seqItem{set: normalize(set), min: 1, max: 1}
	for c := range rune(utf8.RuneSelf) {
		if inSet(it.set, c) {
			it.ascii[c>>6] |= 1 << (c & 63)
		}
	}
	return it
}

func inSet(set []rng, r rune) bool {
	_, found := slices.BinarySearchFunc(set, r, func(x rng, r rune) int {
		switch {
		case x.hi < r:
			return -1
		case x.lo > r:
			return 1
		}
		return 0
	})
	return found
}

func disjoint(a, b []rng) bool {
	for _, x := range a {
		for _, y := range b {
			if x.lo <= y.hi && y.lo <= x.hi {
				return false
			}
		}
	}
	return true
}

// seqMatcher matches patterns of the shape ^ item… $ where each item is
// one set (a code point, an escape, a class or .) with a repetition, and
// every item of variable count is the last one or is followed by an item
// of at least one repetition whose set is disjoint from its own. Then
// exactly one way to split the input can succeed: a variable item must
// take every leading code point of its set (the next one must be outside
// it), so consuming greedily without backtracking decides the match. Code
// points are read as Go's regexp reads them (an invalid UTF-8 byte is
// U+FFFD, one byte wide).
type seqMatcher struct{ items []seqItem }

// seqMatcher returns the seqMatcher of t's pattern when it has that shape.
func (t *translator) seqMatcher() (*seqMatcher, bool) {
	n := len(t.terms)
	if t.notSeq || n < 2 || t.terms[0].anchor != '^' || t.terms[n-1].anchor != '$' {
		return nil, false
	}
	items := t.terms[1 : n-1]
	for k, it := range items {
		if it.anchor != 0 {
			return nil, false
		}
		if it.min == it.max || k == len(items)-1 {
			continue
		}
		next := items[k+1]
		if next.anchor != 0 || next.min < 1 || !disjoint(it.set, next.set) {
			return nil, false
		}
	}
	return &seqMatcher{items: slices.Clone(items)}, true
}

// MatchString reports whether s matches; see seqMatcher.
func (m *seqMatcher) MatchString(s string) bool {
	i := 0
	for k := range m.items {
		it := &m.items[k]
		n := 0
		for (it.max < 0 || n < it.max) && i < len(s) {
			if c := s[i]; c < utf8.RuneSelf {
				if it.ascii[c>>6]&(1<<(c&63)) == 0 {
					break
				}
				i++
			} else {
				r, w := utf8.DecodeRuneInString(s[i:])
				if !inSet(it.set, r) {
					break
				}
				i += w
			}
			n++
		}
		if n < it.min {
			return false
		}
	}
	return i == len(s)
}
