package checkpointer_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestCheckpointerReadFailureLoggedOnce: with the room stream deleted
// under it, the checkpointer's follow fails its read every second; the
// first failure is a warning, the same failure again is logged at debug
// level only (it was a warning a second, without end).
func TestCheckpointerReadFailureLoggedOnce(t *testing.T) {
	e := roomtest.NewEnv(t)
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: roomtest.NewPublisherKey(t), Every: 1000, Interval: time.Hour})
	roomtest.WaitFor(t, 10*time.Second, "the catch-up read to end", ckp.CaughtUp)
	if err := e.Js.DeleteStream(context.Background(), room.DefaultStream); err != nil {
		t.Fatal(err)
	}
	const msg = "checkpointer: reading the room stream"
	roomtest.WaitFor(t, 15*time.Second, "three failed reads", func() bool { return logs.FilterMessage(msg).Len() >= 3 })
	reads := logs.FilterMessage(msg)
	warns := reads.FilterLevelExact(zapcore.WarnLevel).Len()
	if warns != 1 || reads.FilterLevelExact(zapcore.DebugLevel).Len() < 2 {
		t.Fatalf("%d warnings and %d debug entries of %d failed reads, want 1 warning", warns, reads.Len()-warns, reads.Len())
	}
}
