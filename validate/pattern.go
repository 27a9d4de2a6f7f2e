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
// compileECMA configures it), matching by code point, unanchored. The
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
//     the escapes above, plus \- ), ranges a-b of two single atoms with
//     a <= b, and - first or last; not empty, no [ inside, no \b
//   - ^ and $ (no m flag: start and end of the input only)
//   - groups (?:...) and (...), alternation |
//   - quantifiers * + ? {n} {n,} {n,m} (n <= m <= 1000) and their lazy
//     forms, on an atom or group (never on ^ or $)
//
// Captures and laziness change which match is found, never whether one
// exists, and MatchString only asks the latter.

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

// compileLinear returns the Go regexp equal to the ECMAScript pattern expr
// (regexp2, ECMAScript|Unicode), or ok == false when expr is outside the
// class documented above or Go's regexp cannot compile the translation.
func compileLinear(expr string) (*regexp.Regexp, bool) {
	src, ok := translateECMA(expr)
	if !ok {
		return nil, false
	}
	re, err := regexp.Compile(src)
	if err != nil {
		return nil, false
	}
	return re, true
}

// translateECMA returns the Go regexp syntax equal to expr, or ok == false.
func translateECMA(expr string) (string, bool) {
	if !utf8.ValidString(expr) {
		return "", false
	}
	t := translator{src: []rune(expr)}
	if !t.disjunction(0) || t.i != len(t.src) {
		return "", false
	}
	return t.out.String(), true
}

type translator struct {
	src []rune
	i   int
	out strings.Builder
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

// writeSet writes set as a Go class of explicit code points; the empty set
// as a class that matches nothing.
func (t *translator) writeSet(set []rng) {
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
