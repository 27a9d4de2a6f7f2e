package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/roompub/roompub/room/ingest"
)

// TestSurveyorRetries: a survey that could not finish (the server went
// away) is run again, after pauses that double, until one finishes; each
// failure is logged with the loss notices still waiting for it, and those
// are written once, after the survey that finished. The first survey's
// end, failed or not, lets serve start.
func TestSurveyorRetries(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	var mu sync.Mutex
	var surveys int
	var acked []string
	var ackedAfter int // surveys run when the notice was written
	s := newSurveyor(nil, nil, zap.New(core), []string{"room:lost"})
	s.retryFirst = time.Millisecond
	s.survey = func(context.Context) (ingest.Survey, error) {
		mu.Lock()
		defer mu.Unlock()
		surveys++
		if surveys <= 3 {
			return ingest.Survey{}, errors.New("nats: timeout after 229 messages")
		}
		return ingest.Survey{ChainsSeen: 7}, nil
	}
	s.acknowledge = func(_ context.Context, roomID string, _ time.Time) (uint64, error) {
		mu.Lock()
		defer mu.Unlock()
		acked, ackedAfter = append(acked, roomID), surveys
		return 42, nil
	}
	s.start(t.Context())
	s.waitFirst(t.Context()) // closed by the first, failed, survey
	s.wait()

	if surveys != 4 || len(acked) != 1 || acked[0] != "room:lost" || ackedAfter != 4 {
		t.Fatalf("%d surveys, notices %v written after survey %d; want 4 surveys, one notice for room:lost after the 4th", surveys, acked, ackedAfter)
	}
	failed := logs.FilterMessageSnippet("could not finish").All()
	if len(failed) != 3 {
		t.Fatalf("%d failures logged, want 3", len(failed))
	}
	for i, want := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond} {
		f := failed[i].ContextMap()
		if f["again_in"] != want {
			t.Errorf("failure %d: again in %v, want %v", i+1, f["again_in"], want)
		}
		if w, ok := f["loss_notices_waiting"].([]any); !ok || len(w) != 1 || w[0] != "room:lost" {
			t.Errorf("failure %d: loss notices waiting %v, want [room:lost]", i+1, f["loss_notices_waiting"])
		}
	}
	if n := logs.FilterMessageSnippet("loss notice written").Len(); n != 1 {
		t.Errorf("%d notices logged as written, want 1", n)
	}
}

// TestSurveyorStopsRetrying: a survey that cannot finish is tried again
// only while serve runs; its stop ends the pause at once.
func TestSurveyorStopsRetrying(t *testing.T) {
	s := newSurveyor(nil, nil, zap.NewNop(), nil)
	s.retryFirst = time.Hour
	tried := make(chan struct{}, 1)
	s.survey = func(context.Context) (ingest.Survey, error) {
		tried <- struct{}{}
		return ingest.Survey{}, errors.New("no responders")
	}
	ctx, cancel := context.WithCancel(t.Context())
	s.start(ctx)
	<-tried
	cancel()
	done := make(chan struct{})
	go func() { s.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the surveyor still waits to survey again after serve stopped")
	}
	if s.running {
		t.Error("the surveyor still counts as running")
	}
}

// TestSurveyorRetriesANotice: a loss notice that could not be written
// after a survey finished is kept, and written after the next survey,
// not dropped.
func TestSurveyorRetriesANotice(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	var surveys, tries int
	s := newSurveyor(nil, nil, zap.New(core), []string{"room:lost"})
	s.retryFirst = time.Millisecond
	s.survey = func(context.Context) (ingest.Survey, error) { surveys++; return ingest.Survey{}, nil }
	s.acknowledge = func(context.Context, string, time.Time) (uint64, error) {
		tries++
		if tries == 1 {
			return 0, errors.New("nats: connection closed")
		}
		return 7, nil
	}
	s.start(t.Context())
	s.wait()
	if surveys != 2 || tries != 2 || len(s.ack) != 0 {
		t.Fatalf("%d surveys, %d tries, %v left; want 2 surveys, the notice written on the 2nd try", surveys, tries, s.ack)
	}
	if n := logs.FilterMessageSnippet("could not write the loss notice").Len(); n != 1 {
		t.Errorf("%d failed writes logged, want 1", n)
	}
	if n := logs.FilterMessageSnippet("loss notice written").Len(); n != 1 {
		t.Errorf("%d notices logged as written, want 1", n)
	}
}
