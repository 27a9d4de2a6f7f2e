package validate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// TestRecordRefusals makes a record for each record refusal code: the
// members of verified.json, signed with a fresh test key, then changed and
// re-sealed so that exactly the intended rule fails.
func TestRecordRefusals(t *testing.T) {
	key, priv := testKey(1)
	other, otherPriv := testKey(2)
	sig43 := "sha256:" + strings.Repeat("A", 43)

	tests := []struct {
		name  string
		raw   func(t *testing.T) []byte
		opts  []validate.Option
		wants []want
	}{
		{
			name: "valid: verified",
			raw:  func(t *testing.T) []byte { return signed(t, recordMembers(t), key) },
		},
		{
			name: "valid: cancelled, no instance, no evidence",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["outcome"] = "cancelled"
				delete(m, "environment/ref")
				m["evidence"] = []any{}
				return signed(t, m, key)
			},
		},
		{
			name: "valid: refused.json re-signed",
			raw: func(t *testing.T) []byte {
				obj, _, err := events.DecodeObject(readRef(t, "execution-records", "refused.json"))
				if err != nil {
					t.Fatal(err)
				}
				return signed(t, obj, key)
			},
		},
		{
			name: "valid: room/id with dots, colons and slashes",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["room/id"] = "room:a.b:c/d\u00e9\u2603"
				return signed(t, m, key)
			},
		},
		{
			name:  "malformed_json: not JSON",
			raw:   func(t *testing.T) []byte { s := signed(t, recordMembers(t), key); return s[:len(s)-1] },
			wants: []want{{events.MalformedJSON, 0, ""}},
		},
		{
			name: "malformed_json: duplicate key",
			raw: func(t *testing.T) []byte {
				return append([]byte(`{"outcome":"verified",`), signed(t, recordMembers(t), key)[1:]...)
			},
			wants: []want{{events.MalformedJSON, 0, ""}},
		},
		{
			name: "malformed_json: invalid UTF-8",
			raw: func(t *testing.T) []byte {
				return replaceOnce(t, signed(t, recordMembers(t), key), "qmail-open-relay-01-execution", "qmail-open-relay-01-\xffexecution")
			},
			wants: []want{{events.MalformedJSON, 0, ""}},
		},
		{
			name:  "malformed_json: an array",
			raw:   func(t *testing.T) []byte { return []byte(`[` + string(signed(t, recordMembers(t), key)) + `]`) },
			wants: []want{{events.MalformedJSON, 0, ""}},
		},
		{
			name: "schema_invalid: outcome not in the enum",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["outcome"] = "probably"
				return signed(t, m, key)
			},
			wants: []want{{events.SchemaInvalid, 0, "/outcome"}},
		},
		{
			name: "schema_invalid: recorded-at not a date-time",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["recorded-at"] = "2026-09-31T12:15:00Z"
				return signed(t, m, key)
			},
			wants: []want{{events.SchemaInvalid, 0, "/recorded-at"}},
		},
		{
			name: "schema_invalid: command output inline",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["stdout"] = "220 mail ESMTP"
				return signed(t, m, key)
			},
			wants: []want{{events.SchemaInvalid, 0, ""}},
		},
		{
			name: "schema_invalid: refused without refusal/code",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["outcome"] = "refused"
				return signed(t, m, key)
			},
			wants: []want{{events.SchemaInvalid, 0, ""}},
		},
		{
			name: "schema_invalid: step/id not a name",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				evidence(m, 2)["step/id"] = "Restart_QMail"
				return signed(t, m, key)
			},
			wants: []want{{events.SchemaInvalid, 0, "/evidence/2/step~1id"}},
		},
		{
			name: "ref_mismatch",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["host/node-id"] = key.NodeID()
				m["execution/ref"] = "corpus-task-pack-execution:sha256:" + strings.Repeat("B", 43)
				return seal(t, m, priv, events.ExecutionDomain, true)
			},
			wants: []want{{events.RefMismatch, 0, "/execution~1ref"}},
		},
		{
			name: "digest_mismatch",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["review/digest"] = sig43
				return signed(t, m, key)
			},
			wants: []want{{events.DigestMismatch, 0, "/review~1digest"}},
		},
		{
			name: "digest_mismatch: every pair",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["proposal/digest"], m["review/digest"], m["decision/digest"] = sig43, sig43, sig43
				return signed(t, m, key)
			},
			wants: []want{{events.DigestMismatch, 0, "/proposal~1digest"}, {events.DigestMismatch, 0, "/review~1digest"}, {events.DigestMismatch, 0, "/decision~1digest"}},
		},
		{
			name: "host_mismatch",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["host/node-id"] = other.NodeID()
				return seal(t, m, priv, events.ExecutionDomain, false)
			},
			wants: []want{{events.HostMismatch, 0, "/host~1node-id"}},
		},
		{
			name: "signature_invalid: signed by another key",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["host/node-id"] = key.NodeID()
				obj := decode(t, seal(t, m, otherPriv, events.ExecutionDomain, false))
				obj["signature"].(map[string]any)["key/public"] = key.DIDKey()
				return canonical(t, obj)
			},
			wants: []want{{events.SignatureInvalid, 0, "/signature"}},
		},
		{
			name: "signature_invalid: another domain",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["host/node-id"] = key.NodeID()
				return seal(t, m, priv, "corpus-reasoning-experiment-proposal.v1", false)
			},
			wants: []want{{events.SignatureInvalid, 0, "/signature"}},
		},
		{
			name: "signature_invalid: over a changed member",
			raw: func(t *testing.T) []byte {
				obj := decode(t, signed(t, recordMembers(t), key))
				obj["idempotency/key"] = "qmail-open-relay-01-execution-2"
				// Keep execution/ref right, so only the signature is stale.
				rec, err := events.ParseRecord(canonical(t, obj))
				if err != nil {
					t.Fatal(err)
				}
				obj["execution/ref"] = rec.ComputedRef()
				return canonical(t, obj)
			},
			wants: []want{{events.SignatureInvalid, 0, "/signature"}},
		},
		{
			name: "foreign_evidence: another instance",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				evidence(m, 1)["environment/ref"] = "environment:qmail-02"
				return signed(t, m, key)
			},
			wants: []want{{events.ForeignEvidence, 0, "/evidence/1/environment~1ref"}},
		},
		{
			name: "foreign_evidence: no instance but evidence",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["outcome"] = "unknown"
				delete(m, "environment/ref")
				return signed(t, m, key)
			},
			wants: []want{{events.ForeignEvidence, 0, "/evidence/0"}, {events.ForeignEvidence, 0, "/evidence/1"}, {events.ForeignEvidence, 0, "/evidence/2"}},
		},
		{
			name:  "untrusted_host: another host trusted",
			raw:   func(t *testing.T) []byte { return signed(t, recordMembers(t), key) },
			opts:  []validate.Option{validate.WithTrustedHosts(other.NodeID())},
			wants: []want{{events.UntrustedHost, 0, "/host~1node-id"}},
		},
		{
			name:  "untrusted_host: no host trusted",
			raw:   func(t *testing.T) []byte { return signed(t, recordMembers(t), key) },
			opts:  []validate.Option{validate.WithTrustedHosts()},
			wants: []want{{events.UntrustedHost, 0, "/host~1node-id"}},
		},
		{
			name: "valid: trusted host",
			raw:  func(t *testing.T) []byte { return signed(t, recordMembers(t), key) },
			opts: []validate.Option{validate.WithTrustedHosts(other.NodeID(), key.NodeID())},
		},
		// Order: the first failure decides the code; all are listed.
		{
			name: "a trusted host id on a record signed by another key is host_mismatch",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["host/node-id"] = other.NodeID()
				return seal(t, m, priv, events.ExecutionDomain, false)
			},
			opts:  []validate.Option{validate.WithTrustedHosts(other.NodeID())},
			wants: []want{{events.HostMismatch, 0, "/host~1node-id"}},
		},
		{
			name: "digest_mismatch before foreign_evidence and untrusted_host",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["decision/digest"] = sig43
				evidence(m, 0)["environment/ref"] = "environment:qmail-00"
				return signed(t, m, key)
			},
			opts:  []validate.Option{validate.WithTrustedHosts(other.NodeID())},
			wants: []want{{events.DigestMismatch, 0, "/decision~1digest"}, {events.ForeignEvidence, 0, "/evidence/0/environment~1ref"}, {events.UntrustedHost, 0, "/host~1node-id"}},
		},
		{
			name: "every rule at once",
			raw: func(t *testing.T) []byte {
				m := recordMembers(t)
				m["outcome"] = "probably"
				m["execution/ref"] = "corpus-task-pack-execution:sha256:" + strings.Repeat("C", 43)
				m["proposal/digest"] = sig43
				m["host/node-id"] = other.NodeID()
				evidence(m, 2)["environment/ref"] = "environment:qmail-03"
				return seal(t, m, priv, "wrong-domain", true)
			},
			opts: []validate.Option{validate.WithTrustedHosts(key.NodeID())},
			wants: []want{
				{events.SchemaInvalid, 0, "/outcome"},
				{events.RefMismatch, 0, "/execution~1ref"},
				{events.DigestMismatch, 0, "/proposal~1digest"},
				{events.HostMismatch, 0, "/host~1node-id"},
				{events.SignatureInvalid, 0, "/signature"},
				{events.ForeignEvidence, 0, "/evidence/2/environment~1ref"},
				{events.UntrustedHost, 0, "/host~1node-id"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newValidator(t, tt.opts...)
			raw := tt.raw(t)
			at := events.Location{File: "record.json", Seq: 12}
			rec, err := v.Record(raw, at)
			ref := expectRefusal(t, err, tt.wants...)
			if ref != nil && (ref.At.File != "record.json" || ref.At.Seq != 12) {
				t.Errorf("refusal at %+v lost the caller's location", ref.At)
			}
			if (rec == nil) != (len(tt.wants) > 0 && tt.wants[0].code == events.MalformedJSON) {
				t.Errorf("record returned: %v", rec != nil)
			}
			if rec != nil && len(tt.wants) == 0 && rec.ExecutionRef() != rec.ComputedRef() {
				t.Errorf("accepted a record whose execution/ref is not its own")
			}
		})
	}
}

func decode(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	obj, _, err := events.DecodeObject(raw)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

func canonical(t *testing.T, obj map[string]any) []byte {
	t.Helper()
	out, err := events.CanonicalWithout(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSealMatchesSignRecord checks the tests' independent signer against
// events.SignRecord, so the refusal tests above build what they claim.
func TestSealMatchesSignRecord(t *testing.T) {
	key, priv := testKey(3)
	m := recordMembers(t)
	m["host/node-id"] = key.NodeID()
	if got, want := seal(t, m, priv, events.ExecutionDomain, false), signed(t, m, key); !bytes.Equal(got, want) {
		t.Fatalf("seal and SignRecord differ:\n%s\n%s", got, want)
	}
}

func TestRecordEvidenceValues(t *testing.T) {
	v := newValidator(t)
	key, priv := testKey(4)
	m := recordMembers(t)
	m["host/node-id"] = key.NodeID()
	m["review/digest"] = "sha256:" + strings.Repeat("D", 43)
	m["execution/ref"] = "corpus-task-pack-execution:sha256:" + strings.Repeat("E", 43)
	raw := seal(t, m, priv, events.ExecutionDomain, true)
	rec, err := v.Record(raw, events.Location{})
	ref := expectRefusal(t, err, want{events.RefMismatch, 0, "/execution~1ref"}, want{events.DigestMismatch, 0, "/review~1digest"})
	if p := ref.Problems[0]; p.Expected != rec.ComputedRef() || p.Actual != m["execution/ref"] {
		t.Errorf("ref_mismatch expected %q actual %q", p.Expected, p.Actual)
	}
	if p := ref.Problems[1]; p.Expected != "sha256:-wZwDPaemdSvfdPbI3S8uRNxpVHyDBJEXL9P-n9Ny7A" || p.Actual != m["review/digest"] {
		t.Errorf("digest_mismatch expected %q actual %q", p.Expected, p.Actual)
	}
}

// The record schema's patterns are ECMA-262: \s there includes U+00A0,
// U+2028 and U+FEFF, which Go's RE2 \s does not (docs/design.md, "Execution record").
func TestRecordPatternsAreECMA262(t *testing.T) {
	re2 := regexp.MustCompile(`^room:[^\s]+$`)
	key, _ := testKey(5)
	v := newValidator(t)
	for _, tt := range []struct{ name, room string }{
		{"NBSP", "room:qmail\u00a0open-relay"},
		{"LINE SEPARATOR", "room:qmail\u2028open-relay"},
		{"BOM", "room:qmail\ufeffopen-relay"},
		{"IDEOGRAPHIC SPACE", "room:qmail\u3000open-relay"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !re2.MatchString(tt.room) {
				t.Fatalf("RE2 refuses %q too; the case does not show the difference", tt.room)
			}
			m := recordMembers(t)
			m["room/id"] = tt.room
			_, err := v.Record(signed(t, m, key), events.Location{})
			ref := expectRefusal(t, err, want{events.SchemaInvalid, 0, "/room~1id"})
			if !strings.Contains(ref.Reason, "pattern") {
				t.Errorf("reason %q does not name the pattern", ref.Reason)
			}
		})
	}
	m := recordMembers(t)
	m["room/id"] = "room:a b"
	_, err := v.Record(signed(t, m, key), events.Location{})
	expectRefusal(t, err, want{events.SchemaInvalid, 0, "/room~1id"})
}

// The same bytes always give the same refusal, though the schema validator
// walks members in map order.
func TestRecordRefusalIsDeterministic(t *testing.T) {
	key, _ := testKey(6)
	m := recordMembers(t)
	for _, k := range []string{"zz", "aa", "mm", "qq", "bb"} {
		m[k] = "x"
	}
	m["outcome"] = "probably"
	m["room/id"] = "room:a b"
	evidence(m, 0)["extra"] = 1
	evidence(m, 0)["more"] = 2
	raw := signed(t, m, key)
	v := newValidator(t)
	var first []byte
	for i := range 30 {
		_, err := v.Record(raw, events.Location{})
		var ref *events.Refusal
		if !errors.As(err, &ref) {
			t.Fatal(err)
		}
		js, err := json.Marshal(ref)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = js
			if ref.At.Pointer != "" || ref.Problems[0].Reason != "schema: additional properties 'aa', 'bb', 'mm', 'qq', 'zz' not allowed (keyword additionalProperties)" {
				t.Errorf("first problem %s", ref.Problems[0])
			}
			continue
		}
		if !bytes.Equal(js, first) {
			t.Fatalf("run %d refused differently:\n%s\n%s", i, js, first)
		}
	}
}

func TestValidatorOptions(t *testing.T) {
	key, _ := testKey(7)
	if _, err := validate.New(validate.WithTrustedHosts("node:did:key:nope", key.NodeID(), key.DIDKey())); !errors.Is(err, validate.ErrInvalidOption) {
		t.Errorf("bad trusted hosts: %v, want ErrInvalidOption", err)
	} else if n := strings.Count(err.Error(), "trusted host"); n != 2 {
		t.Errorf("error reports %d of the 2 bad ids: %v", n, err)
	}
	if _, err := validate.New(validate.WithSchemaFS(nil)); !errors.Is(err, validate.ErrInvalidOption) {
		t.Errorf("nil schema FS: %v, want ErrInvalidOption", err)
	}

	v := newValidator(t)
	if v.ChecksTrust() || v.TrustedHosts() != nil {
		t.Error("the default validator checks host trust")
	}
	other, _ := testKey(8)
	tv := newValidator(t, validate.WithTrustedHosts(other.NodeID()), validate.WithTrustedHosts(key.NodeID()))
	got := tv.TrustedHosts()
	want := []string{key.NodeID(), other.NodeID()}
	if want[0] > want[1] {
		want[0], want[1] = want[1], want[0]
	}
	if !tv.ChecksTrust() || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("TrustedHosts() = %v, want %v", got, want)
	}
	none := newValidator(t, validate.WithTrustedHosts())
	if !none.ChecksTrust() || len(none.TrustedHosts()) != 0 {
		t.Error("WithTrustedHosts() with no ids does not trust nobody")
	}
}
