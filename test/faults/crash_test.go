package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/test/crashfs"
)

// crashTrials is how many crash trials TestCrash runs: 3, or
// ROOMPUB_CRASH_TRIALS (make test-crash).
func crashTrials(t *testing.T) int {
	t.Helper()
	s := os.Getenv("ROOMPUB_CRASH_TRIALS")
	if s == "" {
		return 3
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("ROOMPUB_CRASH_TRIALS=%q: want a positive number", s)
	}
	return n
}

// crashFigures is what one crash did, for the log and the summary.
type crashFigures struct {
	ackedEntries, ackedRecords int // acknowledged before the crash
	foundEntries, foundRecords int // of those, in the stream after the restart
	dropped                    crashfs.CrashStats
}

func (f crashFigures) lost() int {
	return f.ackedEntries - f.foundEntries + f.ackedRecords - f.foundRecords
}

func (f crashFigures) String() string {
	return fmt.Sprintf("acknowledged %d entries and %d records; after the restart %d and %d of them are stored (%d lost); the filesystem dropped %d bytes, %d names",
		f.ackedEntries, f.ackedRecords, f.foundEntries, f.foundRecords, f.lost(), f.dropped.BytesDropped, len(f.dropped.NamesDropped))
}

// crashMidShipment ships c and rs into roomID through srv (journal and
// records at once), SIGKILLs serve once the chain holds at entries
// messages, and crashes its filesystem. It returns what the shippers
// acknowledged before the kill.
func crashMidShipment(t *testing.T, tl *tally, srv *serve, cfs *crashfs.FS, roomID string, c *capsule, rs *recordSet, entries uint64) (crashFigures, *recordRuns) {
	t.Helper()
	in := inspect(t, srv.url)
	ship := startProc(t, "publisher journal", publisherBin, "journal", "--json", "--server", srv.url, "--room", roomID, c.dir)
	exec := startProc(t, "publisher execution", publisherBin, append([]string{"execution", "--json", "--server", srv.url}, rs.files...)...)
	seen := in.waitCount(in.subj.Journal(roomID, c.key()), entries, 60*time.Second)
	srv.kill()
	in.nc.Close()
	tl.Faults++
	status := ship.wait(30 * time.Second)
	lines := parseShipLines(t, ship.stdout.String())
	if status != 2 || len(lines) != 1 || lines[0].OK || lines[0].Refused != nil {
		t.Fatalf("publisher journal after the kill: exit %d, want 2 with one line saying what was stored\n%s%s", status, ship.stdout, ship.stderr)
	}
	rr := &recordRuns{acked: map[string]room.Outcome{}}
	rr.note(t, result{status: exec.wait(30 * time.Second), stdout: exec.stdout.String()})
	st, err := cfs.Crash()
	if err != nil {
		t.Fatalf("crash: %v", err)
	}
	f := crashFigures{ackedEntries: lines[0].acked(), ackedRecords: len(rr.acked), dropped: st}
	t.Logf("SIGKILL of publisher serve with >= %d entries in the chain, then a crash of its filesystem: it dropped %d bytes and %d names (%s)",
		seen, st.BytesDropped, len(st.NamesDropped), sample(st.NamesDropped, 6))
	return f, rr
}

// sample is the first n of names, and how many more.
func sample(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// tryRestart starts serve's command again after a crash: refused is false
// once it serves, or true with its exit status when it stops before.
func (s *serve) tryRestart(t *testing.T) (refused bool, status int) {
	t.Helper()
	if s.running() {
		t.Fatal("restart of a running publisher serve")
	}
	old := s.proc
	s.proc = startProc(old.t, old.name, publisherBin, append([]string{"serve"}, s.args...)...)
	deadline := time.After(60 * time.Second)
	for {
		if m := servingRE.FindStringSubmatch(s.stderr.String()); m != nil {
			s.url = m[1]
			return false, 0
		}
		select {
		case <-s.exited:
			return true, s.cmd.ProcessState.ExitCode()
		case <-deadline:
			t.Fatalf("publisher serve did not say it serves within 60s:\n%s", tail(s.stderr.String(), 4000))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// found counts what of the acknowledged entries and records the stream
// holds: the chain's prefix (byte for byte, in order) and the records.
func (in *inspector) found(c *capsule, roomID string, acked int, rs *recordSet, rr *recordRuns) (entries, records int) {
	in.t.Helper()
	msgs := in.read(in.subj.Journal(roomID, c.key()))
	for entries < min(len(msgs), acked) && string(msgs[entries].data) == string(c.lines[entries]) {
		entries++
	}
	stored := map[string]bool{}
	for _, m := range in.read(in.subj.Records(roomID)) {
		stored[string(m.data)] = true
	}
	for i, f := range rs.files {
		if _, ok := rr.acked[f]; ok && stored[string(rs.recs[i].Canonical())] {
			records++
		}
	}
	return entries, records
}

// TestCrash: `publisher serve` on its embedded server with its default
// durability (fsync before every acknowledgement) keeps its store on a
// crash filesystem (test/crashfs). In each trial a 3,000-entry journal
// and 40 records are shipped at once; at a random point serve is
// SIGKILLed and the filesystem crashed (everything not fsynced is
// dropped, as by a power loss); serve is restarted on the same store and
// the same commands are run again. Oracles: every entry and record
// acknowledged before the crash is stored after the restart, exactly
// once; no fork; audit clean; the shippers resume without help.
// ROOMPUB_CRASH_TRIALS sets the number of trials (3).
func TestCrash(t *testing.T) {
	tl := count(t)
	key := hostKey(t)
	var total crashFigures
	trials := crashTrials(t)
	for i := range trials {
		t.Run(fmt.Sprintf("trial%d", i+1), func(t *testing.T) {
			ownAuditState(t)
			cfs := crashfs.MountForTest(t, crashfs.Options{Model: crashfs.POSIX})
			srv := startEmbeddedServe(t, cfs.Dir(), key, "--max-batch", "25", "--checkpoint-every", "500")
			roomID := fmt.Sprintf("room:crash-%d", i+1)
			dir := t.TempDir()
			c := newCapsule(t, filepath.Join(dir, "capsule"), fmt.Sprintf("run-crash-%d", i+1), 6000)
			rs := newRecords(t, filepath.Join(dir, "records"), key, roomID, fmt.Sprintf("crash%d", i+1), 200)
			at := uint64(1200 + mrand.IntN(3300))
			f, rr := crashMidShipment(t, tl, srv, cfs, roomID, c, rs, at)
			if refused, status := srv.tryRestart(t); refused {
				t.Fatalf("FINDING: publisher serve refuses to start after the crash (exit %d); %s\n%s", status, f, tail(srv.stderr.String(), 3000))
			}
			in := inspect(t, srv.url)
			f.foundEntries, f.foundRecords = in.found(c, roomID, f.ackedEntries, rs, rr)
			t.Logf("crash at >= %d entries: %s", at, f)
			total.ackedEntries += f.ackedEntries
			total.ackedRecords += f.ackedRecords
			total.foundEntries += f.foundEntries
			total.foundRecords += f.foundRecords
			total.dropped.BytesDropped += f.dropped.BytesDropped
			total.dropped.NamesDropped = append(total.dropped.NamesDropped, f.dropped.NamesDropped...)
			if f.lost() != 0 {
				t.Errorf("FINDING (oracle: no acknowledged entry or record lost): fsync before every acknowledgement lost %d acknowledged items in a crash: %s", f.lost(), f)
			}
			jr := shipUntilDone(t, tl, srv.url, roomID, c, 3)
			more := shipRecordsUntilDone(t, tl, srv.url, rs, 3)
			tl.DupsReported += jr.dupes() + more.dupes
			in.checkChain(tl, c, roomID, max(f.ackedEntries, jr.maxAcked()))
			in.checkRecords(tl, rs, len(more.acked))
			auditClean(t, tl, srv.url, []string{key.NodeID()}, uint64(len(c.lines)), uint64(len(rs.recs)), 1)
			if st := srv.term(); st != 0 {
				t.Errorf("publisher serve: exit %d after SIGTERM", st)
			}
		})
	}
	t.Logf("%d trials: %s", trials, total)
}

// TestCrashNATSDirectories pins a finding about nats-server (v2.15.2)
// and shows roompub's answer to it, on the strict crash filesystem
// (crashfs.POSIX: a name is durable once its directory is fsynced). The
// server never fsyncs the directories it creates (the account's
// jetstream/$G, its streams/, a stream's directory) nor msgs/ when it
// starts a block file: an embedded server with an fsync before every
// acknowledgement stores and acknowledges 200 messages, stops, and the
// filesystem crashes. Without roompub's name syncer the stream is gone
// with every acknowledged message (the test fails, saying so, once
// nats-server fsyncs its directories); with it (what publisher serve
// runs before it reports an append stored: embedded.Server.NameSyncer),
// all 200 are there.
func TestCrashNATSDirectories(t *testing.T) {
	for _, syncNames := range []bool{false, true} {
		t.Run(fmt.Sprintf("namesyncer=%t", syncNames), func(t *testing.T) {
			tl := count(t)
			cfs := crashfs.MountForTest(t, crashfs.Options{Model: crashfs.POSIX})
			start := func() (*embedded.Server, jetstream.JetStream, *nats.Conn) {
				srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: cfs.Dir()})
				if err != nil {
					t.Fatal(err)
				}
				nc, err := nats.Connect(srv.ClientURL())
				if err != nil {
					t.Fatal(err)
				}
				js, _ := jetstream.New(nc)
				return srv, js, nc
			}
			srv, js, nc := start()
			ctx := context.Background()
			var subj room.Subjects
			if _, err := room.EnsureStream(ctx, js, room.StreamConfig("", subj, 1), subj); err != nil {
				t.Fatal(err)
			}
			sync := srv.NameSyncer(room.DefaultStream)
			const n = 200
			for i := range n {
				if _, err := js.Publish(ctx, "rooms.crash.exec", []byte(strconv.Itoa(i))); err != nil {
					t.Fatal(err)
				}
				if syncNames {
					if err := sync(); err != nil {
						t.Fatal(err)
					}
				}
			}
			tl.Acked += n
			nc.Close()
			srv.Shutdown()
			st, err := cfs.Crash()
			if err != nil {
				t.Fatal(err)
			}
			tl.Faults++
			srv, js, nc = start()
			defer srv.Shutdown()
			defer nc.Close()
			var msgs uint64
			if s, err := js.Stream(ctx, room.DefaultStream); err == nil {
				msgs = s.CachedInfo().State.Msgs
			} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Fatal(err)
			}
			tl.Found += int(msgs)
			t.Logf("%d acknowledged, %d stored after the crash; the filesystem dropped %d bytes, %d names (%s)",
				n, msgs, st.BytesDropped, len(st.NamesDropped), sample(st.NamesDropped, 4))
			switch {
			case syncNames && msgs != n:
				t.Errorf("with the name syncer, %d of %d acknowledged messages after the crash", msgs, n)
			case !syncNames && msgs != 0:
				t.Errorf("without the name syncer, %d of %d acknowledged messages survived the crash: does nats-server fsync its directories now? Then the finding in docs/reliability.md is gone", msgs, n)
			case !syncNames:
				t.Logf("FINDING: nats-server fsyncs no directory it creates: a power loss took the stream and its %d acknowledged messages (dropped %s)", n, sample(st.NamesDropped, 4))
			}
		})
	}
}

// auditState runs `subscriber audit --json` trusting the suite's
// publisher key with its own state directory, and returns its exit status
// and report.
func auditState(t *testing.T, url, state string, key *events.HostKey) (int, crashAudit, result) {
	t.Helper()
	r := run(t, 2*time.Minute, subscriberBin, "audit", "--json", "--server", url, "--state-dir", state,
		"--trusted-publisher", publisherID, "--trusted-host", key.NodeID())
	var rep crashAudit
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("subscriber audit --json: exit %d, %v\n%s%s", r.status, err, tail(r.stdout, 3000), tail(r.stderr, 3000))
	}
	return r.status, rep, r
}

// waitStreamMark waits until the stream check of the serve at url has
// recorded the room stream's last sequence in the mark file of its store
// directory, and returns that mark; it fails the test at until.
func waitStreamMark(t *testing.T, url, store string, until time.Time) room.StreamMark {
	t.Helper()
	in := inspect(t, url)
	defer in.nc.Close()
	file := room.StreamMarkFile(store, room.DefaultStream)
	for {
		var m room.StreamMark
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := in.stream.Info(ctx)
		cancel()
		if err == nil {
			var data []byte
			if data, err = os.ReadFile(file); err == nil {
				err = json.Unmarshal(data, &m)
			}
		}
		// The mark read after the stream covers all the stream held.
		if err == nil && m.Created.Equal(info.Created) && m.LastSeq >= info.State.LastSeq {
			return m
		}
		if time.Now().After(until) {
			if err == nil {
				err = fmt.Errorf("the stream was created %s, last sequence %d", info.Created.UTC().Format(time.RFC3339Nano), info.State.LastSeq)
			}
			t.Fatalf("serve's stream check did not record the stream's last sequence in %s: mark %s; %v", file, m, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// crashAudit is the part of `subscriber audit --json` TestCrashSyncInterval reads.
type crashAudit struct {
	Checkpoints []struct {
		Room     string `json:"room"`
		Verified int    `json:"checkpoints_verified"`
		Latest   *struct {
			Size uint64 `json:"size"`
		} `json:"latest"`
		Stored *struct {
			Size uint64 `json:"size"`
		} `json:"stored"`
		Refused string `json:"refused"`
	} `json:"checkpoints"`
	Totals struct {
		Messages uint64         `json:"messages"`
		Entries  uint64         `json:"entries"`
		Records  uint64         `json:"records"`
		ByCode   map[string]int `json:"by_code"`
	} `json:"totals"`
}

// TestCrashSyncInterval gives the crash tests their teeth: `publisher
// serve --sync-interval 2m` (nats-server's default: acknowledged before
// it is on disk) on the journaled crash filesystem, so that what is lost
// is data nats-server did not fsync. Two cases run side by side:
//
//   - new: the stream is created under --sync-interval 2m;
//   - tail: the stream and its first 1,500 entries were written by serve's
//     default (fsync before every acknowledgement), and serve was
//     restarted with --sync-interval 2m for the rest.
//
// In each, the journal (3,000 entries) and 20 records are shipped and
// acknowledged, an audit keeps the room's signed checkpoint in its state
// directory, and serve's stream check (--stream-check-interval 1s) records
// the stream's last sequence in its mark (the test waits for it); then
// serve is SIGKILLed and the filesystem crashed, before nats-server's first background sync (60 to
// 120s after the start). Oracles: the crash loses acknowledged entries
// (else the filesystem does not drop what it should): in new the whole
// stream (its meta.inf was never fsynced either), in tail exactly what
// was shipped after the restart; serve refuses to start (stream_replaced:
// the stream is gone, or lost messages); started with --accept-stream it
// serves, and the audit holding the earlier checkpoint refuses the room as
// rolled back (checkpoint_mismatch, exit 1); the shippers then ship what
// was lost, each item once, and the audit is clean.
func TestCrashSyncInterval(t *testing.T) {
	tl := count(t)
	key := hostKey(t)
	for _, tc := range []struct {
		name    string
		durable int    // entries shipped with fsync before every acknowledgement first
		refusal string // serve's error after the crash
	}{
		{"new", 0, "publisher: stream_replaced: stream ROOMS is gone: serve remembers it created "},
		{"tail", 1500, "publisher: stream_replaced: stream ROOMS lost messages: found it created "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			crashSyncInterval(t, tl, key, tc.name, tc.durable, tc.refusal)
		})
	}
}

func crashSyncInterval(t *testing.T, tl *tally, key *events.HostKey, name string, durable int, refusal string) {
	ownAuditState(t)
	cfs := crashfs.MountForTest(t, crashfs.Options{Model: crashfs.Journaled})
	roomID := "room:crash-interval-" + name
	dir := t.TempDir()
	c := newCapsule(t, filepath.Join(dir, "capsule"), "run-crash-interval-"+name, 3000)
	rs := newRecords(t, filepath.Join(dir, "records"), key, roomID, "interval-"+name, 20)
	args := []string{"--max-batch", "25", "--checkpoint-interval", "1s"}
	if durable > 0 {
		c.truncate(t, durable)
		srv := startEmbeddedServe(t, cfs.Dir(), key, args...)
		if l, r := shipJournal(t, srv.url, roomID, c); r.status != 0 || l.acked() != durable {
			t.Fatalf("the first %d entries, fsync before every acknowledgement: exit %d, %d acknowledged", durable, r.status, l.acked())
		}
		if st := srv.term(); st != 0 {
			t.Fatalf("publisher serve: exit %d after SIGTERM", st)
		}
		c.grow(t, len(c.lines))
	}
	started := time.Now()
	srv := startEmbeddedServe(t, cfs.Dir(), key, append(args, "--sync-interval", "2m", "--stream-check-interval", "1s")...)
	jr := shipUntilDone(t, tl, srv.url, roomID, c, 1)
	rr := shipRecordsUntilDone(t, tl, srv.url, rs, 1)
	time.Sleep(2 * time.Second) // the checkpoint of the whole room (every 1s)
	state := t.TempDir()
	st, before, r := auditState(t, srv.url, state, key)
	if st != 0 || before.Totals.Entries != uint64(len(c.lines)) || len(before.Checkpoints) != 1 || before.Checkpoints[0].Latest == nil {
		t.Fatalf("audit before the crash: exit %d, %d entries, checkpoints %+v; want exit 0, %d entries, a checkpoint\n%s", st, before.Totals.Entries, before.Checkpoints, len(c.lines), tail(r.stderr, 2000))
	}
	kept := before.Checkpoints[0].Latest.Size
	mark := waitStreamMark(t, srv.url, cfs.Dir(), started.Add(50*time.Second))
	t.Logf("serve's stream check recorded %s %s after it started", mark, time.Since(started).Round(time.Second))
	srv.kill()
	tl.Faults++
	if el := time.Since(started); el > 55*time.Second {
		t.Fatalf("the crash came %s after serve started: nats-server may have synced (its first background sync comes 60 to 120s after the start)", el.Round(time.Second))
	}
	dropped, err := cfs.Crash()
	if err != nil {
		t.Fatal(err)
	}
	f := crashFigures{ackedEntries: jr.last().acked(), ackedRecords: len(rr.acked), dropped: dropped}
	t.Logf("SIGKILL of publisher serve %s after it started, then a crash of its filesystem: it dropped %d bytes and %d names (%s)",
		time.Since(started).Round(time.Second), dropped.BytesDropped, len(dropped.NamesDropped), sample(dropped.NamesDropped, 6))

	// serve's stream mark: it remembers more messages than the store holds.
	refused, status := srv.tryRestart(t)
	if !refused || status != 2 || !strings.Contains(srv.stderr.String(), refusal) {
		t.Errorf("publisher serve after the crash: refused %v, exit %d; want exit 2 saying %q\n%s", refused, status, refusal, tail(srv.stderr.String(), 3000))
	} else {
		t.Logf("serve detects it: exit 2: %s", firstLine(srv.stderr.String()))
	}
	if refused {
		srv.args = append(srv.args, "--accept-stream")
		if refused, status := srv.tryRestart(t); refused {
			t.Fatalf("publisher serve --accept-stream: exit %d\n%s", status, tail(srv.stderr.String(), 3000))
		}
	}
	in := inspect(t, srv.url)
	f.foundEntries, f.foundRecords = in.found(c, roomID, f.ackedEntries, rs, rr)
	t.Logf("--sync-interval 2m: %s", f)
	if f.lost() == 0 || f.dropped.BytesDropped == 0 {
		t.Fatalf("oracle (the crash has teeth): --sync-interval 2m lost nothing acknowledged: %s; the filesystem is not dropping unsynced data", f)
	}
	if f.foundEntries != durable || f.foundRecords != 0 {
		t.Errorf("after the crash the room holds %d entries and %d records; want exactly the %d written with fsync before every acknowledgement, and no record", f.foundEntries, f.foundRecords, durable)
	}

	// The reader holding the earlier checkpoint.
	st, after, r := auditState(t, srv.url, state, key)
	if st != 1 || after.Totals.ByCode["checkpoint_mismatch"] == 0 || len(after.Checkpoints) != 1 || !strings.Contains(after.Checkpoints[0].Refused, "rolled back") {
		t.Errorf("audit with the checkpoint of size %d after the crash: exit %d, by code %v, checkpoints %+v; want exit 1 refusing the room as rolled back (checkpoint_mismatch)\n%s",
			kept, st, after.Totals.ByCode, after.Checkpoints, tail(r.stderr, 2000))
	} else {
		t.Logf("the reader detects it: audit exit 1, checkpoint_mismatch: %s", after.Checkpoints[0].Refused)
	}

	// The shippers ship what was lost; the audit is clean.
	jr2 := shipUntilDone(t, tl, srv.url, roomID, c, 3)
	if l := jr2.runs[0]; l.AlreadyStored != f.foundEntries || l.Stored != len(c.lines)-f.foundEntries {
		t.Errorf("the journal shipped again after the crash: %d already stored, %d stored; want %d, %d", l.AlreadyStored, l.Stored, f.foundEntries, len(c.lines)-f.foundEntries)
	}
	more := shipRecordsUntilDone(t, tl, srv.url, rs, 3)
	in.checkChain(tl, c, roomID, len(c.lines))
	in.checkRecords(tl, rs, len(more.acked))
	auditClean(t, tl, srv.url, []string{key.NodeID()}, uint64(len(c.lines)), uint64(len(rs.recs)), 1)
}
