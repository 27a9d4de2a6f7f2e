// Package validate decides whether a journal entry, a journal, a capsule or
// an execution record is valid, and if not, exactly why: JSON Schema with
// format assertions and ECMA-262 patterns, then the rules beyond the schema
// from seed 000, seed 004 and docs/design.md ("Chain rules", "Record
// rules"). Every failure is an *events.Refusal whose code is the first
// failing rule in the order of docs/design.md, "Refusal codes and their order",
// and whose Problems list every rule that failed.
//
// The offline verifier (publisher verify), the publisher's gate and the
// subscriber all call this package, so they cannot disagree.
package validate
