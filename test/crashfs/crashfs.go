// Package crashfs is a FUSE filesystem that forgets what was not made
// durable, as a power loss does: test infrastructure for crash tests of
// processes that keep state on disk (the JetStream store of `publisher
// serve`). A killed process keeps the page cache, so killing it exercises
// its fsync calls without proving them; a crash of this filesystem drops
// everything they did not cover.
//
// # Durability model
//
// The files live in memory; the filesystem is mounted over an empty
// directory (Mount). Each file and directory keeps two states: the one
// processes see, and the durable one, which is what a crash leaves.
//
//   - A file's written data, and its size (writes past the end, truncate,
//     O_TRUNC), become durable when the file is fsynced (fsync(2) or
//     fdatasync(2), through any descriptor of it), or, one write at a time,
//     when the write goes through a descriptor opened with O_SYNC or
//     O_DSYNC.
//   - A name becomes durable when its directory is fsynced: a new name
//     (create, mkdir, the target of a rename), a removed one (unlink,
//     rmdir, the source of a rename) and a replaced one alike. Fsyncing a
//     file does not make its name durable, nor does fsyncing a directory
//     make its parent's entry for it durable: that is POSIX's rule, which
//     ALICE (OSDI 2014) and Jepsen's LazyFS hold programs to, stricter than
//     what ext4 and xfs happen to do (their fsync commits the journal, with
//     every earlier name change in it).
//   - Modes, owners and times take effect at once and are not modelled.
//
// That is the model POSIX, the default (Options.Model). The model
// Journaled keeps the data rule and relaxes the name rule to what a
// journaling filesystem does: an fsync of any file or directory, or a
// write through an O_SYNC or O_DSYNC descriptor, also makes durable every
// name change made before it anywhere in the filesystem, as a commit of
// ext4's (data=ordered) or xfs's journal does when an fsync finds the
// file's size or blocks changed (an append always does). A program that
// loses data only under POSIX relies on its filesystem's journal for the
// names it never fsyncs.
//
// Crash is what a power loss leaves: the caller SIGKILLs every process
// that uses the filesystem first; Crash then unmounts it, reverts every
// directory to its durable entries and every file to its durable bytes
// (a file whose name was never made durable is gone with its data), and
// mounts it again at the same path. CrashStats says what the crash
// dropped, so a test can assert that the filesystem dropped something.
//
// Mounting needs Linux, /dev/fuse and the right to mount (root, or
// fusermount); MountForTest skips the test when they are missing.
package crashfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// ErrUnavailable is wrapped by Mount when the kernel refuses to mount a
// FUSE filesystem here: no /dev/fuse, no right to mount, or no FUSE
// support at all. Tests skip on it (MountForTest).
var ErrUnavailable = errors.New("crashfs: FUSE filesystem cannot be mounted")

// ErrBusy is wrapped by Crash and Unmount when the filesystem cannot be
// unmounted because a process still has a file or directory of it open:
// kill the processes that use it first.
var ErrBusy = errors.New("crashfs: filesystem busy")

// CrashStats is what one Crash dropped, or, for Stats, what processes did
// to the filesystem since Mount.
type CrashStats struct {
	// BytesDropped is how many bytes of file contents the crash took back:
	// for a file that survives, the bytes past its durable size or
	// different from its durable ones; for a file whose name was lost, all
	// of its bytes.
	BytesDropped int64
	// NamesDropped lists, sorted, the paths (relative to the mount point,
	// slash-separated) that existed before the crash and do not after it,
	// or name another file or directory after it. A lost directory counts
	// with every path under it.
	NamesDropped []string
	// NamesRestored lists, sorted, the paths that exist after the crash
	// and did not before it (removed or renamed away without a directory
	// fsync).
	NamesRestored []string
	// FilesReverted is how many surviving files had contents the crash
	// changed.
	FilesReverted int
}

// OpStats counts what processes did to the filesystem since Mount, across
// crashes.
type OpStats struct {
	Writes     int64 // write requests
	SyncWrites int64 // write requests through a descriptor opened with O_SYNC or O_DSYNC
	Fsyncs     int64 // fsync and fdatasync of files
	DirFsyncs  int64 // fsync of directories
	Crashes    int   // calls of Crash that completed
}

// Model is a rule for when names become durable.
type Model int

const (
	// POSIX: a name change becomes durable when its directory is fsynced.
	POSIX Model = iota
	// Journaled: a name change becomes durable when its directory is
	// fsynced, or when any file or directory is fsynced or written through
	// an O_SYNC or O_DSYNC descriptor after it.
	Journaled
)

func (m Model) String() string {
	switch m {
	case POSIX:
		return "POSIX"
	case Journaled:
		return "journaled"
	}
	return "Model(" + strconv.Itoa(int(m)) + ")"
}

// Options configures Mount. The zero value is the POSIX model.
type Options struct {
	// Model says when names become durable.
	Model Model
}

// FS is a mounted crash filesystem. Its methods are safe for concurrent
// use; Crash and Unmount must not be called while processes use it.
type FS struct {
	dir   string
	model Model

	mu      sync.Mutex // guards everything below and every node
	root    *node
	nextIno uint64
	server  *fuse.Server
	dirty   map[*node]bool // directories whose entries changed since the last commit (Journaled)
	last    CrashStats
	ops     OpStats
}

// node is one file or directory of the model.
type node struct {
	ino  uint64
	mode uint32 // syscall.S_IFDIR or S_IFREG, and the permission bits
	uid  uint32
	gid  uint32
	// times are not modelled for durability
	mtime, ctime time.Time
	// files
	data    []byte // what processes read
	durable []byte // what a crash leaves
	// directories
	entries        map[string]*node // what processes see
	durableEntries map[string]*node // what a crash leaves
}

func (n *node) isDir() bool { return n.mode&syscall.S_IFMT == syscall.S_IFDIR }

// Mount mounts an empty crash filesystem over dir, which must exist and
// should be empty (what is in it is hidden while mounted). The root
// directory exists durably; nothing else does. Errors wrap ErrUnavailable
// when FUSE cannot be mounted.
func Mount(dir string, o Options) (*FS, error) {
	if o.Model != POSIX && o.Model != Journaled {
		return nil, fmt.Errorf("crashfs: unknown model %v", o.Model)
	}
	f := &FS{dir: dir, model: o.Model, nextIno: 2, dirty: map[*node]bool{}}
	now := time.Now()
	f.root = &node{ino: 1, mode: syscall.S_IFDIR | 0o755, mtime: now, ctime: now,
		entries: map[string]*node{}, durableEntries: map[string]*node{}}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

// MountForTest mounts a crash filesystem over a new temporary directory
// of t and unmounts it when t ends. It skips t, saying why, when FUSE
// cannot be mounted here, and fails it on any other error.
func MountForTest(t testing.TB, o Options) *FS {
	t.Helper()
	f, err := Mount(t.TempDir(), o)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("crash filesystem not available (needs Linux, /dev/fuse and the right to mount, e.g. root): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Registered after TempDir's cleanup, so it runs before it.
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("crashfs: %v", err)
		}
	})
	return f
}

// Dir is the mount point.
func (f *FS) Dir() string { return f.dir }

// Model is the rule the filesystem follows for names.
func (f *FS) Model() Model { return f.model }

// changed notes that directory d's entries changed. f.mu is held.
func (f *FS) changed(d *node) {
	if f.model == Journaled {
		f.dirty[d] = true
	}
}

// commit makes every name change so far durable under Journaled: a
// journal commit. f.mu is held.
func (f *FS) commit() {
	for d := range f.dirty {
		d.durableEntries = cloneEntries(d.entries)
	}
	clear(f.dirty)
}

func (f *FS) mount() error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	zero := time.Duration(0)
	opts := &fs.Options{
		// No kernel caching of names or attributes: the model is the only
		// truth, and a test reads it back right after a crash.
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			DirectMount:   true,
			FsName:        "crashfs",
			Name:          "crashfs",
			DisableXAttrs: true,
			AllowOther:    true,
		},
	}
	srv, err := fs.Mount(f.dir, &fnode{fs: f, n: f.root}, opts)
	if err != nil {
		return fmt.Errorf("%w: mount on %s: %v", ErrUnavailable, f.dir, err)
	}
	f.server = srv
	return nil
}

func (f *FS) unmount() error {
	if f.server == nil {
		return nil
	}
	if err := f.server.Unmount(); err != nil {
		return fmt.Errorf("%w: unmount %s: %v", ErrBusy, f.dir, err)
	}
	f.server = nil
	return nil
}

// Unmount unmounts the filesystem; its contents are gone. Errors wrap
// ErrBusy when a process still uses it. Unmounting twice is a no-op.
func (f *FS) Unmount() error { return f.unmount() }

// Crash simulates a power loss: it unmounts the filesystem (every process
// that uses it must have been killed; else the error wraps ErrBusy and
// nothing is dropped), reverts it to its durable state and mounts it
// again at Dir. It returns what was dropped, as LastCrash does after it.
func (f *FS) Crash() (CrashStats, error) {
	if err := f.unmount(); err != nil {
		return CrashStats{}, err
	}
	f.mu.Lock()
	st := f.revert()
	f.last = st
	f.ops.Crashes++
	f.mu.Unlock()
	if err := f.mount(); err != nil {
		return st, err
	}
	return st, nil
}

// LastCrash is what the last Crash dropped (zero before the first).
func (f *FS) LastCrash() CrashStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.last
	st.NamesDropped = slices.Clone(st.NamesDropped)
	st.NamesRestored = slices.Clone(st.NamesRestored)
	return st
}

// Ops counts what processes did since Mount.
func (f *FS) Ops() OpStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

// revert sets every node reachable through durable entries to its
// durable state and reports the difference. f.mu is held.
func (f *FS) revert() CrashStats {
	before := map[string]*node{}
	walk(f.root, "", false, before)
	beforeData := map[*node][]byte{}
	for _, n := range before {
		if !n.isDir() {
			beforeData[n] = n.data
		}
	}
	var reset func(n *node)
	reset = func(n *node) {
		if n.isDir() {
			n.entries = cloneEntries(n.durableEntries)
			for _, c := range n.entries {
				reset(c)
			}
			return
		}
		n.data = slices.Clone(n.durable)
	}
	reset(f.root)
	clear(f.dirty)
	after := map[string]*node{}
	walk(f.root, "", false, after)

	var st CrashStats
	for p, n := range before {
		if after[p] != n {
			st.NamesDropped = append(st.NamesDropped, p)
		}
	}
	for p, n := range after {
		if before[p] != n {
			st.NamesRestored = append(st.NamesRestored, p)
		}
	}
	sort.Strings(st.NamesDropped)
	sort.Strings(st.NamesRestored)
	survives := map[*node]bool{}
	for _, n := range after {
		survives[n] = true
	}
	for n, old := range beforeData {
		if !survives[n] {
			st.BytesDropped += int64(len(old))
			continue
		}
		if d := dropped(old, n.data); d > 0 {
			st.BytesDropped += d
			st.FilesReverted++
		}
	}
	return st
}

// dropped is how many bytes of old are not in now at the same offset.
func dropped(old, now []byte) int64 {
	var d int64
	for i, b := range old {
		if i >= len(now) || now[i] != b {
			d++
		}
	}
	return d
}

// walk records every path under n (durable entries when durable is set).
func walk(n *node, prefix string, durable bool, out map[string]*node) {
	if !n.isDir() {
		return
	}
	es := n.entries
	if durable {
		es = n.durableEntries
	}
	for name, c := range es {
		p := name
		if prefix != "" {
			p = prefix + "/" + name
		}
		out[p] = c
		walk(c, p, durable, out)
	}
}

func cloneEntries(m map[string]*node) map[string]*node {
	out := make(map[string]*node, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ---- the FUSE side ----

// fnode is the FUSE inode of one model node. A new mount makes new ones.
type fnode struct {
	fs.Inode
	fs *FS
	n  *node
}

// handle is an open file: whether its writes are synchronous.
type handle struct{ sync bool }

var (
	_ fs.NodeLookuper  = (*fnode)(nil)
	_ fs.NodeGetattrer = (*fnode)(nil)
	_ fs.NodeSetattrer = (*fnode)(nil)
	_ fs.NodeCreater   = (*fnode)(nil)
	_ fs.NodeMkdirer   = (*fnode)(nil)
	_ fs.NodeUnlinker  = (*fnode)(nil)
	_ fs.NodeRmdirer   = (*fnode)(nil)
	_ fs.NodeRenamer   = (*fnode)(nil)
	_ fs.NodeReaddirer = (*fnode)(nil)
	_ fs.NodeOpener    = (*fnode)(nil)
	_ fs.NodeReader    = (*fnode)(nil)
	_ fs.NodeWriter    = (*fnode)(nil)
	_ fs.NodeFsyncer   = (*fnode)(nil)
	_ fs.NodeFlusher   = (*fnode)(nil)
	_ fs.NodeStatfser  = (*fnode)(nil)
)

func (fn *fnode) child(ctx context.Context, c *node) *fs.Inode {
	return fn.NewInode(ctx, &fnode{fs: fn.fs, n: c}, fs.StableAttr{Mode: c.mode & syscall.S_IFMT, Ino: c.ino})
}

func fillAttr(n *node, a *fuse.Attr) {
	a.Ino = n.ino
	a.Mode = n.mode
	a.Uid, a.Gid = n.uid, n.gid
	a.Nlink = 1
	if n.isDir() {
		a.Nlink = 2
		a.Size = 4096
	} else {
		a.Size = uint64(len(n.data))
	}
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = 4096
	a.SetTimes(&n.mtime, &n.mtime, &n.ctime)
}

func (fn *fnode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	fn.fs.mu.Lock()
	defer fn.fs.mu.Unlock()
	c, ok := fn.n.entries[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	fillAttr(c, &out.Attr)
	return fn.child(ctx, c), 0
}

func (fn *fnode) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fn.fs.mu.Lock()
	defer fn.fs.mu.Unlock()
	fillAttr(fn.n, &out.Attr)
	return 0
}

func (fn *fnode) Setattr(_ context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	fn.fs.mu.Lock()
	defer fn.fs.mu.Unlock()
	n := fn.n
	now := time.Now()
	if m, ok := in.GetMode(); ok {
		n.mode = n.mode&syscall.S_IFMT | m&0o7777
	}
	if u, ok := in.GetUID(); ok {
		n.uid = u
	}
	if g, ok := in.GetGID(); ok {
		n.gid = g
	}
	if mt, ok := in.GetMTime(); ok {
		n.mtime = mt
	}
	if sz, ok := in.GetSize(); ok {
		if n.isDir() {
			return syscall.EISDIR
		}
		n.data = resize(n.data, int(sz))
		if h, _ := fh.(*handle); h != nil && h.sync {
			n.durable = resize(n.durable, int(sz))
		}
		n.mtime = now
	}
	n.ctime = now
	fillAttr(n, &out.Attr)
	return 0
}

// resize returns b cut or zero-extended to size.
func resize(b []byte, size int) []byte {
	if size <= len(b) {
		return b[:size:size]
	}
	return append(b, make([]byte, size-len(b))...)
}

func (fn *fnode) newNode(mode uint32, ctx context.Context) *node {
	now := time.Now()
	n := &node{ino: fn.fs.nextIno, mode: mode, mtime: now, ctime: now}
	if c, ok := fuse.FromContext(ctx); ok {
		n.uid, n.gid = c.Uid, c.Gid
	}
	fn.fs.nextIno++
	if n.isDir() {
		n.entries, n.durableEntries = map[string]*node{}, map[string]*node{}
	}
	return n
}

func (fn *fnode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	fn.fs.mu.Lock()
	defer fn.fs.mu.Unlock()
	if c, ok := fn.n.entries[name]; ok {
		// O_CREAT without O_EXCL on a name the kernel did not know yet.
		if flags&syscall.O_EXCL != 0 {
			return nil, nil, 0, syscall.EEXIST
		}
		if c.isDir() {
			return nil, nil, 0, syscall.EISDIR
		}
		h := openHandle(c, flags)
		fillAttr(c, &out.Attr)
		return fn.child(ctx, c), h, 0, 0
	}
	c := fn.newNode(syscall.S_IFREG|mode&0o7777, ctx)
	fn.n.entries[name] = c
	fn.n.mtime = c.mtime
	fn.fs.changed(fn.n)
	fillAttr(c, &out.Attr)
	return fn.child(ctx, c), openHandle(c, flags), 0, 0
}

// openHandle applies O_TRUNC and notes O_SYNC and O_DSYNC.
func openHandle(n *node, flags uint32) *handle {
	h := &handle{sync: flags&(syscall.O_SYNC|syscall.O_DSYNC) != 0}
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		n.data = n.data[:0:0]
		if h.sync {
			n.durable = nil
		}
	}
	return h
}

func (fn *fnode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	fn.fs.mu.Lock()
	defer fn.fs.mu.Unlock()
	if _, ok := fn.n.entries[name]; ok {
		return nil, syscall.EEXIST
	}
	c := fn.newNode(syscall.S_IFDIR|mode&0o7777, ctx)
	fn.n.entries[name] = c
	fn.n.mtime = c.mtime
	fn.fs.changed(fn.n)
	fillAttr(c, &out.Attr)
	return fn.child(ctx, c), 0
}

func (fn *fnode) Unlink(_ context.Context, name string) syscall.Errno {
	fn.fs.mu.Lock()
	defer fn.fs.mu.Unlock()
	c, ok := fn.n.entries[name]
	if !ok {
		return syscall.ENOENT
	}
	if c.isDir() {
		return syscall.EISDIR
	}
	delete(fn.n.entries, name)
	fn.n.mtime = time.Now()
	fn.fs.changed(fn.n)
	return 0
}

func (fn *fnode) Rmdir(_ context.Context, name string) syscall.Errno {
	fn.fs.mu.Lock()
	defer fn.fs.mu.Unlock()
	c, ok := fn.n.entries[name]
	if !ok {
		return syscall.ENOENT
	}
	if !c.isDir() {
		return syscall.ENOTDIR
	}
	if len(c.entries) > 0 {
		return syscall.ENOTEMPTY
	}
	delete(fn.n.entries, name)
	fn.n.mtime = time.Now()
	fn.fs.changed(fn.n)
	return 0
}

// Rename moves a name; RENAME_NOREPLACE is honoured, RENAME_EXCHANGE is
// not supported.
func (fn *fnode) Rename(_ context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	const renameNoReplace, renameExchange = 1, 2
	if flags&renameExchange != 0 {
		return syscall.EINVAL
	}
	np, ok := newParent.(*fnode)
	if !ok {
		return syscall.EXDEV
	}
	fn.fs.mu.Lock()
	defer fn.fs.mu.Unlock()
	c, ok := fn.n.entries[name]
	if !ok {
		return syscall.ENOENT
	}
	if old, ok := np.n.entries[newName]; ok {
		switch {
		case old == c:
			return 0
		case flags&renameNoReplace != 0:
			return syscall.EEXIST
		case c.isDir() && !old.isDir():
			return syscall.ENOTDIR
		case !c.isDir() && old.isDir():
			return syscall.EISDIR
		case old.isDir() && len(old.entries) > 0:
			return syscall.ENOTEMPTY
		}
	}
	delete(fn.n.entries, name)
	np.n.entries[newName] = c
	fn.fs.changed(fn.n)
	fn.fs.changed(np.n)
	now := time.Now()
	fn.n.mtime, np.n.mtime, c.ctime = now, now, now
	return 0
}

func (fn *fnode) Readdir(_ context.Context) (fs.DirStream, syscall.Errno) {
	fn.fs.mu.Lock()
	defer fn.fs.mu.Unlock()
	names := make([]string, 0, len(fn.n.entries))
	for name := range fn.n.entries {
		names = append(names, name)
	}
	sort.Strings(names)
	es := make([]fuse.DirEntry, 0, len(names))
	for _, name := range names {
		c := fn.n.entries[name]
		es = append(es, fuse.DirEntry{Name: name, Mode: c.mode & syscall.S_IFMT, Ino: c.ino})
	}
	return fs.NewListDirStream(es), 0
}

func (fn *fnode) Open(_ context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fn.fs.mu.Lock()
	defer fn.fs.mu.Unlock()
	if fn.n.isDir() {
		return nil, 0, syscall.EISDIR
	}
	return openHandle(fn.n, flags), 0, 0
}

func (fn *fnode) Read(_ context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	fn.fs.mu.Lock()
	defer fn.fs.mu.Unlock()
	d := fn.n.data
	if off >= int64(len(d)) {
		return fuse.ReadResultData(nil), 0
	}
	n := copy(dest, d[off:])
	return fuse.ReadResultData(dest[:n]), 0
}

func (fn *fnode) Write(_ context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	fn.fs.mu.Lock()
	defer fn.fs.mu.Unlock()
	n := fn.n
	n.data = writeAt(n.data, data, off)
	fn.fs.ops.Writes++
	if h, _ := fh.(*handle); h != nil && h.sync {
		n.durable = writeAt(n.durable, data, off)
		fn.fs.ops.SyncWrites++
		fn.fs.commit()
	}
	n.mtime = time.Now()
	return uint32(len(data)), 0
}

// writeAt writes p into b at off, zero-filling a gap, and returns b. A
// file's two states never share an array (Fsync and revert copy), so it
// writes in place.
func writeAt(b, p []byte, off int64) []byte {
	if end := int(off) + len(p); end > len(b) {
		if end <= cap(b) {
			clear(b[len(b):end])
			b = b[:end]
		} else {
			nb := make([]byte, end, max(end, 2*cap(b)))
			copy(nb, b)
			b = nb
		}
	}
	copy(b[off:], p)
	return b
}

// Fsync makes a file's contents, or a directory's entries, durable (and
// under Journaled every name change so far).
func (fn *fnode) Fsync(_ context.Context, _ fs.FileHandle, _ uint32) syscall.Errno {
	fn.fs.mu.Lock()
	defer fn.fs.mu.Unlock()
	n := fn.n
	fn.fs.commit()
	if n.isDir() {
		n.durableEntries = cloneEntries(n.entries)
		fn.fs.ops.DirFsyncs++
		return 0
	}
	n.durable = slices.Clone(n.data)
	fn.fs.ops.Fsyncs++
	return 0
}

func (fn *fnode) Flush(context.Context, fs.FileHandle) syscall.Errno { return 0 }

// Statfs reports a 64 GiB filesystem with 32 GiB free, so that a
// process sizing its store by the free space (nats-server does) starts.
func (fn *fnode) Statfs(_ context.Context, out *fuse.StatfsOut) syscall.Errno {
	const bsize = 4096
	out.Bsize, out.Frsize = bsize, bsize
	out.Blocks = 64 << 30 / bsize
	out.Bfree, out.Bavail = 32<<30/bsize, 32<<30/bsize
	out.Files, out.Ffree = 1<<20, 1<<20
	out.NameLen = 255
	return 0
}
