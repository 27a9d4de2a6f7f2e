package roomtest

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
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// Helpers of the subscriber tests (reader, audit, follow, evidence,
// conformance): messages written straight into the stream, as a
// compromised writer would, and what a reader must make of them.

// PublishRaw appends data on subject with a plain JetStream publish,
// bypassing the gate (no Msg-Id, no expected sequence), and returns its
// stream sequence.
func PublishRaw(t testing.TB, js jetstream.JetStream, subject string, data []byte) uint64 {
	t.Helper()
	ack, err := js.Publish(context.Background(), subject, data)
	if err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
	return ack.Sequence
}

// Rebuilt returns a new entry from base's members with changes applied
// (nil deletes a member) and its entry_hash computed again, so it is a
// sound entry on its own.
func Rebuilt(t testing.TB, base *events.Entry, changes map[string]any) *events.Entry {
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

// ReplaceOnce replaces the first old in b with new and fails if there is
// none.
func ReplaceOnce(t testing.TB, b []byte, old, new string) []byte {
	t.Helper()
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%q not found in %s", old, b)
	}
	return bytes.Replace(b, []byte(old), []byte(new), 1)
}

// Tampered is e's line with its payload status changed and entry_hash
// kept: still canonical, no longer the entry its hash names.
func Tampered(t testing.TB, e *events.Entry) []byte {
	t.Helper()
	return ReplaceOnce(t, bytes.Clone(e.Canonical()), `"status":"ok"`, `"status":"no"`)
}

// ForkOf is another sound entry for e's chain position: same seq and
// parent, another payload.
func ForkOf(t testing.TB, e *events.Entry) *events.Entry {
	t.Helper()
	return Rebuilt(t, e, map[string]any{"payload": map[string]any{"tool": "bash", "status": "forked"}})
}

// RecordIn signs the reference verified record, moved to roomID under its
// own idempotency key and run ref (name), with key.
func RecordIn(t testing.TB, key *events.HostKey, roomID, name string, changes map[string]any) *events.Record {
	t.Helper()
	m := ReferenceRecord(t, "verified.json")
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

// EvidenceOn returns n evidence items observed on instance.
func EvidenceOn(instance string, n int) []any {
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

// NewHostKey returns a fresh host key.
func NewHostKey(t testing.TB) *events.HostKey {
	t.Helper()
	k, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Aside is what a test expects of one set-aside message.
type Aside struct {
	Seq      uint64
	Code     events.Code
	RoomID   string
	Kind     room.Kind
	Subject  string
	Chain    string        // "run/capsule" for journal subjects, "" otherwise
	Problems []events.Code // every problem's code, in order
}

// String is a for a test's failure message.
func (a Aside) String() string {
	return fmt.Sprintf("%d %s %s %s %s chain %q %v", a.Seq, a.Code, a.RoomID, a.Kind, a.Subject, a.Chain, a.Problems)
}

// AsideOf reduces a SetAside to what the tests compare, checking on the
// way that every problem is located at the message's stream sequence and
// that the first problem is the code.
func AsideOf(t testing.TB, s reader.SetAside) Aside {
	t.Helper()
	a := Aside{Seq: s.Seq, Code: s.Code, RoomID: s.RoomID, Kind: s.Kind, Subject: s.Subject}
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

// DiffAsides fails t, naming what, unless got and want are equal.
func DiffAsides(t testing.TB, what string, got, want []Aside) {
	t.Helper()
	if slices.EqualFunc(got, want, func(a, b Aside) bool { return a.String() == b.String() }) {
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

// Follower runs reader.Follow in the background and collects what it hands
// out, until stopped.
type Follower struct {
	Mu     sync.Mutex
	Events []*reader.Event
	Asides []reader.SetAside
	Cancel context.CancelFunc
	Done   chan struct{} // closed when Follow has returned, with err set
	Err    error
}

// StartFollow starts reader.Follow with o on js; handle, when set, is called
// for every event before it is recorded, and its error is returned to
// Follow (the event is then not recorded).
func StartFollow(t testing.TB, js jetstream.JetStream, o reader.FollowOptions, handle func(*reader.Event) error) *Follower {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &Follower{Cancel: cancel, Done: make(chan struct{})}
	o.OnSetAside = func(s reader.SetAside) {
		f.Mu.Lock()
		f.Asides = append(f.Asides, s)
		f.Mu.Unlock()
	}
	go func() {
		defer close(f.Done)
		f.Err = reader.Follow(ctx, js, o, func(_ context.Context, ev *reader.Event) error {
			if handle != nil {
				if err := handle(ev); err != nil {
					return err
				}
			}
			f.Mu.Lock()
			f.Events = append(f.Events, ev)
			f.Mu.Unlock()
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-f.Done:
		case <-time.After(10 * time.Second):
		}
	})
	return f
}

// Seen is how many messages the follower has handed out so far.
func (f *Follower) Seen() int {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return len(f.Events) + len(f.Asides)
}

// WaitSeen waits until the follower has handed out n messages.
func (f *Follower) WaitSeen(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for f.Seen() < n {
		select {
		case <-f.Done:
			t.Fatalf("Follow returned %v after %d of %d messages", f.Err, f.Seen(), n)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("Follow handed out %d of %d messages in 15s", f.Seen(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Stop cancels Follow and returns what it returned.
func (f *Follower) Stop(t testing.TB) error {
	t.Helper()
	f.Cancel()
	return f.Wait(t)
}

// Wait waits for Follow to return and returns what it returned.
func (f *Follower) Wait(t testing.TB) error {
	t.Helper()
	select {
	case <-f.Done:
		return f.Err
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not return within 10s")
		return nil
	}
}

// EventSeqs returns the stream sequences of the events f has seen.
func (f *Follower) EventSeqs() []uint64 {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	out := make([]uint64, len(f.Events))
	for i, ev := range f.Events {
		out[i] = ev.Seq
	}
	return out
}

// SeqRange returns from, from+1, ..., to.
func SeqRange(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// ReferenceOnly is a validator that trusts only the reference host.
func ReferenceOnly(t testing.TB) *validate.Validator {
	t.Helper()
	v, err := validate.New(validate.WithTrustedHosts(ReferenceHost))
	if err != nil {
		t.Fatal(err)
	}
	return v
}
