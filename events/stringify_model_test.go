package events_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// This file is a model of the values the upstream's JSON.parse makes of a
// journal line, written from the ECMAScript rules and nothing in package
// events: strings are UTF-16 code units, an object's members are written
// sorted by code units, JSON.stringify escapes '"', '\', the controls
// (\b \f \n \r \t, others \u00xx) and lone surrogates (\udxxx), all in
// lower case, and writes everything else as it is. The tests hold the
// package to it, and the node golden test holds it to JavaScript.

// The kinds of a jsv.
const (
	vString = iota + 1
	vNumber
	vLiteral
	vArray
	vObject
)

// jsv is one JavaScript value parsed from JSON.
type jsv struct {
	kind  int
	units []uint16 // vString
	num   float64  // vNumber
	lit   string   // vLiteral
	elems []jsv    // vArray
	keys  [][]uint16
	vals  []jsv // vObject, in the order they were generated
}

// canonical is JSON.stringify of the value with its keys sorted, members
// whose key is omit left out at the top level.
func (v *jsv) canonical(b []byte, omit string) []byte {
	switch v.kind {
	case vString:
		return quoteUnits(b, v.units)
	case vNumber:
		s, err := jcs.NumberToJSON(v.num)
		if err != nil {
			panic(err)
		}
		return append(b, s...)
	case vLiteral:
		return append(b, v.lit...)
	case vArray:
		b = append(b, '[')
		for i := range v.elems {
			if i > 0 {
				b = append(b, ',')
			}
			b = v.elems[i].canonical(b, "")
		}
		return append(b, ']')
	}
	order := make([]int, len(v.keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return slices.Compare(v.keys[i], v.keys[j]) })
	skip := utf16.Encode([]rune(omit))
	b = append(b, '{')
	n := 0
	for _, i := range order {
		if omit != "" && slices.Equal(v.keys[i], skip) {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = quoteUnits(b, v.keys[i])
		b = append(b, ':')
		b = v.vals[i].canonical(b, "")
	}
	return append(b, '}')
}

// quoteUnits is JSON.stringify of a string of code units (ES2019).
func quoteUnits(b []byte, s []uint16) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		u := s[i]
		switch {
		case 0xd800 <= u && u <= 0xdbff && i+1 < len(s) && 0xdc00 <= s[i+1] && s[i+1] <= 0xdfff:
			b = utf8.AppendRune(b, utf16.DecodeRune(rune(u), rune(s[i+1])))
			i++
		case 0xd800 <= u && u <= 0xdfff:
			b = fmt.Appendf(b, `\u%04x`, u)
		case u < 0x20 || u == '"' || u == '\\':
			b = append(b, mustEscape(u)...)
		default:
			b = utf8.AppendRune(b, rune(u))
		}
	}
	return append(b, '"')
}

// mustEscape is the escape JSON.stringify writes for '"', '\' and the
// controls.
func mustEscape(u uint16) string {
	switch u {
	case '"', '\\':
		return `\` + string(rune(u))
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	}
	return fmt.Sprintf(`\u%04x`, u)
}

// wtf8 is the string of code units s as package events holds it: UTF-8,
// a lone surrogate as the three bytes of its code point.
func wtf8(s []uint16) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		u := s[i]
		switch {
		case 0xd800 <= u && u <= 0xdbff && i+1 < len(s) && 0xdc00 <= s[i+1] && s[i+1] <= 0xdfff:
			b = utf8.AppendRune(b, utf16.DecodeRune(rune(u), rune(s[i+1])))
			i++
		case 0xd800 <= u && u <= 0xdfff:
			b = append(b, 0xed, 0x80|byte(u>>6)&0x3f, 0x80|byte(u)&0x3f)
		default:
			b = utf8.AppendRune(b, rune(u))
		}
	}
	return string(b)
}

// member returns the value of the top-level member key.
func (v *jsv) member(key string) (*jsv, bool) {
	want := utf16.Encode([]rune(key))
	for i, k := range v.keys {
		if slices.Equal(k, want) {
			return &v.vals[i], true
		}
	}
	return nil, false
}

// chooser makes the choices of the generator and the renderer: from fuzz
// input (zeros once it is used up) or from a seeded source. A zero choice
// is always the plain one (the canonical rendering, an empty container),
// so every input generates a finite value.
type chooser struct {
	data []byte
	r    *rand.Rand
}

func (c *chooser) byte() byte {
	if c.r != nil {
		return byte(c.r.Uint32())
	}
	if len(c.data) == 0 {
		return 0
	}
	b := c.data[0]
	c.data = c.data[1:]
	return b
}

// n returns a choice in [0, k), k at most 256.
func (c *chooser) n(k int) int { return int(c.byte()) % k }

func (c *chooser) u16() uint16 { return uint16(c.byte())<<8 | uint16(c.byte()) }

// genEntry generates a top-level object: some envelope members (which
// the accessors read) and random ones.
func genEntry(c *chooser) jsv {
	v := jsv{kind: vObject}
	for _, key := range []string{"entry_hash", "run_id", "capsule_id", "harness_version", "task_family", "parent_hash", "seq"} {
		if c.n(3) == 0 {
			continue
		}
		var val jsv
		switch {
		case key == "seq" && c.n(4) != 0:
			val = jsv{kind: vNumber, num: float64(c.n(100))}
		default:
			val = jsv{kind: vString, units: genUnits(c)}
		}
		v.keys = append(v.keys, utf16.Encode([]rune(key)))
		v.vals = append(v.vals, val)
	}
	genMembers(c, &v, 1)
	return v
}

// genMembers adds up to seven members with random keys to object v.
func genMembers(c *chooser, v *jsv, depth int) {
	for range c.n(8) {
		key := genUnits(c)
		// The upstream's objects enumerate integer-like keys first, in
		// numeric order, whatever the sort said: such a key never is one.
		if len(key) == 0 || '0' <= key[0] && key[0] <= '9' {
			key = append([]uint16{'k'}, key...)
		}
		if slices.ContainsFunc(v.keys, func(k []uint16) bool { return slices.Equal(k, key) }) {
			continue
		}
		v.keys = append(v.keys, key)
		v.vals = append(v.vals, genValue(c, depth+1))
	}
}

func genValue(c *chooser, depth int) jsv {
	k := c.n(8)
	if depth >= 4 && k >= 5 {
		k = 0
	}
	switch k {
	case 3:
		return jsv{kind: vNumber, num: genNumber(c)}
	case 4:
		return jsv{kind: vLiteral, lit: []string{"null", "true", "false"}[c.n(3)]}
	case 5:
		v := jsv{kind: vArray, elems: []jsv{}}
		for range c.n(4) {
			v.elems = append(v.elems, genValue(c, depth+1))
		}
		return v
	case 6, 7:
		v := jsv{kind: vObject}
		genMembers(c, &v, depth)
		return v
	}
	return jsv{kind: vString, units: genUnits(c)}
}

func genNumber(c *chooser) float64 {
	switch c.n(4) {
	case 0:
		return float64(int(c.u16()) - 1000)
	case 1:
		return float64(c.u16()) / 100
	}
	var bits uint64
	for range 8 {
		bits = bits<<8 | uint64(c.byte())
	}
	f := math.Float64frombits(bits)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0.5
	}
	return f
}

// genUnits generates a string of code units rich in what the canonical
// form treats specially: lone surrogates of both kinds, pairs, controls,
// '"', '\', '/', DEL, the ends of the BMP's ranges, astral characters.
func genUnits(c *chooser) []uint16 {
	units := []uint16{}
	for range c.n(7) {
		switch c.n(10) {
		case 0:
			units = append(units, uint16(0x20+c.n(0x5f)))
		case 1:
			units = append(units, uint16(c.n(0x20)))
		case 2:
			units = append(units, 0xd800|c.u16()&0x3ff) // high, lone unless a low follows
		case 3:
			units = append(units, 0xdc00|c.u16()&0x3ff) // low
		case 4:
			units = append(units, 0xd800|c.u16()&0x3ff, 0xdc00|c.u16()&0x3ff) // a pair
		case 5:
			units = append(units, []uint16{'"', '\\', '/', 0x7f, 0x2028, 0xd7ff, 0xe000, 0xfeff, 0xffff, 0x80}[c.n(10)])
		case 6:
			u := c.u16()
			if 0xd800 <= u && u <= 0xdfff {
				u ^= 0x4000
			}
			units = append(units, u)
		case 7:
			units = append(units, 'a'+uint16(c.n(26)), '_')
		case 8:
			units = append(units, uint16(0x80+c.n(0x80)))
		default:
			units = append(units, 0xd83d, 0xde00)
		}
	}
	return units
}

// render writes v as JSON that JSON.parse reads as v, in a form the
// choices pick: white space, member order, escapes where none is needed,
// either case of hex digits, escaped pairs, other spellings of numbers.
func (v *jsv) render(b []byte, c *chooser) []byte {
	b = space(b, c)
	switch v.kind {
	case vString:
		b = renderUnits(b, v.units, c)
	case vNumber:
		canon, _ := jcs.NumberToJSON(v.num)
		switch c.n(4) {
		case 1:
			canon = strconv.FormatFloat(v.num, 'e', -1, 64)
		case 2:
			canon = strings.ToUpper(strconv.FormatFloat(v.num, 'e', -1, 64))
		case 3:
			canon = strconv.FormatFloat(v.num, 'f', -1, 64)
		}
		b = append(b, canon...)
	case vLiteral:
		b = append(b, v.lit...)
	case vArray:
		b = append(b, '[')
		for i := range v.elems {
			if i > 0 {
				b = append(space(b, c), ',')
			}
			b = v.elems[i].render(b, c)
		}
		b = append(space(b, c), ']')
	case vObject:
		order := make([]int, len(v.keys))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(i, j int) int { return slices.Compare(v.keys[i], v.keys[j]) })
		for i := len(order) - 1; i > 0; i-- {
			if j := c.n(i + 1); j != 0 { // zero: keep the canonical order
				order[i], order[i-j] = order[i-j], order[i]
			}
		}
		b = append(b, '{')
		for n, i := range order {
			if n > 0 {
				b = append(space(b, c), ',')
			}
			b = renderUnits(space(b, c), v.keys[i], c)
			b = append(space(b, c), ':')
			b = v.vals[i].render(b, c)
		}
		b = append(space(b, c), '}')
	}
	return space(b, c)
}

// space may add white space; never a newline, which would end a journal
// line.
func space(b []byte, c *chooser) []byte {
	if c.n(8) == 7 {
		b = append(b, " \t\r"[c.n(3)])
	}
	return b
}

// renderUnits writes a string of code units as a JSON string.
func renderUnits(b []byte, s []uint16, c *chooser) []byte {
	escape := func(u uint16) {
		if c.n(2) == 0 {
			b = fmt.Appendf(b, `\u%04x`, u)
		} else {
			b = fmt.Appendf(b, `\u%04X`, u)
		}
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		u := s[i]
		switch {
		case 0xd800 <= u && u <= 0xdbff && i+1 < len(s) && 0xdc00 <= s[i+1] && s[i+1] <= 0xdfff:
			if c.n(4) == 3 {
				escape(u)
				escape(s[i+1])
			} else {
				b = utf8.AppendRune(b, utf16.DecodeRune(rune(u), rune(s[i+1])))
			}
			i++
		case 0xd800 <= u && u <= 0xdfff:
			escape(u)
		case c.n(8) == 7:
			escape(u)
		case u < 0x20 || u == '"' || u == '\\':
			b = append(b, mustEscape(u)...)
		case u == '/' && c.n(2) == 1:
			b = append(b, `\/`...)
		default:
			b = utf8.AppendRune(b, rune(u))
		}
	}
	return append(b, '"')
}
