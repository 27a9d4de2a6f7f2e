package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// RecordSchemaVersion is the value of "schema/v" in an execution record v1.
const RecordSchemaVersion = 1

// ExecutionRefPrefix starts every execution/ref (seed 004).
const ExecutionRefPrefix = "corpus-task-pack-execution:sha256:"

// DigestPrefix starts every X/digest (seed 004).
const DigestPrefix = "sha256:"

// Record is one parsed task-pack execution record v1 (seed 004). It is built
// only by ParseRecord, which keeps its RFC 8785 bytes and computes its
// execution/ref and signing payload, so none can drift from the content.
// A Record is immutable and safe for concurrent reads.
type Record struct {
	obj       map[string]any
	canonical []byte
	ref       string
	payload   []byte
}

// ParseRecord parses an execution record. It checks only that raw is strict
// JSON (I-JSON, RFC 7493: no lone surrogates) holding an object; the rules
// are checked by package validate. Errors wrap ErrNotJSON, or ErrNotObject
// for JSON that is not an object (validate refuses either as
// malformed_json).
//
// The record is decoded once: a record already in RFC 8785 form (white
// space around it aside) is decoded in one pass without jcs, and the
// execution/ref preimage and the signing payload are its canonical bytes
// with members cut out, not re-serialised. Records the one-pass decoder
// does not take (see scanCanonicalTree) go through jcs and encoding/json.
func ParseRecord(raw []byte) (*Record, error) {
	if src := string(bytes.Trim(raw, jsonSpace)); utf8.ValidString(src) {
		if obj, members, ok := scanCanonicalTree(src); ok {
			return recordFromCanonical(obj, src, members), nil
		}
	}
	canon, err := Canonicalize(raw)
	if err != nil {
		if HasBOM(raw) {
			return nil, fmt.Errorf("%s (%w)", BOMReason("the record", "a record"), err)
		}
		return nil, err
	}
	if err := objectRequired(canon); err != nil {
		return nil, err
	}
	if obj, members, ok := scanCanonicalTree(string(canon)); ok {
		return recordFromCanonical(obj, string(canon), members), nil
	}
	obj, err := decodeCanonical(canon)
	if err != nil {
		return nil, err
	}
	return newRecord(obj, canon)
}

// jsonSpace is JSON's insignificant white space (RFC 8259 §2), which the
// canonical form drops around the value.
const jsonSpace = " \t\n\r"

// recordFromCanonical builds a record from its canonical text, decoded,
// with its top-level members located.
func recordFromCanonical(obj map[string]any, canon string, members []span) *Record {
	pre := cutMembers(canon, members, "signature", "execution/ref")
	payload := cutMembers(canon, members, "signature")
	return &Record{obj: obj, canonical: []byte(canon), ref: ExecutionRefPrefix + b64(sha256.Sum256(pre)), payload: payload}
}

func newRecord(obj map[string]any, canon []byte) (*Record, error) {
	pre, err := CanonicalWithout(obj, "signature", "execution/ref")
	if err != nil {
		return nil, err
	}
	payload, err := CanonicalWithout(obj, "signature")
	if err != nil {
		return nil, err
	}
	return &Record{obj: obj, canonical: canon, ref: ExecutionRefPrefix + b64(sha256.Sum256(pre)), payload: payload}, nil
}

func b64(sum [32]byte) string { return base64.RawURLEncoding.EncodeToString(sum[:]) }

// IsExecutionRef reports whether s has the form of an execution/ref:
// ExecutionRefPrefix and the unpadded base64url of 32 bytes (seed 004),
// as ComputedRef writes it.
func IsExecutionRef(s string) bool {
	rest, ok := strings.CutPrefix(s, ExecutionRefPrefix)
	if !ok || len(rest) != 43 {
		return false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(rest)
	return err == nil && len(b) == 32
}

// Canonical returns the record's RFC 8785 bytes, the form it is stored in
// (docs/design.md, "Identity, order and duplicates"). The slice must not
// be modified.
func (r *Record) Canonical() []byte { return r.canonical }

// Object returns the decoded record (numbers as json.Number). It is shared:
// callers must not modify it.
func (r *Record) Object() map[string]any { return r.obj }

// ComputedRef is what execution/ref must be: the prefix and the unpadded
// base64url SHA-256 of the canonical record without signature and
// execution/ref (seed 004).
func (r *Record) ComputedRef() string { return r.ref }

// SigningPayload is P of ed25519+domain-v1: the canonical record without
// signature. The slice must not be modified.
func (r *Record) SigningPayload() []byte { return r.payload }

// ContentDigest is "sha256:" + unpadded base64url SHA-256 of the canonical
// bytes: the record's content identity, used for Nats-Msg-Id and for "the
// same bytes again" (docs/design.md, "Identity, order and duplicates").
func (r *Record) ContentDigest() string { return ContentDigestOf(r.canonical) }

// ContentDigestOf is the content digest of a record's RFC 8785 bytes, as
// Record.ContentDigest gives it ("sha256:" and the unpadded base64url of
// their SHA-256), without parsing them: of stored bytes, which are the
// canonical form, it is the stored record's.
func ContentDigestOf(canonical []byte) string { return DigestPrefix + b64(sha256.Sum256(canonical)) }

// Str returns the string member key ("" if absent or not a string).
func (r *Record) Str(key string) string {
	s, _ := r.obj[key].(string)
	return s
}

// Has reports whether member key is present.
func (r *Record) Has(key string) bool { _, ok := r.obj[key]; return ok }

// ExecutionRef is the claimed execution/ref.
func (r *Record) ExecutionRef() string { return r.Str("execution/ref") }

// RoomID is room/id.
func (r *Record) RoomID() string { return r.Str("room/id") }

// RunRef is run/ref.
func (r *Record) RunRef() string { return r.Str("run/ref") }

// DecisionRef is decision/ref.
func (r *Record) DecisionRef() string { return r.Str("decision/ref") }

// IdempotencyKey is idempotency/key.
func (r *Record) IdempotencyKey() string { return r.Str("idempotency/key") }

// Outcome is outcome: verified, verification-failed, refused, cancelled or unknown.
func (r *Record) Outcome() string { return r.Str("outcome") }

// HostNodeID is host/node-id.
func (r *Record) HostNodeID() string { return r.Str("host/node-id") }

// EnvironmentRef is environment/ref, the instance the run used; ok is false
// when the record names none.
func (r *Record) EnvironmentRef() (ref string, ok bool) {
	s, ok := r.obj["environment/ref"].(string)
	return s, ok
}

// Signature is the record's signature object (zero if absent or malformed).
func (r *Record) Signature() Signature {
	m, _ := r.obj["signature"].(map[string]any)
	str := func(k string) string { s, _ := m[k].(string); return s }
	return Signature{Alg: str("alg"), Value: str("value"), KeyPublic: str("key/public")}
}

// EvidenceItem is one member of evidence (seed 004).
type EvidenceItem struct {
	StepID         string `json:"step/id"`
	ArtifactRef    string `json:"artifact-ref"`
	Digest         string `json:"digest"`
	EnvironmentRef string `json:"environment/ref"`
}

// Evidence returns the evidence items; members that are not objects or
// strings read as zero values (the schema refuses such records).
func (r *Record) Evidence() []EvidenceItem {
	arr, _ := r.obj["evidence"].([]any)
	out := make([]EvidenceItem, 0, len(arr))
	for _, it := range arr {
		m, _ := it.(map[string]any)
		str := func(k string) string { s, _ := m[k].(string); return s }
		out = append(out, EvidenceItem{StepID: str("step/id"), ArtifactRef: str("artifact-ref"), Digest: str("digest"), EnvironmentRef: str("environment/ref")})
	}
	return out
}

// DigestOfRef returns the digest a ref implies: "sha256:" + what follows the
// ref's last ":sha256:" (seed 004: X/digest is sha256: + the suffix of
// X/ref). ok is false when ref holds no sha256 part.
func DigestOfRef(ref string) (digest string, ok bool) {
	i := strings.LastIndex(ref, ":"+strings.TrimSuffix(DigestPrefix, ":")+":")
	if i < 0 {
		return "", false
	}
	return DigestPrefix + ref[i+len(":sha256:"):], true
}

// SignRecord fills host/node-id, execution/ref and signature of the record
// given as members, using key, and returns the signed record. Any existing
// values of those three members are replaced.
func SignRecord(members map[string]any, key *HostKey) (*Record, error) {
	obj := make(map[string]any, len(members)+3)
	for k, v := range members {
		obj[k] = v
	}
	obj["host/node-id"] = key.NodeID()
	delete(obj, "signature")
	delete(obj, "execution/ref")
	pre, err := CanonicalWithout(obj)
	if err != nil {
		return nil, err
	}
	obj["execution/ref"] = ExecutionRefPrefix + b64(sha256.Sum256(pre))
	payload, err := CanonicalWithout(obj)
	if err != nil {
		return nil, err
	}
	obj["signature"] = map[string]any{
		"alg":        SignatureAlg,
		"value":      key.sign(ExecutionDomain, payload),
		"key/public": key.DIDKey(),
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	return ParseRecord(raw)
}
