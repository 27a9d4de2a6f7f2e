package integration

// The bench (issue 8): cmd/roompub-bench in --quick mode against its own
// embedded nats-server, with the real publisher and subscriber binaries.
// It checks that the run completes and that its JSON line holds every
// throughput and ratio, with the counts both sides actually reached; it
// asserts no speed (no timed tests), only that each side did the work.

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchQuick(t *testing.T) {
	bench := filepath.Join(filepath.Dir(publisher), "roompub-bench")
	build := exec.Command("go", "build", "-o", bench, "./cmd/roompub-bench")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/roompub-bench: %v\n%s", err, out)
	}
	cmd := exec.Command(bench, "--quick", "--publisher", publisher, "--subscriber", subscriberBin(t))
	cmd.Dir = t.TempDir()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("roompub-bench --quick: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("the last line is not JSON: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())

	// The --quick sizes, per scenario and round (the write scenarios run
	// two rounds in --quick): what each side must have stored, audited or
	// verified.
	want := map[string]struct{ n, rounds float64 }{"long_chain": {500, 2}, "parallel": {10 * 100, 2}, "records": {100, 2}, "read": {10 * 2000, 1}, "verify": {5000, 1}}
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
	// --quick audits the write stream: both sides' entries and records
	// verify (the raw side stored exactly what roompub stores), each
	// chain once per side and round, plus the long chain's reference chain
	// of synchronous publishes.
	if got["write_audit_clean"] != true {
		t.Errorf("write_audit_clean = %v, want true", got["write_audit_clean"])
	}
	if got["long_chain_raw_sync_count"] != 500.0 {
		t.Errorf("long_chain_raw_sync_count = %v, want 500", got["long_chain_raw_sync_count"])
	}
	for k, v := range map[string]float64{"write_audit_entries": 2*2*(500+1000) + 500, "write_audit_records": 2 * 2 * 100, "write_audit_chains_ok": 2*2*(1+10) + 1} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for k, v := range map[string]float64{"read_audit_exit_code": 0, "read_audit_chains_ok": 10, "verify_exit_code": 0, "read_peak_rss_cap_mib": 256} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if v, ok := got["read_peak_rss_mib"].(float64); !ok || !(v > 0) {
		t.Errorf("read_peak_rss_mib = %v, want a number > 0", got["read_peak_rss_mib"])
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
