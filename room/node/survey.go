package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// surveyor runs the gate's survey of what the store lost
// (ingest.Gate.Survey) in the background, one at a time: at start, and
// again whenever the stream guard sees the stream lose messages. A survey
// that could not finish (the server restarted, a read timed out) is run
// again after a pause, surveyRetryFirst doubling up to surveyRetryMax,
// until one finishes: the chains nobody uses and the loss notices asked
// for wait for it.
type surveyor struct {
	survey      func(context.Context) (ingest.Survey, error)
	acknowledge func(ctx context.Context, roomID string, now time.Time) (uint64, error)
	metrics     *ingest.Metrics
	log         *zap.Logger
	// ack names the rooms whose loss the first finished survey
	// acknowledges.
	ack        []string
	retryFirst time.Duration // the pause after the first failure; doubled after each
	// found, when set, is told what each finished survey found (before
	// loss notices are written).
	found   func(ingest.Survey)
	mu      sync.Mutex
	first   chan struct{} // closed once the first survey ended, finished or not
	running bool
	again   bool
	wg      sync.WaitGroup
}

// The pauses between surveys that could not finish.
const (
	surveyRetryFirst = time.Second
	surveyRetryMax   = 30 * time.Second
)

func newSurveyor(gate *ingest.Gate, metrics *ingest.Metrics, log *zap.Logger, ack []string) *surveyor {
	return &surveyor{survey: gate.Survey, acknowledge: func(ctx context.Context, roomID string, now time.Time) (uint64, error) {
		_, seq, err := gate.AcknowledgeLoss(ctx, roomID, now)
		return seq, err
	}, metrics: metrics, log: log, ack: ack, retryFirst: surveyRetryFirst, first: make(chan struct{})}
}

// start runs a survey unless one is running, in which case another runs
// once it ends.
func (s *surveyor) start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		s.again = true
		return
	}
	s.running = true
	s.wg.Add(1)
	go s.run(ctx)
}

func (s *surveyor) run(ctx context.Context) {
	defer s.wg.Done()
	pause := s.retryFirst
	for {
		began := time.Now()
		sv, err := s.survey(ctx)
		took := time.Since(began)
		switch {
		case err != nil && ctx.Err() != nil:
		case err != nil:
			fields := []zap.Field{zap.Error(err), zap.Duration("took", took), zap.Duration("again_in", pause)}
			if len(s.ack) > 0 {
				fields = append(fields, zap.Strings("loss_notices_waiting", s.ack))
			}
			s.log.Warn("store survey: could not finish; chains are still judged on their first use; surveying again", fields...)
		case len(sv.Damaged) == 0 && len(sv.DamagedRooms) == 0:
			// Only what chains and checkpoints show: messages the stream
			// reports gone that neither covered (a tail after the last
			// checkpoint) are the stream check's to report.
			s.log.Info("store survey: no chain misses a position below its head, no room's checkpoint covers more than the stream holds",
				zap.Int("chains", sv.ChainsSeen), zap.Int("rooms", sv.RoomsSeen), zap.Duration("took", took))
		default:
			s.log.Error("store survey: the store lost acknowledged messages; /healthz reports it", zap.Int("chains", sv.ChainsSeen), zap.Int("rooms", sv.RoomsSeen),
				zap.Int("damaged_chains", len(sv.Damaged)), zap.Int("damaged_rooms", len(sv.DamagedRooms)), zap.Duration("took", took))
		}
		if err == nil && s.found != nil {
			s.found(sv)
		}
		if err == nil && !s.acknowledgeLoss(ctx) && ctx.Err() == nil {
			// A notice asked for could not be written: survey again, and
			// write it after, as after a survey that could not finish.
			err = errNoticeUnwritten
		}
		select {
		case <-s.first:
		default:
			close(s.first)
		}
		if err != nil && ctx.Err() == nil {
			if !jsapi.Sleep(ctx, pause) {
				s.end()
				return
			}
			pause = min(2*pause, surveyRetryMax)
			continue
		}
		pause = s.retryFirst
		s.mu.Lock()
		if !s.again || ctx.Err() != nil {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.again = false
		s.mu.Unlock()
	}
}

// end marks the surveyor idle, its context ended.
func (s *surveyor) end() {
	s.mu.Lock()
	s.running = false
	s.mu.Unlock()
}

// errNoticeUnwritten makes the surveyor survey again: a loss notice asked
// for could not be written.
var errNoticeUnwritten = errors.New("a loss notice could not be written")

// acknowledgeLoss writes the loss notices asked for, each once, and keeps
// those it could not write for the next survey; it reports whether none
// is left.
func (s *surveyor) acknowledgeLoss(ctx context.Context) bool {
	var left []string
	for _, id := range s.ack {
		seq, err := s.acknowledge(ctx, id, time.Now())
		switch {
		case errors.Is(err, ingest.ErrNothingLost):
			s.log.Warn("acknowledge-loss: the survey found no damaged chain, checkpoint or record of the room (is the room id right?): no notice written", zap.String("room", id))
		case err != nil:
			s.log.Error("acknowledge-loss: could not write the loss notice; trying again after the next survey", zap.String("room", id), zap.Error(err))
			left = append(left, id)
		default:
			s.log.Info("acknowledge-loss: loss notice written", zap.String("room", id), zap.Uint64("stream_seq", seq))
		}
	}
	s.ack = left
	return len(left) == 0
}

// waitFirst waits until the first survey has ended, or ctx has.
func (s *surveyor) waitFirst(ctx context.Context) {
	select {
	case <-s.first:
	case <-ctx.Done():
	}
}

// wait waits for a running survey to end (its context ended first).
func (s *surveyor) wait() { s.wg.Wait() }

// damageErr is what /healthz says of the chains and rooms the gate found
// damaged that no loss notice covers: nil when none, else the count and
// the first three of each.
func damageErr(g *ingest.Gate) error {
	chains, rooms := g.Unacknowledged()
	var errs []error
	if len(chains) > 0 {
		var names []string
		for _, c := range chains[:min(3, len(chains))] {
			names = append(names, fmt.Sprintf("%s %s/%s: %s lost (%s)", c.RoomID, c.Chain.RunID, c.Chain.CapsuleID, c.Loss.Lost(), c.Loss))
		}
		errs = append(errs, fmt.Errorf("the store lost acknowledged entries of %d chains (closed: store_lost): %s", len(chains), strings.Join(names, "; ")))
	}
	if len(rooms) > 0 {
		var names []string
		for _, r := range rooms[:min(3, len(rooms))] {
			names = append(names, fmt.Sprintf("%s: %s", r.RoomID, r.What()))
		}
		errs = append(errs, fmt.Errorf("the store lost acknowledged messages of %d rooms: %s", len(rooms), strings.Join(names, "; ")))
	}
	return errors.Join(errs...)
}
