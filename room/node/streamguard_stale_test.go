package node

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.uber.org/zap"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// noMemory is a stream memory that holds no mark: the guard's own stands.
type noMemory struct{}

func (noMemory) load(context.Context) (*room.StreamMark, error)    { return nil, nil }
func (noMemory) save(context.Context, room.StreamMark, bool) error { return nil }
func (noMemory) where() string                                     { return "the test" }

// TestStreamGuardStaleLeader: a stream that looks shorter than serve
// remembers pauses appends only when its leader heard from a quorum of
// its replicas after the read; a leader that may answer from a stale copy
// (cut off from the others, which moved past it) leaves the last verdict
// standing, so a partition does not pause appends with stream_replaced.
func TestStreamGuardStaleLeader(t *testing.T) {
	e := roomtest.NewEnv(t)
	js, st := e.Js, e.Stream
	var subj room.Subjects
	for i := range 121 {
		if _, err := js.Publish(t.Context(), fmt.Sprintf("rooms.stale.exec.%d", i), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mark := markOf(info)
	mark.LastSeq = 141 // seen by another publisher, through the new leader
	stale := fmt.Errorf("%w: leader n3 of stream ROOMS last heard from its replicas n1 9s ago, n2 9s ago", jsapi.ErrStaleLeader)
	for _, tc := range []struct {
		name      string
		fresh     error
		wantKnown bool
	}{{"stale leader", stale, false}, {"fresh leader", nil, true}} {
		t.Run(tc.name, func(t *testing.T) {
			asked := 0
			g := &streamGuard{js: js, name: room.DefaultStream, subjects: subj, memory: noMemory{}, mark: mark, log: zap.NewNop(),
				fresh: func(context.Context) error { asked++; return tc.fresh }}
			verdict, known := g.check(t.Context())
			if asked != 1 || known != tc.wantKnown {
				t.Fatalf("leader asked %d times, known %v; want once, %v", asked, known, tc.wantKnown)
			}
			if tc.wantKnown != errors.Is(verdict, room.ErrStreamReplaced) {
				t.Fatalf("verdict %v; want stream_replaced only from a fresh leader", verdict)
			}
			if g.mark.LastSeq != 141 {
				t.Errorf("mark at %d; a short stream must not lower it", g.mark.LastSeq)
			}
		})
	}
	// A sound stream asks the leader nothing more.
	asked := 0
	g := &streamGuard{js: js, name: room.DefaultStream, subjects: subj, memory: noMemory{}, mark: markOf(info), log: zap.NewNop(),
		fresh: func(context.Context) error { asked++; return stale }}
	if verdict, known := g.check(t.Context()); verdict != nil || !known || asked != 0 {
		t.Fatalf("sound stream: %v, known %v, leader asked %d times", verdict, known, asked)
	}
}
