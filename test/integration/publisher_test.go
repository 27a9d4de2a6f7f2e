// Package integration runs the real publisher binary, built once in
// TestMain, against the bundled samples and the reference vectors, the way
// a user or a CI job does.
package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// root is the repository root: every command runs there, so paths in the
// output are the same as in the documentation and `make run`.
var root string

// publisher and gen are the binaries TestMain builds.
var publisher, gen string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	var err error
	if root, err = filepath.Abs("../.."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	bin, err := os.MkdirTemp("", "roompub-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(bin)
	publisher, gen = filepath.Join(bin, "publisher"), filepath.Join(bin, "gen")
	for out, pkg := range map[string]string{publisher: "./cmd/publisher", gen: "./testdata/samples/gen"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, msg)
			return 2
		}
	}
	return m.Run()
}

// result is one run of a binary.
type result struct {
	status         int
	stdout, stderr string
}

// execIn runs bin with args in dir and returns its exit status and output.
func execIn(t *testing.T, dir, bin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return result{status: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
}

func pub(t *testing.T, args ...string) result {
	t.Helper()
	return execIn(t, root, publisher, args...)
}

// line is one line of `verify --json`: the fields the tests look at.
type line struct {
	Path     string `json:"path"`
	Kind     string `json:"kind"`
	OK       bool   `json:"ok"`
	Code     string `json:"code"`
	At       string `json:"at"`
	Reason   string `json:"reason"`
	Problems []struct {
		Code string `json:"code"`
	} `json:"problems"`
	Entries *int   `json:"entries"`
	Head    string `json:"head"`
	Ref     string `json:"ref"`
	Error   string `json:"error"`
}

func jsonLines(t *testing.T, stdout string) []line {
	t.Helper()
	var out []line
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON line: %v\n%s", err, sc.Text())
		}
		out = append(out, l)
	}
	return out
}

// lastEntryHash reads the entry_hash of a journal's last line.
func lastEntryHash(t *testing.T, journal string) (hash string, lines int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, journal))
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	var e struct {
		EntryHash string `json:"entry_hash"`
	}
	if err := json.Unmarshal([]byte(all[len(all)-1]), &e); err != nil {
		t.Fatal(err)
	}
	return e.EntryHash, len(all)
}

const (
	samples   = "testdata/samples"
	reference = "testdata/reference"
)

// TestVerifyEveryFile verifies each sample and reference input on its own
// and checks the exit status and the JSON line.
func TestVerifyEveryFile(t *testing.T) {
	tests := []struct {
		path    string
		status  int
		kind    string
		code    string // "" for accepted
		at      string // refusal location
		journal string // accepted journals: the file whose head and length to expect
		ref     string // accepted records: the execution/ref to expect
	}{
		{path: samples + "/capsules/slugify-run", kind: "journal", journal: samples + "/capsules/slugify-run/journal.ndjson"},
		{path: samples + "/capsules/slugify-run/journal.ndjson", kind: "journal", journal: samples + "/capsules/slugify-run/journal.ndjson"},
		{path: samples + "/capsules/csv-dedupe", kind: "journal", journal: samples + "/capsules/csv-dedupe/journal.ndjson"},
		{path: samples + "/capsules/broken", status: 1, kind: "journal", code: "invalid_entry",
			at: samples + "/capsules/broken/journal.ndjson:14 /entry_hash"},
		{path: samples + "/widened/control-plane", status: 1, kind: "journal", code: "invalid_entry",
			at: samples + "/widened/control-plane/journal.ndjson:1 /payload"},
		{path: samples + "/records/verified.json", kind: "execution", ref: "corpus-task-pack-execution:sha256:PEaap8mlrUCWgXaNN_ov8LMrV0U6McBdaRiHIbFzaS0"},
		{path: samples + "/records/refused.json", kind: "execution", ref: "corpus-task-pack-execution:sha256:bOfnms-342jheEQTRshIkvucGZG2pRO1bZfNtctasY4"},
		{path: samples + "/records/foreign-evidence.json", status: 1, kind: "execution", code: "foreign_evidence",
			at: samples + "/records/foreign-evidence.json /evidence/0/environment~1ref"},

		{path: reference + "/capsule-journals/canonical", kind: "journal", journal: reference + "/capsule-journals/canonical/journal.ndjson"},
		{path: reference + "/capsule-journals/canonical/journal.ndjson", kind: "journal", journal: reference + "/capsule-journals/canonical/journal.ndjson"},
		// Not journals: a pretty-printed entry, and a canonical entry without a newline.
		{path: reference + "/capsule-journals/single-entry.json", status: 1, kind: "journal", code: "corrupt_entry",
			at: reference + "/capsule-journals/single-entry.json:1"},
		{path: reference + "/capsule-journals/single-entry.canonical.txt", status: 1, kind: "journal", code: "truncated_tail",
			at: reference + "/capsule-journals/single-entry.canonical.txt:1"},
		{path: reference + "/execution-records/verified.json", kind: "execution", ref: "corpus-task-pack-execution:sha256:PEaap8mlrUCWgXaNN_ov8LMrV0U6McBdaRiHIbFzaS0"},
		{path: reference + "/execution-records/refused.json", kind: "execution", ref: "corpus-task-pack-execution:sha256:bOfnms-342jheEQTRshIkvucGZG2pRO1bZfNtctasY4"},
		{path: reference + "/execution-records/foreign-evidence.json", status: 1, kind: "execution", code: "foreign_evidence",
			at: reference + "/execution-records/foreign-evidence.json /evidence/0/environment~1ref"},
		{path: reference + "/execution-records/invalid/inline-output.json", status: 1, kind: "execution", code: "schema_invalid",
			at: reference + "/execution-records/invalid/inline-output.json /evidence/0"},
		{path: reference + "/execution-records/invalid/refused-without-code.json", status: 1, kind: "execution", code: "schema_invalid",
			at: reference + "/execution-records/invalid/refused-without-code.json"},
		{path: reference + "/execution-records/invalid/verified-without-instance.json", status: 1, kind: "execution", code: "schema_invalid",
			at: reference + "/execution-records/invalid/verified-without-instance.json"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			r := pub(t, "verify", "--json", tc.path)
			if r.status != tc.status {
				t.Errorf("exit status %d, want %d\n%s%s", r.status, tc.status, r.stdout, r.stderr)
			}
			lines := jsonLines(t, r.stdout)
			if len(lines) != 1 {
				t.Fatalf("%d JSON lines, want 1:\n%s", len(lines), r.stdout)
			}
			l := lines[0]
			if l.Path != tc.path || l.Kind != tc.kind || l.OK != (tc.code == "") || l.Code != tc.code || l.At != tc.at || l.Error != "" {
				t.Errorf("got path %q kind %q ok %v code %q at %q error %q\nwant path %q kind %q code %q at %q",
					l.Path, l.Kind, l.OK, l.Code, l.At, l.Error, tc.path, tc.kind, tc.code, tc.at)
			}
			if tc.code != "" && (len(l.Problems) == 0 || l.Problems[0].Code != tc.code || l.Reason == "") {
				t.Errorf("refusal without its problems or reason: %+v", l)
			}
			if tc.journal != "" {
				head, n := lastEntryHash(t, tc.journal)
				if l.Entries == nil || *l.Entries != n || l.Head != head {
					t.Errorf("entries %v head %q, want %d and %q", l.Entries, l.Head, n, head)
				}
			}
			if tc.ref != "" && l.Ref != tc.ref {
				t.Errorf("ref %q, want %q", l.Ref, tc.ref)
			}
		})
	}
}

// TestVerifyJSONLinesInOrder: several paths give one line each, in the
// order given, and a path that cannot be verified still gets its line.
func TestVerifyJSONLinesInOrder(t *testing.T) {
	paths := []string{
		samples + "/records/foreign-evidence.json",
		samples + "/capsules/csv-dedupe",
		samples + "/no-such-capsule",
		samples + "/capsules/broken",
		samples + "/records/verified.json",
	}
	r := pub(t, append([]string{"verify", "--json"}, paths...)...)
	if r.status != 2 {
		t.Errorf("exit status %d, want 2 (one path cannot be verified)", r.status)
	}
	lines := jsonLines(t, r.stdout)
	if len(lines) != len(paths) {
		t.Fatalf("%d lines for %d paths:\n%s", len(lines), len(paths), r.stdout)
	}
	wantOK := []bool{false, true, false, false, true}
	for i, l := range lines {
		if l.Path != paths[i] || l.OK != wantOK[i] {
			t.Errorf("line %d: path %q ok %v, want %q ok %v", i+1, l.Path, l.OK, paths[i], wantOK[i])
		}
	}
	if lines[2].Error == "" || !strings.Contains(r.stderr, paths[2]) {
		t.Errorf("missing path: error %q, stderr %q", lines[2].Error, r.stderr)
	}
}

// TestVerifyUsageErrors: inputs that cannot be verified exit 2 and say
// why on stderr, not stdout.
func TestVerifyUsageErrors(t *testing.T) {
	empty := t.TempDir()
	for name, args := range map[string][]string{
		"missing path":          {"verify", samples + "/no-such-file.json"},
		"dir without journal":   {"verify", empty},
		"schema dir not a dir":  {"verify", "--schema-dir", samples + "/records/verified.json", samples + "/records/verified.json"},
		"bad trusted host":      {"verify", "--trusted-host", "z6MkqB3fVxzXFbVUK2q1GPrLQzaxgwDGGVuxkDzaf5tsLnpo", samples + "/records/verified.json"},
		"no paths":              {"verify"},
		"unknown flag":          {"verify", "--no-such-flag", samples + "/records/verified.json"},
		"missing path and good": {"verify", samples + "/records/verified.json", samples + "/nope"},
	} {
		t.Run(name, func(t *testing.T) {
			r := pub(t, args...)
			if r.status != 2 || r.stderr == "" {
				t.Errorf("exit status %d, stderr %q; want 2 and a message", r.status, r.stderr)
			}
			if strings.Contains(r.stdout, "nope") || strings.Contains(r.stdout, "no-such") {
				t.Errorf("usage error on stdout:\n%s", r.stdout)
			}
		})
	}
}

// TestSchemaDir: the widened sample schemas accept the capsule that uses
// the seven extra payload keys, and the upstream record schemas give the
// same verdicts as the embedded ones.
func TestSchemaDir(t *testing.T) {
	r := pub(t, "verify", "--schema-dir", samples+"/widened/schemas", samples+"/widened/control-plane", samples+"/capsules/slugify-run")
	if r.status != 0 {
		t.Errorf("widened schemas: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	// The reference directory has the record schemas; the envelope is seed 000's.
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(root, reference, "schemas", "*.schema.json"))
	if err != nil || len(files) != 5 {
		t.Fatalf("reference schemas: %v %v", files, err)
	}
	for _, f := range append(files, filepath.Join(root, "schemas", "capsule-envelope.schema.json")) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r = pub(t, "verify", "--json", "--schema-dir", dir,
		samples+"/capsules/slugify-run", samples+"/records/verified.json", samples+"/records/foreign-evidence.json")
	lines := jsonLines(t, r.stdout)
	if r.status != 1 || len(lines) != 3 || !lines[0].OK || !lines[1].OK || lines[2].Code != "foreign_evidence" {
		t.Errorf("reference schemas: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
}

// TestKeygenSignVerify is the host's round trip: a new key signs a record,
// the signed record verifies (also with the key as the one trusted host),
// and one changed byte makes it refused.
func TestKeygenSignVerify(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "host.pem")
	r := pub(t, "keygen", "--out", key)
	if r.status != 0 {
		t.Fatalf("keygen: exit %d: %s", r.status, r.stderr)
	}
	nodeID := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(nodeID, "node:did:key:z6Mk") {
		t.Fatalf("keygen printed %q, want a node id", r.stdout)
	}
	if info, err := os.Stat(key); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", info, err)
	}

	r = pub(t, "sign", "--key", key, samples+"/records/verified.json")
	if r.status != 0 {
		t.Fatalf("sign: exit %d: %s", r.status, r.stderr)
	}
	if !strings.Contains(r.stdout, `"host/node-id": "`+nodeID+`"`) {
		t.Errorf("signed record does not name the new host:\n%s", r.stdout)
	}
	signed := filepath.Join(dir, "signed.json")
	if err := os.WriteFile(signed, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := pub(t, "verify", "--trusted-host", nodeID, signed); r.status != 0 {
		t.Fatalf("verify of the signed record: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	// The reference host is not trusted when only the new key is.
	r = pub(t, "verify", "--json", "--trusted-host", nodeID, samples+"/records/verified.json")
	if l := jsonLines(t, r.stdout); r.status != 1 || len(l) != 1 || l[0].Code != "untrusted_host" {
		t.Errorf("reference record with only the new host trusted: exit %d\n%s", r.status, r.stdout)
	}

	// One byte of run/ref changed: the ref no longer matches, nor does the signature.
	data, err := os.ReadFile(signed)
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Replace(data, []byte(`"run/ref": "operator-task-run:run-01"`), []byte(`"run/ref": "operator-task-run:run-02"`), 1)
	if bytes.Equal(tampered, data) {
		t.Fatal("run/ref not found in the signed record")
	}
	if err := os.WriteFile(signed, tampered, 0o644); err != nil {
		t.Fatal(err)
	}
	r = pub(t, "verify", "--json", signed)
	l := jsonLines(t, r.stdout)
	if r.status != 1 || len(l) != 1 || l[0].Code != "ref_mismatch" || l[0].At != signed+" /execution~1ref" {
		t.Fatalf("tampered record: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	var codes []string
	for _, p := range l[0].Problems {
		codes = append(codes, p.Code)
	}
	if strings.Join(codes, ",") != "ref_mismatch,signature_invalid" {
		t.Errorf("problems %v, want ref_mismatch and signature_invalid", codes)
	}
}

func TestKeygenRefusesToOverwrite(t *testing.T) {
	key := filepath.Join(t.TempDir(), "host.pem")
	if r := pub(t, "keygen", "--out", key); r.status != 0 {
		t.Fatalf("keygen: %s", r.stderr)
	}
	before, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	r := pub(t, "keygen", "--out", key)
	if r.status != 2 || r.stdout != "" || !strings.Contains(r.stderr, "already exists") {
		t.Errorf("second keygen: exit %d, stdout %q, stderr %q", r.status, r.stdout, r.stderr)
	}
	if after, _ := os.ReadFile(key); !bytes.Equal(before, after) {
		t.Error("the existing key was changed")
	}
	if r := pub(t, "keygen", "--out", key, "--force"); r.status != 0 {
		t.Errorf("keygen --force: exit %d: %s", r.status, r.stderr)
	}
	if after, _ := os.ReadFile(key); bytes.Equal(before, after) {
		t.Error("keygen --force kept the old key")
	}
	// --force replaces a regular file only: a symlink (and its target), a
	// directory or a FIFO stay as they were (a breaker's --force as root
	// replaced /dev/full with a key file).
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link, fifo, sub := filepath.Join(dir, "link"), filepath.Join(dir, "fifo"), filepath.Join(dir, "sub")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for path, kind := range map[string]string{link: "a symbolic link", fifo: "a FIFO", sub: "a directory"} {
		r := pub(t, "keygen", "--out", path, "--force")
		if r.status != 2 || r.stdout != "" || !strings.Contains(r.stderr, path+" is not a regular file ("+kind+")") {
			t.Errorf("keygen --force over %s: exit %d, stdout %q, stderr %q", kind, r.status, r.stdout, r.stderr)
		}
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Errorf("the symlink's target changed: %q", b)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v %v", fi, err)
	}
}

// TestMakeRunScript runs the `make run` demo script against the binary.
func TestMakeRunScript(t *testing.T) {
	r := execIn(t, root, filepath.Join(root, samples, "run.sh"), publisher, subscriberBin(t))
	if r.status != 0 || !strings.Contains(r.stdout, "make run: OK") {
		t.Errorf("run.sh: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
}

// TestSamplesAreGenerated: the committed samples are exactly what the
// generator writes, so they can be rebuilt and reviewed as code.
func TestSamplesAreGenerated(t *testing.T) {
	out := t.TempDir()
	if r := execIn(t, root, gen, "-out", out); r.status != 0 {
		t.Fatalf("gen: exit %d: %s", r.status, r.stderr)
	}
	n := 0
	err := filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(out, p)
		if err != nil {
			return err
		}
		fresh, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		committed, err := os.ReadFile(filepath.Join(root, samples, rel))
		if err != nil {
			return err
		}
		if !bytes.Equal(fresh, committed) {
			t.Errorf("%s/%s differs from the generator's output; run `make samples`", samples, rel)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Errorf("generator wrote %d files, want the 4 capsules and 6 schemas", n)
	}
}
