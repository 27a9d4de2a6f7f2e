// Package upstream is a differential test of roompub against the rules of
// the upstream eval harness's verifier (capsule.js, envelope.js,
// canonical.js), the enforcing implementation of capsule envelope v1.
// Capsules are generated as the upstream writer writes them, mutated one
// class at a time, and each class's verdict is derived from the upstream's
// rules (or, for a deliberate divergence, from roompub's documented one);
// verify, the gate and the readers must all agree with it.
package upstream

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// jsString is a JavaScript string: UTF-16 code units, so it can hold a
// lone surrogate, which the upstream writer stores as JSON.stringify
// escapes it.
type jsString []uint16

func js(s string) jsString { return utf16.Encode([]rune(s)) }

// rawJSON is JSON text written as it is: numbers and members no
// JavaScript writer produces, spelled for a mutation.
type rawJSON string

// member is one member of an object; an object keeps its members in the
// order given, and a canonical rendering sorts them.
type member struct {
	key string
	val any // jsString, float64, bool, nil, object, []any or rawJSON
}

type object []member

func (o object) get(key string) (any, bool) {
	for _, m := range o {
		if m.key == key {
			return m.val, true
		}
	}
	return nil, false
}

// with returns a copy of o with key set to val (added at the end if new).
func (o object) with(key string, val any) object {
	out := slices.Clone(o)
	for i := range out {
		if out[i].key == key {
			out[i].val = val
			return out
		}
	}
	return append(out, member{key, val})
}

// without returns a copy of o without key.
func (o object) without(key string) object {
	return slices.DeleteFunc(slices.Clone(o), func(m member) bool { return m.key == key })
}

func (o object) str(key string) string {
	v, _ := o.get(key)
	s, _ := v.(jsString)
	return string(utf16.Decode(s))
}

func (o object) payload() object {
	v, _ := o.get("payload")
	p, _ := v.(object)
	return p
}

// compareUTF16 orders keys as Array#sort does by default: by UTF-16 code
// units, which is also RFC 8785's order.
func compareUTF16(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

// style selects a rendering: the zero value is canonical, what
// JSON.stringify writes for a value whose keys were sorted. The others are
// the ways a hand or another writer may spell the same value.
type style struct {
	spaces         bool // ": " and ", "
	reverseKeys    bool // keys in reverse order
	upperSurrogate bool // \uD800 for a lone surrogate
	escapeAstral   bool // \ud83d\ude00 for an astral character
	escapeSlash    bool // \/ for /
	escapeNonASCII bool // \u00e9 for every BMP character past ASCII
	longControl    bool // \u0008 for what JSON.stringify writes \b
	upperHex       bool // \u001F, \u00E9: upper-case hex in the escapes above
}

func canonical(v any) []byte { return render(v, style{}) }

func render(v any, st style) []byte {
	var b []byte
	return appendValue(b, v, st)
}

func appendValue(b []byte, v any, st style) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, v)
	case float64:
		s, err := jcs.NumberToJSON(v)
		if err != nil {
			panic(fmt.Sprintf("no JSON number for %v", v))
		}
		return append(b, s...)
	case rawJSON:
		return append(b, v...)
	case jsString:
		return appendString(b, v, st)
	case []any:
		b = append(b, '[')
		for i, x := range v {
			if i > 0 {
				b = appendSep(b, st)
			}
			b = appendValue(b, x, st)
		}
		return append(b, ']')
	case object:
		ms := slices.Clone(v)
		slices.SortStableFunc(ms, func(x, y member) int { return compareUTF16(x.key, y.key) })
		if st.reverseKeys {
			slices.Reverse(ms)
		}
		b = append(b, '{')
		for i, m := range ms {
			if i > 0 {
				b = appendSep(b, st)
			}
			b = appendString(b, js(m.key), st)
			b = append(b, ':')
			if st.spaces {
				b = append(b, ' ')
			}
			b = appendValue(b, m.val, st)
		}
		return append(b, '}')
	}
	panic(fmt.Sprintf("no JSON for %T", v))
}

func appendSep(b []byte, st style) []byte {
	if st.spaces {
		return append(b, ", "...)
	}
	return append(b, ',')
}

// appendString writes s as JSON.stringify does (well-formed since ES2019:
// a lone surrogate as a lower-case \u escape), or in one of the other
// spellings st asks for.
func appendString(b []byte, s jsString, st style) []byte {
	u4 := func(b []byte, u uint16, upper bool) []byte {
		h := fmt.Sprintf(`\u%04x`, u)
		if upper {
			h = `\u` + strings.ToUpper(h[2:])
		}
		return append(b, h...)
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		u := s[i]
		switch {
		case u == '"':
			b = append(b, `\"`...)
		case u == '\\':
			b = append(b, `\\`...)
		case u == '/' && st.escapeSlash:
			b = append(b, `\/`...)
		case u < 0x20:
			short := map[uint16]string{'\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}[u]
			if short != "" && !st.longControl {
				b = append(b, short...)
			} else {
				b = u4(b, u, st.upperHex)
			}
		case utf16.IsSurrogate(rune(u)):
			if u < 0xdc00 && i+1 < len(s) && s[i+1] >= 0xdc00 && s[i+1] <= 0xdfff {
				if st.escapeAstral {
					b = u4(u4(b, u, false), s[i+1], false)
				} else {
					b = utf8.AppendRune(b, utf16.DecodeRune(rune(u), rune(s[i+1])))
				}
				i++
				continue
			}
			b = u4(b, u, st.upperSurrogate)
		case u >= 0x80 && st.escapeNonASCII:
			b = u4(b, u, st.upperHex)
		default:
			b = utf8.AppendRune(b, rune(u))
		}
	}
	return append(b, '"')
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// entryHash is the upstream's computeEntryHash: SHA-256 of the canonical
// JSON of the entry without entry_hash.
func entryHash(e object) string { return sha256Hex(canonical(e.without("entry_hash"))) }

// genesis is the parent_hash of a chain's first entry.
const genesis = "0000000000000000000000000000000000000000000000000000000000000000"

// isoString is Date#toISOString: years 0 to 9999 as four digits, others
// as a sign and six digits; always milliseconds and Z.
func isoString(t time.Time) string {
	t = t.UTC()
	y := t.Year()
	year := fmt.Sprintf("%04d", y)
	if y < 0 || y > 9999 {
		sign := "+"
		if y < 0 {
			sign, y = "-", -y
		}
		year = fmt.Sprintf("%s%06d", sign, y)
	}
	return year + t.Format("-01-02T15:04:05.000Z")
}

// The upstream envelope's vocabularies (envelope.js).
func lineages() []string {
	return []string{"plan", "attempt", "interaction", "environment", "strategy"}
}
func effectClasses() []string { return []string{"SE0", "SE1", "SE2", "SE3", "SE4"} }

// payloadType is the seed's 31-key allowlist: each key's upstream type.
func payloadTypes() map[string]string {
	return map[string]string{
		"task_id": "string", "task_family": "string", "tool": "string", "tool_call_id": "string",
		"args_hash": "string", "response_hash": "string", "status": "string", "exit_code": "integer|null",
		"duration_ms": "number", "tokens_in": "integer", "tokens_out": "integer", "cost_usd": "number",
		"model": "string", "message": "string", "note": "string", "decision": "string", "reason": "string",
		"score": "number", "passed": "integer", "failed": "integer", "total": "integer", "variant": "string",
		"digest": "string", "path": "string", "fixture_key": "string", "stage": "string", "verdict": "string",
		"hits": "integer", "branch_id": "string", "parent_branch_id": "string", "summary": "string",
	}
}

// capsule is one capsule directory: capsule.json's value and bytes (nil:
// no file), the entries in file order, their journal lines (without
// newline) and what follows the last newline (a partial write).
type capsule struct {
	meta    object
	metaRaw []byte
	entries []object
	lines   [][]byte
	tail    []byte
}

func (c *capsule) journal() []byte {
	var b []byte
	for _, l := range c.lines {
		b = append(append(b, l...), '\n')
	}
	return append(b, c.tail...)
}

// rechain makes entries from..end a chain again after entry from-1 (or
// from the genesis), each rehashed and its line canonical: what the writer
// would have written had the mutated entry been its own.
func (c *capsule) rechain(from int) {
	parent := genesis
	if from > 0 {
		parent = c.entries[from-1].str("entry_hash")
	}
	for i := from; i < len(c.entries); i++ {
		e := c.entries[i].with("parent_hash", js(parent))
		e = e.with("entry_hash", js(entryHash(e)))
		c.entries[i] = e
		c.lines[i] = canonical(e)
		parent = e.str("entry_hash")
	}
}

// edit replaces entry k, rehashes it (keeping the parent_hash it has) and
// relinks the entries after it.
func (c *capsule) edit(k int, e object) {
	e = e.with("entry_hash", js(entryHash(e)))
	c.entries[k], c.lines[k] = e, canonical(e)
	c.rechain(k + 1)
}

// gen draws what the upstream writer may be asked to write.
type gen struct {
	r *rand.Rand
	// loneSurrogates lets strings hold lone surrogates, as a harness
	// that cut a string inside a surrogate pair hands the writer.
	loneSurrogates bool
	// turn picks a class's variant, so successive samples take each in
	// turn; widest is the most variants one choice offered.
	turn, widest int
}

// choose picks one of n variants: the turn's.
func (g *gen) choose(n int) int {
	g.widest = max(g.widest, n)
	return g.turn % n
}

func newGen(seed uint64) *gen { return &gen{r: rand.New(rand.NewPCG(seed, 0x5eed))} }

func (g *gen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

// id draws a run or capsule id: the writer's own form, or anything of
// /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/.
func (g *gen) id(prefix string) string {
	if g.r.IntN(2) == 0 {
		return fmt.Sprintf("%s-%016x", prefix, g.r.Uint64())
	}
	const first = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	const rest = first + "._:-"
	n := 1 + g.r.IntN(128)
	if g.r.IntN(3) > 0 {
		n = 8 + g.r.IntN(24)
	}
	b := []byte{first[g.r.IntN(len(first))]}
	for len(b) < n {
		b = append(b, rest[g.r.IntN(len(rest))])
	}
	return string(b)
}

// kind draws /^[a-z][a-z0-9_.-]{0,63}$/.
func (g *gen) kind() string {
	if g.r.IntN(2) == 0 {
		return g.pick([]string{"tool_call", "tool.result", "plan-step", "env.snapshot", "verdict", "a"})
	}
	const rest = "abcdefghijklmnopqrstuvwxyz0123456789_.-"
	b := []byte{byte('a' + g.r.IntN(26))}
	for n := g.r.IntN(64); len(b) <= n; {
		b = append(b, rest[g.r.IntN(len(rest))])
	}
	return string(b)
}

// when draws a clock reading the writer turns into ts or created_at:
// mostly recent, sometimes any year from 0 to 9999.
func (g *gen) when() time.Time {
	if g.r.IntN(8) == 0 {
		return time.Date(g.r.IntN(9999), time.January, 1, 0, 0, 0, 0, time.UTC).
			Add(time.Duration(g.r.Int64N(int64(365 * 24 * time.Hour))))
	}
	return time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC).
		Add(time.Duration(g.r.Int64N(int64(2 * 365 * 24 * time.Hour)))).Truncate(time.Millisecond)
}

// pieces are what strings are made of: words, punctuation, JSON's escapes,
// control characters, combining marks, astral characters, and the
// characters JavaScript and Go disagree about (NBSP, NEL, LS, PS, BOM).
func pieces() []string {
	return []string{
		"alpha", "beta", "gamma", "ok", "fail", "p95", "run", "x", "42", "3.14", "Z",
		" ", " ", ".", ",", "-", "_", "/", ":", "=", "'", "(", ")", "#", "@", "<", ">", "&", "+", "~", "%",
		`"`, `\`, `\"`, `\\n`,
		"\x00", "\b", "\t", "\n", "\f", "\r", "\x1b", "\x1f", "\x7f",
		"é", "ß", "ø", "Ω", "Ж", "e\u0301", "\u0308", "ñ", "İ", "ı",
		"漢字", "日本", "한", "\u00a0", "\u0085", "\u2028", "\u2029", "\ufeff", "\u200b", "\u3000", "\ufffd",
		"😀", "𝄞", "🏳️‍🌈", "\U0010ffff", "\U00010000",
	}
}

// str draws a string of up to max pieces.
func (g *gen) str(max int) jsString {
	ps := pieces()
	var s jsString
	for n := g.r.IntN(max + 1); n > 0; n-- {
		if g.loneSurrogates && g.r.IntN(6) == 0 {
			switch g.r.IntN(3) {
			case 0: // a high surrogate alone, as after a cut inside a pair
				s = append(s, uint16(0xd800+g.r.IntN(0x400)))
			case 1:
				s = append(s, uint16(0xdc00+g.r.IntN(0x400)))
			default: // a pair in the wrong order: two lone surrogates
				s = append(s, uint16(0xdc00+g.r.IntN(0x400)), uint16(0xd800+g.r.IntN(0x400)))
			}
			continue
		}
		s = append(s, js(ps[g.r.IntN(len(ps))])...)
	}
	return s
}

// payloadStr draws a payload string the upstream canaries certainly do
// not trip (the writer would refuse it otherwise).
func (g *gen) payloadStr() jsString {
	for {
		if s := g.str(10); !mayTripCanary(s) {
			return s
		}
	}
}

// mayTripCanary over-approximates the upstream canaries (and wider
// readings of them): every canary needs one of these literals, folded
// as any case-insensitive engine might fold them.
func mayTripCanary(s jsString) bool {
	folded := strings.Map(func(r rune) rune {
		switch r {
		case 'ſ':
			return 's'
		case '\u212a': // KELVIN SIGN
			return 'k'
		}
		return r
	}, strings.ToLower(string(utf16.Decode(s))))
	for _, need := range []string{"begin", "akia", "sk-", "gh", "xox", "k_", "bearer", "eyj", "api_key", "secret", "token", "passw"} {
		if strings.Contains(folded, need) {
			return true
		}
	}
	return false
}

// integer draws a Number.isInteger value; the writer's JSON.stringify
// spells those past 1e21 with an exponent.
func (g *gen) integer() float64 {
	switch g.r.IntN(10) {
	case 0:
		return float64(-g.r.IntN(1000))
	case 1:
		return g.pick2([]float64{1 << 53, 1<<53 - 1, 1 << 62, 1e20, 123456789012345680000})
	case 2:
		return g.pick2([]float64{1e21, 1e300, -1e22, math.MaxFloat64})
	default:
		return float64(g.r.IntN(100000))
	}
}

// number draws a finite double: integers, decimals, and exponents either
// way, spelled as JSON.stringify spells them.
func (g *gen) number() float64 {
	switch g.r.IntN(6) {
	case 0:
		return g.integer()
	case 1:
		return math.Round(g.r.Float64()*100000) / 100
	case 2:
		return math.Ldexp(g.r.Float64(), g.r.IntN(2099)-1074)
	case 3:
		return g.pick2([]float64{0.1, 0.5, 1e-7, 1e-6, 5e-324, math.MaxFloat64, math.Copysign(0, -1), 4.35, 0.000001234, 1e21, 9007199254740993})
	default:
		return -g.r.Float64() * 1000
	}
}

func (g *gen) pick2(xs []float64) float64 { return xs[g.r.IntN(len(xs))] }

// value draws a value of an allowlisted type.
func (g *gen) value(typ string) any {
	switch typ {
	case "string":
		return g.payloadStr()
	case "integer":
		return g.integer()
	case "integer|null":
		if g.r.IntN(3) == 0 {
			return nil
		}
		return g.integer()
	default:
		return g.number()
	}
}

// payload draws a payload of allowlisted keys with values of their types.
func (g *gen) payload() object {
	types := payloadTypes()
	keys := make([]string, 0, len(types))
	for k := range types {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var p object
	for _, i := range g.r.Perm(len(keys))[:g.r.IntN(9)] {
		p = append(p, member{keys[i], g.value(types[keys[i]])})
	}
	return p
}

// metaStr draws harness_version or task_family: Capsule.create wants it
// not blank after String#trim.
func (g *gen) metaStr(def string) jsString {
	if g.r.IntN(2) == 0 {
		return js(def)
	}
	for {
		s := g.str(4)
		if !jsBlank(s) {
			return s
		}
	}
}

// jsBlank is !s.trim(): s holds only JavaScript white space and line
// terminators.
func jsBlank(s jsString) bool {
	for _, u := range s {
		switch {
		case u == '\t' || u == '\n' || u == '\v' || u == '\f' || u == '\r' || u == ' ':
		case u == 0xa0 || u == 0x1680 || u >= 0x2000 && u <= 0x200a || u == 0x2028 || u == 0x2029 || u == 0x202f || u == 0x205f || u == 0x3000 || u == 0xfeff:
		default:
			return false
		}
	}
	return true
}

// ids names one chain.
type ids struct{ run, capsule string }

func (g *gen) ids() ids { return ids{g.id("run"), g.id("capsule")} }

// create is Capsule.create: capsule.json as canonical JSON and a newline.
func (g *gen) create(id ids) *capsule {
	meta := object{
		{"schema", js("capsule-envelope/v1")},
		{"run_id", js(id.run)},
		{"capsule_id", js(id.capsule)},
		{"harness_version", g.metaStr("unknown")},
		{"task_family", g.metaStr("unspecified")},
		{"created_at", js(isoString(g.when()))},
	}
	return &capsule{meta: meta, metaRaw: append(canonical(meta), '\n')}
}

// append is Capsule#append: the entry the writer builds, hashed, and its
// canonical line.
func (g *gen) append(c *capsule, p object) {
	parent := genesis
	if n := len(c.entries); n > 0 {
		parent = c.entries[n-1].str("entry_hash")
	}
	hv, _ := c.meta.get("harness_version")
	tf, _ := c.meta.get("task_family")
	e := object{
		{"schema", js("capsule-envelope/v1")},
		{"run_id", js(c.meta.str("run_id"))},
		{"capsule_id", js(c.meta.str("capsule_id"))},
		{"seq", float64(len(c.entries))},
		{"ts", js(isoString(g.when()))},
		{"lineage", js(g.pick(lineages()))},
		{"kind", js(g.kind())},
		{"effect_class", js(g.pick(effectClasses()))},
		{"harness_version", hv},
		{"task_family", tf},
		{"parent_hash", js(parent)},
		{"payload", p},
	}
	e = append(e, member{"entry_hash", js(entryHash(e))})
	c.entries = append(c.entries, e)
	c.lines = append(c.lines, canonical(e))
}

// capsule writes a capsule of n entries as the upstream writer does.
func (g *gen) capsule(id ids, n int) *capsule {
	c := g.create(id)
	for range n {
		g.append(c, g.payload())
	}
	return c
}
