package room_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/validate"
)

// Helpers of the subscriber tests (reader, audit, follow, evidence,
// conformance): messages written straight into the stream, as a
// compromised writer would, and what a reader must make of them.

// publishRaw appends data on subject with a plain JetStream publish,
// bypassing the gate (no Msg-Id, no expected sequence), and returns its
// stream sequence.
func publishRaw(t testing.TB, js jetstream.JetStream, subject string, data []byte) uint64 {
	t.Helper()
	ack, err := js.Publish(context.Background(), subject, data)
	if err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
	return ack.Sequence
}

// rebuilt returns a new entry from base's members with changes applied
// (nil deletes a member) and its entry_hash computed again, so it is a
// sound entry on its own.
func rebuilt(t testing.TB, base *events.Entry, changes map[string]any) *events.Entry {
	t.Helper()
	m := map[string]any{}
	for k, v := range base.Object() {
		m[k] = v
	}
	for k, v := range changes {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	e, err := events.NewEntry(m)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// replaceOnce replaces the first old in b with new and fails if there is
// none.
func replaceOnce(t testing.TB, b []byte, old, new string) []byte {
	t.Helper()
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%q not found in %s", old, b)
	}
	return bytes.Replace(b, []byte(old), []byte(new), 1)
}

// tampered is e's line with its payload status changed and entry_hash
// kept: still canonical, no longer the entry its hash names.
func tampered(t testing.TB, e *events.Entry) []byte {
	t.Helper()
	return replaceOnce(t, bytes.Clone(e.Canonical()), `"status":"ok"`, `"status":"no"`)
}

// forkOf is another sound entry for e's chain position: same seq and
// parent, another payload.
func forkOf(t testing.TB, e *events.Entry) *events.Entry {
	t.Helper()
	return rebuilt(t, e, map[string]any{"payload": map[string]any{"tool": "bash", "status": "forked"}})
}

// recordIn signs the reference verified record, moved to roomID under its
// own idempotency key and run ref (name), with key.
func recordIn(t testing.TB, key *events.HostKey, roomID, name string, changes map[string]any) *events.Record {
	t.Helper()
	m := referenceRecord(t, "verified.json")
	m["room/id"] = roomID
	m["idempotency/key"] = "key-" + name
	m["run/ref"] = "operator-task-run:" + name
	for k, v := range changes {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	rec, err := events.SignRecord(m, key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// evidenceOn returns n evidence items observed on instance.
func evidenceOn(instance string, n int) []any {
	out := make([]any, n)
	for i := range n {
		out[i] = map[string]any{
			"step/id":         fmt.Sprintf("step-%d", i),
			"artifact-ref":    fmt.Sprintf("object-store:sha256:%043d", i),
			"digest":          fmt.Sprintf("sha256:%043d", i),
			"environment/ref": instance,
		}
	}
	return out
}

func newHostKey(t testing.TB) *events.HostKey {
	t.Helper()
	k, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// aside is what a test expects of one set-aside message.
type aside struct {
	Seq      uint64
	Code     events.Code
	RoomID   string
	Kind     room.Kind
	Subject  string
	Chain    string        // "run/capsule" for journal subjects, "" otherwise
	Problems []events.Code // every problem's code, in order
}

func (a aside) String() string {
	return fmt.Sprintf("%d %s %s %s %s chain %q %v", a.Seq, a.Code, a.RoomID, a.Kind, a.Subject, a.Chain, a.Problems)
}

// asideOf reduces a SetAside to what the tests compare, checking on the
// way that every problem is located at the message's stream sequence and
// that the first problem is the code.
func asideOf(t testing.TB, s room.SetAside) aside {
	t.Helper()
	a := aside{Seq: s.Seq, Code: s.Code, RoomID: s.RoomID, Kind: s.Kind, Subject: s.Subject}
	if s.Chain != nil {
		a.Chain = s.Chain.RunID + "/" + s.Chain.CapsuleID
	}
	for _, p := range s.Problems {
		a.Problems = append(a.Problems, p.Code)
		if p.At.Seq != s.Seq {
			t.Errorf("set aside at stream seq %d: problem %s located at stream seq %d", s.Seq, p, p.At.Seq)
		}
	}
	if len(s.Problems) == 0 || s.Problems[0].Code != s.Code || s.Reason != s.Problems[0].Reason || s.Reason == "" {
		t.Errorf("set aside at stream seq %d: code %s reason %q, problems %v", s.Seq, s.Code, s.Reason, s.Problems)
	}
	return a
}

func diffAsides(t testing.TB, what string, got, want []aside) {
	t.Helper()
	if slices.EqualFunc(got, want, func(a, b aside) bool { return a.String() == b.String() }) {
		return
	}
	var b strings.Builder
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i].String()
		}
		if i < len(want) {
			w = want[i].String()
		}
		mark := "  "
		if g != w {
			mark = "≠ "
		}
		fmt.Fprintf(&b, "%s got  %s\n   want %s\n", mark, g, w)
	}
	t.Errorf("%s differ:\n%s", what, b.String())
}

// follower runs room.Follow in the background and collects what it hands
// out, until stopped.
type follower struct {
	mu     sync.Mutex
	events []*room.Event
	asides []room.SetAside
	cancel context.CancelFunc
	done   chan struct{} // closed when Follow has returned, with err set
	err    error
}

// startFollow starts room.Follow with o on js; handle, when set, is called
// for every event before it is recorded, and its error is returned to
// Follow (the event is then not recorded).
func startFollow(t testing.TB, js jetstream.JetStream, o room.FollowOptions, handle func(*room.Event) error) *follower {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{cancel: cancel, done: make(chan struct{})}
	o.OnSetAside = func(s room.SetAside) {
		f.mu.Lock()
		f.asides = append(f.asides, s)
		f.mu.Unlock()
	}
	go func() {
		defer close(f.done)
		f.err = room.Follow(ctx, js, o, func(_ context.Context, ev *room.Event) error {
			if handle != nil {
				if err := handle(ev); err != nil {
					return err
				}
			}
			f.mu.Lock()
			f.events = append(f.events, ev)
			f.mu.Unlock()
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-f.done:
		case <-time.After(10 * time.Second):
		}
	})
	return f
}

// seen is how many messages the follower has handed out so far.
func (f *follower) seen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.events) + len(f.asides)
}

// waitSeen waits until the follower has handed out n messages.
func (f *follower) waitSeen(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for f.seen() < n {
		select {
		case <-f.done:
			t.Fatalf("Follow returned %v after %d of %d messages", f.err, f.seen(), n)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("Follow handed out %d of %d messages in 15s", f.seen(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stop cancels Follow and returns what it returned.
func (f *follower) stop(t testing.TB) error {
	t.Helper()
	f.cancel()
	return f.wait(t)
}

// wait waits for Follow to return and returns what it returned.
func (f *follower) wait(t testing.TB) error {
	t.Helper()
	select {
	case <-f.done:
		return f.err
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not return within 10s")
		return nil
	}
}

func (f *follower) eventSeqs() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]uint64, len(f.events))
	for i, ev := range f.events {
		out[i] = ev.Seq
	}
	return out
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// referenceOnly is a validator that trusts only the reference host.
func referenceOnly(t testing.TB) *validate.Validator {
	t.Helper()
	v, err := validate.New(validate.WithTrustedHosts(referenceHost))
	if err != nil {
		t.Fatal(err)
	}
	return v
}
