package events

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// The upstream harness writes a journal line as JSON.stringify of the entry
// with its keys sorted by UTF-16 code units, and its verifier takes a line
// whose JSON.parse, sorted and stringified again, is the line itself. For
// I-JSON that is RFC 8785, which jcs implements. The one difference: a
// JavaScript string is UTF-16 code units, and JSON.stringify (ES2019,
// "well-formed") writes a lone surrogate as \udxxx in lower case where
// RFC 8785 and jcs refuse it. The upstream writer does produce them (a
// message cut inside a surrogate pair), so a journal line holding a
// surrogate escape is parsed here instead of by jcs, into the value the
// upstream sees, and written out as the upstream writes it.
//
// Strings are held as WTF-8: UTF-8, except that a lone surrogate is the
// three bytes UTF-8 would give its code point (ED A0..BF xx), which valid
// UTF-8 never holds. So a string's bytes say exactly which code units it
// has. Everything else is jcs's strict JSON (FuzzStringifyMatchesJCS holds
// the two equal on every input without a lone surrogate).

// maxNesting is how deeply arrays and objects may nest: jcs's limit, so
// that a line is refused for its depth whichever parser reads it.
const maxNesting = 10000

// jsKind is the type of a jsNode.
type jsKind uint8

const (
	jsString jsKind = iota + 1 // text is the string as WTF-8
	jsScalar                   // text is a number or literal in canonical form
	jsArray
	jsObject
)

// jsNode is one parsed JSON value.
type jsNode struct {
	kind    jsKind
	text    string
	elems   []jsNode   // jsArray
	members []jsMember // jsObject, sorted by key in UTF-16 code unit order
}

// jsMember is one member of an object.
type jsMember struct {
	key   string   // WTF-8
	units []uint16 // the key's UTF-16 code units: its sort key
	value jsNode
}

// stringifyParser reads one JSON text (RFC 8259) into jsNodes.
type stringifyParser struct {
	src   []byte
	i     int
	depth int
	lone  bool // a lone surrogate was read
}

// parseStringified parses src, one JSON value with optional white space
// around it. lone reports whether any string in it holds a lone
// surrogate. Errors wrap ErrNotJSON: not RFC 8259, invalid UTF-8, a
// duplicate key (keys compared as code units), a number beyond an IEEE 754
// double, nesting deeper than jcs allows.
func parseStringified(src []byte) (root jsNode, lone bool, err error) {
	p := &stringifyParser{src: src}
	root, err = p.value()
	if err == nil {
		p.space()
		if p.i < len(src) {
			err = p.fail("content after the value")
		}
	}
	if err != nil {
		return jsNode{}, false, err
	}
	return root, p.lone, nil
}

func (p *stringifyParser) fail(what string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrNotJSON, what, p.i)
}

// space skips JSON's insignificant white space.
func (p *stringifyParser) space() {
	for p.i < len(p.src) {
		switch p.src[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *stringifyParser) value() (jsNode, error) {
	p.space()
	if p.i >= len(p.src) {
		return jsNode{}, p.fail("unexpected end of input")
	}
	switch c := p.src[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, err := p.str()
		return jsNode{kind: jsString, text: s}, err
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	}
	return jsNode{}, p.fail("unexpected character")
}

func (p *stringifyParser) literal(lit string) (jsNode, error) {
	if !bytes.HasPrefix(p.src[p.i:], []byte(lit)) {
		return jsNode{}, p.fail("invalid literal")
	}
	p.i += len(lit)
	return jsNode{kind: jsScalar, text: lit}, nil
}

// number reads a number of RFC 8259's grammar, refuses one beyond a double
// (I-JSON; JSON.parse would make it Infinity) and keeps its canonical form,
// ECMAScript's Number.prototype.toString (jcs.NumberToJSON).
func (p *stringifyParser) number() (jsNode, error) {
	start := p.i
	p.accept('-')
	switch {
	case p.accept('0'):
	case p.digits() == 0:
		return jsNode{}, p.fail("invalid number")
	}
	if p.accept('.') && p.digits() == 0 {
		return jsNode{}, p.fail("invalid number")
	}
	if p.accept('e') || p.accept('E') {
		if !p.accept('+') {
			p.accept('-')
		}
		if p.digits() == 0 {
			return jsNode{}, p.fail("invalid number")
		}
	}
	f, err := strconv.ParseFloat(string(p.src[start:p.i]), 64)
	if err != nil {
		p.i = start
		return jsNode{}, p.fail("number out of range")
	}
	text, err := jcs.NumberToJSON(f)
	if err != nil {
		p.i = start
		return jsNode{}, p.fail("number out of range")
	}
	return jsNode{kind: jsScalar, text: text}, nil
}

func (p *stringifyParser) accept(c byte) bool {
	if p.i < len(p.src) && p.src[p.i] == c {
		p.i++
		return true
	}
	return false
}

// digits skips decimal digits and returns how many.
func (p *stringifyParser) digits() int {
	start := p.i
	for p.i < len(p.src) && '0' <= p.src[p.i] && p.src[p.i] <= '9' {
		p.i++
	}
	return p.i - start
}

// nest enters an array or object.
func (p *stringifyParser) nest() error {
	p.depth++
	if p.depth > maxNesting {
		return p.fail(fmt.Sprintf("nesting deeper than %d", maxNesting))
	}
	return nil
}

func (p *stringifyParser) array() (jsNode, error) {
	if err := p.nest(); err != nil {
		return jsNode{}, err
	}
	p.i++ // '['
	n := jsNode{kind: jsArray, elems: []jsNode{}}
	p.space()
	if p.accept(']') {
		p.depth--
		return n, nil
	}
	for {
		v, err := p.value()
		if err != nil {
			return jsNode{}, err
		}
		n.elems = append(n.elems, v)
		p.space()
		if p.accept(']') {
			p.depth--
			return n, nil
		}
		if !p.accept(',') {
			return jsNode{}, p.fail("expected ',' or ']'")
		}
	}
}

func (p *stringifyParser) object() (jsNode, error) {
	if err := p.nest(); err != nil {
		return jsNode{}, err
	}
	p.i++ // '{'
	n := jsNode{kind: jsObject, members: []jsMember{}}
	p.space()
	if !p.accept('}') {
		for {
			p.space()
			if p.i >= len(p.src) || p.src[p.i] != '"' {
				return jsNode{}, p.fail("expected a member name")
			}
			key, err := p.str()
			if err != nil {
				return jsNode{}, err
			}
			p.space()
			if !p.accept(':') {
				return jsNode{}, p.fail("expected ':'")
			}
			v, err := p.value()
			if err != nil {
				return jsNode{}, err
			}
			n.members = append(n.members, jsMember{key: key, units: codeUnits(key), value: v})
			p.space()
			if p.accept('}') {
				break
			}
			if !p.accept(',') {
				return jsNode{}, p.fail("expected ',' or '}'")
			}
		}
	}
	p.depth--
	// The upstream sorts with JavaScript's default comparison: code units.
	slices.SortFunc(n.members, func(a, b jsMember) int { return slices.Compare(a.units, b.units) })
	for k := 1; k < len(n.members); k++ {
		if slices.Equal(n.members[k-1].units, n.members[k].units) {
			// I-JSON; JSON.parse would keep the last one silently.
			return jsNode{}, fmt.Errorf("%w: duplicate key in the object ending at byte %d", ErrNotJSON, p.i)
		}
	}
	return n, nil
}

// str reads a string at p.i ('"') and returns it as WTF-8.
func (p *stringifyParser) str() (string, error) {
	p.i++ // '"'
	var buf []byte
	for {
		if p.i >= len(p.src) {
			return "", p.fail("unterminated string")
		}
		c := p.src[p.i]
		switch {
		case c == '"':
			p.i++
			return string(buf), nil
		case c < 0x20:
			return "", p.fail("control character in a string")
		case c == '\\':
			var err error
			if buf, err = p.escape(buf); err != nil {
				return "", err
			}
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			p.i++
		default:
			r, size := utf8.DecodeRune(p.src[p.i:])
			if r == utf8.RuneError && size == 1 {
				return "", p.fail("invalid UTF-8")
			}
			buf = append(buf, p.src[p.i:p.i+size]...)
			p.i += size
		}
	}
}

// escape reads the escape at p.i ('\') and appends what it stands for.
func (p *stringifyParser) escape(buf []byte) ([]byte, error) {
	if p.i+1 >= len(p.src) {
		return nil, p.fail("unterminated string")
	}
	if p.src[p.i+1] != 'u' {
		b, ok := shortEscape(p.src[p.i+1])
		if !ok {
			return nil, p.fail("invalid escape")
		}
		p.i += 2
		return append(buf, b), nil
	}
	u, ok := hex4(p.src[p.i+2:])
	if !ok {
		return nil, p.fail("invalid \\u escape")
	}
	p.i += 6
	if !utf16.IsSurrogate(rune(u)) {
		return utf8.AppendRune(buf, rune(u)), nil
	}
	// A high surrogate followed by a low one is one character, as
	// JSON.parse's string of code units has it; any other is lone.
	if u < 0xdc00 && bytes.HasPrefix(p.src[p.i:], []byte(`\u`)) {
		if lo, ok := hex4(p.src[p.i+2:]); ok && 0xdc00 <= lo && lo <= 0xdfff {
			p.i += 6
			return utf8.AppendRune(buf, utf16.DecodeRune(rune(u), rune(lo))), nil
		}
	}
	p.lone = true
	return appendSurrogate(buf, u), nil
}

// hex4 reads the four hex digits of a \u escape.
func hex4(s []byte) (uint16, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var v uint16
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint16(c)
	}
	return v, true
}

// appendSurrogate appends the WTF-8 form of the surrogate u: the bytes
// UTF-8's three-byte pattern gives its code point.
func appendSurrogate(buf []byte, u uint16) []byte {
	return append(buf, 0xe0|byte(u>>12), 0x80|byte(u>>6)&0x3f, 0x80|byte(u)&0x3f)
}

// surrogateAt returns the lone surrogate whose WTF-8 form starts s, if it
// does. Valid UTF-8 never has ED followed by A0..BF.
func surrogateAt(s string) (uint16, bool) {
	if len(s) < 3 || s[0] != 0xed || s[1] < 0xa0 {
		return 0, false
	}
	return 0xd000 | uint16(s[1]&0x3f)<<6 | uint16(s[2]&0x3f), true
}

// codeUnits returns the UTF-16 code units of the WTF-8 string s.
func codeUnits(s string) []uint16 {
	units := make([]uint16, 0, len(s))
	for i := 0; i < len(s); {
		if u, ok := surrogateAt(s[i:]); ok {
			units = append(units, u)
			i += 3
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		units = utf16.AppendRune(units, r)
		i += size
	}
	return units
}

// appendStringified appends the canonical text of n: JSON.stringify's
// output for the value, objects' members in code unit order. At the top
// level, a member named omit (if not "") is left out: the preimage of a
// hash over the value without it.
func appendStringified(buf []byte, n *jsNode, omit string) []byte {
	switch n.kind {
	case jsString:
		return appendQuoted(buf, n.text)
	case jsArray:
		buf = append(buf, '[')
		for k := range n.elems {
			if k > 0 {
				buf = append(buf, ',')
			}
			buf = appendStringified(buf, &n.elems[k], "")
		}
		return append(buf, ']')
	case jsObject:
		buf = append(buf, '{')
		first := true
		for k := range n.members {
			m := &n.members[k]
			if omit != "" && m.key == omit {
				continue
			}
			if !first {
				buf = append(buf, ',')
			}
			first = false
			buf = appendQuoted(buf, m.key)
			buf = append(buf, ':')
			buf = appendStringified(buf, &m.value, "")
		}
		return append(buf, '}')
	}
	return append(buf, n.text...)
}

// appendQuoted appends the WTF-8 string s as JSON.stringify writes it:
// '"' and '\' escaped, \b \f \n \r \t, other controls and lone surrogates
// as \u and four lower-case hex digits, everything else as it is (RFC 8785
// §3.2.2.2, and ES2019 for the surrogates).
func appendQuoted(buf []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	buf = append(buf, '"')
	for i := 0; i < len(s); {
		c := s[i]
		var short byte
		switch c {
		case '"', '\\':
			short = c
		case '\b':
			short = 'b'
		case '\f':
			short = 'f'
		case '\n':
			short = 'n'
		case '\r':
			short = 'r'
		case '\t':
			short = 't'
		}
		u, lone := surrogateAt(s[i:])
		switch {
		case short != 0:
			buf = append(buf, '\\', short)
			i++
		case c < 0x20 || lone:
			if !lone {
				u = uint16(c)
			}
			buf = append(buf, '\\', 'u', hexDigits[u>>12], hexDigits[u>>8&0xf], hexDigits[u>>4&0xf], hexDigits[u&0xf])
			if lone {
				i += 3
			} else {
				i++
			}
		default:
			buf = append(buf, c)
			i++
		}
	}
	return append(buf, '"')
}

// mayHoldSurrogateEscape reports whether line has the text of a surrogate
// escape, \u followed by D8 to DF in either case. It is cheap and may be
// fooled by an escaped backslash ("\\ud800" is text, not an escape); that
// only sends a line to parseStringified, which decides it as jcs does.
func mayHoldSurrogateEscape(line []byte) bool {
	for {
		i := bytes.Index(line, []byte(`\u`))
		if i < 0 || i+3 >= len(line) {
			return false
		}
		if line[i+2]|0x20 == 'd' {
			switch c := line[i+3] | 0x20; {
			case '8' <= c && c <= '9', 'a' <= c && c <= 'f':
				return true
			}
		}
		line = line[i+2:]
	}
}
