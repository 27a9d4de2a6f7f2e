package integration

// The bench: cmd/roompub-bench in --quick mode against its own
// embedded nats-server, with the real publisher and subscriber binaries.
// It checks that the run completes and that its JSON line holds every
// throughput and ratio, with the counts both sides actually reached; it
// asserts no speed (no timed tests), only that each side did the work.
// roompub's side runs attested, with a checkpointer, and its
// readers trust the publisher key: every message admitted, every
// checkpoint verified; --no-attest runs the keyless path.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// runBench builds cmd/roompub-bench and runs it with args in a directory
// of its own, returning its JSON line.
func runBench(t *testing.T, args ...string) map[string]any {
	t.Helper()
	return runBenchIn(t, t.TempDir(), args...)
}

// runBenchIn is runBench in dir.
func runBenchIn(t *testing.T, dir string, args ...string) map[string]any {
	t.Helper()
	return runBenchEnv(t, dir, nil, args...)
}

// runBenchEnv is runBenchIn with env added to the bench's environment.
func runBenchEnv(t *testing.T, dir string, env []string, args ...string) map[string]any {
	t.Helper()
	bench := filepath.Join(filepath.Dir(publisher), "roompub-bench")
	build := exec.Command("go", "build", "-o", bench, "./cmd/roompub-bench")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/roompub-bench: %v\n%s", err, out)
	}
	cmd := exec.Command(bench, append(args, "--publisher", publisher, "--subscriber", subscriberBin(t))...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("roompub-bench %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, out.String(), errOut.String())
	}
	if strings.Contains(out.String()+errOut.String(), "PRIVATE") {
		t.Errorf("the output holds key material:\n%s\n%s", out.String(), errOut.String())
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("the last line is not JSON: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
	return got
}

func TestBenchQuick(t *testing.T) {
	got := runBench(t, "--quick")
	// The --quick sizes, per scenario and round (the write scenarios run
	// two rounds in --quick): what each side must have stored, audited or
	// verified.
	want := map[string]struct{ n, rounds float64 }{"long_chain": {500, 2}, "parallel": {10 * 100, 2}, "records": {100, 2}, "read": {10 * 2000, 1}, "verify": {5000, 1},
		"verify_sha256sum": {5000, 1}}
	for sc, w := range want {
		if got[sc+"_rounds"] != w.rounds {
			t.Errorf("%s_rounds = %v, want %v", sc, got[sc+"_rounds"], w.rounds)
		}
		for _, k := range []string{"items", "raw_count", "roompub_count"} {
			if v, ok := got[sc+"_"+k].(float64); !ok || v != w.n*w.rounds {
				t.Errorf("%s_%s = %v, want %v", sc, k, got[sc+"_"+k], w.n*w.rounds)
			}
		}
		for _, k := range []string{"raw_per_s", "raw_mb_per_s", "roompub_per_s", "roompub_mb_per_s", "ratio", "raw_bytes", "roompub_bytes"} {
			if v, ok := got[sc+"_"+k].(float64); !ok || !(v > 0) {
				t.Errorf("%s_%s = %v, want a number > 0", sc, k, got[sc+"_"+k])
			}
		}
		// Process CPU time (getrusage) during each side's timed work: it
		// is there for every side; roompub's write sides run long enough
		// in-process to have used some.
		for _, k := range []string{"raw_cpu_cores", "raw_cpu_us_each", "roompub_cpu_cores", "roompub_cpu_us_each"} {
			v, ok := got[sc+"_"+k].(float64)
			if !ok || v < 0 || (sc != "read" && !strings.HasPrefix(sc, "verify") && strings.HasPrefix(k, "roompub") && !(v > 0)) {
				t.Errorf("%s_%s = %v, want a CPU figure (> 0 for roompub's write sides)", sc, k, got[sc+"_"+k])
			}
			// No side can use more cores than the machine has (the read
			// row once did: two raw reads' CPU over one read's time).
			if strings.HasSuffix(k, "_cores") && v > float64(runtime.NumCPU())+0.2 {
				t.Errorf("%s_%s = %v, more than the %d cores this machine has", sc, k, v, runtime.NumCPU())
			}
		}
		if got[sc+"_raw_bytes"] != got[sc+"_roompub_bytes"] {
			t.Errorf("%s: raw sent %v bytes, roompub %v: not the same bytes", sc, got[sc+"_raw_bytes"], got[sc+"_roompub_bytes"])
		}
		if _, ok := got[sc+"_floor"].(float64); !ok {
			t.Errorf("%s_floor missing", sc)
		}
		if _, ok := got[sc+"_ok"].(bool); !ok {
			t.Errorf("%s_ok missing", sc)
		}
	}
	// --quick audits the write streams: both sides' entries and records
	// verify (the raw side stored exactly what roompub stores), each
	// chain once per side and round, plus the long chain's reference chain
	// of synchronous publishes (raw). roompub's stream is audited trusting
	// its publisher key: every one of its messages (2 rounds of 500 + 10 ×
	// 100 entries and 100 records) admitted, covered by the checkpoints
	// verified (the bench fails if any came after the last one).
	if got["write_audit_clean"] != true {
		t.Errorf("write_audit_clean = %v, want true", got["write_audit_clean"])
	}
	if got["long_chain_raw_sync_count"] != 500.0 {
		t.Errorf("long_chain_raw_sync_count = %v, want 500", got["long_chain_raw_sync_count"])
	}
	for k, v := range map[string]float64{"write_audit_entries": 2*2*(500+1000) + 500, "write_audit_records": 2 * 2 * 100, "write_audit_chains_ok": 2*2*(1+10) + 1,
		"write_audit_admitted": 2 * (500 + 1000 + 100)} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for _, k := range []string{"attested", "write_audit_attestation_checked", "read_audit_attestation_checked"} {
		if got[k] != true {
			t.Errorf("%s = %v, want true", k, got[k])
		}
	}
	// Every message is either admitted by a covering checkpoint or had
	// its attestation verified one by one.
	for _, p := range []string{"write_audit_", "read_audit_"} {
		by, _ := got[p+"admitted_by_checkpoint"].(float64)
		one, _ := got[p+"attestations_verified"].(float64)
		if by+one < got[p+"admitted"].(float64) {
			t.Errorf("%s: %v admitted by a checkpoint and %v verified one by one, of %v admitted", p, by, one, got[p+"admitted"])
		}
	}
	if v, ok := got["write_audit_checkpoints_verified"].(float64); !ok || v < 3 {
		t.Errorf("write_audit_checkpoints_verified = %v, want at least one per room (3)", got["write_audit_checkpoints_verified"])
	}
	// The read stream: 10 chains of 2000 entries over 10 rooms, all
	// admitted; each room has at least its final checkpoint, and audit
	// verified every checkpoint the stream holds.
	if got["read_audit_admitted"] != 20000.0 {
		t.Errorf("read_audit_admitted = %v, want 20000", got["read_audit_admitted"])
	}
	if v, ok := got["read_checkpoints"].(float64); !ok || v < 10 || got["read_audit_checkpoints_verified"] != v {
		t.Errorf("read_checkpoints = %v, read_audit_checkpoints_verified = %v: want the same, at least 10", got["read_checkpoints"], got["read_audit_checkpoints_verified"])
	}
	for k, v := range map[string]float64{"read_audit_exit_code": 0, "read_audit_chains_ok": 10, "verify_exit_code": 0, "read_peak_rss_cap_mib": 128,
		"read_peak_live_heap_cap_mib": 64, "read_audit_gogc": 200, "read_audit_memory_limit_mib": 192} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	// The audit reports its live heap: more than nothing, less than the
	// process's RSS.
	rss, _ := got["read_peak_rss_mib"].(float64)
	if live, ok := got["read_peak_live_heap_mib"].(float64); !ok || !(live > 0) || !(live < rss) {
		t.Errorf("read_peak_live_heap_mib = %v, read_peak_rss_mib = %v: want 0 < live heap < RSS", got["read_peak_live_heap_mib"], got["read_peak_rss_mib"])
	}
	for _, k := range []string{"go_version", "gomaxprocs", "nats_server_version", "sync", "all_ok"} {
		if _, ok := got[k]; !ok {
			t.Errorf("%s missing", k)
		}
	}
	if got["sync"] != "always" {
		t.Errorf("sync = %v, want always", got["sync"])
	}
}

// TestBenchNoAttest: --no-attest measures the keyless path: no
// attestation, no checkpoint, an audit that does not check them.
func TestBenchNoAttest(t *testing.T) {
	got := runBench(t, "--quick", "--no-attest", "--only", "long", "--only", "read")
	for k, v := range map[string]any{"attested": false, "write_audit_attestation_checked": false, "read_audit_attestation_checked": false,
		"read_checkpoints": 0.0, "read_audit_exit_code": 0.0, "read_raw_count": 20000.0, "read_roompub_count": 20000.0,
		"long_chain_roompub_count": 1000.0, "write_audit_clean": true, "write_audit_entries": 2*1000.0 + 500} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for _, k := range []string{"write_audit_admitted", "read_audit_admitted", "parallel_ratio"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s = %v, want none", k, got[k])
		}
	}
}

// TestBenchReplicas: --replicas 3 runs the long chain and parallel rows
// on a cluster of three real nats-servers, both write streams at three
// replicas, every replica current, led by the server the clients use;
// both sides stored the same entries (the streams counted, then
// audited); the cluster's stores were in the temporary directory, and
// nothing is left there.
func TestBenchReplicas(t *testing.T) {
	tmp := t.TempDir()
	got := runBenchEnv(t, t.TempDir(), []string{"TMPDIR=" + tmp}, "--quick", "--replicas", "3")
	for k, v := range map[string]any{"replicas": 3.0, "servers": 3.0, "sync": "always",
		"write_stream_replicas": 3.0, "raw_stream_replicas": 3.0, "write_stream_current": 3.0, "raw_stream_current": 3.0,
		"write_stream_leader": "n1", "raw_stream_leader": "n1",
		// 2 rounds of 500 + 10 × 100 entries each side; the raw side's
		// long chain has its reference chain of 500 besides.
		"long_chain_raw_count": 1000.0, "long_chain_roompub_count": 1000.0, "parallel_raw_count": 2000.0, "parallel_roompub_count": 2000.0,
		"write_stream_leaves": 3000.0, "raw_stream_leaves": 3500.0,
		"write_audit_clean": true, "write_audit_entries": 2*3000.0 + 500, "write_audit_admitted": 3000.0,
		"long_chain_floor": 0.0, "parallel_floor": 0.0} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for _, k := range []string{"long_chain_ratio", "parallel_ratio", "long_chain_roompub_cpu_us_each", "parallel_raw_cpu_us_each"} {
		if v, ok := got[k].(float64); !ok || !(v > 0) {
			t.Errorf("%s = %v, want a number > 0", k, got[k])
		}
	}
	for _, k := range []string{"records_items", "read_items", "verify_items"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s = %v: only the long chain and parallel rows run on the cluster", k, got[k])
		}
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) > 0 {
		t.Errorf("left in the temporary directory: %v %v", left, err)
	}
}

// TestBenchTrace: --trace DIR writes one execution trace per side and
// round of the write rows selected, named <row>-r<round>-<side>.trace,
// and nothing else; go tool trace reads them.
func TestBenchTrace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "traces")
	got := runBench(t, "--quick", "--only", "parallel", "--trace", dir)
	if got["parallel_raw_count"] == nil || got["parallel_roompub_count"] == nil {
		t.Fatalf("the parallel row did not run: %v", got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"parallel-r1-raw.trace", "parallel-r1-roompub.trace", "parallel-r2-raw.trace", "parallel-r2-roompub.trace"}
	if !slices.Equal(names, want) {
		t.Fatalf("traces %v, want %v", names, want)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil || !bytes.HasPrefix(b, []byte("go 1.")) || !bytes.Contains(b[:16], []byte(" trace")) {
			t.Fatalf("%s is not an execution trace (%d bytes, %v): %q", n, len(b), err, b[:min(len(b), 16)])
		}
	}
	out, err := exec.Command("go", "tool", "trace", "-pprof=sched", filepath.Join(dir, want[1])).Output()
	if err != nil || len(out) == 0 {
		t.Fatalf("go tool trace -pprof=sched %s: %v (%d bytes)", want[1], err, len(out))
	}
}

// TestBenchModes: --modes keyless,attested,witnessed runs the long chain,
// parallel and read rows once per mode, the witnessed one with real
// litewitness processes cosigning both deployment logs (the write rows'
// and the read stream's), and reports each mode's throughputs and ratio;
// the witnessed audits verified every room's latest checkpoint as
// witnessed by the quorum. It runs in the checkout, as make bench does:
// the witnesses are built with the go command from go.mod's tool
// directives.
func TestBenchModes(t *testing.T) {
	got := runBenchIn(t, root, "--quick", "--modes", "keyless,attested,witnessed", "--only", "long", "--only", "parallel", "--only", "read")
	if got["attested"] != true || got["witnessed"] != false {
		t.Errorf("attested = %v, witnessed = %v: the main table is the attested mode's", got["attested"], got["witnessed"])
	}
	if m, _ := got["modes"].([]any); len(m) != 3 || m[0] != "keyless" || m[1] != "attested" || m[2] != "witnessed" {
		t.Errorf("modes = %v, want keyless, attested, witnessed", got["modes"])
	}
	for _, row := range []string{"long_chain", "parallel", "read"} {
		for _, mode := range []string{"keyless", "attested", "witnessed"} {
			for _, k := range []string{"ratio", "raw_per_s", "roompub_per_s", "raw_count", "roompub_count"} {
				key := row + "_" + mode + "_" + k
				if v, ok := got[key].(float64); !ok || !(v > 0) {
					t.Errorf("%s = %v, want a number > 0", key, got[key])
				}
			}
		}
		if got[row+"_attested_ratio"] != got[row+"_ratio"] {
			t.Errorf("%s_attested_ratio = %v, %s_ratio = %v: the attested column is the main table", row, got[row+"_attested_ratio"], row, got[row+"_ratio"])
		}
	}
	// The keyless read does not trust the publisher; the witnessed one
	// checks the deployment log: 10 rooms, each witnessed, by at least
	// the quorum (2 of 3).
	if got["read_keyless_audit_attestation_checked"] != false || got["read_witnessed_audit_attestation_checked"] != true {
		t.Errorf("attestations checked: keyless %v, witnessed %v", got["read_keyless_audit_attestation_checked"], got["read_witnessed_audit_attestation_checked"])
	}
	for k, v := range map[string]float64{"witnesses": 3, "witness_quorum": 2, "read_witnessed_audit_witness_rooms_witnessed": 10, "write_audit_witnessed_witness_rooms_witnessed": 2,
		"read_witnessed_audit_admitted": 20000, "write_audit_witnessed_admitted": 2 * (500 + 1000)} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for _, p := range []string{"read_witnessed_audit_", "write_audit_witnessed_"} {
		for _, k := range []string{"witness_entries", "witness_checkpoints"} {
			if v, ok := got[p+k].(float64); !ok || !(v > 0) {
				t.Errorf("%s%s = %v, want a number > 0", p, k, got[p+k])
			}
		}
		if v, ok := got[p+"witness_cosigners"].(float64); !ok || v < 2 {
			t.Errorf("%switness_cosigners = %v, want at least the quorum, 2", p, got[p+"witness_cosigners"])
		}
	}
	if got["write_audit_keyless_clean"] != true || got["write_audit_witnessed_clean"] != true {
		t.Errorf("write audits: keyless %v, witnessed %v, want clean", got["write_audit_keyless_clean"], got["write_audit_witnessed_clean"])
	}
}
