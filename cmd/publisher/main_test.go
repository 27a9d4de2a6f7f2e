package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/validate"
)

const samples = "../../testdata/samples"

// invoke runs the command line in-process, with nothing on stdin, and
// returns its status and output.
func invoke(t *testing.T, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	return invokeIn(t, "", args...)
}

// invokeIn is invoke with stdin.
func invokeIn(t *testing.T, stdin string, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	status = run(args, strings.NewReader(stdin), &out, &errOut)
	return status, out.String(), errOut.String()
}

func TestExitStatus(t *testing.T) {
	emptyDir := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		status int
		stdout string // substring; "" checks nothing
		stderr string
	}{
		{"capsule ok", []string{"verify", samples + "/capsules/csv-dedupe"}, exitOK, "ok      journal   " + samples + "/capsules/csv-dedupe  14 entries, head ", ""},
		{"record ok", []string{"verify", samples + "/records/verified.json"}, exitOK, "ref corpus-task-pack-execution:sha256:PEaap8mlrUCWgXaN…", ""},
		{"tampered capsule", []string{"verify", samples + "/capsules/broken"}, exitRefused, "REFUSED journal   " + samples + "/capsules/broken: invalid_entry at ", "1 of 1 path refused"},
		{"foreign evidence", []string{"verify", samples + "/records/foreign-evidence.json"}, exitRefused, ": foreign_evidence at " + samples + "/records/foreign-evidence.json /evidence/0/environment~1ref: ", ""},
		{"usage beats refusal", []string{"verify", samples + "/capsules/broken", "no/such/path"}, exitUsage, "REFUSED", "no/such/path"},
		{"dir without journal", []string{"verify", emptyDir}, exitUsage, "", "is not a capsule directory"},
		{"no path", []string{"verify"}, exitUsage, "", "expected \"<path> ...\""},
		{"unknown flag", []string{"verify", "--frobnicate", samples + "/records/verified.json"}, exitUsage, "", "unknown flag --frobnicate"},
		{"no command", nil, exitUsage, "", "expected one of"},
		{"missing schema dir", []string{"verify", "--schema-dir", "no/such/dir", samples + "/records/verified.json"}, exitUsage, "", "no/such/dir"},
		{"schema dir without schemas", []string{"verify", "--schema-dir", emptyDir, samples + "/records/verified.json"}, exitUsage, "", "capsule-envelope.schema.json"},
		{"bad trusted host", []string{"verify", "--trusted-host", "node:did:key:nope", samples + "/records/verified.json"}, exitUsage, "", "trusted host"},
		{"untrusted host", []string{"verify", "--trusted-host", "node:did:key:z6MkqB3fVxzXFbVUK2q1GPrLQzaxgwDGGVuxkDzaf5tsLnpX", samples + "/records/verified.json"}, exitRefused, "untrusted_host", ""},
		{"trusted host", []string{"verify", "--trusted-host", "node:did:key:z6MkqB3fVxzXFbVUK2q1GPrLQzaxgwDGGVuxkDzaf5tsLnpo", samples + "/records/verified.json"}, exitOK, "ok", ""},
		{"widened schema dir", []string{"verify", "--schema-dir", samples + "/widened/schemas", samples + "/widened/control-plane"}, exitOK, "10 entries", ""},
		{"widened keys refused by default", []string{"verify", samples + "/widened/control-plane"}, exitRefused, "invalid_entry at ", ""},
		{"version", []string{"--version"}, exitOK, "", ""},
		{"help", []string{"--help"}, exitOK, "Usage: publisher <command>", ""},
		{"keygen without --out", []string{"keygen"}, exitUsage, "", "--out"},
		{"sign without --key", []string{"sign", samples + "/records/verified.json"}, exitUsage, "", "--key"},
		{"serve --partitions 0", []string{"serve", "--partitions", "0", "--store-dir", emptyDir}, exitUsage, "", "publisher: serve: invalid configuration: --partitions 0: want 1 to 64"},
		{"authconf --partitions 0", []string{"authconf", "--partitions", "0", "no/such/secure.yaml"}, exitUsage, "", "publisher: authconf: invalid configuration: --partitions 0: want 1 to 64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, stdout, stderr := invoke(t, tc.args...)
			if status != tc.status {
				t.Errorf("status %d, want %d\nstdout: %s\nstderr: %s", status, tc.status, stdout, stderr)
			}
			if !strings.Contains(stdout, tc.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tc.stdout, stdout)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, stderr)
			}
		})
	}
}

// TestFlagsAmongPaths: a flag between two paths is a flag, for every
// subcommand that takes several (kong alone refused the second path as an
// unexpected argument), and "--" still ends the flags.
func TestFlagsAmongPaths(t *testing.T) {
	capsule, record := samples+"/capsules/csv-dedupe", samples+"/records/verified.json"
	status, stdout, stderr := invoke(t, "verify", capsule, "--json", record)
	if status != exitOK || strings.Count(stdout, "\n") != 2 || !strings.HasPrefix(stdout, `{"path":"`+capsule+`"`) {
		t.Errorf("verify PATH --json PATH: status %d\nstdout: %s\nstderr: %s", status, stdout, stderr)
	}
	status, stdout, stderr = invoke(t, "verify", capsule, "--", "--json")
	if status != exitUsage || !strings.HasPrefix(stdout, "ok      journal   "+capsule) || !strings.Contains(stderr, "stat --json") {
		t.Errorf("verify PATH -- --json: status %d\nstdout: %s\nstderr: %s", status, stdout, stderr)
	}
	// Nothing to connect to: the flags were taken (each file has its JSON
	// object; exit 2 for the server, not for the command line).
	files := []string{record, record}
	status, objs, stderr := executionObjects(t, record, "--server", "nats://127.0.0.1:1", record)
	if status != exitUsage || strings.Contains(stderr, "--help") {
		t.Errorf("execution FILE --server URL FILE: status %d, stderr %s", status, stderr)
	}
	checkObjects(t, objs, files, []string{"skipped", "skipped"})
	status, stdout, stderr = invoke(t, "journal", capsule, "--room", "room:x", capsule, "--json", "--server", "nats://127.0.0.1:1")
	if status != exitUsage || !strings.HasPrefix(stderr, "publisher: connect nats://127.0.0.1:1") {
		t.Errorf("journal DIR --room ROOM DIR --json: status %d\nstdout: %s\nstderr: %s", status, stdout, stderr)
	}
}

func TestVerifyJSONOneLinePerPath(t *testing.T) {
	paths := []string{
		samples + "/records/verified.json",
		"no/such/file.json",
		samples + "/capsules/broken",
		samples + "/capsules/slugify-run",
	}
	status, stdout, stderr := invoke(t, append([]string{"verify", "--json"}, paths...)...)
	if status != exitUsage {
		t.Fatalf("status %d, want %d (a path could not be verified)", status, exitUsage)
	}
	if !strings.Contains(stderr, "no/such/file.json") {
		t.Errorf("stderr does not name the missing path:\n%s", stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != len(paths) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(paths), stdout)
	}
	var got []jsonLine
	for i, l := range lines {
		var jl jsonLine
		if err := json.Unmarshal([]byte(l), &jl); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i+1, err, l)
		}
		if jl.Path != paths[i] {
			t.Errorf("line %d is for %q, want %q", i+1, jl.Path, paths[i])
		}
		got = append(got, jl)
	}
	if !got[0].OK || got[0].Kind != validate.KindExecution || got[0].Ref == "" {
		t.Errorf("verified.json: %+v", got[0])
	}
	if got[1].OK || got[1].Error == "" {
		t.Errorf("missing file: want ok false and an error, got %+v", got[1])
	}
	if got[2].OK || got[2].Code != events.InvalidEntry || !strings.HasSuffix(got[2].At, "journal.ndjson:14 /entry_hash") || len(got[2].Problems) != 1 {
		t.Errorf("broken: %+v", got[2])
	}
	if !got[3].OK || got[3].Entries == nil || *got[3].Entries != 299 || len(got[3].Head) != 64 {
		t.Errorf("slugify-run: %+v", got[3])
	}
}

func TestTextReportListsEveryProblem(t *testing.T) {
	problems := []events.Problem{
		{Code: events.Reordered, At: events.Location{File: "j", Line: 2, Pointer: "/seq"}, Reason: "seq is off", Expected: "1", Actual: "2"},
		{Code: events.BrokenLink, At: events.Location{File: "j", Line: 2}, Reason: "link"},
		{Code: events.BrokenLink, At: events.Location{File: "j", Line: 3}, Reason: "link"},
	}
	rep := validate.Report{Path: "j", Kind: validate.KindJournal, Code: events.Reordered, Problems: problems, Omitted: 7}
	var b bytes.Buffer
	if err := textReport(&b, rep, nil); err != nil {
		t.Fatal(err)
	}
	want := `REFUSED journal   j: reordered at j:2 /seq: seq is off (expected "1", got "2")
        broken_link at j:2: link
        broken_link at j:3: link
        ... and 7 more problem(s)
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestKeygenSignVerify(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "host.pem")

	status, nodeID, stderr := invoke(t, "keygen", "--out", keyFile)
	if status != exitOK {
		t.Fatalf("keygen: status %d: %s", status, stderr)
	}
	nodeID = strings.TrimSuffix(nodeID, "\n")
	if _, err := events.ParseNodeID(nodeID); err != nil {
		t.Fatalf("keygen printed %q: %v", nodeID, err)
	}
	info, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", info.Mode().Perm())
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := events.ParseHostKey(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if key.NodeID() != nodeID {
		t.Errorf("file holds %s, keygen printed %s", key.NodeID(), nodeID)
	}

	status, signed, stderr := invoke(t, "sign", "--key", keyFile, samples+"/records/verified.json")
	if status != exitOK {
		t.Fatalf("sign: status %d: %s", status, stderr)
	}
	if strings.Contains(signed, "PRIVATE KEY") {
		t.Fatal("sign printed key material")
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(signed), &obj); err != nil {
		t.Fatalf("sign output is not JSON: %v", err)
	}
	if obj["host/node-id"] != nodeID {
		t.Errorf("host/node-id %v, want %s", obj["host/node-id"], nodeID)
	}
	if !strings.HasPrefix(signed, "{\n  \"candidate\": {\n    \"artifact-ref\": ") || !strings.HasSuffix(signed, "\n}\n") {
		t.Errorf("sign output is not sorted, 2-space indented JSON with a trailing newline:\n%s", signed)
	}
	signedFile := filepath.Join(dir, "signed.json")
	if err := os.WriteFile(signedFile, []byte(signed), 0o644); err != nil {
		t.Fatal(err)
	}
	if status, stdout, stderr := invoke(t, "verify", "--trusted-host", nodeID, signedFile); status != exitOK {
		t.Fatalf("verify of the signed record: status %d\n%s%s", status, stdout, stderr)
	}

	// Refuses to overwrite without --force; --force replaces with a new key.
	status, stdout, stderr := invoke(t, "keygen", "--out", keyFile)
	if status != exitUsage || stdout != "" || !strings.Contains(stderr, "--force") {
		t.Errorf("keygen over an existing file: status %d, stdout %q, stderr %q", status, stdout, stderr)
	}
	if again, _ := os.ReadFile(keyFile); !bytes.Equal(again, keyPEM) {
		t.Error("keygen without --force changed the existing file")
	}
	status, stdout, _ = invoke(t, "keygen", "--out", keyFile, "--force")
	if status != exitOK || strings.TrimSpace(stdout) == nodeID {
		t.Errorf("keygen --force: status %d, node id %q (old %q)", status, stdout, nodeID)
	}
	if info, err := os.Stat(keyFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("after --force: %v, %v", info, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestSignUsageErrors(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "host.pem")
	if status, _, stderr := invoke(t, "keygen", "--out", keyFile); status != exitOK {
		t.Fatal(stderr)
	}
	keyBody := pemBody(t, keyFile)
	notJSON := filepath.Join(dir, "record.json")
	if err := os.WriteFile(notJSON, []byte(`{"a":1,"a":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	notKey := filepath.Join(dir, "not-a-key.pem")
	if err := os.WriteFile(notKey, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key, record, stderr string
	}{
		{"missing key", filepath.Join(dir, "nope.pem"), samples + "/records/verified.json", "read key"},
		{"not a key", notKey, samples + "/records/verified.json", events.ErrBadHostKey.Error()},
		{"missing record", keyFile, filepath.Join(dir, "nope.json"), "read record"},
		{"duplicate keys", keyFile, notJSON, events.ErrNotJSON.Error()},
		{"not an object", keyFile, keyFile, events.ErrNotJSON.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, stdout, stderr := invoke(t, "sign", "--key", tc.key, tc.record)
			if status != exitUsage || stdout != "" || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("status %d, stdout %q, stderr %q; want %d and %q", status, stdout, stderr, exitUsage, tc.stderr)
			}
			if strings.Contains(stderr, keyBody) {
				t.Error("stderr shows key material")
			}
		})
	}
}

// TestHelpShowsNoSecret: help given together with a real key file prints
// neither the key nor anything read from it.
func TestHelpShowsNoSecret(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "host.pem")
	if status, _, stderr := invoke(t, "keygen", "--out", keyFile); status != exitOK {
		t.Fatal(stderr)
	}
	body := pemBody(t, keyFile)
	for _, args := range [][]string{
		{"--help"},
		{"sign", "--help"},
		{"sign", "--key", keyFile, "--help"},
		{"sign", "--key", keyFile, "x.json", "--help"},
		{"keygen", "--out", keyFile, "--help"},
		{"verify", "--help"},
	} {
		status, stdout, stderr := invoke(t, args...)
		if status != exitOK {
			t.Errorf("%v: status %d: %s", args, status, stderr)
		}
		if out := stdout + stderr; strings.Contains(out, "PRIVATE KEY") || strings.Contains(out, body) {
			t.Errorf("%v printed key material:\n%s", args, out)
		}
	}
}

// pemBody returns 16 characters of the base64 body of the PEM file: a
// sample of the key material that must never be printed.
func pemBody(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) < 2 || len(lines[1]) < 40 {
		t.Fatalf("%s is not a PEM key", file)
	}
	return lines[1][24:40] // past the PKCS #8 header common to every Ed25519 key
}

// TestServePublisherKeyFlags: serve refuses a --publisher-key that is no
// key without printing the file, and a --trusted-publisher that is no node
// id, before it starts anything.
func TestServePublisherKeyFlags(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("top-secret-not-a-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"serve", "--listen", "127.0.0.1:-1", "--store-dir", filepath.Join(dir, "store")}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"not a key", []string{"--publisher-key", bad}, "--publisher-key " + bad + ": not a key made by 'publisher keygen'"},
		{"no such file", []string{"--publisher-key", filepath.Join(dir, "none.pem")}, "--publisher-key"},
		{"bad trusted publisher", []string{"--trusted-publisher", "node:did:key:nope"}, `--trusted-publisher "node:did:key:nope"`},
		{"negative every", []string{"--checkpoint-every=-1"}, "--checkpoint-every must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, stdout, stderr := invoke(t, append(base, tc.args...)...)
			if status != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("status %d, stderr %q; want %d and %q", status, stderr, exitUsage, tc.want)
			}
			if strings.Contains(stdout+stderr, "top-secret") {
				t.Fatal("the key file's content was printed")
			}
		})
	}
}

// TestServeStreamReplaced: a store whose mark remembers a room stream
// that is not there: serve refuses with stream_replaced, exit status 2,
// and creates no stream.
func TestServeStreamReplaced(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	if err := os.MkdirAll(store, 0o750); err != nil {
		t.Fatal(err)
	}
	mark := room.StreamMarkFile(store, "ROOMS")
	if err := os.WriteFile(mark, []byte(`{"stream":"ROOMS","created":"2026-09-02T10:00:00.5Z","first_seq":1,"last_seq":7}`), 0o600); err != nil {
		t.Fatal(err)
	}
	status, _, stderr := invoke(t, "serve", "--listen", "127.0.0.1:-1", "--store-dir", store, "--log-level", "error")
	want := "publisher: stream_replaced: stream ROOMS is gone: serve remembers it created 2026-09-02T10:00:00.5Z, last sequence 7 (" + mark + "); "
	if status != exitUsage || !strings.Contains(stderr, want) || !strings.Contains(stderr, "--accept-stream") {
		t.Fatalf("status %d, stderr %q; want %d and %q", status, stderr, exitUsage, want)
	}
}

// TestRecordTextReport: publisher execution's text lines. A refusal lists
// every problem; one from a trimmed records reply (no problems list) still
// prints its first problem, which the item itself carries; a skipped
// record says why.
func TestRecordTextReport(t *testing.T) {
	at := events.Location{Pointer: "/outcome"}
	p := events.Problem{Code: events.SchemaInvalid, At: at, Reason: "schema: not one of the outcomes"}
	for _, c := range []struct {
		name  string
		reply room.RecordReply
		want  string
	}{
		{"whole", room.RecordReply{RoomID: "room:r", Item: room.ItemResult{Outcome: room.OutcomeRefused, Code: p.Code, At: &at, Reason: p.Reason, Problems: []events.Problem{p, p}}},
			"REFUSED   r.json → room:r\n          schema_invalid at r.json /outcome: schema: not one of the outcomes\n          schema_invalid at r.json /outcome: schema: not one of the outcomes\n"},
		{"trimmed", room.RecordReply{Item: room.ItemResult{Outcome: room.OutcomeRefused, Code: p.Code, At: &at, Reason: p.Reason}},
			"REFUSED   r.json → (no room)\n          schema_invalid at r.json /outcome: schema: not one of the outcomes\n"},
		{"outcome only", room.RecordReply{Item: room.ItemResult{Outcome: room.OutcomeRefused, Code: p.Code}},
			"REFUSED   r.json → (no room)\n          schema_invalid at r.json: (the reply was cut to outcomes; `publisher verify r.json` lists the problems)\n"},
		{"skipped", room.RecordReply{Item: room.ItemResult{Outcome: room.OutcomeSkipped, Reason: "not looked at: an earlier record of the request failed"}},
			"SKIPPED   r.json: not looked at: an earlier record of the request failed\n"},
		{"stored", room.RecordReply{RoomID: "room:r", Item: room.ItemResult{Outcome: room.OutcomeStored, Hash: "corpus-task-pack-execution:sha256:x", StreamSeq: 7}},
			"stored    r.json → room:r  corpus-task-pack-execution:sha256:x at stream seq 7\n"},
		{"stored, outcome only", room.RecordReply{Item: room.ItemResult{Outcome: room.OutcomeStored, StreamSeq: 7}},
			"stored    r.json at stream seq 7\n"},
	} {
		var b bytes.Buffer
		printRecord(&b, false, "r.json", c.reply)
		if b.String() != c.want {
			t.Errorf("%s: got\n%q\nwant\n%q", c.name, b.String(), c.want)
		}
	}
}

// TestRecordJSONReport: publisher execution --json locates a refusal in
// the record's file, as the text lines and publisher verify do: a record
// that is not strict JSON, which the gate refuses as a whole (no pointer,
// no line), has the file as its "at", never an empty object.
func TestRecordJSONReport(t *testing.T) {
	reply := room.RecordReply{Item: room.RefusedItem(0, []events.Problem{{Code: events.MalformedJSON, Reason: "not strict JSON: Duplicate key: \"a\""}})}
	var b bytes.Buffer
	printRecord(&b, true, "r.json", reply)
	want := `{"file":"r.json","ok":false,"item":{"index":0,"outcome":"refused","code":"malformed_json","at":{"file":"r.json"},"reason":"not strict JSON: Duplicate key: \"a\"",` +
		`"problems":[{"code":"malformed_json","at":{"file":"r.json"},"reason":"not strict JSON: Duplicate key: \"a\""}]}}` + "\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// executionObjects runs publisher execution --json with args and returns
// its exit status, its objects (file, ok, index, outcome, reason) and
// stderr; every stdout line must be one JSON object.
func executionObjects(t *testing.T, args ...string) (int, []executionObject, string) {
	t.Helper()
	status, stdout, stderr := invoke(t, append([]string{"execution", "--json", "--timeout", "2s"}, args...)...)
	var objs []executionObject
	for _, l := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		if l == "" {
			continue
		}
		var v executionObject
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("not a JSON object: %q: %v", l, err)
		}
		objs = append(objs, v)
	}
	return status, objs, stderr
}

type executionObject struct {
	File string `json:"file"`
	OK   bool   `json:"ok"`
	Item struct {
		Index   int    `json:"index"`
		Outcome string `json:"outcome"`
		Reason  string `json:"reason"`
	} `json:"item"`
}

// checkObjects: one object per file given, in that order, each with its
// place as index and the outcome wanted.
func checkObjects(t *testing.T, objs []executionObject, files, outcomes []string) {
	t.Helper()
	if len(objs) != len(files) {
		t.Fatalf("%d objects for %d files: %+v", len(objs), len(files), objs)
	}
	for i, o := range objs {
		if o.File != files[i] || o.Item.Index != i || o.Item.Outcome != outcomes[i] || o.OK {
			t.Errorf("object %d: %+v, want file %s, index %d, outcome %s, ok false", i, o, files[i], i, outcomes[i])
		}
	}
}

// TestExecutionJSONWhenNoAnswer: a server without the ingest service
// answers no request ("no responders"): with --json every file still has
// its object, in the order given (a missing file after an unconfirmed
// record in its place, failed), exit 2, and stderr names the files not
// confirmed (a breaker's find: the missing file's object came first).
func TestExecutionJSONWhenNoAnswer(t *testing.T) {
	srv := startNATS(t, 0)
	good := filepath.Join(samples, "records", "verified.json")
	missing := filepath.Join(t.TempDir(), "missing.json")
	files := []string{good, missing, good}
	status, objs, stderr := executionObjects(t, append([]string{"--server", srv.ClientURL()}, files...)...)
	if status != 2 {
		t.Errorf("exit %d, want 2; stderr %s", status, stderr)
	}
	checkObjects(t, objs, files, []string{"skipped", "failed", "skipped"})
	if len(objs) == 3 && (!strings.Contains(objs[0].Item.Reason, "not confirmed") || !strings.Contains(objs[1].Item.Reason, "no such file")) {
		t.Errorf("reasons: %q, %q", objs[0].Item.Reason, objs[1].Item.Reason)
	}
	if !strings.Contains(stderr, good+" and 1 more files: not confirmed") || !strings.Contains(stderr, "1 could not be read") {
		t.Errorf("stderr %q", stderr)
	}
}

// TestExecutionNoServer: nothing to connect to: with --json each file
// still has its object (skipped, not sent), exit 2.
func TestExecutionNoServer(t *testing.T) {
	good := filepath.Join(samples, "records", "verified.json")
	files := []string{good, good}
	status, objs, stderr := executionObjects(t, "--server", "nats://127.0.0.1:1", good, good)
	if status != 2 {
		t.Errorf("exit %d, want 2; stderr %s", status, stderr)
	}
	checkObjects(t, objs, files, []string{"skipped", "skipped"})
	if len(objs) == 2 && !strings.HasPrefix(objs[0].Item.Reason, "not sent: ") {
		t.Errorf("reason %q", objs[0].Item.Reason)
	}
}

// TestReadRecordFile: a record file must be a regular file; a FIFO is
// refused at once instead of blocking the run until a writer comes (a
// breaker's find: the run hung, deaf to SIGTERM), and so is a directory.
func TestReadRecordFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := readRecordFile(fifo)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("FIFO: %v, want not a regular file", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
	if _, err := readRecordFile(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
	want, err := os.ReadFile(filepath.Join(samples, "records", "verified.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readRecordFile(filepath.Join(samples, "records", "verified.json")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("regular file: %d bytes, %v", len(got), err)
	}
}

// TestNotConfirmedStderr: stderr names the first file not confirmed and
// how many more.
func TestNotConfirmedStderr(t *testing.T) {
	var errOut bytes.Buffer
	notConfirmed(&streams{out: io.Discard, err: &errOut}, []string{"a.json", "b.json"}, errors.New("nats: timeout"))
	if want := "publisher: a.json and 1 more files: not confirmed (run again: a record already stored is answered duplicate): nats: timeout\n"; errOut.String() != want {
		t.Errorf("stderr %q, want %q", errOut.String(), want)
	}
	errOut.Reset()
	notConfirmed(&streams{out: io.Discard, err: &errOut}, []string{"a.json"}, errors.New("nats: timeout"))
	if want := "publisher: a.json: not confirmed (run again: a record already stored is answered duplicate): nats: timeout\n"; errOut.String() != want {
		t.Errorf("stderr %q, want %q", errOut.String(), want)
	}
}

// TestExecutionStopsAtSkippedReply: a gate stopping between records
// answers the rest skipped, with no failed record and no error (a
// reviewer's find): the run must end there, as at a failed record, so that
// nothing after them is sent (and stored before them through another
// gate), and stderr names them. A stand-in service answers every record
// skipped; one record per request (a small max payload).
func TestExecutionStopsAtSkippedReply(t *testing.T) {
	url, requests := standInRecords(t, room.OutcomeSkipped)
	dir := t.TempDir()
	var files []string
	for i := range 2 {
		f := filepath.Join(dir, fmt.Sprintf("r%d.json", i))
		if err := os.WriteFile(f, []byte(fmt.Sprintf(`{"r":%d}`, i)), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	status, objs, stderr := executionObjects(t, append([]string{"--server", url}, files...)...)
	if status != 2 {
		t.Errorf("exit %d, want 2; stderr %s", status, stderr)
	}
	checkObjects(t, objs, files, []string{"skipped", "skipped"})
	if n := requests.Load(); n != 1 {
		t.Errorf("%d records requests, want 1: a record was sent after one that was not decided", n)
	}
	if !strings.Contains(stderr, files[1]+": not confirmed") {
		t.Errorf("stderr does not name %s as not confirmed: %q", files[1], stderr)
	}
}

// TestExecutionUnknownOutcome: an outcome this client does not know is
// not a store: the file prints FAILED and the run exits 2 (a reviewer's
// find: it printed FAILED and exited 0).
func TestExecutionUnknownOutcome(t *testing.T) {
	url, _ := standInRecords(t, "mystery")
	f := filepath.Join(t.TempDir(), "r.json")
	if err := os.WriteFile(f, []byte(`{"r":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	status, stdout, stderr := invoke(t, "execution", "--timeout", "2s", "--server", url, f)
	if status != 2 || !strings.HasPrefix(stdout, "FAILED    "+f) {
		t.Errorf("exit %d, want 2, and a FAILED line\n%s%s", status, stdout, stderr)
	}
}

// standInRecords starts a nats-server (max payload 1,500 bytes: one record
// per request) with a stand-in records endpoint that answers every record
// with outcome, and returns its URL and its request count.
func standInRecords(t *testing.T, outcome room.Outcome) (string, *atomic.Int32) {
	t.Helper()
	srv := startNATS(t, 1500)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var requests atomic.Int32
	sub, err := nc.Subscribe(room.DefaultServicePrefix+".records", func(m *nats.Msg) {
		requests.Add(1)
		n := bytes.Count(bytes.TrimSuffix(m.Data, []byte("\n")), []byte("\n")) + 1
		r := room.RecordsReply{Skipped: n}
		for i := range n {
			r.Records = append(r.Records, room.RecordReply{Item: room.ItemResult{Index: i, Outcome: outcome, Reason: "not looked at: context canceled"}})
		}
		b, _ := json.Marshal(r)
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return srv.ClientURL(), &requests
}

// startNATS starts a plain nats-server (no JetStream, no ingest service)
// for the test, with max payload maxPayload bytes (0: the default).
func startNATS(t *testing.T, maxPayload int32) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true, MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return srv
}
