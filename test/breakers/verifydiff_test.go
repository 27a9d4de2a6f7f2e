// Package breakers holds adversarial differential tests written while
// trying to break the verify fast paths. They compare the current binaries
// with the ones built from the commit before them (0d93e38) and are
// skipped unless ROOMPUB_OLD_BIN names that build's bin directory.
//
//	git -C . archive 0d93e38 | tar -x -C /tmp/old && (cd /tmp/old && go build -o bin/ ./cmd/...)
//	make build
//	ROOMPUB_OLD_BIN=/tmp/old/bin go test ./test/breakers -run TestVerifyDiff -count=1
package breakers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func bins(t *testing.T) (oldBin, newBin string) {
	t.Helper()
	oldBin = os.Getenv("ROOMPUB_OLD_BIN")
	if oldBin == "" {
		t.Skip("ROOMPUB_OLD_BIN (bin directory of the build before the fast paths) not set")
	}
	newBin = os.Getenv("ROOMPUB_NEW_BIN")
	if newBin == "" {
		newBin = filepath.Join(repoRoot(t), "bin")
	}
	return oldBin, newBin
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// ---------- a JSON renderer with selectable non-canonical styles ----------

type style struct {
	reverseKeys  bool // keys in reverse order
	utf8Order    bool // keys in byte order instead of UTF-16 order
	escNonASCII  bool // \uXXXX for every non-ASCII rune
	upperHex     bool // \u00E9 instead of \u00e9
	escSlash     bool // "\/"
	escAllCtl    bool // \u0008 instead of \b
	spaces       bool // ": " and ", "
	entryHashPos int  // 0 sorted, 1 first, 2 last
}

func utf16Less(a, b string) bool {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return ua[i] < ub[i]
		}
	}
	return len(ua) < len(ub)
}

func (st style) str(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	hexf := "\\u%04x"
	if st.upperHex {
		hexf = "\\u%04X"
	}
	for _, r := range s {
		switch {
		case r == '"':
			buf.WriteString(`\"`)
		case r == '\\':
			buf.WriteString(`\\`)
		case r == '/' && st.escSlash:
			buf.WriteString(`\/`)
		case r < 0x20:
			short := map[rune]string{'\b': `\b`, '\t': `\t`, '\n': `\n`, '\f': `\f`, '\r': `\r`}[r]
			if short != "" && !st.escAllCtl {
				buf.WriteString(short)
			} else {
				fmt.Fprintf(buf, hexf, r)
			}
		case r >= 0x80 && st.escNonASCII:
			for _, u := range utf16.Encode([]rune{r}) {
				fmt.Fprintf(buf, hexf, u)
			}
		default:
			buf.WriteRune(r)
		}
	}
	buf.WriteByte('"')
}

func (st style) render(buf *bytes.Buffer, v any, top bool) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		if st.utf8Order {
			sort.Strings(keys)
		} else {
			sort.Slice(keys, func(i, j int) bool { return utf16Less(keys[i], keys[j]) })
		}
		if st.reverseKeys {
			for i, j := 0, len(keys)-1; i < j; i, j = i+1, j-1 {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
		if top && st.entryHashPos != 0 {
			if _, ok := v["entry_hash"]; ok {
				rest := keys[:0:0]
				for _, k := range keys {
					if k != "entry_hash" {
						rest = append(rest, k)
					}
				}
				if st.entryHashPos == 1 {
					keys = append([]string{"entry_hash"}, rest...)
				} else {
					keys = append(rest, "entry_hash")
				}
			}
		}
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
				if st.spaces {
					buf.WriteByte(' ')
				}
			}
			st.str(buf, k)
			buf.WriteByte(':')
			if st.spaces {
				buf.WriteByte(' ')
			}
			st.render(buf, v[k], false)
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				buf.WriteByte(',')
			}
			st.render(buf, e, false)
		}
		buf.WriteByte(']')
	case string:
		st.str(buf, v)
	case json.Number:
		buf.WriteString(string(v))
	case bool:
		buf.WriteString(strconv.FormatBool(v))
	case nil:
		buf.WriteString("null")
	default:
		panic(fmt.Sprintf("render %T", v))
	}
}

func decode(line []byte) (map[string]any, bool) {
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	var m map[string]any
	if d.Decode(&m) != nil || m == nil {
		return nil, false
	}
	return m, true
}

// canonicalHash is sha256 of the RFC 8785 form of obj without entry_hash
// (what entry_hash must be), or "" when jcs refuses the value.
func canonicalHash(obj map[string]any) string {
	cp := make(map[string]any, len(obj))
	for k, v := range obj {
		if k != "entry_hash" {
			cp[k] = v
		}
	}
	var b bytes.Buffer
	style{utf8Order: true}.render(&b, cp, false)
	c, err := jcs.Transform(b.Bytes())
	if err != nil {
		return ""
	}
	s := sha256.Sum256(c)
	return hex.EncodeToString(s[:])
}

// ---------- mutations ----------

var trickyStrings = []string{
	"é", "e\u0301", "\u2028", "\u2029", "\x7f", "\x00", "\x01", "\x1f", "\b\t\n\f\r", "/", "\\", `"`,
	"\U0001F600", "\ue000", "\U00010000", "\ufffe", "\uffff", "\ufeff", "caf\u00e9 \u2192 ok",
	"AKIAABCDEFGHIJKLMNOP", "AKIA" + "ABCDEFGHIJKLMNOP" + "x", "ghp_" + strings.Repeat("a", 30),
	"sk-" + strings.Repeat("A", 20), "xoxb-1", "sk_live_" + strings.Repeat("9", 16),
	"Bearer " + strings.Repeat("z", 20), "Bearer\t" + strings.Repeat("z", 20),
	"eyJa.b.c", "PASSWORD = 'hunter22x'", "api_key=abcdefgh", "Token\u00a0=abcdefghij",
	"-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN  PRIVATE KEY-----", "", " ", strings.Repeat("x", 5000),
	"\u0130", "\u212a", "ſecret=abcdefghij", "SECRET\n=\nabcdefghij",
}

var trickyNumbers = []string{
	"0", "-0", "1", "-1", "1.0", "1e2", "1E2", "1e+2", "100", "1.5", "0.1", "1e-7", "1e21", "1e+21",
	"123456789012345", "1234567890123456", "9007199254740992", "9007199254740993", "18446744073709551616",
	"1e400", "-1e400", "5e-324", "1e-400", "0.0", "00", "01", "-01", "2.5e-3", "0.000001", "1e-6",
	"100000000000000000000", "1e20", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
	"1.7976931348623157e308", "4.35", "0.30000000000000004", "1_0", "0x10", "+1", ".5", "5.", "1e", "-",
}

var payloadKeys = []string{
	"task_id", "message", "note", "reason", "exit_code", "duration_ms", "tokens_in", "score", "passed",
	"hits", "summary", "path", "cost_usd", "status", "verdict",
	"unknown", "é", "\ue000", "\U00010000", "Message", "task id", "", "a\"b", "payload",
}

var topKeys = []string{
	"seq", "ts", "kind", "lineage", "effect_class", "run_id", "capsule_id", "harness_version",
	"task_family", "schema", "parent_hash", "entry_hash", "payload",
}

func randValue(r *rand.Rand, depth int) any {
	switch r.IntN(8) {
	case 0, 1, 2:
		return trickyStrings[r.IntN(len(trickyStrings))]
	case 3, 4:
		return json.Number(trickyNumbers[r.IntN(len(trickyNumbers))])
	case 5:
		if r.IntN(2) == 0 {
			return nil
		}
		return r.IntN(2) == 0
	case 6:
		if depth > 2 {
			return "deep"
		}
		m := map[string]any{}
		for range r.IntN(3) {
			m[payloadKeys[r.IntN(len(payloadKeys))]] = randValue(r, depth+1)
		}
		return m
	default:
		if depth > 2 {
			return json.Number("7")
		}
		var a []any
		for range r.IntN(3) {
			a = append(a, randValue(r, depth+1))
		}
		if a == nil {
			a = []any{}
		}
		return a
	}
}

var topValues = map[string][]any{
	"seq":             {json.Number("1.0"), json.Number("1e0"), json.Number("-1"), "0", json.Number("9223372036854775808"), json.Number("0.5")},
	"ts":              {"2026-09-03T14:30:60Z", "2026-09-03t14:30:00Z", "2026-09-03T14:30:00z", "2026-09-03T24:00:00Z", "2026-02-29T00:00:00Z", "2028-02-29T00:00:00Z", "2026-09-03T14:30:00.Z", "2026-09-03T14:30:00+23:59", "2026-09-03T14:30:00+24:00", "2026-09-03T14:30:00-00:00", "2026-09-03 14:30:00Z", "2026-09-03T14:30:00.1234567890123Z", "2026-09-03T14:30:00", "2026-9-03T14:30:00Z", "2026-09-03T+1:30:00Z", "2026-09-03T14:30:00Z\n", "2026-09-03T23:59:60Z", "2026-12-31T23:59:60Z"},
	"kind":            {"Gate.start", "a", "a" + strings.Repeat("b", 63), "a" + strings.Repeat("b", 64), "gate start", "gate.start\n", "é"},
	"lineage":         {"Plan", "plan ", "planning", ""},
	"effect_class":    {"SE5", "se0", "SE0 ", "SE"},
	"run_id":          {"a" + strings.Repeat("b", 127), "a" + strings.Repeat("b", 128), "-x", "x/y", "x\n", "é"},
	"harness_version": {"", " ", "é"},
	"schema":          {"capsule-envelope/v2", "capsule-envelope\\/v1"},
	"parent_hash":     {strings.Repeat("A", 64), strings.Repeat("0", 63), strings.Repeat("0", 65)},
	"entry_hash":      {strings.Repeat("f", 64), strings.ToUpper(strings.Repeat("ab", 32))},
	"payload":         {map[string]any{}, []any{}, nil, "x"},
}

func randStyle(r *rand.Rand) style {
	if r.IntN(2) == 0 {
		return style{} // canonical
	}
	return style{
		reverseKeys:  r.IntN(6) == 0,
		utf8Order:    r.IntN(3) == 0,
		escNonASCII:  r.IntN(3) == 0,
		upperHex:     r.IntN(3) == 0,
		escSlash:     r.IntN(4) == 0,
		escAllCtl:    r.IntN(4) == 0,
		spaces:       r.IntN(6) == 0,
		entryHashPos: r.IntN(3),
	}
}

// relink re-renders lines from i on canonically so that each parent_hash is
// the previous entry_hash and each entry_hash is right (the first, line i,
// in style st). Lines that do not decode are left as they are.
func relink(lines [][]byte, i int, st style, r *rand.Rand) {
	prev := ""
	if i > 0 {
		if m, ok := decode(lines[i-1]); ok {
			prev, _ = m["entry_hash"].(string)
		}
	}
	for j := i; j < len(lines); j++ {
		m, ok := decode(lines[j])
		if !ok {
			return
		}
		if j > i && prev != "" {
			m["parent_hash"] = prev
		}
		if h := canonicalHash(m); h != "" {
			m["entry_hash"] = h
		}
		var b bytes.Buffer
		if j == i {
			st.render(&b, m, true)
		} else {
			style{}.render(&b, m, true)
		}
		lines[j] = b.Bytes()
		prev, _ = m["entry_hash"].(string)
		if j > i && r.IntN(4) == 0 {
			return // leave a broken link sometimes
		}
	}
}

func mutateJournal(r *rand.Rand, base []byte) []byte {
	lines := bytes.Split(bytes.TrimSuffix(base, []byte("\n")), []byte("\n"))
	for i := range lines {
		lines[i] = append([]byte(nil), lines[i]...)
	}
	if r.IntN(2) == 0 {
		// One entry changed in place and the chain relinked after it,
		// canonically: the fast path and the envelope fast check see it.
		for range 1 + r.IntN(3) {
			i := r.IntN(len(lines))
			m, ok := decode(lines[i])
			if !ok {
				continue
			}
			if r.IntN(3) > 0 {
				p, _ := m["payload"].(map[string]any)
				if p == nil {
					continue
				}
				p[payloadKeys[r.IntN(15)]] = randValue(r, 2)
			} else {
				key := topKeys[r.IntN(len(topKeys))]
				if vals := topValues[key]; len(vals) > 0 {
					m[key] = vals[r.IntN(len(vals))]
				}
			}
			lines[i] = renderStr(m)
			relinkAll(lines, i)
		}
		return append(bytes.Join(lines, []byte("\n")), '\n')
	}
	nmut := 1 + r.IntN(3)
	for range nmut {
		i := r.IntN(len(lines))
		m, ok := decode(lines[i])
		switch k := r.IntN(16); {
		case k < 5 && ok: // payload member
			p, isMap := m["payload"].(map[string]any)
			if !isMap {
				p = map[string]any{}
				m["payload"] = p
			}
			key := payloadKeys[r.IntN(len(payloadKeys))]
			if r.IntN(5) == 0 {
				delete(p, key)
			} else {
				p[key] = randValue(r, 2)
			}
			lines[i] = renderStr(m)
			relinkMaybe(r, lines, i)
		case k < 7 && ok: // top-level member
			key := topKeys[r.IntN(len(topKeys))]
			switch vals := topValues[key]; {
			case r.IntN(6) == 0:
				delete(m, key)
			case r.IntN(6) == 0:
				m["extra"+strconv.Itoa(r.IntN(3))] = randValue(r, 1)
			case len(vals) > 0:
				m[key] = vals[r.IntN(len(vals))]
			default:
				m[key] = randValue(r, 1)
			}
			lines[i] = renderStr(m)
			relinkMaybe(r, lines, i)
		case k < 9 && ok: // same content, another style
			var b bytes.Buffer
			randStyle(r).render(&b, m, true)
			lines[i] = b.Bytes()
			if r.IntN(2) == 0 {
				relink(lines, i, randStyle(r), r)
			}
		case k == 9: // byte edit
			l := lines[i]
			if len(l) == 0 {
				continue
			}
			p := r.IntN(len(l))
			junk := []byte{0, '\r', ' ', 0xff, 0xc3, 0xed, 0xa0, 0x80, '"', '\\', ',', '}', '{', '1', 'u', '\t', 0x7f}
			switch r.IntN(3) {
			case 0:
				l[p] = junk[r.IntN(len(junk))]
			case 1:
				l = append(l[:p], l[p+1:]...)
			default:
				l = append(l[:p], append([]byte{junk[r.IntN(len(junk))]}, l[p:]...)...)
			}
			lines[i] = l
		case k == 10: // line-level additions
			extra := [][]byte{{}, []byte(" "), []byte("\t"), []byte("\r"), []byte("{}"), []byte("null"), []byte("[]"), []byte("\xef\xbb\xbf"), []byte("\x00")}
			e := extra[r.IntN(len(extra))]
			switch r.IntN(3) {
			case 0:
				lines = append(lines[:i], append([][]byte{e}, lines[i:]...)...)
			case 1:
				lines[i] = append(append([]byte(nil), lines[i]...), e...)
			default:
				lines[i] = append(append([]byte(nil), e...), lines[i]...)
			}
		case k == 11: // duplicate key by text
			l := lines[i]
			if len(l) > 1 && l[len(l)-1] == '}' {
				dups := []string{`,"seq":0`, `,"payload":{}`, `,"entry_hash":"x"`, `,"zz":1`, `,"seq":0,"seq":0`}
				lines[i] = append(append(append([]byte(nil), l[:len(l)-1]...), dups[r.IntN(len(dups))]...), '}')
			}
		case k == 12: // duplicate, drop or swap lines
			j := r.IntN(len(lines))
			switch r.IntN(3) {
			case 0:
				lines = append(lines[:i], append([][]byte{lines[j]}, lines[i:]...)...)
			case 1:
				if len(lines) > 1 {
					lines = append(lines[:i], lines[i+1:]...)
				}
			default:
				lines[i], lines[j] = lines[j], lines[i]
			}
		case k == 13 && ok: // payload member with a secret split by escapes
			p, _ := m["payload"].(map[string]any)
			if p == nil {
				continue
			}
			p["message"] = "AKIAABCDEFGHIJKLMNOP"
			if h := canonicalHash(m); h != "" {
				m["entry_hash"] = h
			}
			var b bytes.Buffer
			style{}.render(&b, m, true)
			lines[i] = bytes.Replace(b.Bytes(), []byte("AKIAA"), []byte(`AKIA\u0041`), 1)
		case k == 14 && ok: // number re-spelled in place
			m["seq"] = json.Number([]string{"0", "1", "2", "1.0", "1e0", "10", "01", "-0"}[r.IntN(8)])
			lines[i] = renderStr(m)
			relinkMaybe(r, lines, i)
		default:
			if ok {
				lines[i] = renderStr(m)
			}
		}
	}
	out := bytes.Join(lines, []byte("\n"))
	switch r.IntN(20) {
	case 0: // no final newline
	case 1:
		out = append([]byte("\xef\xbb\xbf"), append(out, '\n')...)
	case 2:
		out = bytes.ReplaceAll(append(out, '\n'), []byte("\n"), []byte("\r\n"))
	case 3:
		out = append(out, "\n\n"...)
	case 4:
		out = append(out, "\n   \n"...)
	default:
		out = append(out, '\n')
	}
	return out
}

// relinkAll rehashes line i and every later line, relinking the chain.
func relinkAll(lines [][]byte, i int) {
	prev := ""
	if i > 0 {
		if m, ok := decode(lines[i-1]); ok {
			prev, _ = m["entry_hash"].(string)
		}
	}
	for j := i; j < len(lines); j++ {
		m, ok := decode(lines[j])
		if !ok {
			return
		}
		if j > i && prev != "" {
			m["parent_hash"] = prev
		}
		if h := canonicalHash(m); h != "" {
			m["entry_hash"] = h
		}
		lines[j] = renderStr(m)
		prev, _ = m["entry_hash"].(string)
	}
}

func renderStr(m map[string]any) []byte {
	var b bytes.Buffer
	style{}.render(&b, m, true)
	return b.Bytes()
}

func relinkMaybe(r *rand.Rand, lines [][]byte, i int) {
	if r.IntN(4) != 0 {
		relink(lines, i, randStyle(r), r)
	}
}

// mutateRecord re-renders or edits an execution record.
func mutateRecord(r *rand.Rand, base []byte) []byte {
	m, ok := decode(base)
	if !ok {
		return base
	}
	switch r.IntN(8) {
	case 6, 7: // a tricky rune inside a string member (pattern edges)
		insertRune(r, m)
		var b bytes.Buffer
		randStyle(r).render(&b, m, false)
		return b.Bytes()
	case 0: // same content, another style
		var b bytes.Buffer
		st := randStyle(r)
		st.entryHashPos = 0
		st.render(&b, m, false)
		return b.Bytes()
	case 1: // a member changed (signature breaks, but the checks before it run)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		k := keys[r.IntN(len(keys))]
		if r.IntN(4) == 0 {
			delete(m, k)
		} else {
			m[k] = randValue(r, 1)
		}
		var b bytes.Buffer
		randStyle(r).render(&b, m, false)
		return b.Bytes()
	case 2: // byte edit
		l := append([]byte(nil), base...)
		p := r.IntN(len(l))
		junk := []byte{0, '\r', ' ', 0xff, 0xc3, '"', '\\', ',', '}', '{', '1', 'u', 0x7f}
		l[p] = junk[r.IntN(len(junk))]
		return l
	case 3: // canonical
		c, err := jcs.Transform(base)
		if err != nil {
			return base
		}
		if r.IntN(2) == 0 {
			c = append(c, '\n')
		}
		return c
	case 4: // duplicate member
		l := bytes.TrimRight(base, " \n\r\t")
		if len(l) > 1 {
			return append(append(append([]byte(nil), l[:len(l)-1]...), `,"schema/v":1`...), '}')
		}
		return base
	default: // whitespace and BOM around it
		pre := [][]byte{{}, []byte("\xef\xbb\xbf"), []byte(" \n"), []byte("\r\n")}
		post := [][]byte{{}, []byte("\n"), []byte("\r\n"), []byte(" \t"), []byte("\x00"), []byte("x")}
		return append(append(append([]byte(nil), pre[r.IntN(len(pre))]...), base...), post[r.IntN(len(post))]...)
	}
}

var patternRunes = []string{"\u00a0", "\ufeff", "\u2028", "\u2029", "\u3000", "\u1680", "\u180e", "\u0085",
	"\u200b", "\u202f", "\u205f", "\v", "\f", "\n", "\r", "\t", " ", "é", "\U0001F600", "\x00", "\\", "/", ".", "~", "_", "-", "=", "+"}

// insertRune puts a rune from patternRunes into one string member of m, at
// depth one or two, at its start, its end or inside.
func insertRune(r *rand.Rand, m map[string]any) {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for range 10 {
		k := keys[r.IntN(len(keys))]
		switch v := m[k].(type) {
		case string:
			p := []int{0, len(v), r.IntN(len(v) + 1)}[r.IntN(3)]
			for p < len(v) && !utf8.RuneStart(v[p]) {
				p++
			}
			m[k] = v[:p] + patternRunes[r.IntN(len(patternRunes))] + v[p:]
			return
		case map[string]any:
			insertRune(r, v)
			return
		case []any:
			if len(v) > 0 {
				if mm, ok := v[r.IntN(len(v))].(map[string]any); ok {
					insertRune(r, mm)
					return
				}
			}
		}
	}
}

type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, dir, bin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{o.String(), e.String(), code}
}

// TestVerifyDiff writes ROOMPUB_BREAK_N mutated capsules, bare journals
// and records and runs both verifiers on them, in groups of paths (the new
// verifier checks paths in parallel), comparing exit code, stdout and
// stderr of each group; a differing group is re-run path by path to name
// the inputs that differ. Each group is also verified with the widened
// schema directory, where no envelope fast check applies.
func TestVerifyDiff(t *testing.T) {
	oldBin, newBin := bins(t)
	root := repoRoot(t)
	seed := uint64(envInt("ROOMPUB_BREAK_SEED", 1))
	n := envInt("ROOMPUB_BREAK_N", 600)
	r := rand.New(rand.NewPCG(seed, 8))

	type capsule struct{ meta, journal []byte }
	var caps []capsule
	for _, d := range []string{"testdata/samples/capsules/csv-dedupe", "testdata/samples/capsules/slugify-run", "testdata/samples/capsules/broken", "testdata/reference/capsule-journals/canonical"} {
		j, err := os.ReadFile(filepath.Join(root, d, "journal.ndjson"))
		if err != nil {
			t.Fatal(err)
		}
		m, _ := os.ReadFile(filepath.Join(root, d, "capsule.json"))
		caps = append(caps, capsule{m, j})
	}
	var recs [][]byte
	for _, f := range []string{"testdata/reference/execution-records/verified.json", "testdata/reference/execution-records/refused.json", "testdata/reference/execution-records/foreign-evidence.json", "testdata/reference/execution-records/invalid/inline-output.json"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, b)
	}

	dir := os.Getenv("ROOMPUB_BREAK_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	var paths []string
	for i := range n {
		switch k := r.IntN(10); {
		case k < 6:
			c := caps[r.IntN(len(caps))]
			p := fmt.Sprintf("c%05d", i)
			if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, p, "capsule.json"), c.meta, 0o644)
			os.WriteFile(filepath.Join(dir, p, "journal.ndjson"), mutateJournal(r, c.journal), 0o644)
			paths = append(paths, p)
		case k < 8:
			c := caps[r.IntN(len(caps))]
			p := fmt.Sprintf("j%05d.ndjson", i)
			os.WriteFile(filepath.Join(dir, p), mutateJournal(r, c.journal), 0o644)
			paths = append(paths, p)
		default:
			p := fmt.Sprintf("r%05d.json", i)
			os.WriteFile(filepath.Join(dir, p), mutateRecord(r, recs[r.IntN(len(recs))]), 0o644)
			paths = append(paths, p)
		}
	}
	const group = 50
	diffs := 0
	for g := 0; g < len(paths); g += group {
		ps := paths[g:min(g+group, len(paths))]
		widened := filepath.Join(root, "testdata/samples/widened/schemas")
		for _, mode := range [][]string{{"verify", "--json"}, {"verify"}, {"verify", "--json", "--schema-dir", widened}} {
			args := append(append([]string(nil), mode...), ps...)
			a, b := run(t, dir, filepath.Join(oldBin, "publisher"), args...), run(t, dir, filepath.Join(newBin, "publisher"), args...)
			if a == b {
				continue
			}
			for _, p := range ps {
				args := append(append([]string(nil), mode...), p)
				a, b := run(t, dir, filepath.Join(oldBin, "publisher"), args...), run(t, dir, filepath.Join(newBin, "publisher"), args...)
				if a != b {
					diffs++
					if diffs <= 20 {
						t.Errorf("%s %v in %s:\nold exit %d\n%s%s\nnew exit %d\n%s%s", p, mode, dir, a.code, a.stdout, a.stderr, b.code, b.stdout, b.stderr)
					}
				}
			}
		}
	}
	if diffs > 0 {
		t.Errorf("%d inputs differ (seed %d)", diffs, seed)
	}
}
