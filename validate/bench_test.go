package validate_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// BenchmarkChainCheck verifies one journal entry as the gate does: parse,
// canonical form, entry_hash, envelope schema, payload rules, chain rules.
func BenchmarkChainCheck(b *testing.B) {
	v := newValidator(b)
	line := bytes.TrimSuffix(bytes.SplitAfter(readRef(b, "capsule-journals", "canonical", "journal.ndjson"), []byte("\n"))[0], []byte("\n"))
	at := events.Location{Line: 1}
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, ps := v.NewChain(nil).Check(line, at); len(ps) != 0 {
			b.Fatal(ps)
		}
	}
}

// realisticJournal is a journal of n entries shaped like a harness run: a
// plan, then tool calls and their results, with hashes, models, token
// counts and costs in the payloads.
func realisticJournal(tb testing.TB, n int) []byte {
	tb.Helper()
	lineages := []string{"plan", "attempt", "interaction", "environment", "strategy"}
	kinds := []string{"gate.start", "tool.call", "tool.result", "model.turn", "verdict"}
	var out bytes.Buffer
	parent := events.ZeroHash
	for i := range n {
		m := entryMembers(i, parent)
		m["lineage"] = lineages[i%len(lineages)]
		m["kind"] = kinds[i%len(kinds)]
		m["effect_class"] = fmt.Sprintf("SE%d", i%3)
		m["ts"] = fmt.Sprintf("2026-09-02T%02d:%02d:%02d.%03dZ", i/3600%24, i/60%60, i%60, i%1000)
		m["payload"] = map[string]any{
			"task_id":       fmt.Sprintf("t%04d", i/100),
			"tool":          "bash",
			"tool_call_id":  fmt.Sprintf("call_%08x", i*2654435761),
			"args_hash":     fmt.Sprintf("%064x", i*7919),
			"response_hash": fmt.Sprintf("%064x", i*104729),
			"status":        "ok",
			"exit_code":     i % 3,
			"duration_ms":   float64(i%5000) + 0.25,
			"tokens_in":     1200 + i%800,
			"tokens_out":    300 + i%200,
			"cost_usd":      0.0003 * float64(i%50),
			"model":         "model-large-2026-08",
			"message":       fmt.Sprintf("step %d: ran the slugify tests, %d passed", i, i%40),
		}
		e, err := events.NewEntry(m)
		if err != nil {
			tb.Fatal(err)
		}
		out.Write(e.Canonical())
		out.WriteByte('\n')
		parent = e.EntryHash()
	}
	return out.Bytes()
}

func BenchmarkJournal10000(b *testing.B) {
	v := newValidator(b)
	data := realisticJournal(b, 10_000)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		res, err := v.Journal(bytes.NewReader(data), "bench.ndjson", nil)
		if err != nil || res.Valid != 10_000 {
			b.Fatal(res, err)
		}
	}
}

func BenchmarkRecord(b *testing.B) {
	v := newValidator(b)
	raw := readRef(b, "execution-records", "verified.json")
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := v.Record(raw, events.Location{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordCanonical verifies a record already in canonical form, as
// the gate receives it from a client and readers get it from the stream.
func BenchmarkRecordCanonical(b *testing.B) {
	v := newValidator(b)
	raw, err := events.Canonicalize(readRef(b, "execution-records", "verified.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := v.Record(raw, events.Location{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckEntry is the entry rules alone on a fast-path entry: the
// envelope check and the secret canaries; BenchmarkCheckEntrySchema is the
// same through jsonschema v6 and the decoded map, as before.
func BenchmarkCheckEntry(b *testing.B) {
	benchCheckEntry(b, (*validate.Validator).CheckEntry)
}

func BenchmarkCheckEntrySchema(b *testing.B) {
	benchCheckEntry(b, (*validate.Validator).CheckEntrySchema)
}

func benchCheckEntry(b *testing.B, check func(*validate.Validator, *events.Entry, events.Location) []events.Problem) {
	v := newValidator(b)
	e, err := events.ParseEntry(realisticJournal(b, 2)[:bytes.IndexByte(realisticJournal(b, 2), '\n')])
	if err != nil {
		b.Fatal(err)
	}
	e.Object() // decoded once, outside the loop, as a reused value would be
	b.ReportAllocs()
	for b.Loop() {
		if ps := check(v, e, events.Location{}); len(ps) != 0 {
			b.Fatal(ps)
		}
	}
}
