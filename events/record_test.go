package events_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
)

func TestReferenceRecordRefs(t *testing.T) {
	for _, name := range []string{"verified.json", "refused.json", "foreign-evidence.json"} {
		t.Run(name, func(t *testing.T) {
			rec, err := events.ParseRecord(readRef(t, "execution-records", name))
			if err != nil {
				t.Fatal(err)
			}
			if rec.ComputedRef() != rec.ExecutionRef() {
				t.Errorf("computed execution/ref %s, claimed %s", rec.ComputedRef(), rec.ExecutionRef())
			}
			// Independently: prefix + base64url(sha256(JCS(record without signature and execution/ref))).
			pre, err := events.CanonicalWithout(rec.Object(), "signature", "execution/ref")
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(pre)
			if want := events.ExecutionRefPrefix + base64.RawURLEncoding.EncodeToString(sum[:]); rec.ComputedRef() != want {
				t.Errorf("ComputedRef() = %s, want %s", rec.ComputedRef(), want)
			}
			sum = sha256.Sum256(rec.Canonical())
			if want := "sha256:" + base64.RawURLEncoding.EncodeToString(sum[:]); rec.ContentDigest() != want {
				t.Errorf("ContentDigest() = %s, want %s", rec.ContentDigest(), want)
			}
			payload, err := events.CanonicalWithout(rec.Object(), "signature")
			if err != nil {
				t.Fatal(err)
			}
			if string(rec.SigningPayload()) != string(payload) {
				t.Error("SigningPayload() is not the canonical record without signature")
			}
		})
	}
}

func TestRecordAccessors(t *testing.T) {
	rec, err := events.ParseRecord(readRef(t, "execution-records", "verified.json"))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct{ name, got, want string }{
		{"ExecutionRef", rec.ExecutionRef(), "corpus-task-pack-execution:sha256:PEaap8mlrUCWgXaNN_ov8LMrV0U6McBdaRiHIbFzaS0"},
		{"RoomID", rec.RoomID(), "room:qmail-open-relay"},
		{"RunRef", rec.RunRef(), "operator-task-run:run-01"},
		{"DecisionRef", rec.DecisionRef(), "corpus-experiment-chair-decision:sha256:oA28VKhsifc4ODhCXQhTYA5qikyleR46w0_GrRwpceE"},
		{"IdempotencyKey", rec.IdempotencyKey(), "qmail-open-relay-01-execution"},
		{"Outcome", rec.Outcome(), "verified"},
		{"HostNodeID", rec.HostNodeID(), "node:did:key:" + refHostDIDKey},
		{"Str(absent)", rec.Str("absent"), ""},
		{"Str(non-string)", rec.Str("schema/v"), ""},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if env, ok := rec.EnvironmentRef(); !ok || env != "environment:qmail-01" {
		t.Errorf("EnvironmentRef() = %q, %v", env, ok)
	}
	if !rec.Has("candidate") || rec.Has("refusal/code") {
		t.Error("Has is wrong")
	}
	sig := rec.Signature()
	if sig.Alg != events.SignatureAlg || sig.KeyPublic != refHostDIDKey || len(sig.Value) != 86 {
		t.Errorf("Signature() = %+v", sig)
	}
	ev := rec.Evidence()
	if len(ev) != 3 {
		t.Fatalf("%d evidence items, want 3", len(ev))
	}
	want := events.EvidenceItem{StepID: "apply-control-patch", ArtifactRef: "object-store:sha256:ui6nSmNbL1vpWX7_ICDHlKFmtZDBoBLMpyS_00_Tr2Q",
		Digest: "sha256:ui6nSmNbL1vpWX7_ICDHlKFmtZDBoBLMpyS_00_Tr2Q", EnvironmentRef: "environment:qmail-01"}
	if ev[1] != want {
		t.Errorf("Evidence()[1] = %+v, want %+v", ev[1], want)
	}

	refused, err := events.ParseRecord(readRef(t, "execution-records", "refused.json"))
	if err != nil {
		t.Fatal(err)
	}
	if env, ok := refused.EnvironmentRef(); ok || env != "" {
		t.Errorf("refused.json EnvironmentRef() = %q, %v; want none", env, ok)
	}
	if len(refused.Evidence()) != 0 {
		t.Error("refused.json has evidence")
	}
}

func TestRecordAccessorsOnMalformedMembers(t *testing.T) {
	rec, err := events.ParseRecord([]byte(`{"signature":"nope","evidence":[1,{"digest":2,"step/id":"s"}],"environment/ref":7}`))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Signature() != (events.Signature{}) {
		t.Errorf("Signature() = %+v, want zero", rec.Signature())
	}
	ev := rec.Evidence()
	if len(ev) != 2 || ev[0] != (events.EvidenceItem{}) || ev[1] != (events.EvidenceItem{StepID: "s"}) {
		t.Errorf("Evidence() = %+v", ev)
	}
	if _, ok := rec.EnvironmentRef(); ok {
		t.Error("a non-string environment/ref reads as present")
	}
}

func TestParseRecordRefusesNonObjects(t *testing.T) {
	// A record stays I-JSON: a lone surrogate is not strict JSON in it.
	for _, in := range []string{``, `{"a":1,"a":1}`, `{"a":"\ud800"}`} {
		if _, err := events.ParseRecord([]byte(in)); !errors.Is(err, events.ErrNotJSON) {
			t.Errorf("ParseRecord(%q) error = %v, want ErrNotJSON", in, err)
		}
	}
	for _, in := range []string{`[]`, `1`, `"\u0041"`} {
		if _, err := events.ParseRecord([]byte(in)); !errors.Is(err, events.ErrNotObject) {
			t.Errorf("ParseRecord(%q) error = %v, want ErrNotObject", in, err)
		}
	}
}

// TestParseRecordBOM: a record saved with a byte order mark is no JSON
// (ErrNotJSON), and the error says what the invisible bytes are; the same
// record with CRLF line endings parses (JSON's white space).
func TestParseRecordBOM(t *testing.T) {
	raw := readRef(t, "execution-records", "verified.json")
	_, err := events.ParseRecord(append([]byte{0xef, 0xbb, 0xbf}, raw...))
	if !errors.Is(err, events.ErrNotJSON) || !strings.HasPrefix(err.Error(), "the record starts with a UTF-8 byte order mark (bytes EF BB BF): a record is UTF-8 without one (") {
		t.Errorf("with a byte order mark: %v", err)
	}
	rec, err := events.ParseRecord(bytes.ReplaceAll(raw, []byte("\n"), []byte("\r\n")))
	if err != nil || rec.ComputedRef() != rec.ExecutionRef() {
		t.Errorf("with CRLF: %v", err)
	}
}

func TestDigestOfRef(t *testing.T) {
	tests := []struct {
		ref, want string
		ok        bool
	}{
		{"corpus-experiment:sha256:Z9OINYzXKjCv2n467f8hCPYp0bbqrW6vf1_HGWXLVj0", "sha256:Z9OINYzXKjCv2n467f8hCPYp0bbqrW6vf1_HGWXLVj0", true},
		{"corpus-experiment-review:sha256:-wZw", "sha256:-wZw", true},
		{"a:sha256:x:sha256:y", "sha256:y", true},
		{"sha256:abc", "", false}, // no ":sha256:" separator
		{"corpus-experiment:sha512:abc", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := events.DigestOfRef(tt.ref)
		if got != tt.want || ok != tt.ok {
			t.Errorf("DigestOfRef(%q) = %q, %v; want %q, %v", tt.ref, got, ok, tt.want, tt.ok)
		}
	}
}

// TestIsExecutionRef: the reference records' refs have the form; a wrong
// prefix, length, alphabet or padding does not.
func TestIsExecutionRef(t *testing.T) {
	for _, name := range []string{"verified.json", "refused.json", "foreign-evidence.json"} {
		rec, err := events.ParseRecord(readRef(t, "execution-records", name))
		if err != nil {
			t.Fatal(err)
		}
		if !events.IsExecutionRef(rec.ComputedRef()) {
			t.Errorf("%s: %q", name, rec.ComputedRef())
		}
	}
	good := events.ExecutionRefPrefix + strings.Repeat("A", 42) + "Q"
	if !events.IsExecutionRef(good) {
		t.Errorf("%q", good)
	}
	for _, bad := range []string{"", "garbage", events.ExecutionRefPrefix, good[:len(good)-1], good + "A", good[:len(good)-1] + "=",
		strings.Replace(good, "A", "+", 1), strings.Replace(good, "A", "/", 1), "x" + good, events.ExecutionRefPrefix + strings.Repeat("A", 42) + "B"} {
		if events.IsExecutionRef(bad) {
			t.Errorf("%q taken for an execution/ref", bad)
		}
	}
}
