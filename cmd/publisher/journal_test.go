package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
)

// ingestRequests starts a nats-server with a stand-in for the ingest
// service that answers nothing and counts every request it gets; it
// returns the server's URL and the count.
func ingestRequests(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	srv := startNATS(t, 0)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var n atomic.Int32
	if _, err := nc.Subscribe(room.DefaultServicePrefix+".>", func(*nats.Msg) { n.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return srv.ClientURL(), &n
}

// TestJournalRoomTooLongForSubject: a room id of the schema's form (at
// most 512 characters) whose subject token is over room.MaxRoomTokenBytes
// once encoded (400 "é": 2,400 bytes) is a usage error naming the limit,
// found before anything is sent (it was sent, and came back a line-1
// bad_request, exit 1).
func TestJournalRoomTooLongForSubject(t *testing.T) {
	url, requests := ingestRequests(t)
	id := "room:" + strings.Repeat("é", 400)
	status, stdout, stderr := invoke(t, "journal", "--server", url, "--timeout", "2s", "--room", id, samples+"/capsules/csv-dedupe")
	if status != exitUsage || stdout != "" || !strings.Contains(stderr, "--room") || !strings.Contains(stderr, "at most 2048") {
		t.Errorf("exit %d, want %d; stdout %q; stderr %q: want a message naming --room and the limit", status, exitUsage, stdout, stderr)
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests sent", n)
	}
	// The limit itself: 341 "é" encode to 2,046 bytes, 342 to 2,052.
	for n, want := range map[int]bool{room.MaxRoomTokenBytes / 6: true, room.MaxRoomTokenBytes/6 + 1: false} {
		c := journalCmd{Room: "room:" + strings.Repeat("é", n)}
		if err := c.Validate(); (err == nil) != want {
			t.Errorf("%d characters: %v", n, err)
		}
	}
}

// journalObject is one line of publisher journal --json: the fields the
// tests look at.
type journalObject struct {
	Dir    string `json:"dir"`
	Room   string `json:"room"`
	Stored int    `json:"stored"`
	OK     bool   `json:"ok"`
	Error  string `json:"error"`
}

// journalObjects parses stdout of publisher journal --json: every line
// must be one JSON object.
func journalObjects(t *testing.T, stdout string) []journalObject {
	t.Helper()
	var objs []journalObject
	for _, l := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		if l == "" {
			continue
		}
		var v journalObject
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("not a JSON object: %q: %v", l, err)
		}
		objs = append(objs, v)
	}
	return objs
}

// TestJournalJSONNoServer: nothing to connect to: with --json each
// capsule still has its object, in the order given, with ok false and
// the error (it printed nothing), and the status is 2.
func TestJournalJSONNoServer(t *testing.T) {
	dirs := []string{samples + "/capsules/csv-dedupe", samples + "/capsules/slugify-run"}
	status, stdout, stderr := invoke(t, append([]string{"journal", "--json", "--server", "nats://127.0.0.1:1", "--room", "room:x"}, dirs...)...)
	if status != exitUsage {
		t.Errorf("exit %d, want %d; stderr %s", status, exitUsage, stderr)
	}
	objs := journalObjects(t, stdout)
	if len(objs) != len(dirs) {
		t.Fatalf("%d objects for %d capsules:\n%s", len(objs), len(dirs), stdout)
	}
	for i, o := range objs {
		if o.Dir != dirs[i] || o.Room != "room:x" || o.OK || !strings.HasPrefix(o.Error, "not sent: connect nats://127.0.0.1:1: ") {
			t.Errorf("object %d: %+v, want dir %s, room room:x, ok false and the connect error", i, o, dirs[i])
		}
	}
}

// TestJournalRunAgainOnlyWhenItHelps: "run again to resume" is printed
// for a capsule a rerun can ship (here: no ingest service answers), and
// never for one it cannot: a directory without journal.ndjson, a path
// that does not exist, a bare journal file (verify takes it, journal
// wants the capsule directory). Every case is exit 2.
func TestJournalRunAgainOnlyWhenItHelps(t *testing.T) {
	url := startNATS(t, 0).ClientURL() // no ingest service: no responders
	empty := t.TempDir()
	// A FIFO for journal.ndjson, then for capsule.json: refused before
	// anything is read (opening one blocks until a writer comes, deaf to
	// SIGTERM).
	fifoJournal, fifoCapsule := t.TempDir(), t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifoJournal, "journal.ndjson"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fifoCapsule, "journal.ndjson"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(fifoCapsule, "capsule.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir, err string
		hint     bool
	}{
		{empty, "is not a capsule directory", false},
		{fifoJournal, "journal.ndjson is a FIFO, not a regular file", false},
		{fifoCapsule, "capsule.json: not a regular file (a FIFO)", false},
		{filepath.Join(empty, "missing"), "is not a capsule directory", false},
		{samples + "/capsules/csv-dedupe/journal.ndjson", "is not a capsule directory", false},
		{samples + "/capsules/csv-dedupe", "ingest service unavailable", true},
	} {
		status, _, stderr := invoke(t, "journal", "--server", url, "--timeout", "2s", "--room", "room:x", tc.dir)
		if status != exitUsage || !strings.Contains(stderr, tc.err) {
			t.Errorf("%s: exit %d, want %d and %q:\n%s", tc.dir, status, exitUsage, tc.err, stderr)
		}
		if got := strings.Contains(stderr, "run again"); got != tc.hint {
			t.Errorf("%s: says to run again: %v, want %v:\n%s", tc.dir, got, tc.hint, stderr)
		}
	}
}

// TestJournalNotSentAfterInterrupt: the capsules a signal kept from
// being sent each get their --json object (ok false, the cause), and in
// text one stderr line names them.
func TestJournalNotSentAfterInterrupt(t *testing.T) {
	var out, errOut bytes.Buffer
	cause := &config.SignalError{Signal: syscall.SIGINT}
	notSent(&streams{out: &out, err: &errOut}, &shipPrinter{w: &out, json: true}, []string{"a", "b"}, "room:x", cause)
	objs := journalObjects(t, out.String())
	if len(objs) != 2 || objs[0].Dir != "a" || objs[1].Dir != "b" || objs[0].OK || objs[1].Error != "not sent: interrupted by SIGINT" {
		t.Errorf("objects %+v", objs)
	}
	if want := "publisher: a and 1 more capsules: not sent: interrupted by SIGINT (run again to resume)\n"; errOut.String() != want {
		t.Errorf("stderr %q, want %q", errOut.String(), want)
	}
	out.Reset()
	errOut.Reset()
	notSent(&streams{out: &out, err: &errOut}, &shipPrinter{w: &out}, []string{"a"}, "room:x", cause)
	if want := "publisher: a: not sent: interrupted by SIGINT (run again to resume)\n"; out.Len() != 0 || errOut.String() != want {
		t.Errorf("text: stdout %q, stderr %q, want %q", out.String(), errOut.String(), want)
	}
}

// TestJournalPrintsWhatLanded: the line under a refusal says what the
// room holds of the chain: nothing from the refused line on, or, for a
// line the gate took for a resend, the lines after it up to the head.
func TestJournalPrintsWhatLanded(t *testing.T) {
	refused := func(resent bool) *client.LineRefusal {
		p := events.Problem{Code: events.Reordered, At: events.Location{File: "c/journal.ndjson", Line: 4, Pointer: "/seq"}, Reason: "seq is not the entry's position"}
		return &client.LineRefusal{Problem: p, Problems: []events.Problem{p}, Resent: resent}
	}
	head := room.ChainHead{RoomID: "room:x", Next: 5, StreamSeq: 9}
	for _, tc := range []struct {
		name string
		res  client.ShipResult
		want string
	}{
		{"refused", client.ShipResult{RoomID: "room:x", Stored: 3, Head: room.ChainHead{RoomID: "room:x", Next: 3}, Refused: refused(false)},
			"lines before it are in the room; it and every later line are not\n"},
		{"resent", client.ShipResult{RoomID: "room:x", Stored: 5, Duplicates: 1, Head: head, Refused: refused(true)},
			"it repeats an entry, and the gate took it for a resend: lines before it are in the room, and so are the lines after it that continue the chain, up to seq 4\n"},
		{"resent, head not known", client.ShipResult{RoomID: "room:x", Stored: 5, Duplicates: 1, Refused: refused(true)},
			"lines after it that continue the chain may be too\n"},
	} {
		var out bytes.Buffer
		(&shipPrinter{w: &out}).print(tc.res, nil)
		if !strings.HasSuffix(out.String(), tc.want) {
			t.Errorf("%s: printed\n%s\nwant it to end %q", tc.name, out.String(), tc.want)
		}
	}
}
