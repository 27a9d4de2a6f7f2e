package room

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/roompub/roompub/events"
)

// ErrStreamReplaced is wrapped by Serve's error when the room stream it
// remembers is gone or is not the one it saw: another creation time, or
// fewer messages than it held (docs/secure-mode.md, "The stream"). It is
// events.StreamReplaced, so the error's text starts with the code
// "stream_replaced" and errors.Is matches either. Serve then creates
// nothing; ServeOptions.AcceptStream lifts the refusal.
var ErrStreamReplaced error = events.StreamReplaced

// DefaultStreamsBucket is the JetStream key-value bucket in which Serve,
// connected to a server or cluster of its own (ServeOptions.ServerURL),
// remembers each room stream it served: key = stream name, value = a
// StreamMark as JSON. With the embedded server the mark is a file in the
// store directory instead (StreamMarkFile).
const DefaultStreamsBucket = "ROOMPUB_STREAMS"

// StreamMark is what Serve remembers of its room stream between runs:
// the stream's creation time (StreamInfo.Created) and the first and last
// sequence it saw (StreamInfo.State). A room stream never shrinks (Discard
// New, no limits, deletes and purges denied), so a stream with another
// creation time, a first sequence above FirstSeq or a last sequence below
// LastSeq is not the stream Serve saw.
type StreamMark struct {
	Stream  string    `json:"stream"`
	Created time.Time `json:"created"`
	// FirstSeq and LastSeq are State.FirstSeq and State.LastSeq; both 0
	// for a stream that never held a message.
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
}

// String is "created <RFC 3339 UTC>, last sequence <n>", as the
// stream_replaced errors print a mark.
func (m StreamMark) String() string {
	return fmt.Sprintf("created %s, last sequence %d", m.Created.UTC().Format(time.RFC3339Nano), m.LastSeq)
}

// StreamMarkFile is the file in an embedded server's store directory that
// holds the StreamMark of room stream name: roompub-stream-<name>.json.
func StreamMarkFile(storeDir, name string) string {
	return filepath.Join(storeDir, "roompub-stream-"+name+".json")
}

// ReadStreamMarkFile reads the StreamMark in file path (StreamMarkFile):
// nil, and no error, when there is no such file.
func ReadStreamMarkFile(path string) (*StreamMark, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream mark %s: %w", path, err)
	}
	var m StreamMark
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("stream mark %s: %w", path, err)
	}
	return &m, nil
}
