package ingest_test

import (
	"context"
	"testing"
	"time"

	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestShipResendsAheadBodiesIntact: with two gates and almost no ahead
// wait, pipelined requests are answered ahead and the shipper sends their
// bodies again (pipeline.settle). The shipper hands each body over without
// a copy, so a body changed after it was sent would store other lines, or
// be refused: the chain must land whole, once, in order.
func TestShipResendsAheadBodiesIntact(t *testing.T) {
	e := roomtest.NewEnv(t)
	e.EachGate(func(g *ingest.Gate) { g.SetAheadWait(time.Microsecond) })
	svc2 := e.SecondService()
	es, body := roomtest.Journal(t, "run-resend", "cap-resend-ahead", 1500)
	dir := roomtest.CapsuleDir(t, "run-resend", "cap-resend-ahead", body)
	cl := client.New(e.Connect(), client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := client.ShipCapsule(ctx, cl, dir, "room:resend", client.ShipOptions{BatchLines: 10, Pipeline: 6})
	if err != nil || res.Refused != nil || res.Stored != len(es) || res.Head.Next != int64(len(es)) {
		t.Fatalf("ship: %+v %v", res, err)
	}
	roomtest.ChainInStream(t, e, "room:resend", es)
	n := endpointRequests(e.Svc)["journal"] + endpointRequests(svc2)["journal"]
	if n <= len(es)/10 {
		t.Fatalf("%d journal requests for %d bodies: none was sent again, the test did not reach the resend path", n, len(es)/10)
	}
	t.Logf("journal requests: %d for %d bodies (%d sent again after ahead)", n, len(es)/10, n-len(es)/10)
}
