package reader

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
)

func signedCheckpoint(t testing.TB, roomID string, size uint64, root [32]byte) *checkpoint.Checkpoint {
	t.Helper()
	k, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := checkpoint.NewNoteSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	n, err := checkpoint.Sign(s, roomID, size, root)
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.ParseUnverified(n)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCheckpointState: Save then Load and Rooms give the checkpoint back;
// a later Save replaces it and leaves no temporary file; a file edited by
// hand, or one holding another room's checkpoint, is refused.
func TestCheckpointState(t *testing.T) {
	s := &CheckpointState{Dir: filepath.Join(t.TempDir(), "state")}
	if c, err := s.Load("room:a"); c != nil || err != nil {
		t.Fatalf("empty state: %v, %v", c, err)
	}
	if rooms, err := s.Rooms(); rooms != nil || err != nil {
		t.Fatalf("no directory: %v, %v", rooms, err)
	}
	a5 := signedCheckpoint(t, "room:a/b.c", 5, [32]byte{5})
	a9 := signedCheckpoint(t, "room:a/b.c", 9, [32]byte{9})
	b1 := signedCheckpoint(t, "room:b", 1, [32]byte{1})
	for _, c := range []*checkpoint.Checkpoint{a5, b1, a9} {
		if err := s.Save(c); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Load("room:a/b.c")
	if err != nil || got.Size != 9 || got.Root != a9.Root || got.Signer != a9.Signer || string(got.Note) != string(a9.Note) {
		t.Fatalf("load: %+v, %v", got, err)
	}
	rooms, err := s.Rooms()
	if err != nil || len(rooms) != 2 {
		t.Fatalf("rooms %v, %v", rooms, err)
	}
	des, _ := os.ReadDir(s.Dir)
	if len(des) != 2 {
		t.Errorf("%d files in the state directory, want 2", len(des))
	}
	// Another room's file under this room's name.
	if err := os.Rename(s.path("room:b"), s.path("room:c")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load("room:c"); !errors.Is(err, ErrState) {
		t.Errorf("a file of room:b as room:c: %v", err)
	}
	if _, err := s.Rooms(); !errors.Is(err, ErrState) {
		t.Errorf("rooms with a misnamed file: %v", err)
	}
	// Edited by hand: the size no longer the note's.
	b, _ := os.ReadFile(s.path("room:a/b.c"))
	if err := os.WriteFile(s.path("room:a/b.c"), []byte(string(b[:len(b)-2])+`, "x": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load("room:a/b.c"); !errors.Is(err, ErrState) {
		t.Errorf("edited file: %v", err)
	}
}

// FuzzReadStored: no state file content makes readStored panic, and what
// it accepts says what its note says.
func FuzzReadStored(f *testing.F) {
	c := signedCheckpoint(f, "room:fuzz", 3, [32]byte{3})
	f.Add([]byte(`{"room":"room:fuzz","size":3,"root":"` + hexRoot(c.Root) + `","signer":"` + c.Signer + `","note":` + quoteJSON(string(c.Note)) + `}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"note":"room:x\n1\nAAAA\n\n— a b\n"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := readStored(b)
		if err != nil {
			return
		}
		n, err := checkpoint.ParseUnverified(got.Note)
		if err != nil || n.Room != got.Room || n.Size != got.Size || n.Root != got.Root {
			t.Fatalf("accepted %q: %+v (%v)", b, got, err)
		}
	})
}

func quoteJSON(s string) string {
	b := []byte{'"'}
	for _, r := range s {
		switch r {
		case '\n':
			b = append(b, '\\', 'n')
		case '"', '\\':
			b = append(b, '\\', byte(r))
		default:
			b = append(b, string(r)...)
		}
	}
	return string(append(b, '"'))
}

// TestCheckpointStateOrigin: a checkpoint in the origin form (signed
// under the room's origin, Signer the node id Parse mapped it to) is kept
// and loaded back with its node id.
func TestCheckpointStateOrigin(t *testing.T) {
	k, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	const roomID, deployment = "room:a+b", "evidence.example.org/roompub"
	origin := checkpoint.RoomOrigin(deployment, roomID)
	s, err := checkpoint.NewNamedNoteSigner(k, origin)
	if err != nil {
		t.Fatal(err)
	}
	n, err := checkpoint.Sign(s, origin, 7, [32]byte{7})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := checkpoint.NewTrust(k.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Parse(n, roomID, tr)
	if err != nil {
		t.Fatal(err)
	}
	st := &CheckpointState{Dir: t.TempDir()}
	if err := st.Save(c); err != nil {
		t.Fatal(err)
	}
	got, err := st.Load(roomID)
	if err != nil || got.Room != roomID || got.Origin != origin || got.Signer != k.NodeID() || got.Size != 7 {
		t.Fatalf("load: %+v, %v", got, err)
	}
}
