// Command gen writes roompub's bundled sample capsules under testdata/samples:
//
//	capsules/slugify-run     an eval harness run over 15 slugify tasks (~300 entries)
//	capsules/csv-dedupe      a small smoke run of another task family
//	capsules/broken          a short run with one entry edited after hashing
//	widened/schemas          the embedded schemas, envelope payload widened by seven keys
//	widened/control-plane    a capsule that uses those seven keys
//
// Every entry is built with events.NewEntry, so each line is canonical and
// hash-chained. The output is deterministic: fixed timestamps and a fixed
// random seed. Run it from the repository root:
//
//	go run ./testdata/samples/gen
//
// It checks what it wrote with package validate and fails if a sample does
// not verify (or, for broken and the widened capsule under the embedded
// schemas, is not refused) as intended. The execution records in
// testdata/samples/records are copies of the reference records, not output
// of this program.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/schemas"
	"github.com/roompub/roompub/validate"
)

func main() {
	out := flag.String("out", "testdata/samples", "directory to write the samples into")
	flag.Parse()
	if err := generate(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func generate(out string) error {
	slug := slugifyRun()
	dedupe := dedupeRun()
	broken, tampered, err := brokenRun()
	if err != nil {
		return err
	}
	hook := controlPlaneRun()
	for _, c := range []struct {
		dir string
		j   *journal
	}{
		{"capsules/slugify-run", slug},
		{"capsules/csv-dedupe", dedupe},
		{"capsules/broken", broken},
		{"widened/control-plane", hook},
	} {
		if c.j.err != nil {
			return fmt.Errorf("%s: %w", c.dir, c.j.err)
		}
		if err := c.j.write(filepath.Join(out, c.dir)); err != nil {
			return err
		}
	}
	widened := filepath.Join(out, "widened/schemas")
	if err := writeWidenedSchemas(widened); err != nil {
		return err
	}
	return check(out, tampered)
}

// journal builds one capsule's chain entry by entry.
type journal struct {
	meta    events.CapsuleMeta
	created time.Time
	clock   time.Time
	rng     *rand.Rand
	head    string
	lines   [][]byte
	err     error
}

func newJournal(meta events.CapsuleMeta, start time.Time, seed uint64) *journal {
	return &journal{meta: meta, created: start, clock: start, head: events.ZeroHash,
		rng: rand.New(rand.NewPCG(seed, 0x726f6f6d707562))}
}

// add appends one entry, dt after the previous one.
func (j *journal) add(dt time.Duration, lineage, kind, effect string, payload map[string]any) {
	if j.err != nil {
		return
	}
	j.clock = j.clock.Add(dt)
	e, err := events.NewEntry(map[string]any{
		"schema":          events.EntrySchema,
		"run_id":          j.meta.RunID,
		"capsule_id":      j.meta.CapsuleID,
		"seq":             num(len(j.lines)),
		"ts":              j.clock.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		"lineage":         lineage,
		"kind":            kind,
		"effect_class":    effect,
		"harness_version": j.meta.HarnessVersion,
		"task_family":     j.meta.TaskFamily,
		"parent_hash":     j.head,
		"payload":         payload,
	})
	if err != nil {
		j.err = fmt.Errorf("entry %d: %w", len(j.lines), err)
		return
	}
	j.lines = append(j.lines, e.Canonical())
	j.head = e.EntryHash()
}

// ms returns a duration of between lo and hi milliseconds, and the same in
// milliseconds for the payload.
func (j *journal) ms(lo, hi int) (time.Duration, json.Number) {
	n := lo + j.rng.IntN(hi-lo+1)
	return time.Duration(n) * time.Millisecond, num(n)
}

func (j *journal) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	capsule, err := json.Marshal(map[string]string{
		"schema":          events.EntrySchema,
		"run_id":          j.meta.RunID,
		"capsule_id":      j.meta.CapsuleID,
		"harness_version": j.meta.HarnessVersion,
		"task_family":     j.meta.TaskFamily,
		"created_at":      j.created.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
	})
	if err != nil {
		return err
	}
	if capsule, err = events.Canonicalize(capsule); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, validate.CapsuleFile), append(capsule, '\n'), 0o644); err != nil {
		return err
	}
	var buf bytes.Buffer
	for _, l := range j.lines {
		buf.Write(l)
		buf.WriteByte('\n')
	}
	return os.WriteFile(filepath.Join(dir, validate.JournalFile), buf.Bytes(), 0o644)
}

func num(n int) json.Number { return json.Number(strconv.Itoa(n)) }

// sha256hex is a stand-in for the hash of a tool's arguments or response:
// the harness records hashes, never the content (seed 000).
func sha256hex(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:])
}

// usd rounds a cost to 1e-6 dollars.
func usd(x float64) float64 { return math.Round(x*1e6) / 1e6 }

const (
	harness = "ecc-eval-harness/1.4.2"
	model   = "frontier-large-2026-08"
)

// price per token, dollars.
const priceIn, priceOut = 3e-6, 15e-6

// slugTask is one task of the slugify family.
type slugTask struct {
	name      string
	cases     int
	attempts  int // attempts the model needs; 0: it never gets there
	tricky    string
	sourceHit int
}

var slugTasks = []slugTask{
	{"basic-ascii", 6, 1, "", 3},
	{"unicode-accents", 9, 2, "NFKD decomposition drops the combining marks too late", 5},
	{"collapse-dashes", 7, 1, "", 4},
	{"strip-punctuation", 8, 2, "apostrophes inside words must vanish, not become dashes", 6},
	{"max-length", 6, 1, "", 2},
	{"leading-trailing-space", 5, 1, "", 2},
	{"emoji", 8, 0, "emoji sequences with zero-width joiners leave stray dashes", 7},
	{"cjk-transliteration", 10, 3, "transliteration table is missing half-width katakana", 9},
	{"digits-and-units", 6, 1, "", 3},
	{"empty-input", 4, 1, "", 1},
	{"mixed-case", 5, 1, "", 2},
	{"stopwords", 9, 2, "stopword list applied before lowercasing", 5},
	{"separator-option", 7, 1, "", 4},
	{"idempotence", 6, 1, "", 2},
	{"rtl-scripts", 8, 0, "bidirectional marks survive normalisation", 6},
}

// taskOutcome is what a run's last entry sums up of one task.
type taskOutcome struct {
	passed              bool
	score               float64
	tokensIn, tokensOut int
	cost                float64
}

// slugifyTask appends one task: a gate, the fixture, a strategy, up to
// maxAttempts attempts (a model call, tool calls, a sandboxed test run and
// a score, with a revised strategy after a failing one) and the gate's
// verdict.
func (j *journal) slugifyTask(id string, task slugTask, variant string, maxAttempts int) taskOutcome {
	var out taskOutcome
	fixture := "slugify/" + id + "-" + task.name
	j.add(1200*time.Millisecond, "plan", "gate.start", "SE0", map[string]any{
		"task_id": id, "task_family": "slugify", "fixture_key": fixture, "stage": "setup",
		"variant": variant, "message": "task " + id + ": " + task.name,
	})
	d, dur := j.ms(30, 90)
	j.add(d, "environment", "fixture.load", "SE1", map[string]any{
		"task_id": id, "fixture_key": fixture, "path": "fixtures/" + fixture + ".json",
		"digest": "sha256:" + sha256hex("fixture", fixture), "total": num(task.cases), "duration_ms": dur,
	})
	branch := id + "-b1"
	j.add(400*time.Millisecond, "strategy", "strategy.select", "SE0", map[string]any{
		"task_id": id, "decision": "read-edit-test", "branch_id": branch,
		"reason": fmt.Sprintf("%d fixture cases; smallest diff to slugify() first", task.cases),
	})
	attempts := task.attempts
	if attempts == 0 || attempts > maxAttempts {
		attempts = maxAttempts
	}
	var passed int
	for a := 1; a <= attempts; a++ {
		start := map[string]any{"task_id": id, "branch_id": branch, "stage": "attempt-" + strconv.Itoa(a)}
		if a > 1 {
			start["parent_branch_id"] = fmt.Sprintf("%s-b%d", id, a-1)
		}
		j.add(200*time.Millisecond, "attempt", "attempt.start", "SE0", start)

		tin, tout := 1800+j.rng.IntN(2400), 250+j.rng.IntN(900)
		if a > 1 {
			tin += 1500 // the failing test output is in the context now
		}
		c := usd(float64(tin)*priceIn + float64(tout)*priceOut)
		out.tokensIn, out.tokensOut, out.cost = out.tokensIn+tin, out.tokensOut+tout, out.cost+c
		d, dur = j.ms(2500, 9000)
		j.add(d, "interaction", "model.call", "SE0", map[string]any{
			"task_id": id, "model": model, "tokens_in": num(tin), "tokens_out": num(tout),
			"cost_usd": c, "duration_ms": dur, "response_hash": sha256hex("model", id, strconv.Itoa(a)),
		})

		// The first attempt reads the test and searches the source; a
		// retry has the failing output in context and only edits.
		calls := []struct{ tool, path, effect string }{{"edit_file", "src/slugify/core.py", "SE1"}}
		if a == 1 {
			calls = append([]struct{ tool, path, effect string }{
				{"read_file", "tests/test_" + strings.ReplaceAll(task.name, "-", "_") + ".py", "SE0"},
				{"grep", "src/slugify", "SE0"},
			}, calls...)
		}
		for k, call := range calls {
			callID := fmt.Sprintf("call_%s_a%d_%02d", id, a, k+1)
			j.add(300*time.Millisecond, "interaction", "tool.call", call.effect, map[string]any{
				"task_id": id, "tool": call.tool, "tool_call_id": callID, "path": call.path,
				"args_hash": sha256hex(call.tool, call.path, callID),
			})
			d, dur = j.ms(4, 140)
			result := map[string]any{
				"tool_call_id": callID, "tool": call.tool, "status": "ok", "exit_code": num(0),
				"duration_ms": dur, "response_hash": sha256hex("response", callID),
			}
			switch call.tool {
			case "grep":
				result["hits"] = num(task.sourceHit)
			case "edit_file":
				result["digest"] = "sha256:" + sha256hex("core.py", id, strconv.Itoa(a))
			}
			j.add(d, "environment", "tool.result", call.effect, result)
		}

		passed = task.cases
		if a != task.attempts {
			passed = task.cases - 1 - j.rng.IntN(min(3, task.cases-1))
		}
		failed := task.cases - passed
		exit, verdict := 0, "pass"
		if failed > 0 {
			exit, verdict = 1, "fail"
		}
		runID := fmt.Sprintf("call_%s_a%d_pytest", id, a)
		j.add(250*time.Millisecond, "interaction", "tool.call", "SE2", map[string]any{
			"task_id": id, "tool": "pytest", "tool_call_id": runID,
			"args_hash": sha256hex("pytest", "-q", "tests/", runID),
		})
		d, dur = j.ms(800, 4200)
		j.add(d, "environment", "test.run", "SE2", map[string]any{
			"task_id": id, "tool": "pytest", "tool_call_id": runID, "exit_code": num(exit),
			"passed": num(passed), "failed": num(failed), "total": num(task.cases), "duration_ms": dur,
			"digest": "sha256:" + sha256hex("junit.xml", id, strconv.Itoa(a)),
		})
		j.add(100*time.Millisecond, "attempt", "score", "SE0", map[string]any{
			"task_id": id, "branch_id": branch, "score": ratio(passed, task.cases), "passed": num(passed),
			"failed": num(failed), "total": num(task.cases), "verdict": verdict,
		})
		if failed > 0 && a < attempts {
			next := fmt.Sprintf("%s-b%d", id, a+1)
			j.add(300*time.Millisecond, "strategy", "strategy.revise", "SE0", map[string]any{
				"task_id": id, "decision": "retry", "branch_id": next, "parent_branch_id": branch,
				"reason": fmt.Sprintf("%d of %d cases failing: %s", failed, task.cases, task.tricky),
			})
			branch = next
		}
	}
	out.passed, out.score = passed == task.cases, ratio(passed, task.cases)
	verdict, summary := "pass", fmt.Sprintf("passed %d/%d after %d attempt(s)", passed, task.cases, attempts)
	if !out.passed {
		verdict, summary = "fail", summary+"; gave up: "+task.tricky
	}
	j.add(150*time.Millisecond, "plan", "gate.end", "SE0", map[string]any{
		"task_id": id, "status": "completed", "verdict": verdict, "score": out.score, "summary": summary,
	})
	return out
}

// ratio is passed/total rounded to three decimals.
func ratio(passed, total int) float64 {
	return math.Round(float64(passed)/float64(total)*1000) / 1000
}

// slugifyRun is a harness run of one model over the slugify task family,
// at most three attempts per task.
func slugifyRun() *journal {
	meta := events.CapsuleMeta{RunID: "run-20260902-slugify-0417", CapsuleID: "cap-slugify-0417-a",
		HarnessVersion: harness, TaskFamily: "slugify"}
	j := newJournal(meta, time.Date(2026, 9, 2, 9, 0, 0, 0, time.UTC), 417)
	j.add(0, "plan", "run.start", "SE0", map[string]any{
		"task_family": "slugify", "model": model, "variant": "baseline",
		"total": num(len(slugTasks)), "note": "15 tasks, at most 3 attempts each, sandboxed tests",
	})
	var sum taskOutcome
	tasksPassed := 0
	for i, task := range slugTasks {
		o := j.slugifyTask(fmt.Sprintf("t%02d", i+1), task, "baseline", 3)
		if o.passed {
			tasksPassed++
		}
		sum.score += o.score
		sum.tokensIn, sum.tokensOut, sum.cost = sum.tokensIn+o.tokensIn, sum.tokensOut+o.tokensOut, sum.cost+o.cost
	}
	mean := math.Round(sum.score/float64(len(slugTasks))*1000) / 1000
	j.add(2*time.Second, "plan", "run.end", "SE0", map[string]any{
		"task_family": "slugify", "status": "completed", "passed": num(tasksPassed),
		"failed": num(len(slugTasks) - tasksPassed), "total": num(len(slugTasks)), "score": mean,
		"tokens_in": num(sum.tokensIn), "tokens_out": num(sum.tokensOut), "cost_usd": usd(sum.cost),
		"summary": fmt.Sprintf("%d of %d tasks passed, mean score %g", tasksPassed, len(slugTasks), mean),
	})
	return j
}

// dedupeRun is a small smoke run of another task family, with what a
// canonical form must carry through unchanged: raw non-ASCII text, a null
// exit code (a tool killed on timeout) and fractional numbers.
func dedupeRun() *journal {
	meta := events.CapsuleMeta{RunID: "run-20260903-csv-dedupe-0009", CapsuleID: "cap-csv-dedupe-0009",
		HarnessVersion: harness, TaskFamily: "csv-dedupe"}
	j := newJournal(meta, time.Date(2026, 9, 3, 14, 30, 0, 0, time.UTC), 9)
	id := "t01"
	j.add(0, "plan", "gate.start", "SE0", map[string]any{
		"task_id": id, "task_family": "csv-dedupe", "fixture_key": "csv-dedupe/t01-customers",
		"stage": "smoke", "variant": "smoke", "message": "déduplication naïve → 3 doublons attendus",
	})
	j.add(350*time.Millisecond, "strategy", "strategy.select", "SE0", map[string]any{
		"task_id": id, "decision": "normalise-then-hash", "branch_id": "t01-b1",
		"reason": "keys differ only in case and Unicode form (é vs e\u0301)",
	})
	j.add(100*time.Millisecond, "attempt", "attempt.start", "SE0", map[string]any{"task_id": id, "branch_id": "t01-b1", "stage": "attempt-1"})
	j.add(3412*time.Millisecond, "interaction", "model.call", "SE0", map[string]any{
		"task_id": id, "model": model, "tokens_in": num(2210), "tokens_out": num(488),
		"cost_usd": usd(2210*priceIn + 488*priceOut), "duration_ms": 3411.5, "response_hash": sha256hex("dedupe-model-1"),
	})
	j.add(200*time.Millisecond, "interaction", "tool.call", "SE2", map[string]any{
		"task_id": id, "tool": "python", "tool_call_id": "call_t01_a1_01", "path": "scripts/dedupe.py",
		"args_hash": sha256hex("python", "scripts/dedupe.py", "--in", "customers.csv"),
	})
	j.add(30*time.Second, "environment", "tool.result", "SE2", map[string]any{
		"tool_call_id": "call_t01_a1_01", "tool": "python", "status": "timeout", "exit_code": nil,
		"duration_ms": num(30000), "note": "killed after 30 s: quadratic pairwise compare",
	})
	j.add(500*time.Millisecond, "strategy", "strategy.revise", "SE0", map[string]any{
		"task_id": id, "decision": "retry", "branch_id": "t01-b2", "parent_branch_id": "t01-b1",
		"reason": "pairwise compare is O(n²); hash the normalised key instead",
	})
	j.add(100*time.Millisecond, "attempt", "attempt.start", "SE0", map[string]any{"task_id": id, "branch_id": "t01-b2", "parent_branch_id": "t01-b1", "stage": "attempt-2"})
	j.add(2870*time.Millisecond, "interaction", "model.call", "SE0", map[string]any{
		"task_id": id, "model": model, "tokens_in": num(3120), "tokens_out": num(301),
		"cost_usd": usd(3120*priceIn + 301*priceOut), "duration_ms": 2869.25, "response_hash": sha256hex("dedupe-model-2"),
	})
	j.add(150*time.Millisecond, "interaction", "tool.call", "SE2", map[string]any{
		"task_id": id, "tool": "python", "tool_call_id": "call_t01_a2_01", "path": "scripts/dedupe.py",
		"args_hash": sha256hex("python", "scripts/dedupe.py", "--in", "customers.csv", "--hash"),
	})
	j.add(1840*time.Millisecond, "environment", "tool.result", "SE2", map[string]any{
		"tool_call_id": "call_t01_a2_01", "tool": "python", "status": "ok", "exit_code": num(0),
		"duration_ms": num(1838), "hits": num(3), "digest": "sha256:" + sha256hex("customers.dedup.csv"),
	})
	j.add(600*time.Millisecond, "environment", "test.run", "SE2", map[string]any{
		"task_id": id, "tool": "pytest", "exit_code": num(0), "passed": num(12), "failed": num(0), "total": num(12),
		"duration_ms": num(596),
	})
	j.add(100*time.Millisecond, "attempt", "score", "SE0", map[string]any{
		"task_id": id, "branch_id": "t01-b2", "score": num(1), "passed": num(12), "failed": num(0), "total": num(12), "verdict": "pass",
	})
	j.add(100*time.Millisecond, "plan", "gate.end", "SE0", map[string]any{
		"task_id": id, "status": "completed", "verdict": "pass", "score": num(1), "summary": "3 doublons retirés, 12/12 ✓",
	})
	return j
}

// brokenRun is a short slugify re-run, one attempt per task, whose failing
// score entry was edited after hashing to read as a pass: the line stays
// canonical and the chain links still match (the next parent_hash is the
// claimed entry_hash), but entry_hash no longer matches the content, so the
// capsule is refused with invalid_entry at that line. It returns the
// tampered line's number.
func brokenRun() (*journal, int, error) {
	meta := events.CapsuleMeta{RunID: "run-20260904-slugify-0418", CapsuleID: "cap-slugify-0418-a",
		HarnessVersion: harness, TaskFamily: "slugify"}
	j := newJournal(meta, time.Date(2026, 9, 4, 8, 0, 0, 0, time.UTC), 418)
	j.slugifyTask("t02", slugTasks[1], "rerun", 1) // needs two attempts: fails
	j.slugifyTask("t05", slugTasks[4], "rerun", 1)
	if j.err != nil {
		return nil, 0, j.err
	}
	for i, line := range j.lines {
		e, err := events.ParseEntry(line)
		if err != nil {
			return nil, 0, err
		}
		obj := e.Object()
		payload, _ := obj["payload"].(map[string]any)
		if obj["kind"] != "score" || payload["verdict"] != "fail" {
			continue
		}
		// The edit: the score now claims a pass, entry_hash unchanged.
		edited := map[string]any{}
		for k, v := range obj {
			edited[k] = v
		}
		claimed := map[string]any{}
		for k, v := range payload {
			claimed[k] = v
		}
		claimed["score"], claimed["passed"], claimed["failed"], claimed["verdict"] = num(1), claimed["total"], num(0), "pass"
		edited["payload"] = claimed
		raw, err := json.Marshal(edited)
		if err != nil {
			return nil, 0, err
		}
		if j.lines[i], err = events.Canonicalize(raw); err != nil {
			return nil, 0, err
		}
		return j, i + 1, nil
	}
	return nil, 0, errors.New("broken: no failing score entry to edit")
}

// widenedKeys are the payload keys that a later upstream envelope revision
// adds, emitted by its control-plane hook
// (reference/capsule-journals/README.md).
var widenedKeys = map[string]string{
	"event_id": "string", "session": "string", "file": "string", "maneuver": "string",
	"blocked": "integer", "risk": "number", "threshold": "string",
}

// controlPlaneRun is a capsule written by a harness whose control-plane
// hook uses the widened payload keys: refused under the seed's envelope,
// accepted with --schema-dir widened/schemas.
func controlPlaneRun() *journal {
	meta := events.CapsuleMeta{RunID: "run-20260905-hooks-0031", CapsuleID: "cap-hooks-0031",
		HarnessVersion: "ecc-eval-harness/1.5.0", TaskFamily: "refactor-guard"}
	j := newJournal(meta, time.Date(2026, 9, 5, 16, 0, 0, 0, time.UTC), 31)
	session := "sess-" + sha256hex("session", "0031")[:12]
	j.add(0, "plan", "gate.start", "SE0", map[string]any{
		"task_id": "t01", "task_family": "refactor-guard", "stage": "setup", "session": session,
	})
	for i, ev := range []struct {
		tool, file, maneuver string
		risk                 float64
		blocked              int
	}{
		{"read_file", "src/billing/invoice.py", "inspect", 0.05, 0},
		{"edit_file", "src/billing/invoice.py", "refactor", 0.35, 0},
		{"bash", "scripts/migrate.sh", "schema-migration", 0.82, 1},
		{"edit_file", "tests/test_invoice.py", "add-test", 0.1, 0},
	} {
		eventID := fmt.Sprintf("evt-0031-%03d", i+1)
		j.add(900*time.Millisecond, "environment", "hook.pre_tool_use", "SE0", map[string]any{
			"event_id": eventID, "session": session, "tool": ev.tool, "file": ev.file,
			"maneuver": ev.maneuver, "risk": ev.risk, "threshold": "0.75", "blocked": num(ev.blocked),
		})
		decision := "allow"
		if ev.blocked == 1 {
			decision = "block"
		}
		j.add(20*time.Millisecond, "strategy", "hook.decision", "SE0", map[string]any{
			"event_id": eventID, "decision": decision, "reason": fmt.Sprintf("risk %g against threshold 0.75", ev.risk),
		})
	}
	j.add(500*time.Millisecond, "plan", "gate.end", "SE0", map[string]any{
		"task_id": "t01", "status": "completed", "verdict": "pass", "hits": num(1), "summary": "1 of 4 tool uses blocked by the hook",
	})
	return j
}

// writeWidenedSchemas writes the embedded schemas to dir, the envelope's
// payload allowlist widened by widenedKeys.
func writeWidenedSchemas(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return fs.WalkDir(schemas.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(schemas.FS(), name)
		if err != nil {
			return err
		}
		if name == schemas.EnvelopeFile {
			if data, err = widenEnvelope(data); err != nil {
				return err
			}
		}
		return os.WriteFile(filepath.Join(dir, name), data, 0o644)
	})
}

func widenEnvelope(data []byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	payload, _ := doc["properties"].(map[string]any)["payload"].(map[string]any)
	props, _ := payload["properties"].(map[string]any)
	if props == nil {
		return nil, errors.New("envelope schema has no payload properties")
	}
	for k, typ := range widenedKeys {
		props[k] = map[string]any{"type": typ}
	}
	doc["$comment"] = "roompub sample: the seed 000 envelope with the payload allowlist widened by the seven keys of a later upstream revision (event_id, session, file, maneuver, blocked, risk, threshold)"
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// check verifies what was written: every sample is accepted or refused as
// intended.
func check(out string, tamperedLine int) error {
	def, err := validate.New()
	if err != nil {
		return err
	}
	wide, err := validate.New(validate.WithSchemaFS(os.DirFS(filepath.Join(out, "widened/schemas"))))
	if err != nil {
		return err
	}
	brokenAt := fmt.Sprintf("%s:%d /entry_hash", filepath.Join(out, "capsules/broken", validate.JournalFile), tamperedLine)
	for _, c := range []struct {
		v        *validate.Validator
		dir      string
		code     events.Code
		at       string
		problems int
	}{
		{def, "capsules/slugify-run", "", "", 0},
		{def, "capsules/csv-dedupe", "", "", 0},
		{def, "capsules/broken", events.InvalidEntry, brokenAt, 1},
		{def, "widened/control-plane", events.InvalidEntry, "", -1},
		{wide, "widened/control-plane", "", "", 0},
		{wide, "capsules/slugify-run", "", "", 0},
	} {
		rep, err := c.v.VerifyPath(filepath.Join(out, c.dir))
		if err != nil {
			return err
		}
		switch {
		case rep.Code != c.code:
			return fmt.Errorf("%s: code %q, want %q: %s", c.dir, rep.Code, c.code, rep.Reason)
		case c.at != "" && rep.At != c.at:
			return fmt.Errorf("%s: refused at %s, want %s", c.dir, rep.At, c.at)
		case c.problems >= 0 && len(rep.Problems) != c.problems:
			return fmt.Errorf("%s: %d problems, want %d: %v", c.dir, len(rep.Problems), c.problems, rep.Problems)
		}
	}
	return nil
}
