package validate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"unicode/utf8"

	"github.com/roompub/roompub/schemas"
)

// recordSchemaSHA256 maps each schema file the record schema uses (itself
// and every file its $refs reach) to the SHA-256 of the embedded bytes
// that recordShapeValid encodes. The fast check is used only when every
// one of them, as compiled (the first layer that has the file wins, as in
// fileLoader), has exactly these bytes: a schema directory that overlays
// any of them with other bytes, or a later edit of an embedded file, makes
// every record go to jsonschema.
var recordSchemaSHA256 = map[string]string{
	schemas.RecordFile:                                    "0bd7c9425981f0456b191e201ea37232c2272d9a7da2967109fc933e570febda",
	"operator-task-common.v1.schema.json":                 "9d274c8e586664d3e9987af528df709d6e3475291cbb7332de14fa5809988218",
	"corpus-reasoning-experiment-proposal.v1.schema.json": "e7803438edc2793556b7f400d057d2c7bd59cfbf2d4923d3e9df0a693ec0b68e",
	"corpus-reasoning-experiment-proposal.v2.schema.json": "1262516e14a7979a5d389b75d50a6c4ebe62d486a780861a4fd872fb13a4cf5c",
	"corpus-task-pack-candidate-adoption.v1.schema.json":  "9a9b0edcb24962cc8cc3658f443a7b2826672687d9e95e05b8a00a19de1edaf7",
}

// fastRecordApplies reports whether every schema file the record schema
// uses, compiled from layers, is the one recordShapeValid encodes, and
// the record schema's patterns all have linear matchers.
func fastRecordApplies(layers []fs.FS) bool {
	if recordPatterns == nil {
		return false
	}
	for name, want := range recordSchemaSHA256 {
		found := false
		for _, fsys := range layers {
			data, err := fs.ReadFile(fsys, name)
			if err != nil {
				continue
			}
			sum := sha256.Sum256(data)
			if hex.EncodeToString(sum[:]) != want {
				return false
			}
			found = true
			break
		}
		if !found {
			return false
		}
	}
	return true
}

// The "pattern"s of the record schema and of the $defs it references,
// verbatim (ECMAScript source, as in the schema files).
const (
	patExecutionRef = `^corpus-task-pack-execution:sha256:[A-Za-z0-9_-]{43}$`
	patAdoptionRef  = `^corpus-task-pack-candidate-adoption:sha256:[A-Za-z0-9_-]{43}$`
	patQueryID      = `^query:[^\s]+$`
	patRoomID       = `^room:[^\s]+$`
	patProposalRef  = `^corpus-experiment:sha256:[A-Za-z0-9_-]{43}$`
	patDigest       = `^sha256:[A-Za-z0-9_-]{43}$`
	patReviewRef    = `^corpus-experiment-review:sha256:[A-Za-z0-9_-]{43}$`
	patDecisionRef  = `^corpus-experiment-chair-decision:sha256:[A-Za-z0-9_-]{43}$`
	patPlanRef      = `^operator-task-plan:[^\s]+$`
	patRunRef       = `^operator-task-run:[^\s]+$`
	patEnvRef       = `^[a-z][a-z0-9-]*:[^\s]+$`
	patObjectStore  = `^object-store:sha256:[A-Za-z0-9_-]{43}$`
	patNodeID       = `^node:did:key:[^\s]+$`
	patName         = `^[a-z0-9]+(?:-[a-z0-9]+)*$`           // operator-task-common $defs/name
	patCandRef      = `^[a-z][a-z0-9-]*[:/][^\s]+$`          // proposal v2 $defs/candidate ref
	patProfileRef   = `^operator-task-profile:[^\s]+$`       // proposal v2 $defs/task-pack-target
	patBindingRef   = `^operator-task-local-binding:[^\s]+$` // proposal v2 $defs/task-pack-target
	patSigValue     = `^[A-Za-z0-9_-]{86}$`                  // proposal v1 $defs/signature value
	patKeyPublic    = `^z[A-Za-z0-9]+$`                      // proposal v1 $defs/signature key/public
)

// recordPatterns holds each pattern above compiled by compileLinear, the
// engine ecmaEngine.compile hands jsonschema for them: the same matcher,
// so the same verdict. nil when any pattern is outside the linear class
// (then the fast check is off).
var recordPatterns = compileRecordPatterns()

func compileRecordPatterns() map[string]linearMatcher {
	out := map[string]linearMatcher{}
	for _, p := range []string{
		patExecutionRef, patAdoptionRef, patQueryID, patRoomID, patProposalRef, patDigest, patReviewRef,
		patDecisionRef, patPlanRef, patRunRef, patEnvRef, patObjectStore, patNodeID, patName, patCandRef,
		patProfileRef, patBindingRef, patSigValue, patKeyPublic,
	} {
		m, ok := compileLinear(p)
		if !ok {
			return nil
		}
		out[p] = m
	}
	return out
}

// strRule is a string schema: "type": "string" with a pattern (or none),
// minLength and maxLength (0: absent) in code points, as jsonschema v6
// counts them (utf8.RuneCount).
type strRule struct {
	pattern  string
	min, max int
}

// ok reports whether v is a string that certainly satisfies r.
func (r strRule) ok(v any) bool {
	s, isStr := v.(string)
	if !isStr {
		return false
	}
	if r.min > 0 || r.max > 0 {
		n := utf8.RuneCountInString(s)
		if n < r.min || r.max > 0 && n > r.max {
			return false
		}
	}
	if r.pattern != "" && !recordPatterns[r.pattern].MatchString(s) {
		return false
	}
	return true
}

// recordStrings are the record's top-level string members other than
// recorded-at (a format): each with its rule, required or not.
var recordStrings = map[string]struct {
	rule     strRule
	required bool
}{
	"execution/ref":          {strRule{pattern: patExecutionRef}, true},
	"candidate/adoption-ref": {strRule{pattern: patAdoptionRef, max: 512}, false},
	"query/id":               {strRule{pattern: patQueryID, max: 512}, true},
	"room/id":                {strRule{pattern: patRoomID, max: 512}, true},
	"proposal/ref":           {strRule{pattern: patProposalRef}, true},
	"proposal/digest":        {strRule{pattern: patDigest}, true},
	"review/ref":             {strRule{pattern: patReviewRef}, true},
	"review/digest":          {strRule{pattern: patDigest}, true},
	"decision/ref":           {strRule{pattern: patDecisionRef}, true},
	"decision/digest":        {strRule{pattern: patDigest}, true},
	"plan/ref":               {strRule{pattern: patPlanRef, max: 512}, true},
	"plan/digest":            {strRule{pattern: patDigest}, true},
	"run/ref":                {strRule{pattern: patRunRef, max: 512}, true},
	"environment/ref":        {strRule{pattern: patEnvRef, max: 512}, false},
	"result/digest":          {strRule{pattern: patDigest}, true},
	"host/node-id":           {strRule{pattern: patNodeID, max: 512}, true},
	"idempotency/key":        {strRule{min: 1, max: 256}, true},
}

// recordOutcomes is the outcome enum.
var recordOutcomes = map[string]bool{
	"verified": true, "verification-failed": true, "refused": true, "cancelled": true, "unknown": true,
}

// refusalCodes is operator-task-common $defs/refusalCode (an enum).
var refusalCodes = map[string]bool{
	"package/not-active": true, "package/conformance-missing": true, "package/profile-digest-mismatch": true,
	"operator/binding-lost": true, "local-binding/missing": true, "local-binding/incomplete": true,
	"local-binding/outside-package-ceiling": true, "local-binding/profile-changed": true, "local-binding/conflict": true,
	"local-binding/paused": true, "local-binding/revision-stale": true, "environment/image-mismatch": true,
	"environment/prepared-system-unavailable": true, "environment/runtime-egress-denied": true,
	"environment/impact-class-exceeded": true, "environment/not-contained": true, "deliberation/flow-unavailable": true,
	"capability/missing": true, "capability/revoked": true, "workbench/command-profile-missing": true,
	"workbench/effect-mode-missing": true, "interface/grant-missing": true, "hil/attention-unavailable": true,
	"verifier/unavailable": true, "verifier/effect-mode-missing": true, "rollback/unavailable": true,
	"rollback/destroy-unconfirmed": true, "publication/policy-missing": true, "publication/disabled": true,
	"offer/withdrawal-pending": true, "package/generation-stale": true, "plan/unknown-action-kind": true,
	"plan/outside-profile": true, "plan/first-step-not-observation": true, "plan/recovery-class-not-admitted": true,
	"plan/changed-replay": true, "workbench/patch-outside-policy": true, "interface/lease-lost": true,
	"hil/denied": true, "hil/expired": true, "delegation/missing": true, "delegation/revoked": true,
	"delegation/expired": true, "delegation/substituted": true, "delegation/outside-scope": true,
	"verifier/check-missing": true, "verifier/mutation-not-admitted": true, "verifier/timeout": true,
	"run/cancelled": true, "run/budget-exhausted": true,
}

// recordRequired is the number of members the record schema requires.
const recordRequired = 22

// recordShapeValid reports whether obj (a decoded record: maps, slices,
// strings, json.Number, bools, nil) certainly satisfies the embedded
// record schema and everything it references. false means only "not
// certain": jsonschema decides, and words the problems. Every keyword is
// the schema's, made stricter where jsonschema's reading has edges (const
// 1 written other than "1"; a date-time with a leap second or a
// lower-case 't'): those go to jsonschema.
func recordShapeValid(obj map[string]any) bool {
	required := 0
	for key, val := range obj {
		if r, ok := recordStrings[key]; ok {
			if !r.rule.ok(val) {
				return false
			}
			if r.required {
				required++
			}
			continue
		}
		switch key {
		case "schema/v": // const 1
			if n, ok := val.(json.Number); !ok || n != "1" {
				return false
			}
		case "candidate":
			if !candidateValid(val) {
				return false
			}
		case "target":
			if !targetValid(val) {
				return false
			}
		case "outcome": // enum
			if s, ok := val.(string); !ok || !recordOutcomes[s] {
				return false
			}
		case "evidence":
			if !evidenceValid(val) {
				return false
			}
		case "recorded-at": // type string, format date-time
			if s, ok := val.(string); !ok || !isDateTime(s) {
				return false
			}
		case "signature":
			if !signatureValid(val) {
				return false
			}
		case "refusal/code": // optional; operator-task-common $defs/refusalCode
			if s, ok := val.(string); !ok || !refusalCodes[s] {
				return false
			}
			continue
		default: // additionalProperties false
			return false
		}
		required++
	}
	if required != recordRequired {
		return false
	}
	// allOf: if outcome is refused then refusal/code is required; if it is
	// verified or verification-failed then environment/ref is.
	switch obj["outcome"] {
	case "refused":
		if _, ok := obj["refusal/code"]; !ok {
			return false
		}
	case "verified", "verification-failed":
		if _, ok := obj["environment/ref"]; !ok {
			return false
		}
	}
	return true
}

// membersValid reports whether v is an object with exactly the members
// rules names (all required, additionalProperties false), each certainly
// valid.
func membersValid(v any, rules map[string]func(any) bool) bool {
	m, ok := v.(map[string]any)
	if !ok || len(m) != len(rules) {
		return false
	}
	for key, val := range m {
		ok := rules[key]
		if ok == nil || !ok(val) {
			return false
		}
	}
	return true
}

// candidateRules: proposal v2 $defs/candidate (all four members required,
// additionalProperties false) with the record's allOf, which narrows
// artifact/type to the const "operator-task-experiment-candidate.v1".
var candidateRules = map[string]func(any) bool{
	"artifact/type": func(v any) bool { return v == "operator-task-experiment-candidate.v1" },
	"ref":           strRule{pattern: patCandRef, max: 512}.ok,
	"artifact-ref":  strRule{pattern: patObjectStore}.ok,
	"digest":        strRule{pattern: patDigest}.ok,
}

func candidateValid(v any) bool { return membersValid(v, candidateRules) }

// targetRules: proposal v2 $defs/task-pack-target.
var targetRules = map[string]func(any) bool{
	"task-profile/ref":    strRule{pattern: patProfileRef, max: 512}.ok,
	"task-profile/digest": strRule{pattern: patDigest}.ok,
	"binding/ref":         strRule{pattern: patBindingRef, max: 512}.ok,
}

func targetValid(v any) bool { return membersValid(v, targetRules) }

// signatureRules: proposal v1 $defs/signature.
var signatureRules = map[string]func(any) bool{
	"alg":        func(v any) bool { return v == "ed25519+domain-v1" },
	"value":      strRule{pattern: patSigValue}.ok,
	"key/public": strRule{pattern: patKeyPublic, max: 128}.ok,
}

func signatureValid(v any) bool { return membersValid(v, signatureRules) }

// evidenceItemRules: the record's evidence items; step/id is
// operator-task-common $defs/name.
var evidenceItemRules = map[string]func(any) bool{
	"step/id":         strRule{pattern: patName, min: 1, max: 128}.ok,
	"artifact-ref":    strRule{pattern: patObjectStore}.ok,
	"digest":          strRule{pattern: patDigest}.ok,
	"environment/ref": strRule{pattern: patEnvRef, max: 512}.ok,
}

// evidenceValid: an array of at most 32 evidence items.
func evidenceValid(v any) bool {
	items, ok := v.([]any)
	if !ok || len(items) > 32 {
		return false
	}
	for _, item := range items {
		if !membersValid(item, evidenceItemRules) {
			return false
		}
	}
	return true
}
