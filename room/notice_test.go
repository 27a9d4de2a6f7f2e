package room_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

const noticeJSON = `{"chains":[{"chain":{"capsule_id":"cap-a","run_id":"run-a"},"loss":{"count":2,"missing":[{"after_stream_seq":3,"before_stream_seq":9,"from":1,"to":2}],"stored":1}}],"noted_at":"2026-12-02T07:30:00Z","publisher":"node:did:key:z6Mk","room":"room:x","schema":"roompub-loss-notice/v1"}`

// TestParseLossNotice: a canonical notice of its room parses; each rule
// refuses, saying which.
func TestParseLossNotice(t *testing.T) {
	n, err := room.ParseLossNotice([]byte(noticeJSON), "room:x")
	if err != nil || n.Chains[0].Chain != (events.ChainKey{RunID: "run-a", CapsuleID: "cap-a"}) || n.Chains[0].Loss.Count != 2 || n.NotedAt != "2026-12-02T07:30:00Z" {
		t.Fatalf("%+v, %v", n, err)
	}
	for _, c := range []struct{ name, data, room, want string }{
		{"other room", noticeJSON, "room:y", `names room "room:x" on the subject of "room:y"`},
		{"not canonical", strings.Replace(noticeJSON, `{"chains"`, `{ "chains"`, 1), "room:x", "not in its canonical form"},
		{"not JSON", `{"schema":`, "room:x", "not JSON"},
		{"unknown member", strings.Replace(noticeJSON, `"noted_at"`, `"extra":1,"noted_at"`, 1), "room:x", `unknown field "extra"`},
		{"schema", strings.Replace(noticeJSON, "roompub-loss-notice/v1", "roompub-loss-notice/v2", 1), "room:x", `schema "roompub-loss-notice/v2"`},
		{"nothing", `{"noted_at":"2026-12-02T07:30:00Z","publisher":"p","room":"room:x","schema":"roompub-loss-notice/v1"}`, "room:x", "acknowledges nothing"},
		{"held over size", `{"checkpoint":{"held":9,"size":1},"noted_at":"2026-12-02T07:30:00Z","publisher":"p","room":"room:x","schema":"roompub-loss-notice/v1"}`, "room:x", "its checkpoint's held 9 is more than its size 1"},
		{"negative count", strings.Replace(noticeJSON, `"count":2`, `"count":-2`, 1), "room:x", "chain run-a/cap-a: count -2 and stored 1 are no chain's positions"},
		{"negative stored", strings.Replace(noticeJSON, `"stored":1`, `"stored":-1`, 1), "room:x", "count 2 and stored -1 are no chain's positions"},
	} {
		if _, err := room.ParseLossNotice([]byte(c.data), c.room); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// FuzzParseLossNotice: any bytes parse or are refused without a panic;
// what parses is of the room asked, acknowledges something, and, encoded
// again in its canonical form, parses again.
func FuzzParseLossNotice(f *testing.F) {
	f.Add([]byte(noticeJSON), "room:x")
	f.Add([]byte(`{"checkpoint":{"held":1,"size":2},"noted_at":"","publisher":"","room":"room:x","schema":"roompub-loss-notice/v1"}`), "room:x")
	f.Add([]byte(`{}`), "")
	f.Fuzz(func(t *testing.T, data []byte, roomID string) {
		n, err := room.ParseLossNotice(data, roomID)
		if err != nil {
			return
		}
		if n.RoomID != roomID || (len(n.Chains) == 0 && n.Checkpoint == nil) {
			t.Fatalf("parsed %+v for %q", n, roomID)
		}
		raw, err := json.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		canon, err := events.Canonicalize(raw)
		if err != nil {
			t.Fatal(err)
		}
		again, err := room.ParseLossNotice(canon, roomID)
		if err != nil || len(again.Chains) != len(n.Chains) || (again.Checkpoint == nil) != (n.Checkpoint == nil) {
			t.Fatalf("re-encoded %s does not parse: %v", canon, err)
		}
	})
}
