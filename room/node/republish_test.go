package node

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestRepublishReach: a RePublish destination's mapping functions widen to
// wildcards before the overlap with the room subjects is decided.
func TestRepublishReach(t *testing.T) {
	for _, c := range []struct {
		dest, reach string
		collides    bool
	}{
		{"rooms.x.exec", "rooms.x.exec", true},
		{"sneak.x", "sneak.x", false},
		{"rooms.{{wildcard(1)}}.exec", "rooms.*.exec", true},
		{"{{wildcard(1)}}.exec", "*.exec", true},
		{"$1.x.y", "*.x.y", true},
		{"other.{{split(1,-)}}", "other.>", false},
		{"{{SplitFromLeft(1,2)}}.x", ">", true},
		{"*.>", "*.>", true},
		{"rooms", "rooms", false},
	} {
		reach := republishReach(c.dest)
		if reach != c.reach || server.SubjectsCollide(reach, "rooms.>") != c.collides {
			t.Errorf("%s: reach %s, collides %v; want %s, %v", c.dest, reach, server.SubjectsCollide(reach, "rooms.>"), c.reach, c.collides)
		}
	}
}
