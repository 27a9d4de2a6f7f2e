package validate_test

import (
	"bytes"
	"testing"

	"github.com/roompub/roompub/events"
)

func TestSignVerifyRoundTrip(t *testing.T) {
	key, err := events.GenerateHostKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	raw := signed(t, recordMembers(t), key)
	v := newValidator(t)
	rec, err := v.Record(raw, events.Location{})
	expectRefusal(t, err)
	if rec.HostNodeID() != key.NodeID() || rec.Signature().KeyPublic != key.DIDKey() {
		t.Errorf("record names host %s key %s, want %s", rec.HostNodeID(), rec.Signature().KeyPublic, key.NodeID())
	}
	// Pretty-printed, the same record is still valid: the signature is over
	// the canonical form, not the file's bytes.
	var pretty bytes.Buffer
	if err := jsonIndent(&pretty, raw); err != nil {
		t.Fatal(err)
	}
	again, err := v.Record(pretty.Bytes(), events.Location{})
	expectRefusal(t, err)
	if !bytes.Equal(again.Canonical(), rec.Canonical()) || again.ContentDigest() != rec.ContentDigest() {
		t.Error("pretty-printing changed the canonical record")
	}
}

// TestSignedRecordBitFlips flips bits of every byte of a signed record, as
// stored (canonical, every bit) and as pretty-printed files (the lowest
// bit): no single flip may produce a record that validates.
func TestSignedRecordBitFlips(t *testing.T) {
	key, _ := testKey(9)
	v := newValidator(t)
	canonicalRaw := signed(t, recordMembers(t), key)
	var pretty bytes.Buffer
	if err := jsonIndent(&pretty, canonicalRaw); err != nil {
		t.Fatal(err)
	}
	all := []byte{0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80}
	low := []byte{0x01}
	if testing.Short() || raceEnabled {
		all = low
	}
	files := []struct {
		name string
		raw  []byte
		bits []byte
	}{
		{"canonical", canonicalRaw, all},
		{"pretty", pretty.Bytes(), low},
		{"upstream verified.json", readRef(t, "execution-records", "verified.json"), low},
	}
	for _, f := range files {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			if _, err := v.Record(f.raw, events.Location{}); err != nil {
				t.Fatalf("unflipped record refused: %v", err)
			}
			buf := bytes.Clone(f.raw)
			for i := range buf {
				for _, bit := range f.bits {
					buf[i] ^= bit
					if _, err := v.Record(buf, events.Location{}); err == nil {
						t.Fatalf("flipping bit %#02x of byte %d (%q -> %q) was accepted", bit, i, f.raw[i], buf[i])
					}
					buf[i] ^= bit
				}
			}
		})
	}
}
