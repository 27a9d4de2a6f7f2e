package ingest_test

import (
	"bytes"
	"fmt"
	"github.com/roompub/roompub/room/embedded"
	"sync"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// racers returns two gates over the env's stream, each on its own
// connection, as two publisher processes would have.
func racers(e *roomtest.Env) [2]*ingest.Gate {
	return [2]*ingest.Gate{e.NewGate(e.Connect()), e.NewGate(e.Connect())}
}

// together runs f(0) and f(1) at once and waits for both.
func together(f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}

// TestRaceSameJournal: two gates ship the same journal at once, in small
// batches of different sizes; the chain ends up with every entry exactly
// once, in order, and every item is stored or duplicate.
func TestRaceSameJournal(t *testing.T) {
	e := roomtest.NewEnv(t)
	gates := racers(e)
	const rounds, n = 20, 50
	batch := [2]int{5, 3}
	for round := range rounds {
		run := fmt.Sprintf("race-%d", round)
		entries, _ := roomtest.Journal(t, run, "cap-1", n)
		var replies [2][]room.JournalReply
		together(func(i int) {
			for from := 0; from < n; from += batch[i] {
				r, err := gates[i].AppendJournal(t.Context(), "room:race", roomtest.Lines(entries[from:min(from+batch[i], n)]), nil)
				if err != nil {
					t.Errorf("gate %d: %v", i, err)
					return
				}
				replies[i] = append(replies[i], r)
			}
		})
		if t.Failed() {
			t.FailNow()
		}
		storedBy := make([]int, n) // how often each position was reported stored
		var seqs = map[uint64]int{}
		for i := range 2 {
			for _, r := range replies[i] {
				if r.Stored+r.Dupes != len(r.Items) {
					t.Fatalf("round %d gate %d: %+v", round, i, r)
				}
				for _, it := range r.Items {
					switch it.Outcome {
					case room.OutcomeStored:
						storedBy[roomtest.SeqOf(it)]++
						seqs[it.StreamSeq]++
					case room.OutcomeDuplicate:
					default:
						t.Fatalf("round %d gate %d: item %+v", round, i, it)
					}
					if it.Hash != entries[roomtest.SeqOf(it)].EntryHash() {
						t.Fatalf("round %d gate %d: item %+v", round, i, it)
					}
				}
			}
		}
		for p, c := range storedBy {
			if c != 1 {
				t.Fatalf("round %d: position %d reported stored %d times", round, p, c)
			}
		}
		subj := "rooms.race.journal." + run + ".cap-1"
		msgs := e.OnSubject(subj)
		if len(msgs) != n {
			t.Fatalf("round %d: %d messages on %s, want %d", round, len(msgs), subj, n)
		}
		for p, m := range msgs {
			if !bytes.Equal(m.Data, entries[p].Canonical()) {
				t.Fatalf("round %d: message %d is not entry %d: %s", round, p, p, m.Data)
			}
			if seqs[m.Sequence] != 1 {
				t.Fatalf("round %d: stream seq %d reported stored %d times", round, m.Sequence, seqs[m.Sequence])
			}
		}
	}
	if st := e.State(); st.Msgs != rounds*n {
		t.Fatalf("stream holds %d messages, want %d", st.Msgs, rounds*n)
	}
}

// TestRaceFork: two gates ship different versions of entry 5 at once;
// exactly one lands and the other is refused.
func TestRaceFork(t *testing.T) {
	e := roomtest.NewEnv(t)
	gates := racers(e)
	const rounds = 20
	wins := [2]int{}
	for round := range rounds {
		run := fmt.Sprintf("fork-%d", round)
		entries, _ := roomtest.Journal(t, run, "cap-1", 6)
		if r, err := gates[0].AppendJournal(t.Context(), "room:race", roomtest.Lines(entries[:5]), nil); err != nil || r.Stored != 5 {
			t.Fatalf("round %d prefix: %+v %v", round, r, err)
		}
		y, err := events.NewEntry(roomtest.Mutate(entries[5].Object(), "kind", "other.kind"))
		if err != nil {
			t.Fatal(err)
		}
		version := [2]*events.Entry{entries[5], y}
		var replies [2]room.JournalReply
		together(func(i int) {
			var err error
			replies[i], err = gates[i].AppendJournal(t.Context(), "room:race", roomtest.Lines(version[i:i+1]), nil)
			if err != nil {
				t.Error(err)
			}
		})
		winner := -1
		for i, r := range replies {
			if r.Stored == 1 {
				if winner >= 0 {
					t.Fatalf("round %d: both stored: %+v", round, replies)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: none stored: %+v", round, replies)
		}
		wins[winner]++
		loser := replies[1-winner].Items[0]
		if loser.Outcome != room.OutcomeRefused || (loser.Code != events.Fork && loser.Code != events.BrokenLink) ||
			loser.Hash != version[1-winner].EntryHash() {
			t.Fatalf("round %d: loser %+v", round, loser)
		}
		subj := "rooms.race.journal." + run + ".cap-1"
		msgs := e.OnSubject(subj)
		if len(msgs) != 6 || !bytes.Equal(msgs[5].Data, version[winner].Canonical()) ||
			msgs[5].Sequence != replies[winner].Items[0].StreamSeq {
			t.Fatalf("round %d: chain holds %d messages", round, len(msgs))
		}
	}
	t.Logf("wins: %v", wins)
}

// TestRaceRecords: two gates append records under one idempotency/key at
// once, different records then the same one.
func TestRaceRecords(t *testing.T) {
	e := roomtest.NewEnvMarked(t, embedded.Options{})
	gates := racers(e)
	base := roomtest.ReferenceRecord(t, "verified.json")
	const rounds = 10
	for round := range rounds {
		roomID := fmt.Sprintf("room:records-%d", round)
		a := e.Sign(base, map[string]any{"room/id": roomID})
		b := e.Sign(base, map[string]any{"room/id": roomID, "recorded-at": "2026-09-25T12:16:00Z"})

		// Different records, one key: one stored, one idempotency_conflict.
		var replies [2]room.RecordReply
		recs := [2]*events.Record{a, b}
		together(func(i int) { replies[i] = gates[i].AppendRecord(t.Context(), recs[i].Canonical()) })
		winner := -1
		for i, r := range replies {
			if r.Item.Outcome == room.OutcomeStored {
				if winner >= 0 {
					t.Fatalf("round %d: both stored: %+v", round, replies)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: none stored: %+v", round, replies)
		}
		loser := replies[1-winner].Item
		if loser.Outcome != room.OutcomeRefused || loser.Code != events.IdempotencyConflict ||
			loser.Problems[0].Expected != recs[winner].ContentDigest() {
			t.Fatalf("round %d: loser %+v", round, loser)
		}
		subj := "rooms." + room.EncodeToken(roomID[len("room:"):]) + ".exec"
		if msgs := e.OnSubject(subj); len(msgs) != 1 || !bytes.Equal(msgs[0].Data, recs[winner].Canonical()) {
			t.Fatalf("round %d: %d records stored", round, len(msgs))
		}

		// The same record from both: one stored, one duplicate of it.
		c := e.Sign(base, map[string]any{"room/id": roomID, "idempotency/key": "key-c", "run/ref": "operator-task-run:run-c"})
		together(func(i int) { replies[i] = gates[i].AppendRecord(t.Context(), c.Canonical()) })
		outcomes := map[room.Outcome]int{}
		for _, r := range replies {
			outcomes[r.Item.Outcome]++
		}
		if outcomes[room.OutcomeStored] != 1 || outcomes[room.OutcomeDuplicate] != 1 ||
			replies[0].Item.StreamSeq != replies[1].Item.StreamSeq || replies[0].Item.StreamSeq == 0 {
			t.Fatalf("round %d: same record: %+v", round, replies)
		}
		if msgs := e.OnSubject(subj); len(msgs) != 2 || !bytes.Equal(msgs[1].Data, c.Canonical()) || msgs[1].Sequence != replies[0].Item.StreamSeq {
			t.Fatalf("round %d: %d records stored", round, len(msgs))
		}
	}
	if n := len(e.StoredUnmarked()); n != 2*rounds {
		t.Fatalf("stream holds %d records, want %d", n, 2*rounds)
	}
}

// TestRaceRoomConflict: two gates ship the same capsule into two rooms at
// once; it lands in exactly one.
func TestRaceRoomConflict(t *testing.T) {
	e := roomtest.NewEnv(t)
	gates := racers(e)
	const rounds = 10
	for round := range rounds {
		run := fmt.Sprintf("rooms-%d", round)
		_, body := roomtest.Journal(t, run, "cap-1", 5)
		rooms := [2]string{"room:left", "room:right"}
		var replies [2]room.JournalReply
		together(func(i int) {
			var err error
			replies[i], err = gates[i].AppendJournal(t.Context(), rooms[i], body, nil)
			if err != nil {
				t.Error(err)
			}
		})
		winner := -1
		for i, r := range replies {
			if r.Stored > 0 {
				if winner >= 0 {
					t.Fatalf("round %d: both stored: %+v", round, replies)
				}
				winner = i
			}
		}
		if winner < 0 || replies[winner].Stored != 5 {
			t.Fatalf("round %d: %+v", round, replies)
		}
		loser := replies[1-winner]
		if loser.Refused != 1 || loser.Skipped != 4 || loser.Items[0].Code != events.RoomConflict || loser.Items[0].Problems[0].Expected != rooms[winner] {
			t.Fatalf("round %d: loser %+v", round, loser)
		}
		if n := e.CountOn("rooms.*.journal." + run + ".cap-1"); n != 5 {
			t.Fatalf("round %d: %d entries stored", round, n)
		}
	}
}
