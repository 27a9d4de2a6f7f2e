package ingest_test

import (
	"context"
	"testing"

	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestSurveyReadsOnItsConnection holds Survey to GateOptions.SurveyConn:
// every request of a survey goes out on it, none on the gate's own
// connection, so the gate's appends never queue behind a survey's reads.
func TestSurveyReadsOnItsConnection(t *testing.T) {
	e := roomtest.NewEnv(t)
	for i, capsule := range []string{"cap-a", "cap-b", "cap-c"} {
		lines, body := roomtest.Journal(t, "run-s", capsule, 3+i)
		if r := e.ShipJournal("room:survey", body); r.Stored != len(lines) {
			t.Fatalf("ship %s: %+v", capsule, r)
		}
	}
	gateNC, surveyNC := e.Connect(), e.Connect()
	g, err := ingest.NewGate(context.Background(), gateNC, ingest.GateOptions{Validator: e.V, SurveyConn: surveyNC})
	if err != nil {
		t.Fatal(err)
	}
	gateBefore, surveyBefore := gateNC.Stats().OutMsgs, surveyNC.Stats().OutMsgs
	sv, err := g.Survey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sv.ChainsSeen != 3 || sv.RoomsSeen != 1 || len(sv.Damaged) != 0 {
		t.Fatalf("survey: %+v", sv)
	}
	// Three subject counts (chains, records, checkpoints), the stream's
	// deleted span and one multi_last of the three chains' heads.
	if got := surveyNC.Stats().OutMsgs - surveyBefore; got != 5 {
		t.Errorf("requests on the survey's connection: %d, want 5", got)
	}
	if got := gateNC.Stats().OutMsgs - gateBefore; got != 0 {
		t.Errorf("requests on the gate's connection: %d, want 0", got)
	}
}
