package crashfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/roompub/roompub/test/crashfs"
)

// fsyncPath fsyncs a file or directory by its path.
func fsyncPath(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", p, err)
	}
}

// writeDurable creates name with data and makes both durable.
func writeDurable(t *testing.T, c *crashfs.FS, name, data string) string {
	t.Helper()
	p := filepath.Join(c.Dir(), name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	fsyncPath(t, p)
	fsyncPath(t, filepath.Dir(p))
	return p
}

func appendFile(t *testing.T, p string, flags int, data string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|flags, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func crash(t *testing.T, c *crashfs.FS) crashfs.CrashStats {
	t.Helper()
	st, err := c.Crash()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.LastCrash(); got.BytesDropped != st.BytesDropped || !slices.Equal(got.NamesDropped, st.NamesDropped) {
		t.Fatalf("LastCrash %+v, Crash returned %+v", got, st)
	}
	return st
}

// content is the file's contents, or "<absent>".
func content(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return "<absent>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantStats(t *testing.T, st crashfs.CrashStats, bytes int64, dropped, restored []string) {
	t.Helper()
	if st.BytesDropped != bytes || !slices.Equal(st.NamesDropped, dropped) || !slices.Equal(st.NamesRestored, restored) {
		t.Errorf("crash dropped %d bytes, names %q, restored %q; want %d, %q, %q",
			st.BytesDropped, st.NamesDropped, st.NamesRestored, bytes, dropped, restored)
	}
}

// TestWriteWithoutFsyncIsLost: bytes written after the last fsync are
// gone after a crash; those before it stay.
func TestWriteWithoutFsyncIsLost(t *testing.T) {
	c := crashfs.MountForTest(t, crashfs.Options{})
	p := writeDurable(t, c, "f", "abc")
	appendFile(t, p, 0, "defg")
	if got := content(t, p); got != "abcdefg" {
		t.Fatalf("before the crash: %q", got)
	}
	st := crash(t, c)
	if got := content(t, p); got != "abc" {
		t.Errorf("after the crash: %q, want %q", got, "abc")
	}
	wantStats(t, st, 4, nil, nil)
	if st.FilesReverted != 1 {
		t.Errorf("files reverted %d, want 1", st.FilesReverted)
	}
}

// TestFsyncKeeps: what was fsynced, file and directory, survives, and a
// crash that finds nothing to drop says so.
func TestFsyncKeeps(t *testing.T) {
	c := crashfs.MountForTest(t, crashfs.Options{})
	p := writeDurable(t, c, "f", "abc")
	appendFile(t, p, 0, "defg")
	fsyncPath(t, p)
	st := crash(t, c)
	if got := content(t, p); got != "abcdefg" {
		t.Errorf("after the crash: %q", got)
	}
	wantStats(t, st, 0, nil, nil)
	if ops := c.Ops(); ops.Fsyncs != 2 || ops.DirFsyncs != 1 || ops.Crashes != 1 {
		t.Errorf("ops %+v, want 2 file fsyncs, 1 directory fsync, 1 crash", ops)
	}
}

// TestSyncWriteKept: a write through a descriptor opened with O_SYNC or
// O_DSYNC is durable at once; a write through another descriptor of the
// same file is not.
func TestSyncWriteKept(t *testing.T) {
	for _, tc := range []struct {
		name string
		flag int
	}{{"O_SYNC", syscall.O_SYNC}, {"O_DSYNC", syscall.O_DSYNC}} {
		t.Run(tc.name, func(t *testing.T) {
			c := crashfs.MountForTest(t, crashfs.Options{})
			p := writeDurable(t, c, "f", "abc")
			appendFile(t, p, tc.flag, "def")
			appendFile(t, p, 0, "XY")
			st := crash(t, c)
			if got := content(t, p); got != "abcdef" {
				t.Errorf("after the crash: %q, want %q", got, "abcdef")
			}
			wantStats(t, st, 2, nil, nil)
			if ops := c.Ops(); ops.SyncWrites != 1 {
				t.Errorf("sync writes %d, want 1", ops.SyncWrites)
			}
		})
	}
}

// TestNewNameNeedsDirFsync: a new file fsynced but its directory not is
// gone after a crash, with its bytes; so is a directory whose parent was
// not fsynced, with everything under it.
func TestNewNameNeedsDirFsync(t *testing.T) {
	c := crashfs.MountForTest(t, crashfs.Options{})
	p := filepath.Join(c.Dir(), "f")
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	fsyncPath(t, p)
	d := filepath.Join(c.Dir(), "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	writeDurable(t, c, "d/g", "world!") // fsyncs d/g and d, not the root
	st := crash(t, c)
	for _, q := range []string{p, filepath.Join(d, "g")} {
		if got := content(t, q); got != "<absent>" {
			t.Errorf("%s after the crash: %q, want it gone", q, got)
		}
	}
	wantStats(t, st, 11, []string{"d", "d/g", "f"}, nil)
	if entries, err := os.ReadDir(c.Dir()); err != nil || len(entries) != 0 {
		t.Errorf("root after the crash: %v %v, want empty", entries, err)
	}
}

// TestRemoveNeedsDirFsync: a durable file unlinked without a directory
// fsync is back after a crash, with its durable bytes.
func TestRemoveNeedsDirFsync(t *testing.T) {
	c := crashfs.MountForTest(t, crashfs.Options{})
	p := writeDurable(t, c, "f", "abc")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	st := crash(t, c)
	if got := content(t, p); got != "abc" {
		t.Errorf("after the crash: %q, want %q", got, "abc")
	}
	wantStats(t, st, 0, nil, []string{"f"})
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	fsyncPath(t, c.Dir())
	st = crash(t, c)
	if got := content(t, p); got != "<absent>" {
		t.Errorf("after unlink, directory fsync and a crash: %q, want it gone", got)
	}
	wantStats(t, st, 0, nil, nil)
}

// TestRenameNeedsDirFsync: the write-temporary-then-rename pattern. A
// rename over an existing file is undone by a crash unless the directory
// was fsynced after it; then it stays.
func TestRenameNeedsDirFsync(t *testing.T) {
	c := crashfs.MountForTest(t, crashfs.Options{})
	target := writeDurable(t, c, "mark", "old")
	tmp := filepath.Join(c.Dir(), "mark.tmp")
	put := func() {
		t.Helper()
		if err := os.WriteFile(tmp, []byte("newer"), 0o644); err != nil {
			t.Fatal(err)
		}
		fsyncPath(t, tmp)
		if err := os.Rename(tmp, target); err != nil {
			t.Fatal(err)
		}
	}
	put()
	st := crash(t, c)
	if got := content(t, target); got != "old" {
		t.Errorf("rename without directory fsync, after the crash: %q, want %q", got, "old")
	}
	if got := content(t, tmp); got != "<absent>" {
		t.Errorf("the temporary file after the crash: %q, want it gone (never durable)", got)
	}
	// "mark" names another file after the crash: dropped; the temporary
	// file's data went with it.
	wantStats(t, st, 5, []string{"mark"}, []string{"mark"})

	put()
	fsyncPath(t, c.Dir())
	st = crash(t, c)
	if got := content(t, target); got != "newer" {
		t.Errorf("rename with directory fsync, after the crash: %q, want %q", got, "newer")
	}
	wantStats(t, st, 0, nil, nil)
}

// TestTruncateFollowsData: a truncation is a data change: undone by a
// crash unless the file was fsynced after it.
func TestTruncateFollowsData(t *testing.T) {
	c := crashfs.MountForTest(t, crashfs.Options{})
	p := writeDurable(t, c, "f", "0123456789")
	if err := os.Truncate(p, 4); err != nil {
		t.Fatal(err)
	}
	st := crash(t, c)
	if got := content(t, p); got != "0123456789" {
		t.Errorf("truncate without fsync, after the crash: %q", got)
	}
	wantStats(t, st, 0, nil, nil)
	if st.FilesReverted != 0 {
		t.Errorf("files reverted %d, want 0 (the crash restored bytes, dropped none)", st.FilesReverted)
	}

	if err := os.Truncate(p, 4); err != nil {
		t.Fatal(err)
	}
	fsyncPath(t, p)
	appendFile(t, p, 0, "ab")
	st = crash(t, c)
	if got := content(t, p); got != "0123" {
		t.Errorf("truncate with fsync, then an append without, after the crash: %q, want %q", got, "0123")
	}
	wantStats(t, st, 2, nil, nil)

	// O_TRUNC through an O_SYNC descriptor is durable at once.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC|syscall.O_SYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("zz"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	crash(t, c)
	if got := content(t, p); got != "zz" {
		t.Errorf("O_TRUNC|O_SYNC, after the crash: %q, want %q", got, "zz")
	}
}

// TestCrashWhileOpen: a crash with a file still open is refused (ErrBusy)
// and drops nothing: the process using the filesystem must be killed
// first.
func TestCrashWhileOpen(t *testing.T) {
	c := crashfs.MountForTest(t, crashfs.Options{})
	p := writeDurable(t, c, "f", "abc")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("def"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Crash(); !errors.Is(err, crashfs.ErrBusy) {
		t.Fatalf("crash with a file open: %v, want ErrBusy", err)
	}
	if got := content(t, p); got != "abcdef" {
		t.Errorf("after a refused crash: %q, want nothing dropped", got)
	}
	f.Close()
	st := crash(t, c)
	wantStats(t, st, 3, nil, nil)
}

// TestJournaledNames: under the Journaled model an fsync of any file
// makes every earlier name change durable, not the data of other files;
// a name change after the last fsync is still lost.
func TestJournaledNames(t *testing.T) {
	c := crashfs.MountForTest(t, crashfs.Options{Model: crashfs.Journaled})
	if c.Model() != crashfs.Journaled || c.Model().String() != "journaled" {
		t.Fatalf("model %v", c.Model())
	}
	d := filepath.Join(c.Dir(), "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(d, "f")
	if err := os.WriteFile(f, []byte("unsynced"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := filepath.Join(c.Dir(), "g")
	if err := os.WriteFile(g, []byte("synced"), 0o644); err != nil {
		t.Fatal(err)
	}
	fsyncPath(t, g) // commits d, d/f and g, and g's data
	late := filepath.Join(c.Dir(), "late")
	if err := os.WriteFile(late, []byte("xy"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := crash(t, c)
	for p, want := range map[string]string{f: "", g: "synced", late: "<absent>"} {
		if got := content(t, p); got != want {
			t.Errorf("%s after the crash: %q, want %q", p, got, want)
		}
	}
	// d/f's 8 bytes (kept name, lost data) and late's 2 (lost name).
	wantStats(t, st, 10, []string{"late"}, nil)
}
