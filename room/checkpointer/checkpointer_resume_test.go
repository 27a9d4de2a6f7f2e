package checkpointer_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap/zaptest/observer"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// resumeRooms are the rooms of the resume tests.
var resumeRooms = []string{"room:resume-a", "room:resume-b"}

// resumeFill appends, through gate (atomic batches of 7), entries
// es[from:to] of each room's chain and then two records per room, named
// by tag.
func resumeFill(t *testing.T, e *roomtest.Env, gate *ingest.Gate, chains map[string][]*events.Entry, from, to int, tag string) {
	t.Helper()
	for _, id := range resumeRooms {
		if r, err := gate.AppendJournal(context.Background(), id, roomtest.Lines(chains[id][from:to]), nil); err != nil || r.Stored != to-from {
			t.Fatalf("%s: %+v %v", id, r, err)
		}
		for i := range 2 {
			if r := gate.AppendRecord(context.Background(), roomtest.RecordNamed(e, id, fmt.Sprintf("%s-%s-%d", tag, id, i))); r.Item.Outcome != room.OutcomeStored {
				t.Fatalf("%s record: %+v", id, r)
			}
		}
	}
}

// resumeChains returns a chain of n entries per room.
func resumeChains(t *testing.T, n int) map[string][]*events.Entry {
	out := map[string][]*events.Entry{}
	for i, id := range resumeRooms {
		out[id], _ = roomtest.Journal(t, "run-resume", fmt.Sprintf("cap-%d", i), n)
	}
	return out
}

// resumeFrom is where a checkpointer resuming from each room's latest
// checkpoint starts reading, from an independent rebuild: the room's
// first message after the leaf that ends its latest checkpoint, other than
// a checkpoint, lowest over the rooms (the stream's last seq + 1 when
// there is none).
func resumeFrom(e *roomtest.Env, trust *checkpoint.Trust) uint64 {
	stored := e.Stored()
	from := stored[len(stored)-1].Sequence + 1
	for _, id := range resumeRooms {
		rt := roomtest.Rebuild(e, id, trust)
		last := rt.Checkpoints[len(rt.Checkpoints)-1]
		leaf := rt.LeafSeqs[last.Size-1]
		for _, m := range stored {
			if p, err := (room.Subjects{}).Parse(m.Subject); err == nil && p.RoomID == id && m.Sequence > leaf && p.Kind != room.KindCheckpoint {
				from = min(from, m.Sequence)
				break
			}
		}
	}
	return from
}

// startBoth starts a checkpointer with o, which resumes, and one that
// reads every room from its first message (the oracle), waits until both
// have read the stream, and checks that they read exactly what they
// should (from wantFrom on, to the stream's end) and hold the same tree
// of every room, the independent rebuild's.
func startBoth(t *testing.T, e *roomtest.Env, o checkpointer.Options, trust *checkpoint.Trust, wantFrom uint64) (resumed, full *checkpointer.Checkpointer, logs *observer.ObservedLogs, contradictions *[]string) {
	t.Helper()
	last := e.State().LastSeq
	resumed, logs = roomtest.StartCheckpointer(t, e.Connect(), o)
	var got []string
	contradictions = &got
	fo := o
	fo.FullRead = true
	fo.OnContradiction = func(roomID, reason string) { got = append(got, roomID+": "+reason) }
	full, _ = roomtest.StartCheckpointer(t, e.Connect(), fo)
	roomtest.WaitFor(t, 20*time.Second, "both checkpointers caught up", func() bool { return resumed.CaughtUp() && full.CaughtUp() })
	if n, from := resumed.CatchUpRead(); from != wantFrom || n != last-wantFrom+1 {
		t.Fatalf("the resumed checkpointer read %d messages from stream seq %d; want %d from %d (stream's last %d)", n, from, last-wantFrom+1, wantFrom, last)
	}
	if n, from := full.CatchUpRead(); from != 1 || n != last {
		t.Fatalf("the full read read %d messages from stream seq %d; want %d from 1", n, from, last)
	}
	for _, id := range resumeRooms {
		rs, rr, rok := resumed.RoomTree(id)
		fs, fr, fok := full.RoomTree(id)
		rt := roomtest.Rebuild(e, id, trust)
		want, _ := rt.Tree.RootAt(rt.Tree.Size())
		if !rok || !fok || rs != fs || rr != fr || rs != rt.Tree.Size() || rr != want {
			t.Fatalf("%s: resumed tree %d %x, full read %d %x, rebuilt %d %x", id, rs, rr, fs, fr, rt.Tree.Size(), want)
		}
	}
	return resumed, full, logs, contradictions
}

// stopBoth stops the resumed checkpointer (its final checkpoints), then
// the full read, which reads them, accepts them and has nothing to add;
// then every checkpoint of every room verifies against an independent
// rebuild and a reader's audit of the stream is clean. It returns the
// rooms' checkpoint sizes.
func stopBoth(t *testing.T, e *roomtest.Env, resumed, full *checkpointer.Checkpointer, trust *checkpoint.Trust, contradictions *[]string) map[string][]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := resumed.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	before := e.CountOn(room.Subjects{}.Root() + ".*.checkpoint")
	if err := full.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.CountOn(room.Subjects{}.Root() + ".*.checkpoint"); n != before || len(*contradictions) > 0 {
		t.Fatalf("the full read wrote %d checkpoints after the resumed one's final ones, contradictions %v; want none", n-before, *contradictions)
	}
	sizes := map[string][]uint64{}
	for _, id := range resumeRooms {
		sizes[id] = roomtest.Rebuild(e, id, trust).CheckCheckpoints(t)
	}
	auditClean(t, e, trust)
	return sizes
}

// auditClean asserts a reader's audit of the stream finds nothing.
func auditClean(t *testing.T, e *roomtest.Env, trust *checkpoint.Trust) *reader.AuditReport {
	t.Helper()
	rep, err := reader.Audit(context.Background(), e.Js, reader.AuditOptions{Validator: e.V, Trust: trust})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) > 0 || len(rep.StreamProblems) > 0 {
		t.Fatalf("audit: violations %+v, stream problems %v", rep.Violations, rep.StreamProblems)
	}
	return rep
}

// TestCheckpointerResumesFromItsCheckpoints: a checkpointer that starts on
// a stream whose rooms' latest checkpoints it wrote reads only the
// messages after the last leaf they cover (exactly those: the count is
// asserted), and its trees, and the final checkpoints it writes, are the
// full read's: the full read, running beside it, holds the same roots and
// sizes, accepts its checkpoints and has nothing to add. Records after the
// resume point count from the resumed record count (they are leaves), and
// a third start resumes from the resumed checkpointer's checkpoints.
func TestCheckpointerResumesFromItsCheckpoints(t *testing.T) {
	t.Parallel()
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	key := roomtest.NewPublisherKey(t)
	trust := roomtest.Trusting(t, key)
	o := checkpointer.Options{Key: key, Every: 1000, Interval: time.Hour}
	chains := resumeChains(t, 60)

	first, _ := roomtest.StartCheckpointer(t, e.Connect(), o)
	gate := roomtest.AttestingGate(e, e.Connect(), key, first, ingest.GateOptions{MaxBatch: 7})
	// A quiet room, first on the stream and checkpointed, with nothing
	// after: it costs the resumed read nothing (resumeFrom leaves it out).
	quiet, _ := roomtest.Journal(t, "run-quiet", "cap-quiet", 5)
	if r, err := gate.AppendJournal(context.Background(), "room:resume-quiet", roomtest.Lines(quiet), nil); err != nil || r.Stored != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	resumeFill(t, e, gate, chains, 0, 30, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range append([]string{"room:resume-quiet"}, resumeRooms...) {
		m := e.OnSubject(room.Subjects{}.Checkpoint(id))
		if len(m) != 1 || !strings.HasPrefix(m[0].Header.Get(checkpoint.ResumeHeader), "1 ") {
			t.Fatalf("%s: %d checkpoints, resume header %q", id, len(m), m[0].Header.Get(checkpoint.ResumeHeader))
		}
	}
	// Appended while no checkpointer runs.
	resumeFill(t, e, roomtest.AttestingGate(e, e.Connect(), key, nil, ingest.GateOptions{MaxBatch: 7}), chains, 30, 45, "b")

	resumed, full, logs, contra := startBoth(t, e, o, trust, resumeFrom(e, trust))
	if l := logs.FilterMessage("checkpointer: resuming").All(); len(l) != 1 || l[0].ContextMap()["rooms_resumed"] != int64(3) || l[0].ContextMap()["rooms_read_whole"] != int64(0) {
		t.Fatalf("resume log %v", l)
	}
	sizes := stopBoth(t, e, resumed, full, trust, contra)
	// 30 entries and 2 records, then 15 and 2: the final checkpoints of
	// the first and the resumed checkpointer.
	for _, id := range resumeRooms {
		if !slices.Equal(sizes[id], []uint64{32, 49}) {
			t.Fatalf("%s: checkpoint sizes %v, want [32 49]", id, sizes[id])
		}
	}

	// Again, from the resumed checkpointer's checkpoints.
	resumeFill(t, e, roomtest.AttestingGate(e, e.Connect(), key, nil, ingest.GateOptions{MaxBatch: 7}), chains, 45, 60, "c")
	resumed, full, _, contra = startBoth(t, e, o, trust, resumeFrom(e, trust))
	sizes = stopBoth(t, e, resumed, full, trust, contra)
	for _, id := range resumeRooms {
		if !slices.Equal(sizes[id], []uint64{32, 49, 66}) {
			t.Fatalf("%s: checkpoint sizes %v, want [32 49 66]", id, sizes[id])
		}
	}
}

// TestCheckpointerResumeFallsBack: when a room's latest checkpoint cannot
// be resumed from (no resume header, as written before it; another
// trusted key's; a header changed under its signature; signed but with a
// damaged compact range, or naming another leaf),
// the room is read from its first message, with a warning that says why,
// while the other room resumes; the trees and final checkpoints are the
// full read's all the same, and the audit stays clean.
func TestCheckpointerResumeFallsBack(t *testing.T) {
	t.Parallel()
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	key, other := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	trust := roomtest.Trusting(t, key, other)
	o := checkpointer.Options{Key: key, TrustedPublishers: []string{other.NodeID()}, Every: 1000, Interval: time.Hour}
	otherSigner, err := checkpoint.NewNoteSigner(other)
	if err != nil {
		t.Fatal(err)
	}
	chains := resumeChains(t, 85)
	first, _ := roomtest.StartCheckpointer(t, e.Connect(), o)
	resumeFill(t, e, roomtest.AttestingGate(e, e.Connect(), key, first, ingest.GateOptions{MaxBatch: 7}), chains, 0, 10, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	forged, id := resumeRooms[0], 0
	ckSubj := room.Subjects{}.Checkpoint(forged)
	// resign signs an edited header as the checkpointer would have: what
	// the checks after its signature refuse is what a checkpointer of the
	// same key that went wrong could write.
	resign := func(data []byte, h string) string {
		sig, err := checkpoint.SignResume(key, data, h)
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
	for _, tc := range []struct {
		why  string
		edit func(data []byte, h, sig string) ([]byte, string, string) // the forged copy of the latest checkpoint
	}{
		{"no_header", func(data []byte, _, _ string) ([]byte, string, string) { return data, "", "" }},
		{"other_key", func(data []byte, h, sig string) ([]byte, string, string) {
			ck := roomtest.Parsed(t, data)
			n, err := checkpoint.Sign(otherSigner, forged, ck.Size, ck.Root)
			if err != nil {
				t.Fatal(err)
			}
			return n, h, sig
		}},
		{"unsigned", func(data []byte, h, sig string) ([]byte, string, string) {
			rs, err := checkpoint.ParseResume(h)
			if err != nil || rs.Records == 0 {
				t.Fatalf("%q: %v", h, err)
			}
			rs.Records-- // a record count the signature is not over: every later record's position
			return data, rs.String(), sig
		}},
		{"bad_range", func(data []byte, h, _ string) ([]byte, string, string) {
			rs, err := checkpoint.ParseResume(h)
			if err != nil || len(rs.Prefix) == 0 {
				t.Fatalf("%q: %v", h, err)
			}
			rs.Prefix[0][0] ^= 1
			return data, rs.String(), resign(data, rs.String())
		}},
		{"leaf_mismatch", func(data []byte, h, _ string) ([]byte, string, string) {
			rs, err := checkpoint.ParseResume(h)
			if err != nil {
				t.Fatal(err)
			}
			rs.LeafSeq--
			return data, rs.String(), resign(data, rs.String())
		}},
	} {
		t.Run(tc.why, func(t *testing.T) {
			resumeFill(t, e, roomtest.AttestingGate(e, e.Connect(), key, nil, ingest.GateOptions{MaxBatch: 7}), chains, 10+id*15, 25+id*15, fmt.Sprint(tc.why))
			id++
			last := e.OnSubject(ckSubj)
			m := last[len(last)-1]
			data, h, sig := tc.edit(m.Data, m.Header.Get(checkpoint.ResumeHeader), m.Header.Get(checkpoint.ResumeSignatureHeader))
			msg := &nats.Msg{Subject: ckSubj, Data: data, Header: nats.Header{}}
			if h != "" {
				msg.Header.Set(checkpoint.ResumeHeader, h)
			}
			if sig != "" {
				msg.Header.Set(checkpoint.ResumeSignatureHeader, sig)
			}
			if _, err := e.Js.PublishMsg(context.Background(), msg); err != nil {
				t.Fatal(err)
			}
			first := e.OnSubject(room.Subjects{}.Room(forged))[0].Sequence
			resumed, full, logs, contra := startBoth(t, e, o, trust, first)
			warns := logs.FilterMessage("checkpointer: cannot resume the room from its latest checkpoint: reading it from its first message").All()
			if len(warns) != 1 || warns[0].ContextMap()["room"] != forged || warns[0].ContextMap()["why"] != tc.why {
				t.Fatalf("warnings %v, want one for %s saying %s", warns, forged, tc.why)
			}
			if l := logs.FilterMessage("checkpointer: resuming").All(); len(l) != 1 || l[0].ContextMap()["rooms_resumed"] != int64(1) {
				t.Fatalf("resume log %v", l)
			}
			stopBoth(t, e, resumed, full, trust, contra)
		})
	}
}

// TestCheckpointerResumeTrustChanged: a checkpointer that trusts other
// publishers than the one that wrote the rooms' checkpoints would build
// other trees (another's attestations admit or no longer admit messages):
// it reads every room from its first message, saying so, and its trees
// are the full read's.
func TestCheckpointerResumeTrustChanged(t *testing.T) {
	t.Parallel()
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	key, other := roomtest.NewPublisherKey(t), roomtest.NewPublisherKey(t)
	trust := roomtest.Trusting(t, key)
	chains := resumeChains(t, 20)
	o := checkpointer.Options{Key: key, TrustedPublishers: []string{other.NodeID()}, Every: 1000, Interval: time.Hour}
	first, _ := roomtest.StartCheckpointer(t, e.Connect(), o)
	resumeFill(t, e, roomtest.AttestingGate(e, e.Connect(), key, first, ingest.GateOptions{MaxBatch: 7}), chains, 0, 10, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	resumeFill(t, e, roomtest.AttestingGate(e, e.Connect(), key, nil, ingest.GateOptions{MaxBatch: 7}), chains, 10, 20, "b")
	o.TrustedPublishers = nil
	resumed, full, logs, contra := startBoth(t, e, o, trust, 1)
	warns := logs.FilterMessage("checkpointer: cannot resume the room from its latest checkpoint: reading it from its first message").All()
	var why []string
	for _, w := range warns {
		why = append(why, fmt.Sprint(w.ContextMap()["room"], " ", w.ContextMap()["why"]))
	}
	if want := []string{resumeRooms[0] + " trust_changed", resumeRooms[1] + " trust_changed"}; !slices.Equal(why, want) {
		t.Fatalf("warnings %v, want %v", why, want)
	}
	stopBoth(t, e, resumed, full, trust, contra)
}

// TestCheckpointerStopDuringCatchUp: a checkpointer stopped while its
// catch-up read is in the middle of the stream writes, within the stop
// limit, the checkpoint of each room's tree as read so far, on whole
// atomic batches only (the batch the read is in the middle of is left
// out), and says how far it read; the checkpoints verify and the audit is
// clean; the next checkpointer resumes from them.
func TestCheckpointerStopDuringCatchUp(t *testing.T) {
	t.Parallel()
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	key := roomtest.NewPublisherKey(t)
	trust := roomtest.Trusting(t, key)
	o := checkpointer.Options{Key: key, Every: 1000, Interval: time.Hour}
	chains := resumeChains(t, 30)
	// Room a: batches of 7 at stream seqs 1-7, 8-14, 15-21, 22-28, 29-30,
	// records 31 and 32; then room b.
	resumeFill(t, e, roomtest.AttestingGate(e, e.Connect(), key, nil, ingest.GateOptions{MaxBatch: 7}), chains, 0, 30, "a")
	last := e.State().LastSeq
	pause := make(chan struct{})
	ckp, logs := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.WithCatchUpPause(o, 10, pause))
	pause <- struct{}{} // the first read handled: seqs 1-10; then 11-20
	roomtest.WaitFor(t, 5*time.Second, "the second read", func() bool { n, _ := ckp.CatchUpRead(); return n == 20 })
	const limit = 6 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	err := ckp.Stop(ctx)
	if took := time.Since(start); took >= limit {
		t.Fatalf("Stop took %s, the limit is %s", took, limit)
	}
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("read 20 of %d messages", last)) {
		t.Fatalf("Stop: %v; want how far it read", err)
	}
	if n := logs.FilterMessage("checkpointer: stopped before reading the stream to its end: writing the checkpoints of what was read").Len(); n != 1 {
		t.Fatalf("%d warnings of the prefix, want 1", n)
	}
	// Room a's tree as read: the whole batches at 1-7 and 8-14 (15-20 is
	// part of a batch not read whole); room b not read at all.
	rt := roomtest.Rebuild(e, resumeRooms[0], trust)
	if sizes := rt.CheckCheckpoints(t); !slices.Equal(sizes, []uint64{14}) {
		t.Fatalf("room a's checkpoint sizes %v, want [14]", sizes)
	}
	if n := e.CountOn(room.Subjects{}.Checkpoint(resumeRooms[1])); n != 0 {
		t.Fatalf("%d checkpoints of room b, which was not read", n)
	}
	rep := auditClean(t, e, trust)
	for _, rc := range rep.Checkpoints {
		if rc.RoomID == resumeRooms[0] && (rc.Latest == nil || rc.Covered != 14 || rc.Admitted != 32) {
			t.Fatalf("audit of room a: %+v", rc)
		}
	}
	// The next checkpointer resumes room a after its leaf 14 (stream seq
	// 14) and reads room b from its first message, which comes later.
	next, _ := roomtest.StartCheckpointer(t, e.Connect(), o)
	roomtest.WaitFor(t, 10*time.Second, "caught up", next.CaughtUp)
	if n, from := next.CatchUpRead(); from != 15 || n != e.State().LastSeq-14 {
		t.Fatalf("read %d from %d; want %d from 15", n, from, e.State().LastSeq-14)
	}
}

// TestCheckpointerResumesWithDeploymentLog: with a deployment origin (room
// checkpoints signed under the room's origin, the deployment log kept),
// a restarted checkpointer resumes from the rooms' checkpoints all the
// same, and the log's entries are then every room checkpoint on the
// stream, in stream order, none twice.
func TestCheckpointerResumesWithDeploymentLog(t *testing.T) {
	t.Parallel()
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	key := roomtest.NewPublisherKey(t)
	trust := roomtest.Trusting(t, key)
	o := checkpointer.Options{Key: key, Origin: tDeployment, Every: 1000, Interval: time.Hour,
		Deployment: checkpointer.DeploymentOptions{Interval: 50 * time.Millisecond}}
	chains := resumeChains(t, 40)
	first, _ := roomtest.StartCheckpointer(t, e.Connect(), o)
	resumeFill(t, e, roomtest.AttestingGate(e, e.Connect(), key, first, ingest.GateOptions{MaxBatch: 7}), chains, 0, 20, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	resumeFill(t, e, roomtest.AttestingGate(e, e.Connect(), key, nil, ingest.GateOptions{MaxBatch: 7}), chains, 20, 40, "b")
	want := resumeFrom(e, trust)
	last := e.State().LastSeq
	second, logs := roomtest.StartCheckpointer(t, e.Connect(), o)
	roomtest.WaitFor(t, 10*time.Second, "caught up", second.CaughtUp)
	if n, from := second.CatchUpRead(); from != want || n != last-want+1 {
		t.Fatalf("read %d from %d; want %d from %d", n, from, last-want+1, want)
	}
	if l := logs.FilterMessage("checkpointer: resuming").All(); len(l) != 1 || l[0].ContextMap()["rooms_resumed"] != int64(2) {
		t.Fatalf("resume log %v", l)
	}
	if err := second.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var notes [][]byte
	for _, m := range e.Stored() {
		if p, err := (room.Subjects{}).Parse(m.Subject); err == nil && p.Kind == room.KindCheckpoint {
			notes = append(notes, m.Data)
		}
	}
	entries, _ := deploymentLog(t, e)
	if len(notes) != 4 || len(entries) != len(notes) {
		t.Fatalf("%d room checkpoints, %d log entries; want 4 of each", len(notes), len(entries))
	}
	for i, m := range entries {
		if string(m.Data) != string(notes[i]) {
			t.Fatalf("log entry %d is not the room checkpoint %d", i, i)
		}
	}
	for _, id := range resumeRooms {
		if sizes := roomtest.Rebuild(e, id, trust).CheckCheckpoints(t); !slices.Equal(sizes, []uint64{22, 44}) {
			t.Fatalf("%s: sizes %v, want [22 44]", id, sizes)
		}
	}
}

// TestCheckpointerReadWhole: a message the store lost before a room's
// latest checkpoint, the server still counting it (its state file kept),
// is not seen by a checkpointer that resumes the room; one told to read
// the room whole (Options.ReadWhole, what serve keeps of an earlier full
// read) finds the contradiction again, and tells of a room so read that
// matches its checkpoint (reason "") once its catch-up read is done.
func TestCheckpointerReadWhole(t *testing.T) {
	e := roomtest.NewEnvUnmarked(t, embedded.Options{})
	key := roomtest.NewPublisherKey(t)
	o := checkpointer.Options{Key: key, Every: 1000, Interval: time.Hour}
	chains := resumeChains(t, 30)
	first, _ := roomtest.StartCheckpointer(t, e.Connect(), o)
	resumeFill(t, e, roomtest.AttestingGate(e, e.Connect(), key, first, ingest.GateOptions{MaxBatch: 7}), chains, 0, 30, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	e.Stop()
	e.DamageKeepingState([]byte(chains["room:resume-a"][3].EntryHash()))
	e.Start()

	start := func(readWhole ...string) (*checkpointer.Checkpointer, *observer.ObservedLogs, func() []string) {
		var mu sync.Mutex
		var told []string
		o := o
		o.ReadWhole = readWhole
		o.OnContradiction = func(roomID, reason string) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, roomID+": "+reason)
		}
		c, logs := roomtest.StartCheckpointer(t, e.Connect(), o)
		roomtest.WaitFor(t, 20*time.Second, "caught up", c.CaughtUp)
		return c, logs, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(told) }
	}
	// Resumed: the damage lies before the checkpoints, unread.
	resumed, _, told := start()
	if got := told(); len(got) != 0 {
		t.Fatalf("the resumed checkpointer found %v", got)
	}
	if n, _ := resumed.CatchUpRead(); n != 0 {
		t.Fatalf("the resumed checkpointer read %d messages, want none", n)
	}
	if err := resumed.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	c, logs, told := start(resumeRooms...)
	// The whole stream, but the message the server cannot read.
	if n, from := c.CatchUpRead(); from != 1 || n != e.State().LastSeq-1 {
		t.Fatalf("read %d messages from stream seq %d, want the whole stream (%d) but one", n, from, e.State().LastSeq)
	}
	got := told()
	if len(got) != 2 || !strings.HasPrefix(got[0], "room:resume-a: its checkpoint at stream seq ") || got[1] != "room:resume-b: " {
		t.Fatalf("told %q; want room:resume-a contradicted, then room:resume-b matching", got)
	}
	if l := logs.FilterMessageSnippet("an earlier run found").Len(); l != 2 {
		t.Fatalf("%d warnings of rooms read whole, want 2", l)
	}
}
