package backup_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/backup"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

const (
	roomA = "room:backup-a"
	roomB = "room:backup-b"
)

// latestSize is the size of roomID's last checkpoint on the stream, 0
// without one.
func latestSize(t *testing.T, e *roomtest.Env, roomID string) uint64 {
	t.Helper()
	ms := e.OnSubject(room.Subjects{}.Checkpoint(roomID))
	if len(ms) == 0 {
		return 0
	}
	return roomtest.Parsed(t, ms[len(ms)-1].Data).Size
}

// copyDir copies the regular files of src into a new directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	des, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(src, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, de.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// freshServer starts an embedded server on an empty store: the machine
// after the old store was wiped.
func freshServer(t *testing.T) (*embedded.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return srv, nc, js
}

// TestBackupRestoreDetectsRollback backs a room stream with signed
// checkpoints up twice (B1 with checkpoint C1, B2 after more entries and
// checkpoint C2, which a reader keeps), wipes the store, restores B2 (a
// clean audit against C2, with exact counts, and the gate extends a chain
// of it), then restores the older B1 into a wiped store: the reader that
// kept C2 refuses the room as rolled back (checkpoint_mismatch).
func TestBackupRestoreDetectsRollback(t *testing.T) {
	ctx := context.Background()
	e := roomtest.NewEnvUnmarked(t, embedded.Options{}) // exact message counts: no record markers
	pub := roomtest.NewPublisherKey(t)
	trust := roomtest.Trusting(t, pub)
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: pub, Every: 6, Interval: time.Hour})
	gate := roomtest.AttestingGate(e, e.Nc, pub, ckp, ingest.GateOptions{})
	esA, _ := roomtest.Journal(t, "run-backup", "cap-a", 12)
	esB, _ := roomtest.Journal(t, "run-backup", "cap-b", 6)
	ship := func(roomID string, es []*events.Entry) {
		t.Helper()
		if r, err := gate.AppendJournal(ctx, roomID, roomtest.Lines(es), nil); err != nil || r.Stored != len(es) {
			t.Fatalf("ship %d entries into %s: %+v %v", len(es), roomID, r, err)
		}
	}
	stateDir := filepath.Join(t.TempDir(), "state")
	audit := func(js jetstream.JetStream, state string) *reader.AuditReport {
		t.Helper()
		rep, err := reader.Audit(ctx, js, reader.AuditOptions{Validator: e.V, Trust: trust, State: &reader.CheckpointState{Dir: state}})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	kept := func(state, roomID string) uint64 {
		t.Helper()
		c, err := (&reader.CheckpointState{Dir: state}).Load(roomID)
		if err != nil || c == nil {
			t.Fatalf("the state's checkpoint of %s: %+v, %v", roomID, c, err)
		}
		return c.Size
	}

	// Time 1: 5 entries and a record in room A, checkpoint C1 of size 6.
	ship(roomA, esA[:5])
	if r := gate.AppendRecord(ctx, roomtest.RecordNamed(e, roomA, "b0")); r.Item.Outcome != room.OutcomeStored {
		t.Fatalf("record: %+v", r)
	}
	roomtest.WaitFor(t, 10*time.Second, "C1", func() bool { return latestSize(t, e, roomA) == 6 })
	if rep := audit(e.Js, stateDir); !rep.Clean() || rep.Totals.Messages != 7 || kept(stateDir, roomA) != 6 {
		t.Fatalf("audit at time 1: clean %v, %+v", rep.Clean(), rep.Totals)
	}
	b1 := filepath.Join(t.TempDir(), "b1")
	r1, err := backup.Backup(ctx, e.Nc, room.DefaultStream, b1)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Stream != room.DefaultStream || r1.Messages != 7 || r1.FirstSeq != 1 || r1.LastSeq != 7 || r1.Bytes == 0 {
		t.Fatalf("B1: %+v, want 7 messages, seqs 1 to 7", r1)
	}
	if _, err := backup.Backup(ctx, e.Nc, room.DefaultStream, b1); !errors.Is(err, backup.ErrBackup) {
		t.Fatalf("a second backup into B1's directory: %v, want ErrBackup", err)
	}

	// Time 2: room A grows to 12 leaves, room B to 6; C2 of each, which
	// the reader keeps.
	ship(roomA, esA[5:11])
	ship(roomB, esB)
	roomtest.WaitFor(t, 10*time.Second, "C2", func() bool { return latestSize(t, e, roomA) == 12 && latestSize(t, e, roomB) == 6 })
	if err := ckp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if rep := audit(e.Js, stateDir); !rep.Clean() || rep.Totals.Messages != 21 || kept(stateDir, roomA) != 12 || kept(stateDir, roomB) != 6 {
		t.Fatalf("audit at time 2: clean %v, %+v", rep.Clean(), rep.Totals)
	}
	keptC2 := copyDir(t, stateDir)
	b2 := filepath.Join(t.TempDir(), "b2")
	r2, err := backup.Backup(ctx, e.Nc, room.DefaultStream, b2)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Messages != 21 || r2.LastSeq != 21 {
		t.Fatalf("B2: %+v, want 21 messages", r2)
	}

	// The store is lost.
	e.Stop()
	if err := os.RemoveAll(e.Dir); err != nil {
		t.Fatal(err)
	}

	t.Run("restore B2: clean against C2, chains go on", func(t *testing.T) {
		srv, nc, js := freshServer(t)
		defer srv.Shutdown()
		defer nc.Close()
		got, err := backup.Restore(ctx, nc, b2, backup.RestoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Stream != room.DefaultStream || got.Messages != 21 || got.FirstSeq != 1 || got.LastSeq != 21 {
			t.Fatalf("restored %+v, want 21 messages, seqs 1 to 21", got)
		}
		st, err := js.Stream(ctx, room.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		if err := room.CheckStreamConfig(st.CachedInfo().Config, room.Subjects{}); err != nil {
			t.Fatalf("the restored stream's configuration: %v", err)
		}
		if _, err := backup.Restore(ctx, nc, b2, backup.RestoreOptions{}); !errors.Is(err, backup.ErrStreamExists) {
			t.Fatalf("restoring over the restored stream: %v, want ErrStreamExists", err)
		}

		state := copyDir(t, keptC2)
		rep := audit(js, state)
		tot := rep.Totals
		if !rep.Clean() || rep.Empty || tot.Messages != 21 || tot.Entries != 17 || tot.Records != 1 || tot.Checkpoints != 3 ||
			tot.ChainsOK != 2 || tot.ChainsBroken != 0 || tot.SetAside != 0 || !tot.StreamIsSound {
			t.Fatalf("audit of B2 against C2: clean %v, %+v, violations %v", rep.Clean(), tot, rep.Violations)
		}
		for _, c := range rep.Checkpoints {
			if c.Refused != "" || c.Stored == nil || !c.StoredConsistent {
				t.Fatalf("room %s against its kept checkpoint: %+v", c.RoomID, c)
			}
		}

		// The gate extends room A's chain at position 11, right after the
		// restored stream's last message.
		g, err := ingest.NewGate(ctx, nc, ingest.GateOptions{Validator: e.V, PublisherKey: pub})
		if err != nil {
			t.Fatal(err)
		}
		r, err := g.AppendJournal(ctx, roomA, roomtest.Lines(esA[11:12]), nil)
		if err != nil || r.Stored != 1 || r.Items[0].StreamSeq != 22 || r.Head.Next != 12 {
			t.Fatalf("the next entry after the restore: %+v %v", r, err)
		}
		// A fork of a restored position is refused as before the loss.
		if r, _ := g.AppendJournal(ctx, roomA, roomtest.Lines([]*events.Entry{roomtest.ForkOf(t, esA[3])}), nil); r.Refused != 1 || r.Items[0].Code != events.Fork {
			t.Fatalf("a fork of a restored entry: %+v", r)
		}
		if rep := audit(js, state); !rep.Clean() || rep.Totals.Entries != 18 {
			t.Fatalf("audit after the next entry: clean %v, %+v", rep.Clean(), rep.Totals)
		}
	})

	t.Run("restore the older B1: rolled back against C2", func(t *testing.T) {
		srv, nc, js := freshServer(t)
		defer srv.Shutdown()
		defer nc.Close()
		got, err := backup.Restore(ctx, nc, b1, backup.RestoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Messages != 7 || got.LastSeq != 7 {
			t.Fatalf("restored %+v, want B1's 7 messages", got)
		}
		state := copyDir(t, keptC2)
		rep := audit(js, state)
		if rep.Clean() || rep.Totals.ByCode[events.CheckpointMismatch] == 0 {
			t.Fatalf("audit of B1 against C2: clean %v, %+v", rep.Clean(), rep.Totals)
		}
		var reasons []string
		for _, v := range rep.Violations {
			if v.Code != events.CheckpointMismatch {
				t.Errorf("violation %+v, want only checkpoint_mismatch", v)
			}
			reasons = append(reasons, v.RoomID+": "+v.Reason)
		}
		want := "rolled back or forked: this reader verified a checkpoint of size 12"
		found := false
		for _, c := range rep.Checkpoints {
			if c.RoomID == roomA {
				found = strings.Contains(c.Refused, want) && strings.Contains(c.Refused, "the newest verified checkpoint has size 6")
			}
		}
		if !found {
			t.Fatalf("room A not refused as rolled back from 12 to 6: %+v\nviolations %v", rep.Checkpoints, reasons)
		}
		// The reader's state keeps C2: a rollback never lowers it.
		if kept(state, roomA) != 12 {
			t.Fatalf("state after the rolled-back audit: %d, want 12", kept(state, roomA))
		}
	})
}

// editedBackup copies the backup in src and rewrites its backup.json with
// edit, which gets the decoded record.
func editedBackup(t *testing.T, src string, edit func(map[string]any)) string {
	t.Helper()
	dst := copyDir(t, src)
	p := filepath.Join(dst, "backup.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestRestoreChecksWhatItRestored: a backup whose record claims a message
// the archive lacks fails the restore (ErrRestoreMismatch); a backup whose
// configuration allows an age limit restores a stream that fails
// roompub's append-only check (room.ErrStreamConfig); a directory without
// a backup is ErrBackup.
func TestRestoreChecksWhatItRestored(t *testing.T) {
	ctx := context.Background()
	e := roomtest.NewEnv(t)
	_, body := roomtest.Journal(t, "run-check", "cap-check", 4)
	if r := e.ShipJournal("room:check", body); r.Stored != 4 {
		t.Fatalf("%+v", r)
	}
	dir := filepath.Join(t.TempDir(), "b")
	if r, err := backup.Backup(ctx, e.Nc, room.DefaultStream, dir); err != nil || r.Messages != 4 {
		t.Fatalf("backup: %+v, %v", r, err)
	}

	t.Run("a recorded message missing", func(t *testing.T) {
		bad := editedBackup(t, dir, func(m map[string]any) {
			st := m["state"].(map[string]any)
			st["messages"], st["last_seq"] = 5, 5
		})
		srv, nc, _ := freshServer(t)
		defer srv.Shutdown()
		defer nc.Close()
		got, err := backup.Restore(ctx, nc, bad, backup.RestoreOptions{})
		if !errors.Is(err, backup.ErrRestoreMismatch) || got.Messages != 4 {
			t.Fatalf("restore of a record claiming 5 messages: %+v, %v", got, err)
		}
	})
	t.Run("a configuration that is not append-only", func(t *testing.T) {
		weak := editedBackup(t, dir, func(m map[string]any) {
			m["config"].(map[string]any)["max_age"] = int64(time.Hour)
		})
		srv, nc, _ := freshServer(t)
		defer srv.Shutdown()
		defer nc.Close()
		_, err := backup.Restore(ctx, nc, weak, backup.RestoreOptions{})
		if !errors.Is(err, room.ErrStreamConfig) || !strings.Contains(err.Error(), "max_age is 1h0m0s") {
			t.Fatalf("restore of a stream with max_age: %v", err)
		}
	})
	t.Run("no backup", func(t *testing.T) {
		srv, nc, _ := freshServer(t)
		defer srv.Shutdown()
		defer nc.Close()
		if _, err := backup.Restore(ctx, nc, t.TempDir(), backup.RestoreOptions{}); !errors.Is(err, backup.ErrBackup) {
			t.Fatalf("restore of an empty directory: %v", err)
		}
	})
}

// A partition's room stream is held to its own subjects, and the
// placement bucket, a key-value stream, is restored as it is: a
// deployment of several partitions restores whole.
func TestRestorePartitions(t *testing.T) {
	ctx := context.Background()
	e := roomtest.NewEnv(t)
	q := room.Layout{Partitions: 2}.Partition(1)
	place, err := room.OpenPlacement(ctx, e.Js, room.Layout{Partitions: 2}, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Js.CreateStream(ctx, room.StreamConfig(q.Stream, q.Subjects, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Js.Publish(ctx, q.Subjects.Records("room:p1"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if got, err := place.Record(ctx, "room:p1", q); err != nil || got != q {
		t.Fatalf("record: %+v %v", got, err)
	}
	dir := t.TempDir()
	for _, name := range []string{q.Stream, "KV_" + room.DefaultPlacementBucket} {
		if _, err := backup.Backup(ctx, e.Nc, name, filepath.Join(dir, name)); err != nil {
			t.Fatalf("backup %s: %v", name, err)
		}
	}
	srv, nc, js := freshServer(t)
	defer srv.Shutdown()
	defer nc.Close()
	for _, name := range []string{q.Stream, "KV_" + room.DefaultPlacementBucket} {
		if r, err := backup.Restore(ctx, nc, filepath.Join(dir, name), backup.RestoreOptions{}); err != nil || r.Messages == 0 {
			t.Fatalf("restore %s: %+v %v", name, r, err)
		}
	}
	restored, err := room.OpenPlacement(ctx, js, room.Layout{}, 1, false)
	if err != nil || len(restored.Partitions()) != 2 {
		t.Fatalf("the restored bucket: %v", err)
	}
	if got, err := restored.Locate(ctx, "room:p1"); err != nil || got.Stream != q.Stream {
		t.Fatalf("room:p1 after the restore: %+v %v", got, err)
	}
}
