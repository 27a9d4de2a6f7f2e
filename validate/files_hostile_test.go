package validate_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// TestVerifyPathHostileFiles: what `publisher verify` makes of hostile
// files: each is refused with a code, nothing panics, and a
// directory without a journal is a usage error, not a refusal.
func TestVerifyPathHostileFiles(t *testing.T) {
	v, err := validate.New()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cases := []struct {
		name string
		data string
		kind string
		code events.Code
	}{
		{"empty file", "", "", events.EmptyInput}, // neither kind
		{"byte-order mark", "\ufeff{\"schema\":\"capsule-envelope/v1\"}\n", validate.KindJournal, events.CorruptEntry},
		{"CRLF line (schema fails first)", "{\"a\":1}\r\n", validate.KindJournal, events.InvalidEntry},
		{"no final newline", "{\"a\":1}", validate.KindJournal, events.TruncatedTail},
		{"deep nesting", strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "\n", validate.KindJournal, events.CorruptEntry},
		{"NUL bytes", "\x00\x00\n", validate.KindJournal, events.CorruptEntry},
		{"invalid UTF-8", "{\"a\":\"\xc3\x28\"}\n", validate.KindJournal, events.NonCanonical},
		{"record: 1e400", `{"schema/v":1e400,"room/id":"room:x"}`, validate.KindExecution, events.MalformedJSON},
		{"record: duplicate keys", `{"schema/v":1,"schema/v":1}`, validate.KindExecution, events.MalformedJSON},
		{"record: lone surrogate", `{"schema/v":1,"room/id":"room:\udc00"}`, validate.KindExecution, events.MalformedJSON},
		{"record: wrong types", `{"schema/v":"1","room/id":7,"evidence":{}}`, validate.KindExecution, events.SchemaInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
			if err := os.WriteFile(p, []byte(c.data), 0o644); err != nil {
				t.Fatal(err)
			}
			rep, err := v.VerifyPath(p)
			if err != nil || rep.OK || rep.Kind != c.kind || rep.Code != c.code {
				t.Fatalf("got kind %q code %q ok %v err %v; want %q %q", rep.Kind, rep.Code, rep.OK, err, c.kind, c.code)
			}
		})
	}
	if _, err := v.VerifyPath(t.TempDir()); err == nil {
		t.Fatal("a directory without a journal must be a usage error")
	}
}
