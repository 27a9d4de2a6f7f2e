package breakers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"
	"testing/fstest"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/schemas"
	"github.com/roompub/roompub/validate"
)

// TestPatternTimeoutUnderLoad verifies one long valid journal against the
// embedded schemas with one byte added to the envelope schema (so the
// envelope fast check does not apply and every entry goes through
// jsonschema and its regexp2 patterns, as with --schema-dir). Every entry
// is valid, so the journal must verify.
//
// Found while breaking the verify fast paths: regexp2's MatchTimeout (250 ms) is enforced
// by a shared clock goroutine that ticks every 100 ms; when the process is
// starved (a loaded machine, GC, the parallel VerifyJournal workers) the
// clock jumps and a match that just started times out, which
// validate.ecmaRegexp counts as "does not match": a valid entry is refused
// with "schema: '<64 hex>' does not match pattern '^[0-9a-f]{64}$'" and the
// rest of its chain is broken (the same for records: schema_invalid on a
// valid reference record). Commit 2557904 moved the embedded patterns to
// Go's regexp; this test guards that. The failure needs a busy or
// throttled process to show (run it alongside a SIGSTOP/SIGCONT loop, or
// on a loaded machine), so it runs only with ROOMPUB_BREAK_LOAD=1 (about
// 10-20 s of CPU).
func TestPatternTimeoutUnderLoad(t *testing.T) {
	if os.Getenv("ROOMPUB_BREAK_LOAD") == "" {
		t.Skip("ROOMPUB_BREAK_LOAD not set")
	}
	env, err := fs.ReadFile(schemas.FS(), schemas.EnvelopeFile)
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{schemas.EnvelopeFile: {Data: append(env, ' ')}}
	v, err := validate.New(validate.WithSchemaFS(fsys))
	if err != nil {
		t.Fatal(err)
	}
	meta := events.CapsuleMeta{RunID: "run-load", CapsuleID: "cap-load", HarnessVersion: "h/1", TaskFamily: "fam"}
	var journal bytes.Buffer
	prev := events.ZeroHash
	const n = 100_000
	for i := range n {
		e, err := events.NewEntry(map[string]any{
			"capsule_id": meta.CapsuleID, "effect_class": "SE0", "harness_version": meta.HarnessVersion,
			"kind": "step", "lineage": "attempt", "parent_hash": prev, "run_id": meta.RunID,
			"schema": events.EntrySchema, "seq": json.Number(fmt.Sprint(i)), "task_family": meta.TaskFamily,
			"ts":      "2026-09-03T14:30:00.000Z",
			"payload": map[string]any{"message": fmt.Sprintf("entry %d", i), "tokens_in": json.Number(fmt.Sprint(i))},
		})
		if err != nil {
			t.Fatal(err)
		}
		journal.Write(e.Canonical())
		journal.WriteByte('\n')
		prev = e.EntryHash()
	}
	for round := range 3 {
		res, err := v.Journal(bytes.NewReader(journal.Bytes()), "load.ndjson", &meta)
		var ref *events.Refusal
		if errors.As(err, &ref) {
			t.Fatalf("round %d: a valid journal was refused (%d of %d entries valid): %v", round, res.Valid, n, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if res.Valid != n {
			t.Fatalf("round %d: %d of %d entries valid", round, res.Valid, n)
		}
	}
}
