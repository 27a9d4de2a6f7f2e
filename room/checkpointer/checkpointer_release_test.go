package checkpointer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// releaseLogs are the entries of logs about releasing a lease.
func releaseLogs(logs *observer.ObservedLogs) []observer.LoggedEntry {
	var out []observer.LoggedEntry
	for _, en := range logs.All() {
		if strings.Contains(en.Message, "releas") {
			out = append(out, en)
		}
	}
	return out
}

// TestCheckpointerReleaseLogLevel: at Stop, a lease that lapsed or that
// another publisher took over since this checkpointer last wrote it is not
// released, which is normal: one debug entry that says so, nothing at
// info or above (a bare revision mismatch, err_code=10071, was logged at
// info). A release that fails otherwise (the connection is gone) is a
// warning.
func TestCheckpointerReleaseLogLevel(t *testing.T) {
	const ttl = time.Second
	for _, tc := range []struct {
		name  string
		after func(t *testing.T, e *roomtest.Env, kv jetstream.KeyValue, key string)
		level zapcore.Level
		want  string
	}{
		{"taken over", func(t *testing.T, e *roomtest.Env, kv jetstream.KeyValue, key string) {
			if _, err := kv.Put(context.Background(), key, []byte("another publisher's lease")); err != nil {
				t.Fatal(err)
			}
		}, zapcore.DebugLevel, "lease not released: it lapsed or another publisher took it over"},
		{"lapsed", func(t *testing.T, e *roomtest.Env, kv jetstream.KeyValue, key string) {
			roomtest.WaitFor(t, 10*time.Second, "the lease to lapse", func() bool {
				_, err := kv.Get(context.Background(), key)
				return err != nil
			})
		}, zapcore.DebugLevel, "lease not released: it lapsed or another publisher took it over"},
		{"released", func(*testing.T, *roomtest.Env, jetstream.KeyValue, string) {}, zapcore.DebugLevel, "lease released"},
		{"connection gone", nil, zapcore.WarnLevel, "releasing a lease failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := roomtest.NewEnv(t)
			ctx := context.Background()
			key := roomtest.NewPublisherKey(t)
			const roomID = "room:release"
			nc := e.Connect()
			ckp, logs := roomtest.StartCheckpointer(t, nc, checkpointer.Options{Key: key, Every: 5, Interval: time.Hour, LeaseTTL: ttl})
			gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
			es, _ := roomtest.Journal(t, "run-r", "cap-r", 5)
			if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es), nil); err != nil || r.Stored != 5 {
				t.Fatalf("%+v %v", r, err)
			}
			// A checkpoint written: the lease is held.
			roomtest.WaitFor(t, 10*time.Second, "a checkpoint", func() bool { return e.CountOn(room.Subjects{}.Checkpoint(roomID)) == 1 })
			kv, err := e.Js.KeyValue(ctx, room.DefaultLeaseBucket)
			if err != nil {
				t.Fatal(err)
			}
			if tc.after != nil {
				tc.after(t, e, kv, checkpointer.LeaseKey(roomID))
			} else {
				nc.Close()
			}
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = ckp.Stop(sctx)
			got := releaseLogs(logs)
			if len(got) != 1 || got[0].Level != tc.level || !strings.Contains(got[0].Message, tc.want) {
				for _, en := range got {
					t.Logf("%s %q %v", en.Level, en.Message, en.ContextMap())
				}
				t.Fatalf("%d release entries; want one at %s saying %q", len(got), tc.level, tc.want)
			}
			if got[0].ContextMap()["room"] != roomID {
				t.Errorf("entry %v does not name the room", got[0].ContextMap())
			}
		})
	}
}
