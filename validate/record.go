package validate

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/roompub/roompub/events"
)

// digestPairs are the X/ref and X/digest members that must agree (seed 004:
// X/digest is "sha256:" + the suffix of X/ref).
var digestPairs = [...][2]string{
	{"proposal/ref", "proposal/digest"},
	{"review/ref", "review/digest"},
	{"decision/ref", "decision/digest"},
}

// Record verifies an execution record given as raw JSON. On success it
// returns the parsed record and nil. Otherwise the error is an
// *events.Refusal whose code is the first failure in the order of
// docs/design.md, "Refusal codes and their order"
// (malformed_json, schema_invalid, ref_mismatch, digest_mismatch,
// host_mismatch, signature_invalid, foreign_evidence, untrusted_host) and
// whose Problems list every rule that failed; the record is returned too
// when it could be parsed. Empty input (only white space) is empty_input.
// The stream-side rules are the gate's.
func (v *Validator) Record(raw []byte, at events.Location) (*events.Record, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, events.NewRefusal([]events.Problem{{Code: events.EmptyInput, At: at, Reason: "no JSON value: the record is empty"}})
	}
	rec, err := events.ParseRecord(raw)
	if err != nil {
		return nil, events.NewRefusal([]events.Problem{{Code: events.MalformedJSON, At: at, Reason: err.Error()}})
	}
	if ps := v.CheckRecord(rec, at); len(ps) > 0 {
		return rec, events.NewRefusal(ps)
	}
	return rec, nil
}

// ErrNotStoredForm is returned by StoredRecord for a record that passes its
// own rules but is not stored as a room's records are.
var ErrNotStoredForm = errors.New("not this room's record in its canonical form")

// StoredRecord judges data, a message on roomID's record subject (at its
// stream sequence), as the gate and the readers count stored records for
// the relation rules: every rule of Record (its *events.Refusal when one
// fails), then roomID's record stored in its RFC 8785 form (else
// ErrNotStoredForm). A record written around the gate in another form
// must not block a genuine one.
func (v *Validator) StoredRecord(data []byte, at events.Location, roomID string) (*events.Record, error) {
	rec, err := v.Record(data, at)
	if err != nil {
		return rec, err
	}
	if rec.RoomID() != roomID || !bytes.Equal(data, rec.Canonical()) {
		return rec, ErrNotStoredForm
	}
	return rec, nil
}

// CheckRecord applies every record rule but malformed_json to a parsed
// record and returns the problems in check order.
//
// With the embedded record schemas, a record whose decoded members
// certainly satisfy them (recordShapeValid) skips jsonschema; any other
// record is checked by jsonschema, which finds and words the problems.
func (v *Validator) CheckRecord(rec *events.Record, at events.Location) []events.Problem {
	return v.checkRecord(rec, at, v.schemas.fastRecord)
}

// checkRecord is CheckRecord, with the record fast check in front of
// jsonschema when fast is set.
func (v *Validator) checkRecord(rec *events.Record, at events.Location, fast bool) []events.Problem {
	ptr := func(p string) events.Location { l := at; l.Pointer = p; return l }
	// The signature is verified in line, not on a goroutine of its own
	// while the schema runs: on 2 cores with the server fsyncing, that made
	// the gate's record path slower (make bench records ratio 0.46 and 0.57
	// with it, 0.55 and 0.65 without, alternating runs).
	sig := rec.Signature()
	var problems []events.Problem
	if !fast || !recordShapeValid(rec.Object()) {
		problems = v.schemas.check(true, rec.Object(), events.SchemaInvalid, at)
	}

	if claimed := rec.ExecutionRef(); claimed != rec.ComputedRef() {
		problems = append(problems, events.Problem{Code: events.RefMismatch, At: ptr("/execution~1ref"),
			Reason:   "execution/ref is not the SHA-256 of the canonical record without signature and execution/ref",
			Expected: rec.ComputedRef(), Actual: claimed})
	}
	for _, pair := range digestPairs {
		ref, digest := rec.Str(pair[0]), rec.Str(pair[1])
		want, ok := events.DigestOfRef(ref)
		if !ok || digest != want {
			if !ok {
				want = "a digest derived from " + pair[0]
			}
			problems = append(problems, events.Problem{Code: events.DigestMismatch, At: ptr("/" + escape(pair[1])),
				Reason: pair[1] + " does not match " + pair[0], Expected: want, Actual: digest})
		}
	}
	if want := events.NodeIDPrefix + sig.KeyPublic; rec.HostNodeID() != want {
		problems = append(problems, events.Problem{Code: events.HostMismatch, At: ptr("/host~1node-id"),
			Reason: "host/node-id is not the signing key", Expected: want, Actual: rec.HostNodeID()})
	}
	if err := events.VerifySignature(sig, events.ExecutionDomain, rec.SigningPayload()); err != nil {
		reason := "ed25519+domain-v1 signature over the canonical record without signature does not verify"
		if !errors.Is(err, events.ErrBadSignature) || err.Error() != events.ErrBadSignature.Error() {
			reason += ": " + err.Error()
		}
		problems = append(problems, events.Problem{Code: events.SignatureInvalid, At: ptr("/signature"), Reason: reason})
	}
	env, hasEnv := rec.EnvironmentRef()
	for i, item := range rec.Evidence() {
		if !hasEnv {
			problems = append(problems, events.Problem{Code: events.ForeignEvidence, At: ptr("/evidence/" + strconv.Itoa(i)),
				Reason: "a record without environment/ref carries no evidence", Actual: item.EnvironmentRef})
			continue
		}
		if item.EnvironmentRef != env {
			problems = append(problems, events.Problem{Code: events.ForeignEvidence, At: ptr("/evidence/" + strconv.Itoa(i) + "/environment~1ref"),
				Reason: "evidence observed on another instance than the record's", Expected: env, Actual: item.EnvironmentRef})
		}
	}
	if v.trust != nil && !v.trust[rec.HostNodeID()] {
		problems = append(problems, events.Problem{Code: events.UntrustedHost, At: ptr("/host~1node-id"),
			Reason: "the host is not trusted here", Actual: rec.HostNodeID()})
	}
	return problems
}

func escape(token string) string { return pointer([]string{token})[1:] }
