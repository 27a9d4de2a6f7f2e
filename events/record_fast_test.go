package events_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/gowebpki/jcs"

	"github.com/roompub/roompub/events"
)

// compareRecordPaths fails t when ParseRecord differs from the general
// path (jcs, encoding/json, CanonicalWithout) in any observable: error,
// canonical bytes, decoded object, execution/ref, signing payload.
func compareRecordPaths(t *testing.T, raw []byte) {
	t.Helper()
	got, gotErr := events.ParseRecord(raw)
	want, wantErr := events.ParseRecordGeneral(raw)
	if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
		t.Fatalf("ParseRecord(%q) error %v, general path %v", raw, gotErr, wantErr)
	}
	if gotErr != nil {
		if events.RecordTakesOnePass(raw) {
			t.Fatalf("one-pass path takes %q, which the general path refuses", raw)
		}
		return
	}
	if !bytes.Equal(got.Canonical(), want.Canonical()) || !reflect.DeepEqual(got.Object(), want.Object()) ||
		got.ComputedRef() != want.ComputedRef() || !bytes.Equal(got.SigningPayload(), want.SigningPayload()) {
		t.Fatalf("records of %q differ:\n%q %s %q\n%q %s %q", raw, got.Canonical(), got.ComputedRef(), got.SigningPayload(),
			want.Canonical(), want.ComputedRef(), want.SigningPayload())
	}
	if events.RecordTakesOnePass(raw) {
		canon, err := jcs.Transform(raw)
		if err != nil || !bytes.Equal(canon, bytes.Trim(raw, " \t\n\r")) {
			t.Fatalf("one-pass path takes %q, which jcs canonicalises to %q (%v)", raw, canon, err)
		}
	}
}

func recordSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, name := range []string{"verified.json", "refused.json", "foreign-evidence.json"} {
		raw := readRef(tb, "execution-records", name)
		canon, err := events.Canonicalize(raw)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, raw, canon, append(bytes.Clone(canon), '\n'), append([]byte(" \t"), canon...))
	}
	key, _ := seededKey(3)
	rec, err := events.SignRecord(members(tb, readRef(tb, "execution-records", "verified.json")), key)
	if err != nil {
		tb.Fatal(err)
	}
	return append(out, rec.Canonical())
}

// TestRecordOnePassPath: the reference records, indented and canonical,
// give the general path's record, and the canonical ones take one pass.
func TestRecordOnePassPath(t *testing.T) {
	for _, raw := range recordSeeds(t) {
		compareRecordPaths(t, raw)
	}
	canon, err := events.Canonicalize(readRef(t, "execution-records", "verified.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !events.RecordTakesOnePass(canon) || !events.RecordTakesOnePass(append(canon, '\n')) {
		t.Fatal("a canonical record takes the general path")
	}
	for _, s := range []string{`{}`, `{"signature":{}}`, `{"a":[],"b":[[]],"c":[{"d":1}]}`, `{"a":[1,"x",true,null]}`,
		`{"b":1,"a":2}`, `{"a":[1,]}`, `{"a":[1}`, `{"a":"\u0041"}`, "{\"a\":1}\v", "\u00a0{\"a\":1}", `[1]`, ` `, ``,
		`{"execution/ref":"x","signature":{"a":1},"z":[1]}`, `{"signature":1}`} {
		compareRecordPaths(t, []byte(s))
	}
}

// FuzzRecordOnePass holds ParseRecord's one-pass path against the general
// path on every input.
func FuzzRecordOnePass(f *testing.F) {
	for _, raw := range recordSeeds(f) {
		f.Add(raw)
	}
	for _, s := range []string{
		`{"a":[{"b":[]}],"c":-0.5}`,
		`{"a":"b","execution/ref":"x","signature":{"alg":"y"},"z":[1,{"q":null}]}`,
		"{\n  \"signature\": {\"value\": \"v\"},\n  \"execution/ref\": \"r\",\n  \"a\": [true, 1e21]\n}\n",
		`{"execution/ref":"r"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		compareRecordPaths(t, raw)
	})
}
