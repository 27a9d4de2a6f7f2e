package events_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/roompub/roompub/events"
)

func TestLocationString(t *testing.T) {
	tests := []struct {
		at   events.Location
		want string
	}{
		{events.Location{}, ""},
		{events.Location{File: "j.ndjson"}, "j.ndjson"},
		{events.Location{File: "j.ndjson", Line: 3}, "j.ndjson:3"},
		{events.Location{Line: 3}, "line 3"},
		{events.Location{Pointer: "/seq"}, "/seq"},
		{events.Location{File: "r.json", Pointer: "/evidence/0"}, "r.json /evidence/0"},
		{events.Location{Seq: 42}, "stream seq 42"},
		{events.Location{File: "j", Line: 2, Pointer: "/payload/message", Seq: 9}, "j:2 /payload/message stream seq 9"},
	}
	for _, tt := range tests {
		if got := tt.at.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.at, got, tt.want)
		}
	}
}

func TestProblemString(t *testing.T) {
	p := events.Problem{Code: events.BrokenLink, At: events.Location{File: "j", Line: 2, Pointer: "/parent_hash"},
		Reason: "parent_hash is not the previous entry's entry_hash", Expected: "aa", Actual: "bb"}
	want := `broken_link at j:2 /parent_hash: parent_hash is not the previous entry's entry_hash (expected "aa", got "bb")`
	if got := p.String(); got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
	if got := (events.Problem{Code: events.EmptyInput, Reason: "nothing"}).String(); got != "empty_input: nothing" {
		t.Errorf("String() = %q", got)
	}
	// Only the side that is known is printed: an untrusted host has no
	// one expected value.
	for p, want := range map[events.Problem]string{
		{Code: events.UntrustedHost, Reason: "not trusted", Actual: "node:x"}: `untrusted_host: not trusted (got "node:x")`,
		{Code: events.Gap, Reason: "missing", Expected: "3"}:                  `gap: missing (expected "3")`,
	} {
		if got := p.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
	// A hostile value is quoted and cut, so it cannot flood or forge a log line.
	long := events.Problem{Code: events.MetadataMismatch, Reason: "r", Expected: "x", Actual: strings.Repeat("A", 500) + "\nforged line"}
	got := long.String()
	if strings.Contains(got, "\n") || strings.Contains(got, strings.Repeat("A", 81)) || !strings.Contains(got, "…") {
		t.Errorf("String() does not cut and quote a long actual value: %q", got)
	}
}

func TestRefusal(t *testing.T) {
	if events.NewRefusal(nil) != nil {
		t.Fatal("NewRefusal(nil) is not nil")
	}
	ps := []events.Problem{
		{Code: events.SchemaInvalid, At: events.Location{Pointer: "/outcome"}, Reason: "schema: bad"},
		{Code: events.SignatureInvalid, At: events.Location{Pointer: "/signature"}, Reason: "bad signature"},
	}
	ref := events.NewRefusal(ps)
	if ref.Code != events.SchemaInvalid || ref.At.Pointer != "/outcome" || len(ref.Problems) != 2 || ref.Omitted != 0 {
		t.Fatalf("refusal %+v", ref)
	}
	if want := "schema_invalid at /outcome: schema: bad (and 1 more problem(s))"; ref.Error() != want {
		t.Errorf("Error() = %q, want %q", ref.Error(), want)
	}
	var err error = fmt.Errorf("verify r.json: %w", ref)
	if !errors.Is(err, events.SchemaInvalid) {
		t.Error("errors.Is(wrapped, SchemaInvalid) = false")
	}
	if errors.Is(err, events.SignatureInvalid) {
		t.Error("errors.Is matches a code that is listed but is not the refusal's code")
	}
	if !ref.Has(events.SignatureInvalid) || ref.Has(events.RefMismatch) {
		t.Error("Has does not report the listed codes")
	}
	var got *events.Refusal
	if !errors.As(err, &got) || got != ref {
		t.Error("errors.As does not find the refusal")
	}
	if events.SchemaInvalid.Error() != "schema_invalid" {
		t.Errorf("Code.Error() = %q", events.SchemaInvalid.Error())
	}

	raw, err := json.Marshal(ref)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Code     string `json:"code"`
		Problems []struct {
			Code string `json:"code"`
			At   struct {
				Pointer string `json:"pointer"`
			} `json:"at"`
		} `json:"problems"`
	}
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if back.Code != "schema_invalid" || len(back.Problems) != 2 || back.Problems[1].At.Pointer != "/signature" {
		t.Errorf("JSON form %s", raw)
	}
}

func TestRefusalBoundsProblems(t *testing.T) {
	ps := make([]events.Problem, events.MaxProblems+7)
	for i := range ps {
		ps[i] = events.Problem{Code: events.CorruptEntry, At: events.Location{Line: i + 1}, Reason: "x"}
	}
	ref := events.NewRefusal(ps)
	if len(ref.Problems) != events.MaxProblems || ref.Omitted != 7 {
		t.Fatalf("%d problems, %d omitted", len(ref.Problems), ref.Omitted)
	}

	var coll events.Problems
	for _, p := range ps {
		coll.Add(p)
	}
	if coll.Len() != len(ps) {
		t.Errorf("Len() = %d, want %d", coll.Len(), len(ps))
	}
	ref = coll.Refusal()
	if len(ref.Problems) != events.MaxProblems || ref.Omitted != 7 || ref.Problems[0].At.Line != 1 {
		t.Errorf("Problems.Refusal(): %d problems, %d omitted", len(ref.Problems), ref.Omitted)
	}
	var empty events.Problems
	if empty.Refusal() != nil || empty.Len() != 0 {
		t.Error("empty Problems makes a refusal")
	}
}

func TestRefusalTextsClipped(t *testing.T) {
	long := strings.Repeat("é", events.MaxTextBytes) // 2 bytes each
	r := events.NewRefusal([]events.Problem{{Code: events.SchemaInvalid, Reason: long, Expected: long, Actual: "short"}})
	for _, s := range []string{r.Reason, r.Problems[0].Reason, r.Problems[0].Expected} {
		if len(s) > events.MaxTextBytes+32 || !strings.Contains(s, "bytes more)") || !utf8.ValidString(s) {
			t.Fatalf("not clipped at a rune boundary: %d bytes, %q…", len(s), s[len(s)-40:])
		}
	}
	if r.Problems[0].Actual != "short" {
		t.Fatalf("short text changed: %q", r.Problems[0].Actual)
	}
}

func TestDocumentCode(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want events.Code
	}{
		{"", events.EmptyInput},
		{" \n\t\r", events.EmptyInput},
		// No JSON white space: no value either, but not an empty one.
		{"\f", events.MalformedJSON},
		{"\v", events.MalformedJSON},
		{"\u00a0", events.MalformedJSON},
		{"\u2003", events.MalformedJSON},
		{"{", events.MalformedJSON},
		{`{"a":1,"a":2}`, events.MalformedJSON},
		{"\xef\xbb\xbf{}", events.MalformedJSON},
		{"{}\n{}", events.MalformedJSON},
		{`"\ud800"`, events.MalformedJSON},
		{"null", events.SchemaInvalid},
		{"[1]", events.SchemaInvalid},
		{` {"room":"room:a"} `, events.SchemaInvalid},
	} {
		if got := events.DocumentCode([]byte(c.doc)); got != c.want {
			t.Errorf("DocumentCode(%q) = %s, want %s", c.doc, got, c.want)
		}
	}
}
