package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// The bench needs millions of valid journal entries: events.NewEntry
// takes ~100 µs each (a map, a JSON round trip, jcs), so the generator
// writes the RFC 8785 bytes directly: members in sorted order (every key
// is ASCII, so byte order is UTF-16 order), strings with JCS escaping,
// numbers in ECMAScript form. gen_test.go proves its output byte-equal to
// events.Canonicalize and valid for validate.

// harnessVersion is the harness_version of every generated entry.
const harnessVersion = "ecc-eval-harness/1.4.2"

// taskFamily is the task_family of every generated entry.
const taskFamily = "csv-dedupe"

// genStart is the ts of every chain's first entry.
var genStart = time.Date(2026, 9, 3, 14, 30, 0, 0, time.UTC)

// value is one payload member value: a string, an integer, a decimal or
// null.
type value struct {
	kind byte // 's', 'i', 'f', 'n'
	s    string
	i    int64
	f    float64
}

func str(s string) value      { return value{kind: 's', s: s} }
func integer(i int64) value   { return value{kind: 'i', i: i} }
func decimal(f float64) value { return value{kind: 'f', f: f} }
func null() value             { return value{kind: 'n'} }

type member struct {
	key string
	val value
}

// appendString appends s as an RFC 8785 string: '"' and '\\' escaped,
// control characters as \b \t \n \f \r or \u00xx, everything else (all
// non-ASCII included) as itself. s must be valid UTF-8.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			b = append(b, '\\', '"')
		case c == '\\':
			b = append(b, '\\', '\\')
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xF])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// appendNumber appends f in ECMAScript Number.prototype.toString form
// (RFC 8785 §3.2.2.3) for the range the generator uses: 0, or
// 1e-6 <= |f| < 1e21, where that form is the shortest round-tripping
// digits in plain decimal notation.
func appendNumber(b []byte, f float64) []byte {
	if a := math.Abs(f); f != 0 && (a < 1e-6 || a >= 1e21) || math.IsNaN(f) || math.Signbit(f) && f == 0 {
		panic(fmt.Sprintf("appendNumber: %v is outside the generator's range", f))
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

func appendValue(b []byte, v value) []byte {
	switch v.kind {
	case 's':
		return appendString(b, v.s)
	case 'i':
		return strconv.AppendInt(b, v.i, 10)
	case 'f':
		return appendNumber(b, v.f)
	default:
		return append(b, "null"...)
	}
}

// chainGen writes the entries of one chain, in order. Its output depends
// only on its seed and the chain's ids: two generators with the same seed
// and ids of equal length write entries of equal length.
type chainGen struct {
	meta    events.CapsuleMeta
	rng     *rand.Rand
	seq     int64
	parent  string
	clock   time.Time
	members []member
	pre     []byte // the entry without entry_hash
	out     []byte
}

func newChainGen(meta events.CapsuleMeta, seed uint64) *chainGen {
	return &chainGen{meta: meta, rng: rand.New(rand.NewPCG(seed, 0x62656e6368)), parent: events.ZeroHash, clock: genStart}
}

// chainMeta is the metadata of a generated chain.
func chainMeta(runID, capsuleID string) events.CapsuleMeta {
	return events.CapsuleMeta{RunID: runID, CapsuleID: capsuleID, HarnessVersion: harnessVersion, TaskFamily: taskFamily}
}

// step is one kind of entry in the generated harness script; a task runs
// the steps in order.
type step struct {
	lineage, kind, effect string
}

var script = []step{
	{"plan", "gate.start", "SE0"},
	{"strategy", "strategy.select", "SE0"},
	{"attempt", "attempt.start", "SE0"},
	{"interaction", "model.call", "SE0"},
	{"interaction", "tool.call", "SE2"},
	{"environment", "tool.result", "SE2"},
	{"interaction", "tool.call", "SE1"},
	{"environment", "test.run", "SE2"},
	{"attempt", "score", "SE0"},
	{"plan", "gate.end", "SE0"},
}

// Payload strings with what a canonical form must carry through: raw
// non-ASCII (accents, a combining mark, arrows, CJK, a check mark),
// quotes, a backslash and a tab.
var (
	messages = []string{
		"déduplication naïve → 3 doublons attendus",
		"clés normalisées (NFC) puis hachées ; 12 lignes, 3 doublons",
		"fixture « clients-été » chargée: 1 204 lignes, encodage UTF-8",
		"顧客リストの重複を除去 (3 件)",
	}
	reasons = []string{
		"keys differ only in case and Unicode form (é vs e\u0301)",
		"pairwise compare is O(n²); hash the normalised key instead",
		"the \"email\" column has trailing spaces\tand mixed case",
		`path C:\data\customers.csv uses backslashes; normalise first`,
	}
	notes = []string{
		"killed after 30 s: quadratic pairwise compare",
		"3 doublons retirés, 12/12 ✓",
		"résultat stable sur 3 exécutions ✓",
	}
)

func (g *chainGen) hex(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00") + strconv.FormatUint(g.rng.Uint64(), 16)))
	return hex.EncodeToString(sum[:])
}

func (g *chainGen) pick(list []string) string { return list[g.rng.IntN(len(list))] }

// payload returns the payload members of one step (unsorted).
func (g *chainGen) payload(st step, task string) []member {
	attempt := "attempt-" + strconv.Itoa(1+g.rng.IntN(3))
	callID := fmt.Sprintf("call_%s_a1_%02d", task, 1+g.rng.IntN(20))
	ms := func(lo, hi int) value { return decimal(float64(lo+g.rng.IntN(hi-lo)) + float64(g.rng.IntN(4))*0.25) }
	m := g.members[:0]
	add := func(k string, v value) { m = append(m, member{k, v}) }
	switch st.kind {
	case "gate.start":
		add("task_id", str(task))
		add("task_family", str(taskFamily))
		add("fixture_key", str("csv-dedupe/"+task+"-customers"))
		add("stage", str("smoke"))
		add("variant", str("baseline"))
		add("message", str(g.pick(messages)))
	case "strategy.select":
		add("task_id", str(task))
		add("branch_id", str(task+"-b1"))
		add("decision", str("normalise-then-hash"))
		add("reason", str(g.pick(reasons)))
	case "attempt.start":
		add("task_id", str(task))
		add("branch_id", str(task+"-b1"))
		add("stage", str(attempt))
		add("message", str(g.pick(messages)))
	case "model.call":
		tin, tout := 1800+g.rng.IntN(2400), 250+g.rng.IntN(900)
		add("task_id", str(task))
		add("model", str("frontier-large-2026-08"))
		add("tokens_in", integer(int64(tin)))
		add("tokens_out", integer(int64(tout)))
		add("cost_usd", decimal(math.Round((float64(tin)*3e-6+float64(tout)*15e-6)*1e6)/1e6))
		add("duration_ms", ms(2500, 9000))
		add("response_hash", str(g.hex("model", task)))
	case "tool.call":
		add("task_id", str(task))
		add("tool", str("python"))
		add("tool_call_id", str(callID))
		add("path", str("scripts/dedupe.py"))
		add("args_hash", str(g.hex("python", callID)))
		add("note", str(g.pick(notes)))
	case "tool.result":
		add("tool_call_id", str(callID))
		add("tool", str("python"))
		if g.rng.IntN(8) == 0 {
			add("status", str("timeout"))
			add("exit_code", null())
			add("duration_ms", integer(30000))
			add("note", str(notes[0]))
		} else {
			add("status", str("ok"))
			add("exit_code", integer(0))
			add("duration_ms", ms(4, 900))
			add("hits", integer(int64(g.rng.IntN(12))))
			add("digest", str("sha256:"+g.hex("out", callID)))
		}
	case "test.run":
		total := 12
		passed := total - g.rng.IntN(3)
		add("task_id", str(task))
		add("tool", str("pytest"))
		add("tool_call_id", str(callID))
		add("exit_code", integer(int64(min(1, total-passed))))
		add("passed", integer(int64(passed)))
		add("failed", integer(int64(total-passed)))
		add("total", integer(int64(total)))
		add("duration_ms", ms(300, 4200))
		add("digest", str("sha256:"+g.hex("junit", callID)))
	case "score":
		passed := 9 + g.rng.IntN(4)
		add("task_id", str(task))
		add("branch_id", str(task+"-b1"))
		add("score", decimal(math.Round(float64(passed)/12*1000)/1000))
		add("passed", integer(int64(passed)))
		add("failed", integer(int64(12-passed)))
		add("total", integer(12))
		add("verdict", str("pass"))
	case "gate.end":
		add("task_id", str(task))
		add("status", str("completed"))
		add("verdict", str("pass"))
		add("score", decimal(1))
		add("cost_usd", decimal(0.0123))
		add("summary", str(g.pick(notes)+" — "+g.pick(messages)))
	}
	g.members = m
	slices.SortFunc(m, func(a, b member) int { return strings.Compare(a.key, b.key) })
	return m
}

// next returns the chain's next entry: its canonical bytes (without a
// newline; the slice is reused by the following call) and its entry_hash.
func (g *chainGen) next() (line []byte, hash string) {
	st := script[g.seq%int64(len(script))]
	task := fmt.Sprintf("t%05d", g.seq/int64(len(script)))
	g.clock = g.clock.Add(time.Duration(50+g.rng.IntN(4000)) * time.Millisecond)
	pay := g.payload(st, task)

	// Members in sorted order: capsule_id, effect_class, [entry_hash],
	// harness_version, kind, lineage, parent_hash, payload, run_id,
	// schema, seq, task_family, ts.
	b := g.pre[:0]
	b = append(b, `{"capsule_id":`...)
	b = appendString(b, g.meta.CapsuleID)
	b = append(b, `,"effect_class":`...)
	b = appendString(b, st.effect)
	split := len(b)
	b = append(b, `,"harness_version":`...)
	b = appendString(b, g.meta.HarnessVersion)
	b = append(b, `,"kind":`...)
	b = appendString(b, st.kind)
	b = append(b, `,"lineage":`...)
	b = appendString(b, st.lineage)
	b = append(b, `,"parent_hash":`...)
	b = appendString(b, g.parent)
	b = append(b, `,"payload":{`...)
	for i, m := range pay {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, m.key)
		b = append(b, ':')
		b = appendValue(b, m.val)
	}
	b = append(b, `},"run_id":`...)
	b = appendString(b, g.meta.RunID)
	b = append(b, `,"schema":`...)
	b = appendString(b, events.EntrySchema)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, g.seq, 10)
	b = append(b, `,"task_family":`...)
	b = appendString(b, g.meta.TaskFamily)
	b = append(b, `,"ts":`...)
	b = appendString(b, g.clock.Format("2006-01-02T15:04:05.000Z07:00"))
	b = append(b, '}')
	g.pre = b

	sum := sha256.Sum256(b)
	hash = hex.EncodeToString(sum[:])
	out := g.out[:0]
	out = append(out, b[:split]...)
	out = append(out, `,"entry_hash":"`...)
	out = append(out, hash...)
	out = append(out, '"')
	out = append(out, b[split:]...)
	g.out = out
	g.parent = hash
	g.seq++
	return out, hash
}

// chain is a generated chain held in memory.
type chain struct {
	meta   events.CapsuleMeta
	lines  [][]byte // canonical entries, without newlines
	hashes []string
	bytes  int64 // sum of len(lines[i])
}

// genChain generates n entries of one chain.
func genChain(meta events.CapsuleMeta, seed uint64, n int) *chain {
	g := newChainGen(meta, seed)
	c := &chain{meta: meta, lines: make([][]byte, n), hashes: make([]string, n)}
	for i := range n {
		line, hash := g.next()
		c.lines[i], c.hashes[i] = bytes.Clone(line), hash
		c.bytes += int64(len(line))
	}
	return c
}

// writeCapsule writes a capsule directory (capsule.json and
// journal.ndjson, as testdata/samples/capsules has them) under dir: n
// entries, entry i being line(i), each followed by a newline.
func writeCapsule(dir string, meta events.CapsuleMeta, n int, line func(i int) []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var cj []byte
	cj = append(cj, `{"capsule_id":`...)
	cj = appendString(cj, meta.CapsuleID)
	cj = append(cj, `,"created_at":`...)
	cj = appendString(cj, genStart.Format("2006-01-02T15:04:05.000Z07:00"))
	cj = append(cj, `,"harness_version":`...)
	cj = appendString(cj, meta.HarnessVersion)
	cj = append(cj, `,"run_id":`...)
	cj = appendString(cj, meta.RunID)
	cj = append(cj, `,"schema":`...)
	cj = appendString(cj, events.EntrySchema)
	cj = append(cj, `,"task_family":`...)
	cj = appendString(cj, meta.TaskFamily)
	cj = append(cj, "}\n"...)
	if err := os.WriteFile(filepath.Join(dir, validate.CapsuleFile), cj, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, validate.JournalFile))
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := range n {
		w.Write(line(i))
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeChain writes c as a capsule directory under dir.
func writeChain(dir string, c *chain) error {
	return writeCapsule(dir, c.meta, len(c.lines), func(i int) []byte { return c.lines[i] })
}

// recordTemplate is an execution record v1 in the shape of the reference
// record testdata/reference/execution-records/verified.json; genRecords
// gives each copy its own room, idempotency/key, run/ref and recorded-at
// and signs it.
const recordTemplate = `{
  "schema/v": 1,
  "query/id": "query:qmail-open-relay",
  "room/id": "room:qmail-open-relay",
  "proposal/ref": "corpus-experiment:sha256:Z9OINYzXKjCv2n467f8hCPYp0bbqrW6vf1_HGWXLVj0",
  "proposal/digest": "sha256:Z9OINYzXKjCv2n467f8hCPYp0bbqrW6vf1_HGWXLVj0",
  "review/ref": "corpus-experiment-review:sha256:-wZwDPaemdSvfdPbI3S8uRNxpVHyDBJEXL9P-n9Ny7A",
  "review/digest": "sha256:-wZwDPaemdSvfdPbI3S8uRNxpVHyDBJEXL9P-n9Ny7A",
  "decision/ref": "corpus-experiment-chair-decision:sha256:oA28VKhsifc4ODhCXQhTYA5qikyleR46w0_GrRwpceE",
  "decision/digest": "sha256:oA28VKhsifc4ODhCXQhTYA5qikyleR46w0_GrRwpceE",
  "candidate": {
    "artifact/type": "operator-task-experiment-candidate.v1",
    "ref": "operator-task-experiment-candidate:qmail-01",
    "artifact-ref": "object-store:sha256:FPidKwubLf5d6OzruHL3EWrUJ9fzGOjhGJsB9p0N1-A",
    "digest": "sha256:FPidKwubLf5d6OzruHL3EWrUJ9fzGOjhGJsB9p0N1-A"
  },
  "target": {
    "task-profile/ref": "operator-task-profile:qmail-local-administration",
    "task-profile/digest": "sha256:qOpwTunafl7k27Iz3HYIQMMrPniAOvCKLp48kU16a70",
    "binding/ref": "operator-task-local-binding:qmail-on-workbench-a"
  },
  "plan/ref": "operator-task-plan:run-01",
  "plan/digest": "sha256:ZIeffWuWCgGQl2LZEaMtRYLCABDFZB7pAni2RKnjtSU",
  "run/ref": "operator-task-run:run-01",
  "environment/ref": "environment:qmail-01",
  "outcome": "verified",
  "result/digest": "sha256:srBF33Om3u50aloxxdNXou1JSRtY06tPWNOaomGIpJE",
  "evidence": [
    {
      "step/id": "inspect-qmail",
      "artifact-ref": "object-store:sha256:clS9L-u50lBvnKL4B8jKpD190PLkfS86KUobKiQVHCE",
      "digest": "sha256:clS9L-u50lBvnKL4B8jKpD190PLkfS86KUobKiQVHCE",
      "environment/ref": "environment:qmail-01"
    },
    {
      "step/id": "apply-control-patch",
      "artifact-ref": "object-store:sha256:ui6nSmNbL1vpWX7_ICDHlKFmtZDBoBLMpyS_00_Tr2Q",
      "digest": "sha256:ui6nSmNbL1vpWX7_ICDHlKFmtZDBoBLMpyS_00_Tr2Q",
      "environment/ref": "environment:qmail-01"
    },
    {
      "step/id": "restart-qmail",
      "artifact-ref": "object-store:sha256:6i-2m41FYJuFldHga0WrqCNceAHHdnIkBlckD8AVCPY",
      "digest": "sha256:6i-2m41FYJuFldHga0WrqCNceAHHdnIkBlckD8AVCPY",
      "environment/ref": "environment:qmail-01"
    }
  ],
  "recorded-at": "2026-09-25T12:15:00Z",
  "idempotency/key": "qmail-open-relay-01-execution"
}`

// genRecords signs n execution records for roomID with key, each with its
// own idempotency/key and run/ref (so none conflicts with another) and a
// later recorded-at. tag (of a fixed length) keeps the keys of two sides
// apart while their records stay the same length.
func genRecords(key *events.HostKey, roomID, tag string, n int) ([]*events.Record, error) {
	tmpl, err := events.ParseRecord([]byte(recordTemplate))
	if err != nil {
		return nil, fmt.Errorf("record template: %w", err)
	}
	out := make([]*events.Record, n)
	for i := range n {
		m := make(map[string]any, len(tmpl.Object())+3)
		for k, v := range tmpl.Object() {
			m[k] = v
		}
		m["room/id"] = roomID
		m["idempotency/key"] = fmt.Sprintf("bench-%s-%07d-execution", tag, i)
		m["run/ref"] = fmt.Sprintf("operator-task-run:bench-%s-%07d", tag, i)
		m["recorded-at"] = genStart.Add(time.Duration(i) * time.Second).Format(time.RFC3339)
		rec, err := events.SignRecord(m, key)
		if err != nil {
			return nil, fmt.Errorf("sign record %d: %w", i, err)
		}
		out[i] = rec
	}
	return out, nil
}
