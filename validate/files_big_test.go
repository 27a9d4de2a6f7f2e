package validate_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// TestVerifyPathBigFiles: files over MaxRecordBytes are never read whole:
// one that starts like a record is refused as too_large, anything else is
// streamed as a journal (its lines counted and checked).
func TestVerifyPathBigFiles(t *testing.T) {
	if raceEnabled {
		// Half a million lines through the detector take ~40s and
		// share no memory across goroutines that other tests do not;
		// make unit runs it in its pass without -race.
		t.Skip("run without -race (make unit's second pass)")
	}
	v, err := validate.New()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rec := filepath.Join(dir, "big.json")
	body := append([]byte(`{"schema/v":1,"room/id":"room:x","pad":"`), bytes.Repeat([]byte("y"), validate.MaxRecordBytes)...)
	body = append(body, `"}`...)
	if err := os.WriteFile(rec, body, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := v.VerifyPath(rec)
	if err != nil || rep.OK || rep.Kind != validate.KindExecution || rep.Code != events.TooLarge {
		t.Fatalf("big record: %+v %v", rep, err)
	}
	jr := filepath.Join(dir, "big.ndjson")
	lines := bytes.Repeat([]byte("x\n"), validate.MaxRecordBytes/2+10)
	if err := os.WriteFile(jr, lines, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err = v.VerifyPath(jr)
	if err != nil || rep.OK || rep.Kind != validate.KindJournal || rep.Code != events.CorruptEntry || rep.Entries == nil || *rep.Entries != validate.MaxRecordBytes/2+10 {
		t.Fatalf("big journal: %+v %v", rep, err)
	}
}
