package integration

// The systemd units of deploy/systemd, checked by systemd-analyze verify
// in a scratch root that holds what a host would: the distribution's
// units, and the built commands at the paths the units start.

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// unitsDir holds the units, relative to the repository root.
const unitsDir = "deploy/systemd"

// TestSystemdUnits: systemd-analyze verify says nothing about the units,
// and the checker that says so rejects a unit with a misspelled key
// (which verify reports and still exits 0 for) and a unit whose command
// is missing.
func TestSystemdUnits(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skipf("systemd-analyze is not installed: %v", err)
	}
	units, err := filepath.Glob(filepath.Join(root, unitsDir, "roompub-*"))
	if err != nil || len(units) != 3 {
		t.Fatalf("units in %s: %v, %v; want roompub-serve.service, roompub-audit.service and roompub-audit.timer", unitsDir, units, err)
	}
	scratch := scratchRoot(t, units)
	var paths []string
	for _, u := range units {
		paths = append(paths, filepath.Join(scratch, "etc", "systemd", "system", filepath.Base(u)))
	}
	if problems := verifyUnits(t, analyze, scratch, paths...); len(problems) > 0 {
		t.Errorf("systemd-analyze verify of %s:\n%s", strings.Join(paths, " "), strings.Join(problems, "\n"))
	}

	serve, err := os.ReadFile(filepath.Join(root, unitsDir, "roompub-serve.service"))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("misspelled key", func(t *testing.T) {
		bad := strings.Replace(string(serve), "\nProtectSystem=strict\n", "\nProtectSytem=strict\n", 1)
		if bad == string(serve) {
			t.Fatal("roompub-serve.service has no line ProtectSystem=strict to misspell")
		}
		p := filepath.Join(scratch, "etc", "systemd", "system", "roompub-misspelled.service")
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		problems := verifyUnits(t, analyze, scratch, p)
		if len(problems) == 0 || !strings.Contains(strings.Join(problems, "\n"), "Unknown key 'ProtectSytem'") {
			t.Fatalf("a unit with ProtectSytem=: problems %q; want verify's unknown key", problems)
		}
		if !strings.HasPrefix(problems[len(problems)-1], "exit status") {
			t.Logf("verify exited 0 for it: only its output shows the problem")
		}
	})
	t.Run("missing command", func(t *testing.T) {
		p := filepath.Join(scratch, "etc", "systemd", "system", "roompub-nocommand.service")
		unit := strings.Replace(string(serve), "ExecStart=/usr/local/bin/publisher ", "ExecStart=/usr/local/bin/no-such-publisher ", 1)
		if err := os.WriteFile(p, []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		if problems := verifyUnits(t, analyze, scratch, p); !strings.Contains(strings.Join(problems, "\n"), "/usr/local/bin/no-such-publisher") {
			t.Errorf("a unit starting a missing command: problems %q; want it named", problems)
		}
	})
	t.Run("example configs", func(t *testing.T) {
		// The files the units read (/etc/roompub/serve.yaml, audit.yaml)
		// load: serve starts with its own (local ports for the test: flags
		// win), and the audit reads that server with its own.
		srv := startServe(t, t.TempDir(), false, "--config", filepath.Join(unitsDir, "serve.yaml"),
			"--listen", "127.0.0.1:-1", "--http", "127.0.0.1:0", "--store-dir", t.TempDir())
		r := execIn(t, root, subscriberBin(t), "audit", "--config", filepath.Join(unitsDir, "audit.yaml"),
			"--server", srv.url, "--state-dir", t.TempDir(), "--allow-empty")
		if r.status != 0 || !strings.Contains(r.stdout, "CLEAN: 0 messages") {
			t.Errorf("subscriber audit --config %s/audit.yaml: exit %d\n%s%s", unitsDir, r.status, r.stdout, r.stderr)
		}
	})
}

// scratchRoot makes a root directory for systemd-analyze --root: the
// host's own unit directory (the targets the units order themselves
// after: network-online.target, multi-user.target, timers.target and
// what those pull in), the units in etc/systemd/system, and the built
// publisher and subscriber at each path an ExecStart= names.
func scratchRoot(t *testing.T, units []string) string {
	t.Helper()
	scratch := t.TempDir()
	hostUnits := "/usr/lib/systemd/system"
	if _, err := os.Stat(filepath.Join(hostUnits, "sysinit.target")); err != nil {
		t.Fatalf("systemd-analyze is installed but the host has no %s/sysinit.target to verify against: %v", hostUnits, err)
	}
	// cp -a keeps the symlinks between units (aliases, .wants) as they are.
	if out, err := exec.Command("cp", "-a", hostUnits, filepath.Join(mkdir(t, scratch, "usr/lib/systemd"), "system")).CombinedOutput(); err != nil {
		t.Fatalf("copy %s: %v\n%s", hostUnits, err, out)
	}
	system := mkdir(t, scratch, "etc/systemd/system")
	built := map[string]string{"publisher": publisher, "subscriber": subscriberBin(t)}
	for _, u := range units {
		data, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(system, filepath.Base(u)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range execStarts(data) {
			src, ok := built[filepath.Base(cmd)]
			if !ok {
				t.Fatalf("%s starts %s, which is not a roompub command", filepath.Base(u), cmd)
			}
			install(t, src, filepath.Join(scratch, cmd))
		}
	}
	return scratch
}

// execStarts returns the command of every ExecStart= line of a unit,
// without the prefixes (-, @, :, +, !) systemd allows before it.
func execStarts(unit []byte) []string {
	var cmds []string
	sc := bufio.NewScanner(bytes.NewReader(unit))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "ExecStart="); ok {
			if f := strings.Fields(strings.TrimLeft(v, "-@:+!")); len(f) > 0 {
				cmds = append(cmds, f[0])
			}
		}
	}
	return cmds
}

// verifyUnits runs systemd-analyze verify --root=scratch on the unit
// files and returns every line it printed, on stdout or stderr, and its
// exit status when that is not 0. verify reports an unknown key (a
// misspelled one, silently ignored at run time) on stderr and exits 0,
// so any output is a problem: nothing is filtered.
func verifyUnits(t *testing.T, analyze, scratch string, units ...string) []string {
	t.Helper()
	cmd := exec.Command(analyze, append([]string{"verify", "--root=" + scratch}, units...)...)
	cmd.Dir = scratch
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var problems []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.TrimSpace(l) != "" {
			problems = append(problems, l)
		}
	}
	if err != nil {
		problems = append(problems, err.Error())
	}
	return problems
}

// install copies the executable src to dst (a hard link where it can).
func install(t *testing.T, src, dst string) {
	t.Helper()
	mkdir(t, "/", filepath.Dir(dst))
	if err := os.Link(src, dst); err == nil {
		return
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// mkdir makes dir/rel and its parents, and returns it.
func mkdir(t *testing.T, dir, rel string) string {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
