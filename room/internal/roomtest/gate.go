package roomtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// HostileLine is one journal line a hostile harness may send, named, and
// the code the gate refuses it with.
type HostileLine struct {
	Name string
	Line []byte
	Code events.Code
}

// HostileLines are journal lines a hostile or broken harness may send, each
// with the code the gate must refuse it with (every input class gets a
// clear refusal with a code, and nothing lands).
func HostileLines(t *testing.T) []HostileLine {
	good, _ := Journal(t, "run-h", "cap-h", 1)
	obj := good[0].Object()
	canon := good[0].Canonical()
	with := func(k string, v any) []byte {
		m := map[string]any{}
		for kk, vv := range obj {
			m[kk] = vv
		}
		m[k] = v
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out, err := events.Canonicalize(b)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	keys := func(n int) []byte {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"k%05d":1`, i)
		}
		b.WriteString("}")
		return []byte(b.String())
	}
	cases := []HostileLine{
		{"truncated JSON", canon[:len(canon)/2], events.CorruptEntry},
		// JSON but not an object: not an envelope (the upstream's verdict).
		{"huge string, not an object", []byte(`"` + strings.Repeat("x", 700<<10) + `"`), events.InvalidEntry},
		{"deep nesting", []byte(strings.Repeat("[", 10000) + strings.Repeat("]", 10000)), events.InvalidEntry},
		{"nesting over 10,000", []byte(strings.Repeat("[", 10001) + strings.Repeat("]", 10001)), events.CorruptEntry},
		{"10,000 keys", keys(10000), events.InvalidEntry},
		{"duplicate keys", []byte(`{"seq":0,"seq":1}`), events.CorruptEntry},
		{"invalid UTF-8", append([]byte(`{"a":"`), 0xff, '"', '}'), events.NonCanonical},
		{"lone surrogate, an entry of no envelope field", []byte(`{"a":"\ud800"}`), events.InvalidEntry},
		{"lone surrogate, duplicate keys", []byte(`{"\ud800":0,"\uD800":1}`), events.CorruptEntry},
		{"lone surrogates nested 10,001 deep", []byte(strings.Repeat(`{"\udc00":`, 10001) + `1` + strings.Repeat("}", 10001)), events.CorruptEntry},
		{"number 1e400", []byte(`{"a":1e400}`), events.CorruptEntry},
		{"raw NUL byte", []byte("{\"a\":\"\x00\"}"), events.CorruptEntry},
		{"byte-order mark", append([]byte("\ufeff"), canon...), events.CorruptEntry},
		{"empty line", []byte{}, events.CorruptEntry},
		{"run_id of 129 characters", with("run_id", strings.Repeat("r", 129)), events.InvalidEntry},
		{"payload nested object", with("payload", map[string]any{"status": map[string]any{"a": 1}}), events.InvalidEntry},
		{"secret in payload", with("payload", map[string]any{"note": "AKIA" + strings.Repeat("Q", 16)}), events.InvalidEntry},
	}
	// Wrong types at every field.
	for k, v := range obj {
		var wrong []any
		switch v.(type) {
		case string:
			wrong = []any{json.Number("7"), nil, []any{"x"}, true}
		case json.Number:
			wrong = []any{"0", nil, map[string]any{}}
		case map[string]any:
			wrong = []any{"payload", []any{}, json.Number("1")}
		}
		for _, w := range wrong {
			cases = append(cases, HostileLine{fmt.Sprintf("%s as %T", k, w), with(k, w), events.InvalidEntry})
		}
	}
	return cases
}

// CapsuleDir writes a capsule directory of journal's chain (run, capsule)
// holding body.
func CapsuleDir(t *testing.T, run, capsule string, body []byte) string {
	t.Helper()
	dir := t.TempDir()
	meta := fmt.Sprintf(`{"capsule_id":%q,"created_at":"2026-09-02T00:00:00.000Z","harness_version":"test/1","run_id":%q,"schema":"capsule-envelope/v1","task_family":"slugify"}`, capsule, run)
	if err := os.WriteFile(filepath.Join(dir, "capsule.json"), []byte(meta+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "journal.ndjson"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ChainInStream checks that the stream holds exactly es, in chain order,
// on the chain's subject in roomID.
func ChainInStream(t *testing.T, e *Env, roomID string, es []*events.Entry) {
	t.Helper()
	subj := room.Subjects{}.Journal(roomID, events.ChainKey{RunID: es[0].RunID(), CapsuleID: es[0].CapsuleID()})
	msgs := e.OnSubject(subj)
	if len(msgs) != len(es) {
		t.Fatalf("%s holds %d messages, want %d", subj, len(msgs), len(es))
	}
	for i, m := range msgs {
		if !bytes.Equal(m.Data, es[i].Canonical()) {
			t.Fatalf("%s message %d (stream seq %d) is not entry %d", subj, i, m.Sequence, i)
		}
	}
}

// RefRoom is the reference records' room, RefSubject its record subject
// under the default prefix.
const (
	RefRoom    = "room:qmail-open-relay"
	RefSubject = "rooms.qmail-open-relay.exec"
)

// The ingest service's subjects of the anonymous identity.
const (
	SubjJournal   = "roompub.v1.journal"
	SubjExecution = "roompub.v1.execution"
	SubjHead      = "roompub.v1.head"
)

// CheckStored asserts that items[from:to] hold es[from:to] and were stored
// in order at stream sequences firstSeq, firstSeq+1, … on subject.
func CheckStored(t *testing.T, r room.JournalReply, es []*events.Entry, from, to int, firstSeq uint64, subject string) {
	t.Helper()
	for i := from; i < to; i++ {
		it := r.Items[i]
		want := firstSeq + uint64(i-from)
		seq, _ := es[i].Seq()
		if it.Index != i || it.Outcome != room.OutcomeStored || it.StreamSeq != want || it.Subject != subject ||
			SeqOf(it) != seq || it.Hash != es[i].EntryHash() || it.Code != "" || it.At != nil {
			t.Fatalf("item %d: %+v, want stored at stream seq %d on %s", i, it, want, subject)
		}
	}
}

// SeqOf is an item's entry seq, -1 when it has none.
func SeqOf(it room.ItemResult) int64 {
	if it.Seq == nil {
		return -1
	}
	return *it.Seq
}
