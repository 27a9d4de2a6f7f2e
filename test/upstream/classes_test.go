package upstream

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"unicode/utf16"

	"github.com/roompub/roompub/events"
)

// verdict is what a capsule must get, as the upstream's rules decide it
// (or roompub's, for a deliberate divergence).
type verdict struct {
	code events.Code // "" : the capsule is accepted
	// line is the 1-based journal line verify names; 0: capsule.json, or
	// the journal as a whole.
	line int
	// anyLine: the upstream names no line (a journal that is not UTF-8);
	// verify may name none, or line.
	anyLine bool
	// first is the first line a line-at-a-time check (the gate, a reader)
	// must refuse at or before; 0: before any line.
	first int
	// reader is a reader's code for a forged line at first, when it is
	// not code: a reader tells a chain position out of step as gap.
	reader events.Code
}

func accepted() verdict { return verdict{} }

func atLine(code events.Code, line int) verdict { return verdict{code: code, line: line, first: line} }

// wholeFile is a journal that is not UTF-8: the upstream checks the whole
// file before any line; line holds the first bad byte.
func wholeFile(line int) verdict {
	return verdict{code: events.NonCanonical, line: line, anyLine: true, first: line}
}

func capsuleLevel() verdict { return verdict{code: events.InvalidCapsule} }

func (v verdict) codeName() string {
	if v.code == "" {
		return "ok"
	}
	return string(v.code)
}

func (v verdict) String() string {
	switch {
	case v.code == "" || v.line == 0:
		return v.codeName()
	case v.anyLine:
		return fmt.Sprintf("%s (at no line, or line %d)", v.code, v.line)
	}
	return fmt.Sprintf("%s at line %d", v.code, v.line)
}

// sample is one generated capsule and its verdict. forge: its lines up to
// want.first (all of them when accepted) can be written straight into the
// stream, where a reader must decide the last one as want says.
type sample struct {
	variant string
	c       *capsule
	want    verdict
	forge   bool
}

// class is one kind of journal: the writer's own, or one mutation of it.
// kept marks a deliberate divergence: want is roompub's verdict.
type class struct {
	name string
	kept bool
	make func(g *gen, id ids) sample
}

// pendingClasses are the classes roompub does not agree on yet, with why,
// by class name (every path) or "class/path" (one path: verify,
// gate-batched, gate-per-line, readers); they are skipped until the change
// that makes roompub agree has landed (ROOMPUB_UPSTREAM_PENDING=run runs
// them anyway).
func pendingClasses() map[string]string {
	return map[string]string{}
}

// n draws a journal length from lo to hi.
func (g *gen) n(lo, hi int) int { return lo + g.r.IntN(hi-lo+1) }

// safeText is a payload string the canaries never trip, with a few of the
// characters a mutation needs.
func safeText(g *gen, must string) jsString {
	s := append(g.payloadStr(), js(must)...)
	return append(s, g.payloadStr()...)
}

// stringKey draws a payload key of type string.
func (g *gen) stringKey() string {
	return g.pick([]string{"message", "note", "summary", "reason", "status", "tool", "path", "model", "verdict", "stage"})
}

// variant picks one of names, and returns its index too.
func (g *gen) variant(names ...string) (int, string) {
	i := g.choose(len(names))
	return i, names[i]
}

// classes lists every class, in the order they are run.
func classes() []class {
	return []class{
		{name: "writer_base", make: func(g *gen, id ids) sample {
			return sample{"", g.capsule(id, g.n(1, 8)), accepted(), true}
		}},
		{name: "last_line_deleted", make: func(g *gen, id ids) sample {
			// A chain cut after a whole entry is still a chain.
			c := g.capsule(id, g.n(2, 6))
			n := len(c.lines) - 1
			c.lines, c.entries = c.lines[:n], c.entries[:n]
			return sample{"", c, accepted(), true}
		}},
		{name: "entry_hash_edited", make: makeEntryHashEdited},
		{name: "content_edited_no_rehash", make: makeContentEdited},
		{name: "payload_key_unknown", make: makePayloadKeyUnknown},
		{name: "payload_type_wrong", make: makePayloadTypeWrong},
		{name: "envelope_rule_broken", make: makeEnvelopeRuleBroken},
		{name: "canary_tripped", make: canaryMaker(canariesTripped(), true)},
		{name: "canary_js_narrower", make: canaryMaker(canariesJSNarrower(), true)},
		{name: "canary_js_broader", make: canaryMaker(canariesJSBroader(), false)},
		{name: "lines_swapped", make: func(g *gen, id ids) sample {
			c := g.capsule(id, g.n(2, 7))
			k := g.r.IntN(len(c.lines) - 1)
			c.lines[k], c.lines[k+1] = c.lines[k+1], c.lines[k]
			c.entries[k], c.entries[k+1] = c.entries[k+1], c.entries[k]
			want := atLine(events.Reordered, k+1)
			want.reader = events.Gap
			return sample{"", c, want, true}
		}},
		{name: "line_deleted", make: func(g *gen, id ids) sample {
			c := g.capsule(id, g.n(2, 7))
			k := g.r.IntN(len(c.lines) - 1)
			c.lines, c.entries = slices.Delete(c.lines, k, k+1), slices.Delete(c.entries, k, k+1)
			want := atLine(events.Reordered, k+1)
			want.reader = events.Gap
			return sample{"", c, want, true}
		}},
		{name: "parent_hash_wrong", make: makeParentHashWrong},
		{name: "non_canonical_spacing", make: makeNonCanonicalSpacing},
		{name: "non_canonical_key_order", make: makeNonCanonicalKeyOrder},
		{name: "non_canonical_escape", make: makeNonCanonicalEscape},
		{name: "non_canonical_astral_pair", make: func(g *gen, id ids) sample {
			c := g.capsule(id, g.n(1, 6))
			k := g.r.IntN(len(c.lines))
			_, ch := g.variant("😀", "𝄞", "\U0010ffff", "\U00010000")
			e := c.entries[k]
			c.edit(k, e.with("payload", e.payload().with(g.stringKey(), safeText(g, ch))))
			c.lines[k] = render(c.entries[k], style{escapeAstral: true})
			return sample{"escaped " + ch, c, atLine(events.NonCanonical, k+1), true}
		}},
		{name: "non_canonical_number", make: makeNonCanonicalNumber},
		{name: "non_canonical_surrogate_upper", make: func(g *gen, id ids) sample {
			c := g.capsule(id, g.n(1, 6))
			k := g.r.IntN(len(c.lines))
			s := append(js("cut "), uint16(0xd800+g.r.IntN(0x800)))
			e := c.entries[k]
			c.edit(k, e.with("payload", e.payload().with(g.stringKey(), s)))
			c.lines[k] = render(c.entries[k], style{upperSurrogate: true})
			return sample{"", c, atLine(events.NonCanonical, k+1), true}
		}},
		{name: "truncated_tail", make: makeTruncatedTail},
		{name: "utf8_invalid", make: makeUTF8Invalid},
		{name: "utf8_invalid_truncated_tail", make: makeUTF8InvalidTruncatedTail},
		{name: "not_json", make: makeNotJSON},
		{name: "non_object_line", make: func(g *gen, id ids) sample {
			c := g.capsule(id, g.n(1, 6))
			k := g.r.IntN(len(c.lines))
			_, v := g.variant(nonObjects(c.lines[k])...)
			c.lines[k] = []byte(v)
			return sample{clip(v), c, atLine(events.InvalidEntry, k+1), true}
		}},
		{name: "metadata_mismatch", make: makeMetadataMismatch},
		{name: "metadata_mismatch_then_chain", make: makeMetadataThenChain},
		{name: "capsule_json_invalid", make: makeCapsuleJSONInvalid},
		{name: "capsule_json_laxer", make: makeCapsuleJSONLaxer},
		{name: "capsule_json_accepted", make: makeCapsuleJSONAccepted},
		{name: "capsule_json_missing_chain_fault", make: func(g *gen, id ids) sample {
			s := chainFault(g, g.capsule(id, g.n(2, 6)), 1)
			s.c.metaRaw = nil
			return s
		}},
		{name: "empty_journal", make: func(g *gen, id ids) sample {
			c := g.capsule(id, 0)
			if i, variant := g.variant("Capsule.create's", "a newline only"); i == 1 {
				c.lines = [][]byte{{}}
				return sample{variant, c, atLine(events.CorruptEntry, 1), false}
			}
			return sample{"Capsule.create's", c, accepted(), false}
		}},
		{name: "lone_surrogate", make: func(g *gen, id ids) sample {
			c := g.create(id)
			g.loneSurrogates = true
			defer func() { g.loneSurrogates = false }()
			for range g.n(1, 6) {
				g.append(c, g.payload())
			}
			// At least one: a string cut inside a surrogate pair.
			k := g.r.IntN(len(c.lines))
			e := c.entries[k]
			c.edit(k, e.with("payload", e.payload().with(g.stringKey(), append(js("cut 😀 here: "), 0xd83d))))
			return sample{"", c, accepted(), true}
		}},

		// Deliberate divergences: roompub's verdict stands.
		{name: "duplicate_key", kept: true, make: makeDuplicateKey},
		{name: "number_out_of_range", kept: true, make: func(g *gen, id ids) sample {
			c := g.capsule(id, g.n(1, 6))
			k := g.r.IntN(len(c.lines))
			_, key := g.variant("duration_ms", "cost_usd", "score", "tokens_in", "exit_code")
			_, text := g.variant("1e400", "-1e400", "1e309", "123e999")
			e := c.entries[k]
			c.edit(k, e.with("payload", e.payload().with(key, 0.0)))
			c.lines[k] = canonical(c.entries[k].with("payload", c.entries[k].payload().with(key, rawJSON(text))))
			return sample{key + " " + text, c, atLine(events.CorruptEntry, k+1), true}
		}},
		{name: "nesting_depth", kept: true, make: func(g *gen, id ids) sample {
			c := g.capsule(id, g.n(1, 4))
			k := g.r.IntN(len(c.lines))
			deep := rawJSON(strings.Repeat("[", 10000) + strings.Repeat("]", 10000))
			c.lines[k] = canonical(c.entries[k].with("payload", c.entries[k].payload().with("note", deep)))
			return sample{"", c, atLine(events.CorruptEntry, k+1), true}
		}},
		{name: "lone_surrogate_metadata", kept: true, make: func(g *gen, id ids) sample {
			// Capsule.create takes any string not blank after trim: it
			// writes the surrogate into capsule.json and every entry.
			// capsule.json is read as I-JSON.
			c := g.create(id)
			_, field := g.variant("harness_version", "task_family")
			c.meta = c.meta.with(field, append(js("v1 "), uint16(0xd800+g.r.IntN(0x800))))
			c.metaRaw = append(canonical(c.meta), '\n')
			for range g.n(1, 4) {
				g.append(c, g.payload())
			}
			return sample{field, c, capsuleLevel(), false}
		}},
		{name: "truncated_mid_utf8_char", kept: true, make: func(g *gen, id ids) sample {
			c := g.capsule(id, g.n(1, 6))
			variant := cutInsideChar(g, c)
			return sample{variant, c, atLine(events.TruncatedTail, len(c.lines)+1), false}
		}},
		{name: "ts_rfc3339_not_dateparse", kept: true, make: func(g *gen, id ids) sample {
			c := g.capsule(id, g.n(1, 6))
			k := g.r.IntN(len(c.lines))
			_, ts := g.variant("2016-12-31T23:59:60Z", "2016-12-31T23:59:60.000Z", "2016-12-31T23:59:60.5Z")
			c.edit(k, c.entries[k].with("ts", js(ts)))
			return sample{ts, c, accepted(), true}
		}},
		{name: "ts_dateparse_lenient", kept: true, make: func(g *gen, id ids) sample {
			c := g.capsule(id, g.n(1, 6))
			k := g.r.IntN(len(c.lines))
			// The first two are what toISOString writes for a clock past
			// year 9999 or before year 0.
			_, ts := g.variant("+010000-01-01T00:00:00.001Z", "-000001-01-01T00:00:00.000Z", "2026-01-01", "Jan 1 2026", "2026-01-01T00:00:00.000")
			c.edit(k, c.entries[k].with("ts", js(ts)))
			return sample{ts, c, atLine(events.InvalidEntry, k+1), true}
		}},
	}
}

func clip(s string) string {
	if len(s) > 24 {
		return s[:24] + "…"
	}
	return s
}

func makeEntryHashEdited(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	k := g.r.IntN(len(c.lines))
	h := c.entries[k].str("entry_hash")
	flip := h[:63] + map[bool]string{true: "1", false: "0"}[h[63] == '0']
	i, variant := g.variant("a digit changed", "upper case", "63 digits", "the parent's hash")
	alt := []string{flip, strings.ToUpper(h), h[:63], c.entries[k].str("parent_hash")}[i]
	if alt == h { // a hash with no letters has no upper case
		variant, alt = "a digit changed", flip
	}
	c.entries[k] = c.entries[k].with("entry_hash", js(alt))
	c.lines[k] = canonical(c.entries[k])
	return sample{variant, c, atLine(events.InvalidEntry, k+1), true}
}

// makeContentEdited edits a member of one entry and leaves its entry_hash.
func makeContentEdited(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	k := g.r.IntN(len(c.lines))
	e := c.entries[k]
	i, variant := g.variant("payload value", "payload member added", "payload member removed", "kind", "ts", "lineage", "effect_class")
	for {
		var alt object
		switch i {
		case 0, 1, 2:
			p := e.payload()
			switch {
			case i == 2 && len(p) > 0:
				p = p.without(p[g.r.IntN(len(p))].key)
			case i == 0 && len(p) > 0:
				m := p[g.r.IntN(len(p))]
				p = p.with(m.key, g.value(payloadTypes()[m.key]))
			default:
				p = p.with(g.stringKey(), g.payloadStr())
			}
			alt = e.with("payload", p)
		case 3:
			alt = e.with("kind", js(g.kind()))
		case 4:
			alt = e.with("ts", js(isoString(g.when())))
		case 5:
			alt = e.with("lineage", js(g.pick(lineages())))
		default:
			alt = e.with("effect_class", js(g.pick(effectClasses())))
		}
		if line := canonical(alt); !bytes.Equal(line, c.lines[k]) {
			c.entries[k], c.lines[k] = alt, line
			return sample{variant, c, atLine(events.InvalidEntry, k+1), true}
		}
	}
}

func makePayloadKeyUnknown(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	k := g.r.IntN(len(c.lines))
	// session, risk and blocked are allowlisted by a later 38-key revision
	// only (allowlist_38_keys); the seed's 31 keys stand.
	_, key := g.variant("session", "risk", "blocked", "Tool", "tool ", "", "__proto__", "constructor", "toString", "payload", "entry_hash", "tóol", "9", "10")
	e := c.entries[k]
	c.edit(k, e.with("payload", e.payload().with(key, g.payloadStr())))
	return sample{fmt.Sprintf("%q", key), c, atLine(events.InvalidEntry, k+1), true}
}

func makePayloadTypeWrong(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	k := g.r.IntN(len(c.lines))
	types := payloadTypes()
	keys := make([]string, 0, len(types))
	for key := range types {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	key := g.pick(keys)
	bad := map[string][]any{
		"string":       {1.0, nil, true, object{}, []any{}, []any{js("x")}},
		"integer":      {1.5, js("1"), true, nil, object{}, 1e-7, []any{1.0}},
		"integer|null": {1.5, js("0"), false, []any{}, object{{"code", 1.0}}},
		"number":       {js("1"), nil, true, []any{1.0}, object{{"a", 1.0}}},
	}[types[key]]
	v := bad[g.choose(len(bad))]
	e := c.entries[k]
	c.edit(k, e.with("payload", e.payload().with(key, v)))
	return sample{key + " " + string(canonical(v)), c, atLine(events.InvalidEntry, k+1), true}
}

// makeEnvelopeRuleBroken breaks one envelope rule of one entry, rehashed
// so that rule alone fails.
func makeEnvelopeRuleBroken(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	k := g.r.IntN(len(c.lines))
	e := c.entries[k]
	parent := e.str("parent_hash")
	alts := []struct {
		name string
		e    object
	}{
		{"unknown member", e.with("extra", 1.0)},
		{"kind missing", e.without("kind")},
		{"ts missing", e.without("ts")},
		{"payload missing", e.without("payload")},
		{"schema missing", e.without("schema")},
		{"schema v2", e.with("schema", js("capsule-envelope/v2"))},
		{"schema a number", e.with("schema", 1.0)},
		{"run_id off pattern", e.with("run_id", js("-"+id.run))},
		{"capsule_id with a space", e.with("capsule_id", js("cap "+id.capsule))},
		{"seq negative", e.with("seq", -1.0)},
		{"seq a fraction", e.with("seq", float64(k)+0.5)},
		{"seq a string", e.with("seq", js(fmt.Sprint(k)))},
		{"lineage unknown", e.with("lineage", js("Plan"))},
		{"kind upper case", e.with("kind", js("Tool"))},
		{"kind empty", e.with("kind", js(""))},
		{"kind 65 characters", e.with("kind", js(strings.Repeat("k", 65)))},
		{"kind starts with a digit", e.with("kind", js("1step"))},
		{"effect_class SE5", e.with("effect_class", js("SE5"))},
		{"effect_class lower case", e.with("effect_class", js("se0"))},
		{"harness_version empty", e.with("harness_version", js(""))},
		{"task_family empty", e.with("task_family", js(""))},
		{"task_family a number", e.with("task_family", 7.0)},
		{"parent_hash not hex", e.with("parent_hash", js(parent[:63]+"g"))},
		{"parent_hash upper case", e.with("parent_hash", js("ABCDEF"+parent[6:]))},
		{"ts not a date", e.with("ts", js("yesterday"))},
		{"payload an array", e.with("payload", []any{})},
		{"payload null", e.with("payload", nil)},
		{"payload a string", e.with("payload", js("x"))},
	}
	a := alts[g.choose(len(alts))]
	c.edit(k, a.e)
	want := atLine(events.InvalidEntry, k+1)
	switch a.name {
	case "run_id off pattern", "capsule_id with a space":
		// Under the chain's subject, a reader sees another chain's entry.
		want.reader = events.WrongRoom
	}
	return sample{a.name, c, want, true}
}

func makeParentHashWrong(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	k := g.r.IntN(len(c.lines))
	i, variant := g.variant("random", "genesis", "own hash", "one digit off")
	parent := c.entries[k].str("parent_hash")
	alt := []string{sha256Hex([]byte(fmt.Sprint(g.r.Uint64()))), genesis, c.entries[k].str("entry_hash"),
		parent[:63] + map[bool]string{true: "1", false: "0"}[parent[63] == '0']}[i]
	if alt == parent { // the first entry's parent is the genesis
		variant, alt = "random", sha256Hex([]byte(id.run))
	}
	c.edit(k, c.entries[k].with("parent_hash", js(alt)))
	return sample{variant, c, atLine(events.BrokenLink, k+1), true}
}

func makeNonCanonicalSpacing(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	k := g.r.IntN(len(c.lines))
	line := c.lines[k]
	i, variant := g.variant("spaces after : and ,", "leading space", "trailing space", "CR before the newline", "tab after {")
	switch i {
	case 0:
		line = render(c.entries[k], style{spaces: true})
	case 1:
		line = append([]byte(" "), line...)
	case 2:
		line = append(slices.Clone(line), ' ')
	case 3:
		line = append(slices.Clone(line), '\r')
	default:
		line = append([]byte("{\t"), line[1:]...)
	}
	c.lines[k] = line
	return sample{variant, c, atLine(events.NonCanonical, k+1), true}
}

func makeNonCanonicalKeyOrder(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	k := g.r.IntN(len(c.lines))
	e := c.entries[k]
	i, variant := g.variant("keys reversed", "payload keys reversed", "entry_hash first")
	switch i {
	case 0:
		c.lines[k] = render(e, style{reverseKeys: true})
	case 1:
		p := e.payload().with("status", g.payloadStr()).with("message", g.payloadStr())
		c.edit(k, e.with("payload", p))
		c.lines[k] = canonical(c.entries[k].with("payload", rawJSON(render(p, style{reverseKeys: true}))))
	default:
		rest := canonical(e.without("entry_hash"))
		c.lines[k] = fmt.Appendf(nil, `{"entry_hash":"%s",%s`, e.str("entry_hash"), rest[1:])
	}
	return sample{variant, c, atLine(events.NonCanonical, k+1), true}
}

func makeNonCanonicalEscape(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	k := g.r.IntN(len(c.lines))
	e := c.entries[k]
	c.edit(k, e.with("payload", e.payload().with(g.stringKey(), safeText(g, "a/é\b\x1fZ"))))
	i, variant := g.variant(`\/`, `\u00e9`, `\u0008`, `\u001F`, `\u00E9`, "an escaped key", "an escaped hash digit")
	switch i {
	case 5:
		c.lines[k] = bytes.Replace(c.lines[k], []byte(`"capsule_id":`), []byte(`"\u0063apsule_id":`), 1)
	case 6:
		h := c.entries[k].str("entry_hash")
		c.lines[k] = bytes.Replace(c.lines[k], []byte(`"entry_hash":"`+h), fmt.Appendf(nil, `"entry_hash":"\u%04x%s`, h[0], h[1:]), 1)
	default:
		st := []style{{escapeSlash: true}, {escapeNonASCII: true}, {longControl: true}, {upperHex: true}, {escapeNonASCII: true, upperHex: true}}[i]
		c.lines[k] = render(c.entries[k], st)
	}
	return sample{variant, c, atLine(events.NonCanonical, k+1), true}
}

// makeNonCanonicalNumber spells one payload number otherwise than
// JSON.stringify: the value, and so the hash, is the canonical one.
func makeNonCanonicalNumber(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	k := g.r.IntN(len(c.lines))
	spellings := []struct {
		key  string
		v    float64
		text string
	}{
		{"tokens_in", 1, "1.0"}, {"tokens_in", 1, "1e0"}, {"tokens_in", 1, "1E+0"}, {"tokens_in", 1, "10e-1"},
		{"tokens_out", 0, "-0"}, {"tokens_out", 0, "0.0"}, {"passed", 0, "-0.0"},
		{"cost_usd", 0.5, "0.50"}, {"cost_usd", 0.5, "5e-1"}, {"cost_usd", 0.5, "5E-1"},
		{"total", 1e21, "1e21"}, {"total", 1e21, "1000000000000000000000"}, {"score", 100, "1e2"},
		{"duration_ms", 0, "1e-400"}, {"duration_ms", 5e-324, "4.9406564584124654e-324"},
	}
	// seq spelled otherwise: the upstream compares the parsed number.
	seq := []string{fmt.Sprintf("%d.0", k), fmt.Sprintf("%de0", k), fmt.Sprintf("%dE+0", k)}
	if i := g.choose(len(spellings) + len(seq)); i >= len(spellings) {
		c.lines[k] = canonical(c.entries[k].with("seq", rawJSON(seq[i-len(spellings)])))
		return sample{"seq " + seq[i-len(spellings)], c, atLine(events.NonCanonical, k+1), true}
	}
	s := spellings[g.choose(len(spellings)+len(seq))]
	e := c.entries[k]
	c.edit(k, e.with("payload", e.payload().with(s.key, s.v)))
	c.lines[k] = canonical(c.entries[k].with("payload", c.entries[k].payload().with(s.key, rawJSON(s.text))))
	return sample{s.key + " " + s.text, c, atLine(events.NonCanonical, k+1), true}
}

// cutTail leaves the last line without its newline, cut at a character
// boundary (at least its first byte kept).
func cutTail(g *gen, c *capsule) {
	n := len(c.lines) - 1
	last := c.lines[n]
	m := 1 + g.r.IntN(len(last))
	for m < len(last) && m > 1 && (last[m]&0xc0) == 0x80 {
		m--
	}
	c.tail = last[:m]
	c.lines, c.entries = c.lines[:n], c.entries[:n]
}

func makeTruncatedTail(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	n := len(c.lines)
	i, variant := g.variant("cut inside the last line", "only the newline missing", "a partial next entry")
	switch i {
	case 0:
		cutTail(g, c)
	case 1:
		c.tail = c.lines[n-1]
		c.lines, c.entries = c.lines[:n-1], c.entries[:n-1]
	default:
		c.tail = []byte(`{"capsule_id":"` + id.capsule[:min(5, len(id.capsule))])
		n++
	}
	return sample{variant, c, atLine(events.TruncatedTail, n), false}
}

// spoilUTF8 puts bytes that are not UTF-8 into a string of line k.
func spoilUTF8(g *gen, c *capsule, k int) string {
	e := c.entries[k]
	c.edit(k, e.with("payload", e.payload().with("note", js("ab"))))
	i, variant := g.variant("FF", "overlong C0 80", "surrogate ED A0 80", "past U+10FFFF", "lone continuation 80", "cut sequence E2 82")
	bad := []string{"\xff", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80", "\xe2\x82"}[i]
	c.lines[k] = bytes.Replace(c.lines[k], []byte(`"note":"ab"`), []byte(`"note":"a`+bad+`b"`), 1)
	return variant
}

// cutInsideChar leaves the last line as a write cut inside a character.
func cutInsideChar(g *gen, c *capsule) string {
	last := len(c.lines) - 1
	_, ch := g.variant("é", "漢", "😀")
	e := c.entries[last]
	c.edit(last, e.with("payload", e.payload().with(g.stringKey(), safeText(g, ch))))
	line := c.lines[last]
	at := bytes.Index(line, []byte(ch))
	cut := 1 + g.r.IntN(len(ch)-1)
	c.tail = line[:at+cut]
	c.lines, c.entries = c.lines[:last], c.entries[:last]
	return fmt.Sprintf("cut after byte %d of %s", cut, ch)
}

func makeUTF8InvalidTruncatedTail(g *gen, id ids) sample {
	c := g.capsule(id, g.n(2, 6))
	n := len(c.lines)
	i, where := g.variant("in a middle line", "inside the partial tail", "in a middle line, the tail cut inside a character")
	switch i {
	case 1:
		// Bytes that are not UTF-8 inside the partial tail, not at its
		// cut: no truncation explains them.
		variant := spoilUTF8(g, c, n-1)
		line := c.lines[n-1]
		note := bytes.Index(line, []byte(`"note":"a`))
		c.tail = line[:note+bytes.Index(line[note:], []byte(`b"`))+1]
		c.lines, c.entries = c.lines[:n-1], c.entries[:n-1]
		return sample{variant + " " + where, c, wholeFile(n), false}
	default:
		k := g.r.IntN(n - 1)
		variant := spoilUTF8(g, c, k)
		if i == 0 {
			cutTail(g, c)
		} else {
			cutInsideChar(g, c)
		}
		return sample{variant + " " + where, c, wholeFile(k + 1), false}
	}
}

func makeUTF8Invalid(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	k := g.r.IntN(len(c.lines))
	variant := spoilUTF8(g, c, k)
	want := wholeFile(k + 1)
	if k > 0 && g.r.IntN(3) == 0 {
		// The whole file's UTF-8 comes before an earlier corrupt line.
		j := g.r.IntN(k)
		c.lines[j] = []byte("{")
		want.first = j + 1
		return sample{variant + ", line " + fmt.Sprint(j+1) + " not JSON", c, want, false}
	}
	return sample{variant, c, want, true}
}

// notJSON are lines JSON.parse refuses, named, made from a valid line.
func notJSON(line []byte) (names, lines []string) {
	for _, v := range []struct{ name, line string }{
		{"empty", ""}, {"{", "{"}, {"hello", "hello"}, {"trailing comma", `{"seq":0,}`}, {"single quotes", `{'seq':0}`},
		{"BOM", "\ufeff" + string(line)}, {"garbage after", string(line) + "x"}, {"NaN", "NaN"},
		{"array trailing comma", "[1,]"}, {"leading zero", `{"seq":01}`},
		{"cut at the first comma", string(line[:bytes.IndexByte(line, ',')])},
		{"two entries", string(line) + string(line)}, {"two objects", "{}{}"},
		{"raw control character", strings.Replace(string(line), `"schema":"`, "\"schema\":\"\x01", 1)},
		{"raw tab", strings.Replace(string(line), `"schema":"`, "\"schema\":\"\t", 1)},
		{"whitespace only", " \t"},
	} {
		names, lines = append(names, v.name), append(lines, v.line)
	}
	return names, lines
}

// nonObjects are JSON lines that hold no object, made from a valid line.
func nonObjects(line []byte) []string {
	return []string{"[]", "null", "0", `"text"`, "true", "[" + string(line) + "]"}
}

func makeNotJSON(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	k := g.r.IntN(len(c.lines))
	names, alts := notJSON(c.lines[k])
	i := g.choose(len(alts))
	c.lines[k] = []byte(alts[i])
	return sample{names[i], c, atLine(events.CorruptEntry, k+1), true}
}

// metadataFields are the identity members an entry repeats from capsule.json.
func metadataFields() []string {
	return []string{"run_id", "capsule_id", "harness_version", "task_family"}
}

// otherMetadata returns another valid value of field for entry e.
func otherMetadata(g *gen, e object, field string) any {
	for {
		var v jsString
		switch field {
		case "run_id", "capsule_id":
			v = js(g.id("other"))
		default:
			v = g.metaStr("other")
		}
		if string(utf16.Decode(v)) != e.str(field) && len(v) > 0 {
			return v
		}
	}
}

func makeMetadataMismatch(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	if g.r.IntN(4) == 0 {
		// capsule.json edited by hand: every entry differs, the first one
		// is reported.
		field := g.pick([]string{"harness_version", "task_family"})
		c.meta = c.meta.with(field, otherMetadata(g, c.meta, field))
		c.metaRaw = append(canonical(c.meta), '\n')
		return sample{"capsule.json " + field, c, atLine(events.MetadataMismatch, 1), false}
	}
	j := g.r.IntN(len(c.lines))
	field := g.pick(metadataFields())
	c.edit(j, c.entries[j].with(field, otherMetadata(g, c.entries[j], field)))
	return sample{field, c, atLine(events.MetadataMismatch, j+1), false}
}

// chainFault breaks c's chain at one line from lo on (the upstream's
// per-line checks, the final newline, the whole file's UTF-8).
func chainFault(g *gen, c *capsule, lo int) sample {
	k := lo + g.r.IntN(len(c.lines)-lo)
	i, variant := g.variant("wrong parent_hash", "not JSON", "unknown payload key", "spaces", "swapped with the line before", "truncated tail", "not UTF-8")
	want := atLine(events.BrokenLink, k+1)
	switch i {
	case 0:
		c.edit(k, c.entries[k].with("parent_hash", js(genesis)))
	case 1:
		c.lines[k] = []byte("{")
		want.code = events.CorruptEntry
	case 2:
		e := c.entries[k]
		c.edit(k, e.with("payload", e.payload().with("risk", 1.0)))
		want.code = events.InvalidEntry
	case 3:
		c.lines[k] = render(c.entries[k], style{spaces: true})
		want.code = events.NonCanonical
	case 4:
		c.lines[k-1], c.lines[k] = c.lines[k], c.lines[k-1]
		c.entries[k-1], c.entries[k] = c.entries[k], c.entries[k-1]
		want = atLine(events.Reordered, k)
	case 5:
		cutTail(g, c)
		want = atLine(events.TruncatedTail, len(c.lines)+1)
	default:
		spoilUTF8(g, c, k)
		want = wholeFile(k + 1)
	}
	return sample{variant, c, want, false}
}

func makeMetadataThenChain(g *gen, id ids) sample {
	c := g.capsule(id, g.n(3, 7))
	// The first entry names other metadata (rehashed and relinked); a
	// later line breaks the chain: the upstream checks metadata only once
	// the whole chain has verified.
	field := g.pick(metadataFields())
	c.edit(0, c.entries[0].with(field, otherMetadata(g, c.entries[0], field)))
	s := chainFault(g, c, 2)
	s.variant = field + " of line 1, then " + s.variant
	return s
}

func makeCapsuleJSONInvalid(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 4))
	m := c.meta
	alts := []struct {
		name string
		raw  []byte
	}{
		{"missing", nil},
		{"not JSON", []byte("{")},
		{"empty file", []byte("")},
		{"an array", []byte("[]\n")},
		{"null", []byte("null\n")},
		{"run_id missing", append(canonical(m.without("run_id")), '\n')},
		{"capsule_id a number", append(canonical(m.with("capsule_id", 7.0)), '\n')},
		{"task_family not a string", append(canonical(m.with("task_family", []any{})), '\n')},
		{"harness_version empty", append(canonical(m.with("harness_version", js(""))), '\n')},
		{"not UTF-8", bytes.Replace(append(canonical(m), '\n'), []byte(`"schema":"capsule`), []byte("\"schema\":\"\xffcapsule"), 1)},
	}
	a := alts[g.choose(len(alts))]
	c.metaRaw = a.raw
	if g.r.IntN(4) == 0 {
		// The upstream checks capsule.json of an empty journal too.
		c.lines, c.entries = nil, nil
		a.name += ", empty journal"
	}
	return sample{a.name, c, capsuleLevel(), false}
}

// createdAtRefused are created_at strings that are not what
// Date#toISOString writes for the date they parse as, or no date at all.
func createdAtRefused() []string {
	return []string{"2026-01-01T00:00:00Z", "2026-01-01T00:00:00.000+00:00", "2026-02-30T00:00:00.000Z",
		"2026-01-01t00:00:00.000z", "2026-01-01T00:00:00.0000Z", "2026-01-01", "+275760-09-13T00:00:00.001Z",
		"-000000-01-01T00:00:00.000Z", "+000000-01-01T00:00:00.000Z", "10000-01-01T00:00:00.000Z", "+002026-01-01T00:00:00.000Z",
		"2100-02-29T00:00:00.000Z", ""}
}

// createdAtAccepted are what Date#toISOString writes, at the edges: years
// past 9999 and before 0 in six digits, the first and last dates.
func createdAtAccepted() []string {
	return []string{"+010000-01-01T00:00:00.000Z", "-000001-01-01T00:00:00.000Z", "0000-01-01T00:00:00.000Z",
		"+275760-09-13T00:00:00.000Z", "-271821-04-20T00:00:00.000Z", "1969-12-31T23:59:59.999Z", "0050-06-15T12:00:00.000Z",
		"2000-02-29T00:00:00.000Z"}
}

// blanks are blank after String#trim: JavaScript's white space and line
// terminators.
func blanks() []string {
	return []string{" ", "\t\n", "\u00a0", "\u3000", "\ufeff", "\u2028", "\u2029", "\u1680", "\u200a", "\u202f", "\u205f", "\v\f\r"}
}

// notBlanks look blank to other trims, not to String#trim.
func notBlanks() []string { return []string{"\u0085", "\u200b", "\u180e", "\x1c"} }

func makeCapsuleJSONLaxer(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 4))
	m := c.meta
	alts := []struct {
		name string
		m    object
	}{
		{"schema v2", m.with("schema", js("capsule-envelope/v2"))},
		{"schema missing", m.without("schema")},
		{"schema a number", m.with("schema", 1.0)},
		{"run_id off pattern", m.with("run_id", js("-"+id.run))},
		{"run_id 129 characters", m.with("run_id", js(strings.Repeat("r", 129)))},
		{"run_id with a newline", m.with("run_id", js(id.run+"\n"))},
		{"capsule_id with a space", m.with("capsule_id", js("cap "+id.capsule))},
		{"capsule_id with a slash", m.with("capsule_id", js("cap/"+id.capsule))},
		{"task_family blank", m.with("task_family", js(" \u2028\t"))},
		{"created_at missing", m.without("created_at")},
		{"created_at a number", m.with("created_at", 1.767e12)},
	}
	for _, v := range createdAtRefused() {
		alts = append(alts, struct {
			name string
			m    object
		}{"created_at " + v, m.with("created_at", js(v))})
	}
	for _, v := range blanks() {
		alts = append(alts, struct {
			name string
			m    object
		}{fmt.Sprintf("harness_version %q", v), m.with("harness_version", js(v))})
	}
	a := alts[g.choose(len(alts))]
	c.metaRaw = append(canonical(a.m), '\n')
	return sample{a.name, c, capsuleLevel(), false}
}

// makeCapsuleJSONAccepted: capsule.json forms the upstream accepts, which
// Capsule.create may write or a hand may leave.
func makeCapsuleJSONAccepted(g *gen, id ids) sample {
	forms := []string{"spaces", "keys reversed", "no final newline", "an extra member", "task_family padded", "run_id 128 characters", "capsule_id 1 character"}
	for _, v := range notBlanks() {
		forms = append(forms, fmt.Sprintf("harness_version %q", v))
	}
	for _, v := range createdAtAccepted() {
		forms = append(forms, "created_at "+v)
	}
	i, variant := g.variant(forms...)
	if i >= 4 && i < 7+len(notBlanks()) {
		// Values Capsule.create itself accepts: written into every entry.
		switch i {
		case 5:
			id.run = strings.Repeat("R", 127) + "9"
		case 6:
			id.capsule = "c"
		}
		c := g.create(id)
		switch {
		case i == 4:
			c.meta = c.meta.with("task_family", js(" \u00a0family\u3000 "))
		case i >= 7:
			c.meta = c.meta.with("harness_version", js(notBlanks()[i-7]))
		}
		c.metaRaw = append(canonical(c.meta), '\n')
		for range g.n(1, 4) {
			g.append(c, g.payload())
		}
		return sample{variant, c, accepted(), false}
	}
	c := g.capsule(id, g.n(1, 4))
	m := c.meta
	switch i {
	case 0:
		c.metaRaw = append(render(m, style{spaces: true}), '\n')
	case 1:
		c.metaRaw = append(render(m, style{reverseKeys: true}), '\n')
	case 2:
		c.metaRaw = canonical(m)
	case 3:
		c.metaRaw = append(canonical(m.with("note", js("made by hand"))), '\n')
	default:
		c.metaRaw = append(canonical(m.with("created_at", js(createdAtAccepted()[i-7-len(notBlanks())]))), '\n')
	}
	return sample{variant, c, accepted(), false}
}

func makeDuplicateKey(g *gen, id ids) sample {
	c := g.capsule(id, g.n(1, 6))
	k := g.r.IntN(len(c.lines))
	e := c.entries[k]
	i, variant := g.variant("seq twice", "entry_hash twice", "payload member twice", "capsule.json run_id twice")
	switch i {
	case 0:
		c.lines[k] = fmt.Appendf(nil, `{"seq":%d,%s`, k, c.lines[k][1:])
	case 1:
		c.lines[k] = fmt.Appendf(nil, `{"entry_hash":"%s",%s`, e.str("entry_hash"), c.lines[k][1:])
	case 2:
		p := e.payload().with("status", js("ok"))
		c.edit(k, e.with("payload", p))
		dup := canonical(p)
		c.lines[k] = canonical(c.entries[k].with("payload", rawJSON(`{"status":"failed",`+string(dup[1:]))))
	default:
		// JSON.parse keeps the last: the upstream reads the right run_id.
		c.metaRaw = fmt.Appendf(nil, `{"run_id":"dup-first",%s`, append(canonical(c.meta), '\n')[1:])
		return sample{variant, c, capsuleLevel(), false}
	}
	return sample{variant, c, atLine(events.CorruptEntry, k+1), true}
}

// The upstream canaries, as cases: the strings tripped as the upstream's
// JavaScript regular expressions decide (the node test checks each).

// canariesTripped trip the upstream canaries in ways every reading of
// them agrees on.
func canariesTripped() []string {
	return []string{
		"key sk-abcdefghijklmnopqrstuvwx in the log",
		"AKIAABCDEFGHIJKLMNOP",
		"token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
		"xoxb-1234567890-abcdef",
		"sk_live_0123456789abcdefABCD",
		"Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
		"API_KEY=abcdefgh12",
		"password = hunter2hunter2",
		"-----BEGIN RSA PRIVATE KEY-----",
		"-----BEGIN PRIVATE KEY-----",
	}
}

// canariesJSNarrower trip the upstream canaries only as JavaScript reads
// them: \s is Unicode white space (with \v), \S counts UTF-16 code units
// and quotes.
func canariesJSNarrower() []string {
	return []string{
		"token='abcdefg'",
		`secret="abcdefg"`,
		"Bearer\u00a0abcdefghijklmnopqrstuvwxyz",
		"Bearer\vabcdefghijklmnopqrstuvwxyz",
		"Bearer\u3000abcdefghijklmnopqrstuvwxyz",
		"SECRET\u00a0=abcdefghij",
		"API_KEY=😀😀😀😀",
		"API_KEY=😀😀😀ab",
		"Bearer\ufeffabcdefghijklmnopqrstuvwxyz",
		"Bearer\u1680abcdefghijklmnopqrstuvwxyz",
		"TOKEN=\u2028abcdefgh",
		"SECRET =\u00a0abcdefgh",
		"Api_Key = abcdefgh",
		"PASSWORD\t=\tabcdefgh",
		"😀sk-abcdefghijklmnopqrst",
		"sk-abcdefghijklmnopqrsté",
		"AKIAABCDEFGHIJKLMNOP😀",
		"eyJabcdefghij.abcdefghij.abcdefghij-",
		"-----BEGIN  PRIVATE KEY-----",
		"ghs_abcdefghijklmnopqrstuvwxyz0123",
		"rk_test_abcdefghijklmnop",
	}
}

// canariesJSBroader trip no upstream canary: \b needs a word boundary,
// the length floors hold, /i folds no non-ASCII letter to ASCII.
func canariesJSBroader() []string {
	return []string{
		"task-abcdefghijklmnopqrstuvwxyz",
		"xoxb-123",
		"xoxb-123456789",
		"eyJa.b.c",
		"MY_TOKEN=abcdefghij",
		"xAKIAABCDEFGHIJKLMNOP",
		"AKIAABCDEFGHIJKLMNOPQ",
		"-----BEGIN RSA2 PRIVATE KEY-----",
		"ſecret=abcdefghij",
		"api_\u212aey=abcdefghij",
		"Bearer\u0085abcdefghijklmnopqrstuvwxyz",
		"Bearer\u180eabcdefghijklmnopqrstuvwxyz",
		"Bearer\u200babcdefghijklmnopqrstuvwxyz",
		"bearer abcdefghijklmnopqrstuvwxyz",
		"passwd=1234567",
		"password=abc def gh",
		"API_KEY=😀😀😀a",
		"eyJabcdefghij.abcdefghi.abcdefghij",
		"eyJabcdefghij.abcdefghij.abcdefghi-",
		"sk-abcdefghijklmnopqrs-",
		"-----BEGIN private KEY-----",
		"xoxc-1234567890",
		"AKIAabcdefghijklmnop",
	}
}

func canaryMaker(cases []string, trips bool) func(g *gen, id ids) sample {
	return func(g *gen, id ids) sample {
		c := g.capsule(id, g.n(1, 6))
		k := g.r.IntN(len(c.lines))
		s := cases[g.choose(len(cases))]
		e := c.entries[k]
		c.edit(k, e.with("payload", e.payload().with(g.stringKey(), js(s))))
		want := accepted()
		if trips {
			want = atLine(events.InvalidEntry, k+1)
		}
		return sample{fmt.Sprintf("%q", s), c, want, true}
	}
}
