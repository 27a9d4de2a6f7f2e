package events_test

import (
	"bytes"
	"crypto/sha256"
	"io"
	"testing"

	"github.com/roompub/roompub/events"
)

func BenchmarkCanonicalize(b *testing.B) {
	raw := readRef(b, "execution-records", "verified.json")
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := events.Canonicalize(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseEntry is the hashing half of verifying an entry: canonical
// form, decode, and entry_hash preimage.
func BenchmarkParseEntry(b *testing.B) {
	line := refJournalLines(b)[1]
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := events.ParseEntry(line); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSignRecord(b *testing.B) {
	key, _ := seededKey(1)
	m := members(b, readRef(b, "execution-records", "verified.json"))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := events.SignRecord(m, key); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseEntryGeneral is ParseEntry's general path alone (jcs,
// encoding/json, the preimage re-serialised from the map): what every
// line cost before the fast path, and what lines it declines still cost.
func BenchmarkParseEntryGeneral(b *testing.B) {
	line := refJournalLines(b)[1]
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := events.ParseEntryGeneral(line); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEntryHashGeneral is the entry_hash preimage the general way:
// re-serialise the map without entry_hash and canonicalise it.
func BenchmarkEntryHashGeneral(b *testing.B) {
	e, err := events.ParseEntry(refJournalLines(b)[1])
	if err != nil {
		b.Fatal(err)
	}
	obj := e.Object()
	b.ReportAllocs()
	for b.Loop() {
		pre, err := events.CanonicalWithout(obj, "entry_hash")
		if err != nil {
			b.Fatal(err)
		}
		sha256.Sum256(pre)
	}
}

// BenchmarkVerifySignature is the ed25519+domain-v1 check of one record.
func BenchmarkVerifySignature(b *testing.B) {
	rec, err := events.ParseRecord(readRef(b, "execution-records", "verified.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := events.VerifySignature(rec.Signature(), events.ExecutionDomain, rec.SigningPayload()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseRecord decodes a canonical record and computes its ref and
// signing payload; BenchmarkParseRecordGeneral is the previous way.
func BenchmarkParseRecord(b *testing.B) {
	benchParseRecord(b, events.ParseRecord)
}

func BenchmarkParseRecordGeneral(b *testing.B) {
	benchParseRecord(b, events.ParseRecordGeneral)
}

func benchParseRecord(b *testing.B, parse func([]byte) (*events.Record, error)) {
	raw, err := events.Canonicalize(readRef(b, "execution-records", "verified.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyJournal verifies 10,000 chained entries without entry
// rules: parse, hash and chain, in parallel (VerifyJournal) and line after
// line (the previous VerifyJournal).
func BenchmarkVerifyJournal(b *testing.B) {
	benchVerifyJournal(b, events.VerifyJournal)
}

func BenchmarkVerifyJournalSequential(b *testing.B) {
	benchVerifyJournal(b, events.VerifyJournalSequential)
}

func benchVerifyJournal(b *testing.B, verify func(io.Reader, string, *events.CapsuleMeta, events.EntryCheck) (events.JournalResult, error)) {
	data := journal(chainLines(b, 10_000, nil)...)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if res, err := verify(bytes.NewReader(data), "j", nil, nil); err != nil || res.Valid != 10_000 {
			b.Fatal(res, err)
		}
	}
}
