package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
)

func TestCanonicalizeSingleEntryVector(t *testing.T) {
	raw := readRef(t, "capsule-journals", "single-entry.json")
	want := readRef(t, "capsule-journals", "single-entry.canonical.txt")
	got, err := events.Canonicalize(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Canonicalize(single-entry.json) =\n%s\nwant (single-entry.canonical.txt)\n%s", got, want)
	}
	again, err := events.Canonicalize(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, want) {
		t.Fatalf("canonical form is not a fixed point:\n%s", again)
	}
}

func TestCanonicalizeReferenceJournalLinesAreCanonical(t *testing.T) {
	for i, line := range refJournalLines(t) {
		got, err := events.Canonicalize(line)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if !bytes.Equal(got, line) {
			t.Errorf("line %d is not a fixed point of Canonicalize:\n got %s\nwant %s", i+1, got, line)
		}
	}
}

func TestCanonicalize(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"keys sorted", `{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"nested keys sorted", `{"z":{"y":1,"x":[{"b":0,"a":0}]}}`, `{"z":{"x":[{"a":0,"b":0}],"y":1}}`},
		{"insignificant whitespace", " {\t\"a\" :\r\n[ 1 , 2 ] }\n", `{"a":[1,2]}`},
		{"1.0 is 1", `{"n":1.0}`, `{"n":1}`},
		{"exponent expanded", `{"n":1e2}`, `{"n":100}`},
		{"big exponent kept", `{"n":1e21}`, `{"n":1e+21}`},
		{"small exponent", `{"n":1E-7}`, `{"n":1e-7}`},
		{"negative zero", `{"n":-0}`, `{"n":0}`},
		{"shortest double", `{"n":0.30000000000000004}`, `{"n":0.30000000000000004}`},
		{"score -1.5", `{"score":-1.5}`, `{"score":-1.5}`},
		{"\\u0041 unescaped", `{"s":"\u0041"}`, `{"s":"A"}`},
		{"\\u00e9 as UTF-8", `{"s":"\u00e9"}`, "{\"s\":\"\u00e9\"}"},
		{"surrogate pair as UTF-8", `{"s":"\ud83d\ude00"}`, "{\"s\":\"\U0001F600\"}"},
		{"solidus unescaped", `{"s":"a\/b"}`, `{"s":"a/b"}`},
		{"control escaped lowercase", `{"s":"\u001F"}`, `{"s":"\u001f"}`},
		{"short escapes kept", `{"s":"\u0009\u000a\"\\"}`, `{"s":"\t\n\"\\"}`},
		{"U+2028 raw", `{"s":"\u2028"}`, "{\"s\":\"\u2028\"}"},
		{"HTML characters raw", `{"s":"<&>"}`, `{"s":"<&>"}`},
		{"raw snowman kept", "{\"m\":\"snow \u2603\"}", "{\"m\":\"snow \u2603\"}"},
		{"literals", `{"t":true,"f":false,"n":null}`, `{"f":false,"n":null,"t":true}`},
		// RFC 8785 §3.2.3 sorts by UTF-16 code units, not code points:
		// U+1F600 (D83D DE00) sorts before U+FB01, although its UTF-8 is larger.
		{"keys by UTF-16 code units", `{"\ufb01":1,"\ud83d\ude00":2,"\u20ac":3}`, "{\"\u20ac\":3,\"\U0001F600\":2,\"\ufb01\":1}"},
		{"top-level scalar", ` 42 `, `42`},
		{"empty object", `{ }`, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.Canonicalize([]byte(tt.in))
			if err != nil {
				t.Fatalf("Canonicalize(%q): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Fatalf("Canonicalize(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestCanonicalizeRefusesNonStrictJSON(t *testing.T) {
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"only whitespace", " \n\t"},
		{"duplicate key", `{"a":1,"a":2}`},
		{"duplicate key by escape", `{"a":1,"\u0061":2}`},
		{"nested duplicate key", `{"x":{"k":1,"k":1}}`},
		{"lone high surrogate", `{"a":"\ud800"}`},
		{"lone low surrogate", `{"a":"\udc00"}`},
		{"high surrogate then non-surrogate", `{"a":"\ud800\u0041"}`},
		{"invalid UTF-8 in string", "{\"a\":\"\xff\"}"},
		{"invalid UTF-8 outside string", "{\"a\":1}\xc3"},
		{"overlong UTF-8", "{\"a\":\"\xc0\xaf\"}"},
		{"trailing garbage", `{"a":1}x`},
		{"two values", `{"a":1} {"b":2}`},
		{"missing value", `{"a":}`},
		{"trailing comma in object", `{"a":1,}`},
		{"trailing comma in array", `[1,]`},
		{"leading zero", `{"a":01}`},
		{"number out of range", `{"a":1e400}`},
		{"NaN", `{"a":NaN}`},
		{"hex number", `{"a":0x10}`},
		{"plus sign", `{"a":+1}`},
		{"bad literal", `{"a":tru}`},
		{"single quotes", `{'a':1}`},
		{"raw control character in string", "{\"a\":\"tab\there\"}"},
		{"bad escape", `{"a":"\x41"}`},
		{"short unicode escape", `{"a":"\u41"}`},
		{"unterminated", `{"a":"b`},
		{"missing colon", `{"a" 1}`},
		{"missing comma", `{"a":1 "b":2}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := events.Canonicalize([]byte(tt.in))
			if !errors.Is(err, events.ErrNotJSON) {
				t.Fatalf("Canonicalize(%q) = %q, %v; want an error wrapping ErrNotJSON", tt.in, out, err)
			}
		})
	}
}

// TestCanonicalizeNamesARawControlCharacter: a control character left
// unescaped in a string (a NUL, say) is named with its byte, where the
// JCS library said "Unterminated string literal".
func TestCanonicalizeNamesARawControlCharacter(t *testing.T) {
	for in, want := range map[string]string{
		"{\"a\":\"x\x00y\"}":     "not strict JSON: control character U+0000 unescaped inside a string at byte 7",
		"{\"a\\\"\x1f\":1}":      "not strict JSON: control character U+001F unescaped inside a string at byte 5",
		"{\"a\":\"\\\\\"}\n\x01": "not strict JSON: ",
	} {
		_, err := events.Canonicalize([]byte(in))
		if err == nil || !strings.HasPrefix(err.Error(), want) || (!strings.Contains(want, "U+") && strings.Contains(err.Error(), "U+")) {
			t.Errorf("Canonicalize(%q): %v; want %q", in, err, want)
		}
	}
}

func TestDecodeObject(t *testing.T) {
	obj, canon, err := events.DecodeObject([]byte(`{ "seq": 1.0, "big": 12345678901234567890, "s": "\u0041" }`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"big":12345678901234567000,"s":"A","seq":1}`; string(canon) != want {
		t.Errorf("canonical = %s, want %s", canon, want)
	}
	if n, ok := obj["seq"].(json.Number); !ok || n != "1" {
		t.Errorf(`obj["seq"] = %#v, want json.Number("1")`, obj["seq"])
	}
	if s, ok := obj["s"].(string); !ok || s != "A" {
		t.Errorf(`obj["s"] = %#v, want "A"`, obj["s"])
	}

	for _, in := range []string{`{"a":1,"a":1}`, ``, ` `, `{"a":"\ud800"}`} {
		if _, _, err := events.DecodeObject([]byte(in)); !errors.Is(err, events.ErrNotJSON) || errors.Is(err, events.ErrNotObject) {
			t.Errorf("DecodeObject(%q) error = %v, want ErrNotJSON", in, err)
		}
	}
	// Strict JSON, only not an object: its own error.
	for _, in := range []string{`[1,2]`, `"s"`, `42`, `null`, ` true `} {
		if _, _, err := events.DecodeObject([]byte(in)); !errors.Is(err, events.ErrNotObject) || errors.Is(err, events.ErrNotJSON) {
			t.Errorf("DecodeObject(%q) error = %v, want ErrNotObject", in, err)
		}
	}
}

func TestCanonicalWithout(t *testing.T) {
	obj, _, err := events.DecodeObject([]byte(`{"c":3,"b":{"y":2,"x":1},"a":"\u2603","entry_hash":"h"}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := events.CanonicalWithout(obj, "entry_hash", "absent")
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"a\":\"\u2603\",\"b\":{\"x\":1,\"y\":2},\"c\":3}"; string(got) != want {
		t.Errorf("CanonicalWithout = %s, want %s", got, want)
	}
	if _, ok := obj["entry_hash"]; !ok || len(obj) != 4 {
		t.Errorf("CanonicalWithout modified its argument: %v", obj)
	}
	all, err := events.CanonicalWithout(obj)
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"a\":\"\u2603\",\"b\":{\"x\":1,\"y\":2},\"c\":3,\"entry_hash\":\"h\"}"; string(all) != want {
		t.Errorf("CanonicalWithout() = %s, want %s", all, want)
	}
}
