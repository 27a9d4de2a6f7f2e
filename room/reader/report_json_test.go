package reader_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/reader"
)

// TestWriteJSONIsMarshal: WriteJSON writes the bytes json.Marshal makes of
// the report, and a newline, for no chains, an empty list and chains with
// and without a break, other members holding "chains" keys and text that
// looks like the member (escaped); a writer's error is returned.
func TestWriteJSONIsMarshal(t *testing.T) {
	broken := &reader.SetAside{Seq: 7, Code: events.BrokenLink, Reason: `parent_hash "chains":null <&>`}
	chains := []reader.ChainSummary{
		{RoomID: "room:a", Chain: events.ChainKey{RunID: "run-1", CapsuleID: "cap-1"}, Entries: 3, Head: "ab", FirstSeq: 1, LastSeq: 3, Verdict: "ok"},
		{RoomID: "room:b", Chain: events.ChainKey{RunID: "run-2", CapsuleID: "cap-2"}, Entries: 1, Verdict: "broken", Broken: broken},
	}
	for name, rep := range map[string]*reader.AuditReport{
		"nil chains":   {Stream: "ROOMS", StreamProblems: []string{`"chains":null`}},
		"empty chains": {Stream: "ROOMS", Chains: []reader.ChainSummary{}, Records: map[string]int{"room:a": 2}},
		"chains": {Stream: `RO"OMS`, FromSeq: 1, LastSeq: 9, Chains: chains, Violations: []reader.SetAside{*broken},
			Totals: reader.AuditTotals{Entries: 4, ChainsOK: 1, ChainsBroken: 1}, RoomMessages: map[string]uint64{"room:a": 3}},
	} {
		want, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := rep.WriteJSON(&got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got.Bytes(), append(want, '\n')) {
			t.Errorf("%s:\n got %s\nwant %s", name, got.Bytes(), want)
		}
	}
	boom := errors.New("boom")
	if err := (&reader.AuditReport{Chains: chains}).WriteJSON(failingWriter{boom}); !errors.Is(err, boom) {
		t.Errorf("a failing writer: %v", err)
	}
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }
