package events_test

import (
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
