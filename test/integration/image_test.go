package integration

// The OCI image: `make image` writes the layout, the test reads it back
// as any OCI tool would, unpacks its filesystem and runs what the config
// names, the way a container runtime would, minus the namespaces.

import (
	"archive/tar"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// imageFiles is everything the image may hold: the commands, the CA
// certificates, the user's passwd and group lines, the working directory,
// and their parent directories.
var imageFiles = []string{
	"etc", "etc/group", "etc/passwd", "etc/ssl", "etc/ssl/certs", "etc/ssl/certs/ca-certificates.crt",
	"usr", "usr/local", "usr/local/bin", "usr/local/bin/publisher", "usr/local/bin/subscriber",
	"var", "var/lib", "var/lib/roompub",
}

// TestMakeImage: `make image` writes an OCI layout whose only image holds
// exactly imageFiles, runs as a non-root user that owns its working
// directory, is reproducible, and whose default command, run from the
// unpacked filesystem in its working directory, serves on 0.0.0.0 and
// stores a capsule that audits CLEAN.
func TestMakeImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image's binaries are linux binaries: run them on linux")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("no make: %v", err)
	}
	const (
		version = "v9.8.7-image-test"
		epoch   = 1767225600 // 2026-01-01T00:00:00Z
	)
	bin := t.TempDir()
	start := time.Now()
	mk := exec.Command("make", "--no-print-directory", "image", "BIN="+bin, "VERSION="+version,
		"SOURCE_DATE_EPOCH="+strconv.Itoa(epoch))
	mk.Dir = root
	out, err := mk.Output()
	if err != nil {
		var stderr []byte
		if exitErr := (*exec.ExitError)(nil); errors.As(err, &exitErr) {
			stderr = exitErr.Stderr
		}
		t.Fatalf("make image: %v\n%s%s", err, out, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	printed := lines[len(lines)-1]
	t.Logf("make image: %s in %s", printed, time.Since(start).Round(time.Millisecond))

	img := readLayout(t, filepath.Join(bin, "image"), printed)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg := cf.Config
	checkConfig(t, cf, version, epoch)
	uid, gid := configUser(t, cfg.User)

	// Reproducible: the same inputs again give the same digest.
	again := filepath.Join(t.TempDir(), "image")
	r := execIn(t, root, filepath.Join(bin, "roompub-image"), "--out", again,
		"--publisher", filepath.Join(bin, "image-bin", "publisher"), "--subscriber", filepath.Join(bin, "image-bin", "subscriber"),
		"--image-version", version, "--created-unix", strconv.Itoa(epoch))
	if r.status != 0 || strings.TrimSpace(r.stdout) != printed {
		t.Errorf("roompub-image with the same inputs: exit %d, %q (stderr %q); want %s", r.status, r.stdout, r.stderr, printed)
	}

	fs := t.TempDir()
	headers := unpack(t, img, fs)
	if names := slices.Sorted(maps.Keys(headers)); !slices.Equal(names, imageFiles) {
		t.Errorf("the image holds %q\nwant %q", names, imageFiles)
	}
	work := strings.TrimPrefix(filepath.Clean(cfg.WorkingDir), "/")
	if h := headers[work]; h == nil || h.Typeflag != tar.TypeDir || h.Uid != uid || h.Gid != gid || h.Mode&0o700 != 0o700 {
		t.Errorf("working directory %s: %+v; want a directory owned by %d:%d that it may write", cfg.WorkingDir, h, uid, gid)
	}
	passwd, _ := os.ReadFile(filepath.Join(fs, "etc", "passwd"))
	group, _ := os.ReadFile(filepath.Join(fs, "etc", "group"))
	wantPasswd := "roompub:x:" + strconv.Itoa(uid) + ":" + strconv.Itoa(gid) + ":roompub:" + cfg.WorkingDir + ":/sbin/nologin\n"
	if string(passwd) != wantPasswd || string(group) != "roompub:x:"+strconv.Itoa(gid)+":\n" {
		t.Errorf("/etc/passwd %q, /etc/group %q; want %q and the group %d", passwd, group, wantPasswd, gid)
	}
	hostCerts, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err == nil {
		if certs, _ := os.ReadFile(filepath.Join(fs, "etc", "ssl", "certs", "ca-certificates.crt")); string(certs) != string(hostCerts) {
			t.Errorf("the image's CA certificates (%d bytes) are not the build machine's (%d bytes)", len(certs), len(hostCerts))
		}
	}

	if len(cfg.Entrypoint) == 0 {
		t.Fatal("the config names no entrypoint")
	}
	entry := filepath.Join(fs, cfg.Entrypoint[0])
	for _, cmd := range []string{entry, filepath.Join(fs, "usr", "local", "bin", "subscriber")} {
		if r := execIn(t, root, cmd, "--version"); r.status != 0 || strings.TrimSpace(r.stdout) != version {
			t.Errorf("%s --version: exit %d, %q (stderr %q); want %q", cmd, r.status, r.stdout, r.stderr, version)
		}
	}
	runDefaultCommand(t, fs, cf, uid, gid)
}

// readLayout reads the OCI layout in dir, checks that its index holds one
// OCI image manifest, the one with digest want, and returns that image.
func readLayout(t *testing.T, dir, want string) v1.Image {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Digest.String() != want || im.Manifests[0].MediaType != types.OCIManifestSchema1 {
		t.Fatalf("the layout's index: %+v; want one OCI manifest, %s (what make image printed)", im.Manifests, want)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := img.Digest(); err != nil || d.String() != want {
		t.Fatalf("the image's digest: %v, %v; want %s", d, err, want)
	}
	return img
}

// checkConfig checks the config's platform, created time, labels and that
// every port the default command listens on is exposed.
func checkConfig(t *testing.T, cf *v1.ConfigFile, version string, epoch int64) {
	t.Helper()
	cfg := cf.Config
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s; want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if !cf.Created.Time.Equal(time.Unix(epoch, 0)) {
		t.Errorf("created %s; want %s (SOURCE_DATE_EPOCH)", cf.Created.Time, time.Unix(epoch, 0).UTC())
	}
	if got := cfg.Labels["org.opencontainers.image.version"]; got != version {
		t.Errorf("label org.opencontainers.image.version %q; want %q", got, version)
	}
	if got := cfg.Labels["org.opencontainers.image.source"]; !strings.HasPrefix(got, "https://") {
		t.Errorf("label org.opencontainers.image.source %q; want a URL", got)
	}
	for _, flag := range []string{"--listen", "--http"} {
		addr := flagValue(cfg.Cmd, flag)
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "0.0.0.0" {
			t.Errorf("Cmd %q: %s %q; want 0.0.0.0:PORT, reachable from outside the container", cfg.Cmd, flag, addr)
			continue
		}
		if _, ok := cfg.ExposedPorts[port+"/tcp"]; !ok {
			t.Errorf("ExposedPorts %v lacks %s/tcp, where %s listens", cfg.ExposedPorts, port, flag)
		}
	}
}

// configUser parses the config's User, which must be numeric "UID:GID"
// (no runtime then needs the image's /etc/passwd) and not root.
func configUser(t *testing.T, user string) (uid, gid int) {
	t.Helper()
	u, g, ok := strings.Cut(user, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || uid == 0 || gid == 0 {
		t.Fatalf("config User %q; want a non-root UID:GID", user)
	}
	return uid, gid
}

// flagValue is the value of the last `flag value` in args ("" if none).
func flagValue(args []string, flag string) string {
	v := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			v = args[i+1]
		}
	}
	return v
}

// unpack writes img's flattened filesystem into dir and returns each
// entry's tar header by its clean relative name. As root it also gives
// every entry the owner its header names, as a runtime does.
func unpack(t *testing.T, img v1.Image, dir string) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	headers := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) {
			t.Fatalf("tar entry %q leaves the root", h.Name)
		}
		headers[name] = h
		dst := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, os.FileMode(h.Mode).Perm())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("tar entry %s: type %c; the image holds only directories and regular files", h.Name, h.Typeflag)
			continue
		}
	}
	// Modes and owners after the files are in place: a directory of mode
	// 0750 owned by another user could not be filled.
	for name, h := range headers {
		dst := filepath.Join(dir, name)
		if err := os.Chmod(dst, os.FileMode(h.Mode).Perm()); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(dst, h.Uid, h.Gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	return headers
}

// runDefaultCommand runs Entrypoint + Cmd from the unpacked filesystem fs
// with the working directory of the config (as the config's user when the
// test runs as root), checks that it serves on 0.0.0.0, ships a capsule to
// it over a non-loopback address when the machine has one, audits it
// CLEAN with the image's subscriber and stops it with SIGTERM.
func runDefaultCommand(t *testing.T, fs string, cf *v1.ConfigFile, uid, gid int) {
	t.Helper()
	cfg := cf.Config
	args := append(append([]string(nil), cfg.Entrypoint[1:]...), cfg.Cmd...)
	// The command as the config names it, unless another process holds
	// its ports (a container has ports of its own; this test shares the
	// machine's): then only the ports change, never the address.
	for _, flag := range []string{"--listen", "--http"} {
		addr := flagValue(cfg.Cmd, flag)
		l, err := net.Listen("tcp", addr)
		if err == nil {
			_ = l.Close()
			continue
		}
		free := freePort(t)
		t.Logf("%s %s is taken on this machine (%v): running the default command with %s 0.0.0.0:%d", flag, addr, err, flag, free)
		args = append(args, flag, "0.0.0.0:"+strconv.Itoa(free))
	}
	httpAddr := flagValue(args, "--http")

	cmd := exec.Command(filepath.Join(fs, cfg.Entrypoint[0]), args...)
	cmd.Dir = filepath.Join(fs, cfg.WorkingDir)
	cmd.Env = childEnv()
	if os.Geteuid() == 0 {
		// As the image's user: its working directory must be its own.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		// fs is a t.TempDir(): it and the test's directory above it are
		// 0700; let the user reach fs (nothing above them is changed).
		for _, d := range []string{fs, filepath.Dir(fs)} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		t.Logf("not root: the default command runs as uid %d, not as the image's %d", os.Geteuid(), uid)
	}
	log := &syncBuffer{}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	var url string
	deadline := time.After(20 * time.Second)
	for url == "" {
		if m := servingRE.FindStringSubmatch(log.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case <-exited:
			t.Fatalf("the default command %q exited with %d before serving:\n%s", args, cmd.ProcessState.ExitCode(), log)
		case <-deadline:
			t.Fatalf("the default command %q did not serve within 20 s:\n%s", args, log)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !strings.HasPrefix(url, "nats://0.0.0.0:") {
		t.Errorf("the default command serves on %s; want nats://0.0.0.0:PORT", url)
	}
	_, natsPort, _ := strings.Cut(strings.TrimPrefix(url, "nats://"), ":")
	_, httpPort, _ := net.SplitHostPort(httpAddr)

	host := nonLoopback()
	if host == "" {
		t.Logf("no non-loopback address on this machine: shipping over 127.0.0.1")
		host = "127.0.0.1"
	} else {
		t.Logf("shipping over %s, a non-loopback address", host)
	}
	server := "nats://" + net.JoinHostPort(host, natsPort)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + net.JoinHostPort(host, httpPort) + "/healthz")
	if err != nil {
		t.Errorf("GET /healthz over %s: %v", host, err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "ok" {
			t.Errorf("GET /healthz over %s: %d %q; want 200 ok", host, resp.StatusCode, body)
		}
	}

	pub := filepath.Join(fs, cfg.Entrypoint[0])
	r := execIn(t, root, pub, "journal", "--json", "--server", server, "--room", "room:image", csvDir)
	if r.status != 0 {
		t.Fatalf("publisher journal --server %s: exit %d\n%s%s", server, r.status, r.stdout, r.stderr)
	}
	if l := oneShipLine(t, r); l.Stored != 14 || l.AlreadyStored != 0 || l.Duplicates != 0 {
		t.Errorf("shipped %d already stored, %d stored, %d duplicates; want 0, 14, 0", l.AlreadyStored, l.Stored, l.Duplicates)
	}
	r = execIn(t, root, filepath.Join(fs, "usr", "local", "bin", "subscriber"), "audit", "--server", server,
		"--room", "room:image", "--state-dir", t.TempDir())
	if r.status != 0 || !strings.Contains(r.stdout, "CLEAN: 14 messages, 14 entries and 0 records verified") {
		t.Errorf("subscriber audit: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		stopped = true
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("the default command: exit %d after SIGTERM:\n%s", code, log)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the default command did not stop within 15 s of SIGTERM:\n%s", log)
	}
	// The store is where the command said, inside the working directory.
	store := filepath.Join(fs, cfg.WorkingDir, flagValue(args, "--store-dir"))
	fi, err := os.Stat(filepath.Join(store, "roompub-stream-ROOMS.json"))
	if err != nil {
		t.Fatalf("no stream mark in the store %s: %v", store, err)
	}
	// As root the command ran as the image's user: what it wrote is its.
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && (int(st.Uid) != uid || int(st.Gid) != gid) {
		t.Errorf("the stream mark is owned by %d:%d; want the image's user %d:%d", st.Uid, st.Gid, uid, gid)
	}
}

// freePort is a TCP port nothing listens on, at the time of asking.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// nonLoopback is an IPv4 address of this machine outside 127.0.0.0/8 and
// link-local, or "" when it has none.
func nonLoopback() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip := n.IP.To4(); ip != nil && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
				return ip.String()
			}
		}
	}
	return ""
}
