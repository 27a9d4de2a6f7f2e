// Package validate decides whether a journal entry, a journal, a capsule or
// an execution record is valid, and if not, exactly why: JSON Schema with
// format assertions and ECMA-262 patterns, then the rules beyond the schema
// from seed 000, seed 004 and DESIGN.md. Every failure is an
// *events.Refusal whose code is the first failing rule in DESIGN.md's order
// and whose Problems list every rule that failed.
//
// The offline verifier (publisher verify), the publisher's gate and the
// subscriber all call this package, so they cannot disagree.
package validate
