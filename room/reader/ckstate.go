package reader

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/roompub/roompub/checkpoint"
)

// ErrState is wrapped by CheckpointState's errors about a file that is
// not what Save writes.
var ErrState = errors.New("checkpoint state")

// CheckpointState is a directory that keeps, per room, the last checkpoint
// a subscriber verified, so the next read can tell a rolled-back
// or forked copy of the room: its newest checkpoint must be at least as
// large and consistent with the stored one. One directory belongs to one
// deployment (its rooms are named by room id only); a reader whose trust
// would not have verified a kept checkpoint (another deployment's, in a
// shared directory) ignores it and leaves it in place (foreignKept). A
// room's file is
// "<hex SHA-256 of the room id>.checkpoint.json", written by Save with an
// atomic rename. Methods are safe for one process at a time.
type CheckpointState struct {
	Dir string
}

// stateFileSuffix ends every room's state file.
const stateFileSuffix = ".checkpoint.json"

// storedCheckpoint is a state file: the signed note and, for people, what
// it says.
type storedCheckpoint struct {
	Room   string `json:"room"`
	Size   uint64 `json:"size"`
	Root   string `json:"root"`
	Signer string `json:"signer"`
	Note   string `json:"note"`
}

func (s *CheckpointState) path(roomID string) string {
	sum := sha256.Sum256([]byte(roomID))
	return filepath.Join(s.Dir, hex.EncodeToString(sum[:])+stateFileSuffix)
}

// Load returns roomID's stored checkpoint, or nil when there is none. The
// note is parsed again (not its signature: it was verified before it was
// stored) and must say what the file says; errors wrap ErrState or are
// the file system's.
func (s *CheckpointState) Load(roomID string) (*checkpoint.Checkpoint, error) {
	p := s.path(roomID)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c, err := readStored(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrState, p, err)
	}
	if c.Room != roomID {
		return nil, fmt.Errorf("%w: %s holds a checkpoint of %q, not %q", ErrState, p, c.Room, roomID)
	}
	return c, nil
}

func readStored(b []byte) (*checkpoint.Checkpoint, error) {
	var sc storedCheckpoint
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sc); err != nil {
		return nil, err
	}
	c, err := checkpoint.ParseUnverified([]byte(sc.Note))
	if err != nil {
		return nil, err
	}
	// A checkpoint in the origin form is signed under its origin's name:
	// the node id that signed it is the file's word (it was verified when
	// saved, as the rest of the file).
	signer := c.Signer
	if c.Origin != c.Room && signer == c.Origin {
		signer = sc.Signer
	}
	if c.Room != sc.Room || c.Size != sc.Size || hexRoot(c.Root) != sc.Root || signer != sc.Signer {
		return nil, errors.New("the note does not say what the file says")
	}
	c.Signer = signer
	return c, nil
}

// Save stores c as its room's checkpoint, replacing the file atomically
// (a temporary file, fsync, rename, fsync of the directory), creating the
// directory if needed.
func (s *CheckpointState) Save(c *checkpoint.Checkpoint) error {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(storedCheckpoint{Room: c.Room, Size: c.Size, Root: hexRoot(c.Root), Signer: c.Signer, Note: string(c.Note)}, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(s.Dir, ".checkpoint-*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename there is nothing left to remove
	if _, err = f.Write(append(b, '\n')); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, s.path(c.Room)); err != nil {
		return err
	}
	d, err := os.Open(s.Dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Rooms returns the room ids with a stored checkpoint. Errors wrap
// ErrState for a file Save did not write.
func (s *CheckpointState) Rooms() ([]string, error) {
	des, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, de := range des {
		if de.IsDir() || !strings.HasSuffix(de.Name(), stateFileSuffix) || strings.HasPrefix(de.Name(), ".") {
			continue
		}
		p := filepath.Join(s.Dir, de.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		c, err := readStored(b)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrState, p, err)
		}
		if s.path(c.Room) != p {
			return nil, fmt.Errorf("%w: %s holds a checkpoint of %q", ErrState, p, c.Room)
		}
		out = append(out, c.Room)
	}
	return out, nil
}
