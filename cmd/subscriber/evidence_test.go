package main

import (
	"crypto/rand"
	"strings"
	"testing"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
)

// TestEvidenceInstanceForm: an --instance that is not an environment/ref
// is refused before anything is read (exit 2), naming the form; a reader
// asked for "qmail-01" would otherwise find no record and print an empty
// result as if the instance had none.
func TestEvidenceInstanceForm(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"qmail-01", "env/x", " environment:x", "environment:x ", "environment:", "Environment:x", "environment:a b", ":x", ""} {
		status, _, stderr := invoke(t, "", "evidence", "--server", "nats://127.0.0.1:1", "--instance", bad)
		if status != config.ExitUsage || !strings.Contains(stderr, "is not an environment/ref") || !strings.Contains(stderr, "e.g. environment:qmail-01") {
			t.Errorf("--instance %q: status %d, %s", bad, status, stderr)
		}
	}
	status, _, stderr := invoke(t, "", "evidence", "--server", "nats://127.0.0.1:1", "--instance", "environment:qmail-01")
	if status == config.ExitOK || strings.Contains(stderr, "environment/ref") {
		t.Errorf("a good --instance, no server: status %d, %s", status, stderr)
	}
}

// TestEvidenceEmptyRoomSaid: evidence of an instance in a room that holds
// no message (a mistyped --room) says so on stderr beside the "0 verified
// records" (it printed that alone, exit 0, where audit says EMPTY); of a
// room with messages, it does not.
func TestEvidenceEmptyRoomSaid(t *testing.T) {
	pub, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	url, _, _, _ := attestedServer(t, pub) // messages in room:cli, no record of the instance
	for _, c := range []struct {
		room string
		said bool
	}{{"room:typo", true}, {cliRoom, false}} {
		status, _, stderr := invoke(t, "", "evidence", "--server", url, "--instance", "environment:qmail-01", "--room", c.room)
		said := strings.Contains(stderr, "subscriber: "+c.room+" holds no message on stream ROOMS: is --room right?")
		if status != config.ExitOK || !strings.Contains(stderr, "0 verified record(s) observed on environment:qmail-01") || said != c.said {
			t.Errorf("--room %s: status %d, said empty %v (want %v)\n%s", c.room, status, said, c.said, stderr)
		}
	}
}
