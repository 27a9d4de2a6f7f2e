package room_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// TestShipRoomConflictNamesTheRoom: a capsule shipped into a second room
// is refused room_conflict, and the refusal the shipper hands back names
// the room the chain lives in: in its reason, as Expected, and the room
// asked for as Actual (the first problem's values were dropped, and the
// reason said only "another room").
func TestShipRoomConflictNamesTheRoom(t *testing.T) {
	e := newEnv(t)
	_, body := journal(t, "run-conflict", "cap-conflict", 5)
	dir := capsuleDir(t, "run-conflict", "cap-conflict", body)
	client := room.NewClient(e.connect(), room.ClientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if res, err := room.ShipCapsule(ctx, client, dir, "room:alpha", room.ShipOptions{}); err != nil || res.Stored != 5 {
		t.Fatalf("ship into room:alpha: %+v %v", res, err)
	}
	res, err := room.ShipCapsule(ctx, client, dir, "room:beta", room.ShipOptions{})
	if err != nil || res.Refused == nil || res.Stored != 0 {
		t.Fatalf("ship into room:beta: %+v %v", res, err)
	}
	p := res.Refused.Problem
	if p.Code != events.RoomConflict || p.Expected != "room:alpha" || p.Actual != "room:beta" || !strings.Contains(p.Reason, `"room:alpha"`) {
		t.Errorf("refusal %+v: want room_conflict naming room:alpha in its reason, expected room:alpha, actual room:beta", p)
	}
	if len(res.Refused.Problems) != 1 || res.Refused.Problems[0].Reason != p.Reason || res.Refused.Problems[0].Expected != "room:alpha" {
		t.Errorf("problems %+v", res.Refused.Problems)
	}
	if want := `(expected "room:alpha", got "room:beta")`; !strings.HasSuffix(p.String(), want) {
		t.Errorf("printed %q, want it to end in %s", p.String(), want)
	}
}
