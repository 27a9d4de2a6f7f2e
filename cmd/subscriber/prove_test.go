package main

import (
	"strings"
	"testing"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
)

// TestProveWhatForm: prove and export refuse, before anything is read
// (exit 2), an --entry that is no entry_hash and a --ref that is no
// execution/ref, naming the form; a lookup of either could match nothing
// and would say so as if the room lacked the message.
func TestProveWhatForm(t *testing.T) {
	t.Parallel()
	hash := strings.Repeat("ab", 32)
	ref := events.ExecutionRefPrefix + strings.Repeat("A", 42) + "Q"
	flags := func(cmd string) []string {
		f := []string{cmd, "--server", "nats://127.0.0.1:1", "--room", "room:x", "--trusted-publisher", "node:did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX"}
		if cmd == "export" {
			f = append(f, "--out", t.TempDir(), "--witness", "example.com/w+12345678+AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8w", "--origin", "o")
		}
		return f
	}
	for _, cmd := range []string{"prove", "export"} {
		for _, tc := range []struct{ flag, value, want string }{
			{"--entry", "abc", "is not an entry_hash: 64 lower-case hex digits"},
			{"--entry", strings.ToUpper(hash), "is not an entry_hash"},
			{"--ref", "garbage", "is not an execution/ref: " + events.ExecutionRefPrefix},
			{"--ref", ref + "=", "is not an execution/ref"},
		} {
			status, _, stderr := invoke(t, "", append(flags(cmd), tc.flag, tc.value)...)
			if status != config.ExitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("%s %s %q: status %d, %s", cmd, tc.flag, tc.value, status, stderr)
			}
		}
		for _, good := range [][]string{{"--entry", hash}, {"--ref", ref}} {
			if _, _, stderr := invoke(t, "", append(flags(cmd), good...)...); strings.Contains(stderr, "is not an") {
				t.Errorf("%s %v: %s", cmd, good, stderr)
			}
		}
	}
}
