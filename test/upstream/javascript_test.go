package upstream

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
)

// jsFacts is what the node program checks: the generator's lines and the
// JavaScript facts the classes' verdicts rest on.
type jsFacts struct {
	Canonical    []string `json:"canonical"`     // capsule.json lines: JSON.stringify of the key-sorted value
	Entries      []string `json:"entries"`       // journal lines: that, and entry_hash the hash of the rest
	NonCanonical []string `json:"non_canonical"` // JSON, not canonical, entry_hash the hash of the canonical rest
	Trips        []string `json:"trips"`         // trip an upstream canary
	Clean        []string `json:"clean"`         // trip none
	DatesOK      []string `json:"dates_ok"`      // what Date#toISOString writes for the date they parse as
	DatesBad     []string `json:"dates_bad"`
	Blank        []string `json:"blank"` // !s.trim()
	NotBlank     []string `json:"not_blank"`
	NotJSON      []string `json:"not_json"`   // JSON.parse throws
	NonObject    []string `json:"non_object"` // JSON.parse gives no plain object
	TsNaN        []string `json:"ts_nan"`     // Date.parse gives NaN
	TsParsed     []string `json:"ts_parsed"`
}

// jsCheck reads jsFacts on stdin and prints the facts that do not hold.
// The canaries are the upstream's rules (envelope.js), restated.
const jsCheck = `
const crypto = require('crypto');
const f = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const out = [];
const sortKeys = v => {
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(sortKeys);
  const o = {};
  for (const k of Object.keys(v).sort()) {
    Object.defineProperty(o, k, { value: sortKeys(v[k]), enumerable: true, writable: true, configurable: true });
  }
  return o;
};
const canon = v => JSON.stringify(sortKeys(v));
const hashOK = v => {
  const { entry_hash, ...rest } = v;
  return crypto.createHash('sha256').update(canon(rest)).digest('hex') === entry_hash;
};
const show = s => JSON.stringify(s).slice(0, 160);
for (const l of f.canonical) if (canon(JSON.parse(l)) !== l) out.push('not what JSON.stringify writes: ' + show(l));
for (const l of f.entries) {
  const v = JSON.parse(l);
  if (canon(v) !== l) out.push('not what JSON.stringify writes: ' + show(l));
  else if (!hashOK(v)) out.push('entry_hash is not the hash of the rest: ' + show(l));
}
for (const l of f.non_canonical) {
  let v;
  try { v = JSON.parse(l); } catch { out.push('not JSON: ' + show(l)); continue; }
  if (canon(v) === l) out.push('canonical after all: ' + show(l));
  else if (!hashOK(v)) out.push('entry_hash is not the hash of the canonical rest: ' + show(l));
}
const canaries = [
  /-----BEGIN [A-Z ]*PRIVATE KEY-----/,
  /\bAKIA[0-9A-Z]{16}\b/,
  /\bsk-[A-Za-z0-9_-]{20,}\b/,
  /\bgh[pousr]_[A-Za-z0-9]{30,}\b/,
  /\bxox[abpr]-[A-Za-z0-9-]{10,}\b/,
  /\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}\b/,
  /\bBearer\s+[A-Za-z0-9._~+/=-]{20,}/,
  /\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b/,
  /\b(?:API_KEY|SECRET|TOKEN|PASSWORD|PASSWD)\s*=\s*\S{8,}/i,
];
const trips = s => canaries.some(re => re.test(s));
for (const s of f.trips) if (!trips(s)) out.push('trips no canary: ' + show(s));
for (const s of f.clean) if (trips(s)) out.push('trips a canary: ' + show(s));
const isoOK = s => { const d = new Date(s); return Number.isFinite(d.getTime()) && d.toISOString() === s; };
for (const s of f.dates_ok) if (!isoOK(s)) out.push('not a canonical ISO timestamp: ' + show(s));
for (const s of f.dates_bad) if (isoOK(s)) out.push('a canonical ISO timestamp: ' + show(s));
for (const s of f.blank) if (s.trim()) out.push('not blank: ' + show(s));
for (const s of f.not_blank) if (!s.trim()) out.push('blank: ' + show(s));
for (const l of f.not_json) { try { JSON.parse(l); out.push('JSON after all: ' + show(l)); } catch {} }
for (const l of f.non_object) {
  try {
    const v = JSON.parse(l);
    if (v && typeof v === 'object' && !Array.isArray(v)) out.push('an object: ' + show(l));
  } catch { out.push('not JSON: ' + show(l)); }
}
for (const s of f.ts_nan) if (!Number.isNaN(Date.parse(s))) out.push('Date.parse reads it: ' + show(s));
for (const s of f.ts_parsed) if (Number.isNaN(Date.parse(s))) out.push('Date.parse gives NaN: ' + show(s));
process.stdout.write(JSON.stringify(out));
`

// TestWriterAgreesWithJavaScript checks, where node runs, that the
// generator writes what JSON.stringify writes (and hashes as the upstream
// does), and that the facts the classes' verdicts rest on hold in
// JavaScript: which strings trip the canaries, which created_at values are
// canonical, what String#trim blanks, what JSON.parse refuses.
func TestWriterAgreesWithJavaScript(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on this machine: the generator is not checked against JSON.stringify")
	}
	var f jsFacts
	for i := range 60 {
		g := newGen(classSeed("javascript", i))
		g.loneSurrogates = i%2 == 1
		c := g.capsule(g.ids(), g.n(1, 8))
		f.Canonical = append(f.Canonical, strings.TrimSuffix(string(c.metaRaw), "\n"))
		for _, l := range c.lines {
			f.Entries = append(f.Entries, string(l))
		}
		for range 20 {
			f.DatesOK = append(f.DatesOK, isoString(g.when()))
			if !g.loneSurrogates { // a Go string cannot carry a lone surrogate to node
				f.Clean = append(f.Clean, string(utf16.Decode(g.payloadStr())))
			}
		}
	}
	for _, cl := range classes() {
		if !strings.HasPrefix(cl.name, "non_canonical") {
			continue
		}
		for i, n := 0, 1; i < n; i++ {
			g := newGen(classSeed(cl.name, i))
			g.turn = i
			s := cl.make(g, g.ids())
			n = max(n, g.widest)
			f.NonCanonical = append(f.NonCanonical, string(s.c.lines[s.want.line-1]))
		}
	}
	f.Trips = append(canariesTripped(), canariesJSNarrower()...)
	f.Clean = append(f.Clean, canariesJSBroader()...)
	f.DatesOK = append(f.DatesOK, createdAtAccepted()...)
	f.DatesBad = createdAtRefused()
	f.Blank, f.NotBlank = blanks(), append(notBlanks(), " \u00a0family\u3000 ")
	g := newGen(1)
	line := g.capsule(g.ids(), 1).lines[0]
	_, f.NotJSON = notJSON(line)
	f.NonObject = nonObjects(line)
	f.TsNaN = []string{"2016-12-31T23:59:60Z", "2016-12-31T23:59:60.000Z", "2016-12-31T23:59:60.5Z"}
	f.TsParsed = []string{"+010000-01-01T00:00:00.001Z", "-000001-01-01T00:00:00.000Z", "2026-01-01", "Jan 1 2026", "2026-01-01T00:00:00.000"}

	in, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := exec.Command(node, "-e", jsCheck)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var failures []string
	if err := json.Unmarshal(out, &failures); err != nil {
		t.Fatalf("node said %q: %v", out, err)
	}
	for _, msg := range failures {
		t.Error(msg)
	}
	t.Logf("node checked %d canonical capsule.json, %d entries, %d non-canonical lines, %d canary cases, %d dates in %v",
		len(f.Canonical), len(f.Entries), len(f.NonCanonical), len(f.Trips)+len(f.Clean), len(f.DatesOK)+len(f.DatesBad), time.Since(start).Round(time.Millisecond))
}
