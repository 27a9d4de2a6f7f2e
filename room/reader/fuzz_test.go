package reader_test

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/witness"
)

// offlineBundle builds, without a server, a valid bundle of one record
// (a batch of one) in a room whose tree holds only it, and a deployment
// log whose only entry is that room's checkpoint; no witness cosigns it
// (a policy of 0 witnesses accepts it). It returns the bundle, the trust
// and the policy.
func offlineBundle(t testing.TB) ([]byte, *checkpoint.Trust, *witness.Policy) {
	t.Helper()
	key := events.NewHostKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize)))
	const roomID, origin = "room:fuzz", "evidence.example.org/roompub"
	subject := room.Subjects{}.Records(roomID)
	data := []byte(`{"record":1}`)
	content := checkpoint.ContentHash(data)
	rs, err := checkpoint.NewNamedNoteSigner(key, checkpoint.RoomOrigin(origin, roomID))
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Sign(rs, checkpoint.RoomOrigin(origin, roomID), 1, checkpoint.LeafHash(roomID, subject, content))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := checkpoint.NewNamedNoteSigner(key, origin)
	if err != nil {
		t.Fatal(err)
	}
	d, err := checkpoint.Sign(ds, origin, 1, checkpoint.EntryLeaf(c))
	if err != nil {
		t.Fatal(err)
	}
	ev := &reader.Evidence{Room: roomID, Subject: subject, StreamSeq: 1, Position: checkpoint.RecordPosition(0),
		Attestation: checkpoint.Attest(key, roomID, subject, checkpoint.RecordPosition(0), content), Data: data,
		RoomProof:       &checkpoint.TlogProof{Extra: checkpoint.LeafData(roomID, subject, content), Checkpoint: c},
		DeploymentProof: &checkpoint.TlogProof{Checkpoint: d}}
	b, err := ev.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	trust, err := checkpoint.NewTrust(key.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	if trust, err = trust.WithOrigin(origin); err != nil {
		t.Fatal(err)
	}
	p, err := witness.NewPolicy(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b, trust, p
}

// FuzzParseEvidence: ParseEvidence and VerifyEvidence never panic;
// ParseEvidence's errors wrap ErrBadEvidence and what it accepts writes
// back to a bundle it reads the same; a bundle VerifyEvidence accepts
// says what the one valid bundle says (only stream_seq, which nothing
// signs, and the JSON's layout may differ).
func FuzzParseEvidence(f *testing.F) {
	good, trust, policy := offlineBundle(f)
	want, err := reader.ParseEvidence(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(bytes.Replace(good, []byte(`"room"`), []byte(`"Room"`), 1))
	f.Add(bytes.Replace(good, []byte(`"room":`), []byte(`"room":"room:x","room":`), 1))
	f.Add([]byte(`{"format":"roompub-evidence/v1"}`))
	f.Add([]byte(`{"room":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := reader.ParseEvidence(data)
		if err != nil {
			if !errors.Is(err, reader.ErrBadEvidence) {
				t.Fatalf("error %v does not wrap ErrBadEvidence", err)
			}
		} else {
			again, err := e.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			e2, err := reader.ParseEvidence(again)
			if err != nil {
				t.Fatalf("accepted %q, refused it written back: %v", data, err)
			}
			if same, _ := e2.MarshalJSON(); !bytes.Equal(same, again) {
				t.Fatalf("accepted %q, which reads back differently", data)
			}
		}
		if _, err := reader.VerifyEvidence(data, trust, policy); err != nil {
			var ee *reader.EvidenceError
			if !errors.As(err, &ee) {
				t.Fatalf("VerifyEvidence error %v is no EvidenceError", err)
			}
			return
		}
		e.StreamSeq = want.StreamSeq
		got, _ := e.MarshalJSON()
		if wantB, _ := want.MarshalJSON(); !bytes.Equal(got, wantB) {
			t.Fatalf("VerifyEvidence accepted another bundle: %s", got)
		}
	})
}
