package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/reader"
)

// emptyServer starts a server with the room stream and nothing in it.
func emptyServer(t *testing.T) string {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := room.EnsureStream(context.Background(), js, room.StreamConfig("", room.Subjects{}, 1), room.Subjects{}); err != nil {
		t.Fatal(err)
	}
	return srv.ClientURL()
}

// TestAuditEmpty: an audit that reads no message (an empty stream, a
// mistyped room, or a room given with others that has none) is not
// CLEAN: its verdict is EMPTY, it names the rooms, the JSON report says
// "empty", and it exits 1, unless --allow-empty accepts it. An audit of a
// room with messages is CLEAN as before.
func TestAuditEmpty(t *testing.T) {
	pub, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	url, _, _, _ := attestedServer(t, pub) // 8 messages in room:cli, clean without --trusted-publisher
	empty := emptyServer(t)
	for _, c := range []struct {
		name   string
		args   []string
		status int
		out    string // the verdict line (text) or the empty rooms (JSON)
		err    string
	}{
		{"a room with messages", []string{"--server", url, "--room", cliRoom}, config.ExitOK,
			"CLEAN: 8 messages, 7 entries and 0 records verified, 0 set aside; 1 chains ok, 0 broken; stream append-only: true\n", ""},
		{"a typo", []string{"--server", url, "--room", "room:clj"}, config.ExitRefused,
			"room:clj\n  no messages\nattestations and checkpoints: not checked (no trusted publisher keys (--trusted-publisher))\n" +
				"EMPTY: 0 messages, 0 entries and 0 records verified, 0 set aside; 0 chains ok, 0 broken; stream append-only: true; no messages in room:clj (stream seq 1 to 8)\n",
			"subscriber: audit: no messages in room:clj (stream seq 1 to 8) (--allow-empty accepts that): empty\n"},
		{"a typo among rooms", []string{"--server", url, "--room", cliRoom, "--room", "room:clj"}, config.ExitRefused,
			"EMPTY: 8 messages, 7 entries and 0 records verified, 0 set aside; 1 chains ok, 0 broken; stream append-only: true; no messages in room:clj (stream seq 1 to 8)\n",
			"no messages in room:clj (stream seq 1 to 8)"},
		{"a typo, allowed", []string{"--server", url, "--room", "room:clj", "--allow-empty"}, config.ExitOK,
			"CLEAN: 0 messages, 0 entries and 0 records verified, 0 set aside; 0 chains ok, 0 broken; stream append-only: true; no messages in room:clj (stream seq 1 to 8)\n", ""},
		{"an empty stream", []string{"--server", empty}, config.ExitRefused,
			"EMPTY: 0 messages, 0 entries and 0 records verified, 0 set aside; 0 chains ok, 0 broken; stream append-only: true; no messages in stream ROOMS (the stream holds none)\n",
			"subscriber: audit: no messages in stream ROOMS (the stream holds none) (--allow-empty accepts that): empty\n"},
		{"an empty stream, allowed", []string{"--server", empty, "--allow-empty"}, config.ExitOK, "CLEAN: 0 messages", ""},
		{"past the last message", []string{"--server", url, "--from-seq", "9"}, config.ExitRefused,
			"EMPTY: 0 messages", "no messages in stream ROOMS (the stream ends at seq 8, before 9)"},
		{"refused and empty", []string{"--server", url, "--room", cliRoom, "--room", "room:clj", "--trusted-publisher", pub.NodeID(), "--state-dir", t.TempDir()}, config.ExitRefused,
			"REFUSED: 8 messages", "subscriber: audit: 1 message(s) set aside, 0 chain(s) broken, 0 stream problem(s); no messages in room:clj (stream seq 1 to 8): refused\n"},
	} {
		status, stdout, stderr := invoke(t, "", append([]string{"audit"}, c.args...)...)
		if status != c.status || !strings.Contains(stdout, c.out) || !strings.Contains(stderr, c.err) {
			t.Errorf("%s: status %d (want %d)\nstdout:\n%s\nstderr:\n%s\nwant stdout with %q, stderr with %q", c.name, status, c.status, stdout, stderr, c.out, c.err)
		}
	}

	// JSON: "empty" and the rooms, per room.
	status, stdout, _ := invoke(t, "", "audit", "--json", "--server", url, "--room", cliRoom, "--room", "room:clj")
	var rep struct {
		Empty        bool              `json:"empty"`
		EmptyRooms   []string          `json:"empty_rooms"`
		RoomMessages map[string]uint64 `json:"room_messages"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || status != config.ExitRefused || !rep.Empty ||
		!slices.Equal(rep.EmptyRooms, []string{"room:clj"}) || rep.RoomMessages[cliRoom] != 8 || rep.RoomMessages["room:clj"] != 0 || len(rep.RoomMessages) != 2 {
		t.Errorf("JSON: status %d, %v: %+v\n%s", status, err, rep, stdout)
	}
	status, stdout, _ = invoke(t, "", "audit", "--json", "--server", url, "--room", cliRoom)
	if status != config.ExitOK || !strings.Contains(stdout, `"room_messages":{"room:cli":8},"empty":false}`) {
		t.Errorf("JSON of a room with messages: status %d\n%s", status, stdout)
	}
}

// TestPrintNotices: a notice of a checkpoint contradiction prints the
// contradiction, not a checkpoint of 0 leaves; one of a checkpoint
// larger than the stream prints its sizes.
func TestPrintNotices(t *testing.T) {
	var b strings.Builder
	printNotices(&b, []reader.Notice{
		{Seq: 7, Verified: true, Signer: "node:did:key:zA", Notice: room.LossNotice{RoomID: "room:a", NotedAt: "2026-12-03T20:00:00Z",
			Checkpoint: &room.NoticedCheckpoint{Contradiction: "it covers 20 messages, but only 0 admitted messages of the room precede it"}}},
		{Seq: 9, Notice: room.LossNotice{RoomID: "room:b", NotedAt: "2026-12-03T20:01:00Z", Checkpoint: &room.NoticedCheckpoint{Size: 250, Held: 200}}},
	})
	want := "loss notice for room:a at stream seq 7, noted 2026-12-03T20:00:00Z, attested by node:did:key:zA:\n" +
		"  the room's checkpoint contradicted its messages: it covers 20 messages, but only 0 admitted messages of the room precede it\n" +
		"loss notice for room:b at stream seq 9, noted 2026-12-03T20:01:00Z, not verified (no --trusted-publisher):\n" +
		"  the room's checkpoint covers 250 leaves; the stream held 200\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestPrintViolationsFolds: three or more set-aside messages in a row
// with one code on one subject for one reason but its numbers (a batch a
// damaged store broke) print as the first one and a count with the span
// of their stream sequences; shorter runs, and runs broken by another
// code, subject or reason (untrusted hosts, each named), print whole.
func TestPrintViolationsFolds(t *testing.T) {
	aside := func(seq uint64, code events.Code, subj string) reader.SetAside {
		return reader.SetAside{Seq: seq, Code: code, Subject: subj, Reason: "r" + strconv.FormatUint(seq, 10)}
	}
	hosts := []reader.SetAside{
		{Seq: 5, Code: "untrusted_host", Subject: "rooms.lab.exec", Reason: "host node:did:key:zONE is not trusted"},
		{Seq: 6, Code: "untrusted_host", Subject: "rooms.lab.exec", Reason: "host node:did:key:zTWO is not trusted"},
		{Seq: 9, Code: "untrusted_host", Subject: "rooms.lab.exec", Reason: "host node:did:key:zTHREE is not trusted"},
	}
	var hb strings.Builder
	printViolations(&hb, hosts)
	if want := "  untrusted_host at stream seq 5 (rooms.lab.exec): host node:did:key:zONE is not trusted\n" +
		"  untrusted_host at stream seq 6 (rooms.lab.exec): host node:did:key:zTWO is not trusted\n" +
		"  untrusted_host at stream seq 9 (rooms.lab.exec): host node:did:key:zTHREE is not trusted\n"; hb.String() != want {
		t.Errorf("distinct reasons: got\n%s\nwant\n%s", hb.String(), want)
	}
	const a, b = "rooms.lab.journal.x.y", "rooms.lab.exec"
	var vs []reader.SetAside
	for seq := uint64(10); seq < 1010; seq++ {
		vs = append(vs, aside(seq, "checkpoint_mismatch", a))
	}
	vs = append(vs, aside(1010, "checkpoint_mismatch", b), aside(1011, "checkpoint_mismatch", b),
		aside(1012, "chain_break", a), aside(1013, "checkpoint_mismatch", a), aside(1014, "checkpoint_mismatch", a), aside(1015, "checkpoint_mismatch", a))
	var out strings.Builder
	printViolations(&out, vs)
	want := "  checkpoint_mismatch at stream seq 10 (" + a + "): r10\n" +
		"  … and 999 more checkpoint_mismatch on " + a + " for the same reason, between stream seq 11 and 1009 (--json lists each)\n" +
		"  checkpoint_mismatch at stream seq 1010 (" + b + "): r1010\n" +
		"  checkpoint_mismatch at stream seq 1011 (" + b + "): r1011\n" +
		"  chain_break at stream seq 1012 (" + a + "): r1012\n" +
		"  checkpoint_mismatch at stream seq 1013 (" + a + "): r1013\n" +
		"  … and 2 more checkpoint_mismatch on " + a + " for the same reason, between stream seq 1014 and 1015 (--json lists each)\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

func TestRoomList(t *testing.T) {
	for _, c := range []struct {
		rooms []string
		want  string
	}{
		{[]string{"room:a"}, "room:a"},
		{[]string{"room:a", "room:b", "room:c", "room:d", "room:e"}, "room:a, room:b, room:c, room:d, room:e"},
		{[]string{"room:a", "room:b", "room:c", "room:d", "room:e", "room:f", "room:g"}, "room:a, room:b, room:c, room:d, room:e and 2 more (--json lists each)"},
	} {
		if got := roomList(c.rooms); got != c.want {
			t.Errorf("roomList(%v) = %q, want %q", c.rooms, got, c.want)
		}
	}
}

// TestWarnLogger: a library's warnings on the command's stderr read as its
// other lines do: one a line, no time, the command named.
func TestWarnLogger(t *testing.T) {
	var b strings.Builder
	l := warnLogger(&b)
	l.Info("not shown")
	l.Warn("fetch", zap.String("error", "consumer d: pull ended"))
	if got, want := b.String(), "warn: subscriber: fetch: {\"error\": \"consumer d: pull ended\"}\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}
