// Package ociimage builds roompub's OCI image without a container runtime
// or registry: the statically linked publisher and subscriber, CA
// certificates and a non-root user on an empty base (FROM scratch), written
// as an OCI image layout directory (docs/operations.md, "The OCI image").
//
// The image is reproducible: every tar header, the config's created time
// and the history carry Options.Created, entries are written in a fixed
// order with fixed owners and modes, and gzip is deterministic, so the same
// binaries, certificates and options give the same digest.
package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image holds and how it runs. The user and group id are the
// "nonroot" id of distroless images, so volumes prepared for those fit.
const (
	// UserName is the image's user and group name, in /etc/passwd and
	// /etc/group.
	UserName = "roompub"
	// UID and GID are the user's and group's numeric ids; the config's
	// User is "UID:GID", so no runtime needs /etc/passwd to resolve it.
	UID, GID = 65532, 65532
	// WorkDir is the working directory, owned by UID:GID (mode 0750):
	// serve's store, "data", lives below it. Mount a volume here.
	WorkDir = "/var/lib/roompub"
	// BinDir holds the commands, publisher and subscriber.
	BinDir = "/usr/local/bin"
	// CACertsPath is where the CA certificates go: the first file Go's
	// crypto/x509 reads on Linux.
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
	// NATSPort is the embedded nats-server's client port the default
	// command listens on; HTTPPort serves /metrics and /healthz.
	NATSPort, HTTPPort = 4222, 8222
	// DefaultSource is the org.opencontainers.image.source label when
	// Options.Source is empty.
	DefaultSource = "https://github.com/roompub/roompub"
)

// Entrypoint and Cmd are the image's default command: `publisher serve`
// on the embedded server, reachable from outside the container (0.0.0.0),
// its store relative to WorkDir, so it runs wherever the working
// directory is (a container, or a test's unpacked copy).
var (
	Entrypoint = []string{BinDir + "/publisher"}
	Cmd        = []string{"serve",
		"--listen", "0.0.0.0:" + strconv.Itoa(NATSPort),
		"--http", "0.0.0.0:" + strconv.Itoa(HTTPPort),
		"--store-dir", "data",
	}
)

// Errors of Build and WriteLayout.
var (
	// ErrInvalidOptions: Options.Validate found a problem (joined with
	// the others it found), or Build found the two binaries built for
	// different architectures.
	ErrInvalidOptions = errors.New("ociimage: invalid options")
	// ErrNotStatic: a binary is not a statically linked Linux ELF
	// executable of a known architecture; the image has no libc and no
	// dynamic loader, so it would not start.
	ErrNotStatic = errors.New("ociimage: not a statically linked linux executable")
	// ErrNotEmpty: WriteLayout's directory exists and holds files; an
	// old layout's blobs would stay next to the new one.
	ErrNotEmpty = errors.New("ociimage: layout directory is not empty")
)

// Options says what goes into the image. The zero value is not usable:
// Publisher, Subscriber and Version are required; the rest has defaults.
type Options struct {
	// Publisher and Subscriber are the paths of the two commands, built
	// with CGO_ENABLED=0 for Linux, both for one architecture, which
	// becomes the image's.
	Publisher, Subscriber string
	// CACerts is the path of a PEM bundle of CA certificates; empty means
	// the build machine's /etc/ssl/certs/ca-certificates.crt.
	CACerts string
	// Version is the org.opencontainers.image.version label, what the
	// binaries' --version prints.
	Version string
	// Source is the org.opencontainers.image.source label; empty means
	// DefaultSource.
	Source string
	// Created is the image's creation time and every file's modification
	// time (to the second); zero means the Unix epoch. Pass the commit's
	// time (SOURCE_DATE_EPOCH) for a reproducible image.
	Created time.Time
}

// Validate reports every missing required option at once, each wrapping
// ErrInvalidOptions.
func (o Options) Validate() error {
	var errs []error
	for _, req := range []struct{ name, value string }{
		{"Publisher", o.Publisher}, {"Subscriber", o.Subscriber}, {"Version", o.Version},
	} {
		if req.value == "" {
			errs = append(errs, fmt.Errorf("%w: %s is required", ErrInvalidOptions, req.name))
		}
	}
	return errors.Join(errs...)
}

// Build assembles the image in memory: a layer with the user, the CA
// certificates and the working directory, then a layer with the two
// commands (so a new build of the commands leaves the first layer
// shared), and the config (user, working directory, default command,
// ports, volume, labels, created time). Both layers are OCI gzip layers;
// the manifest and config have OCI media types.
func Build(ctx context.Context, o Options) (v1.Image, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.CACerts == "" {
		o.CACerts = CACertsPath
	}
	if o.Source == "" {
		o.Source = DefaultSource
	}
	created := o.Created.UTC().Truncate(time.Second)
	if o.Created.IsZero() {
		created = time.Unix(0, 0).UTC()
	}
	arch, err := staticArch(o.Publisher)
	if err != nil {
		return nil, err
	}
	if subArch, err := staticArch(o.Subscriber); err != nil {
		return nil, err
	} else if subArch != arch {
		return nil, fmt.Errorf("%w: %s is for %s, %s for %s: an image has one architecture", ErrInvalidOptions, o.Publisher, arch, o.Subscriber, subArch)
	}
	certs, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("ociimage: CA certificates: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	base := newLayer(created)
	base.dir("etc/", 0, 0, 0o755)
	base.file("etc/passwd", 0o644, []byte(fmt.Sprintf("%s:x:%d:%d:%s:%s:/sbin/nologin\n", UserName, UID, GID, UserName, WorkDir)))
	base.file("etc/group", 0o644, []byte(fmt.Sprintf("%s:x:%d:\n", UserName, GID)))
	base.dir("etc/ssl/", 0, 0, 0o755)
	base.dir("etc/ssl/certs/", 0, 0, 0o755)
	base.file(CACertsPath[1:], 0o644, certs)
	base.dir("var/", 0, 0, 0o755)
	base.dir("var/lib/", 0, 0, 0o755)
	base.dir(WorkDir[1:]+"/", UID, GID, 0o750)

	bins := newLayer(created)
	bins.dir("usr/", 0, 0, 0o755)
	bins.dir("usr/local/", 0, 0, 0o755)
	bins.dir(BinDir[1:]+"/", 0, 0, 0o755)
	for _, b := range []struct{ name, src string }{{"publisher", o.Publisher}, {"subscriber", o.Subscriber}} {
		data, err := os.ReadFile(b.src)
		if err != nil {
			return nil, fmt.Errorf("ociimage: %s: %w", b.name, err)
		}
		bins.file(path.Join(BinDir[1:], b.name), 0o755, data)
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	vcreated := v1.Time{Time: created}
	for _, l := range []struct {
		layer *layer
		by    string
	}{
		{base, "roompub-image: user " + UserName + ", CA certificates, " + WorkDir},
		{bins, "roompub-image: " + BinDir + "/publisher, " + BinDir + "/subscriber"},
	} {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		tl, err := l.layer.build()
		if err != nil {
			return nil, err
		}
		if img, err = mutate.Append(img, mutate.Addendum{
			Layer:   tl,
			History: v1.History{Created: vcreated, CreatedBy: l.by},
		}); err != nil {
			return nil, fmt.Errorf("ociimage: append layer: %w", err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("ociimage: config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Created = vcreated
	cf.OS = "linux"
	cf.Architecture = arch
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", UID, GID),
		WorkingDir: WorkDir,
		Entrypoint: append([]string(nil), Entrypoint...),
		Cmd:        append([]string(nil), Cmd...),
		Env:        []string{"PATH=" + BinDir + ":/usr/bin:/bin"},
		ExposedPorts: map[string]struct{}{
			strconv.Itoa(NATSPort) + "/tcp": {},
			strconv.Itoa(HTTPPort) + "/tcp": {},
		},
		Volumes: map[string]struct{}{WorkDir: {}},
		Labels: map[string]string{
			"org.opencontainers.image.version": o.Version,
			"org.opencontainers.image.source":  o.Source,
			"org.opencontainers.image.title":   "roompub",
			"org.opencontainers.image.created": created.Format(time.RFC3339),
		},
		// serve stops cleanly on SIGTERM (final checkpoints, drain).
		StopSignal: "SIGTERM",
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("ociimage: config: %w", err)
	}
	return img, nil
}

// Write builds the image of o (Build) and writes it as an OCI image
// layout into dir (WriteLayout), its index naming it by o.Version; it
// returns the image's digest. It is what `make image` runs.
func Write(ctx context.Context, dir string, o Options) (v1.Hash, error) {
	img, err := Build(ctx, o)
	if err != nil {
		return v1.Hash{}, err
	}
	return WriteLayout(dir, img, o.Version)
}

// WriteLayout writes img as an OCI image layout into dir (created if
// missing; ErrNotEmpty if it holds anything), its index naming it
// org.opencontainers.image.ref.name=refName when refName is not empty,
// and returns the manifest's digest.
func WriteLayout(dir string, img v1.Image, refName string) (v1.Hash, error) {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return v1.Hash{}, fmt.Errorf("%w: %s", ErrNotEmpty, dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return v1.Hash{}, fmt.Errorf("ociimage: %w", err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("ociimage: write layout %s: %w", dir, err)
	}
	var opts []layout.Option
	if refName != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": refName}))
	}
	if err := p.AppendImage(img, opts...); err != nil {
		return v1.Hash{}, fmt.Errorf("ociimage: write image to %s: %w", dir, err)
	}
	d, err := img.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("ociimage: digest: %w", err)
	}
	return d, nil
}

// staticArch returns the OCI architecture of the Linux ELF executable at
// name, or ErrNotStatic when it is not one, names a dynamic loader
// (PT_INTERP) or has an architecture the image does not support.
func staticArch(name string) (string, error) {
	f, err := elf.Open(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrNotStatic, name, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "", fmt.Errorf("%w: %s is an ELF %s", ErrNotStatic, name, f.Type)
	}
	if f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		return "", fmt.Errorf("%w: %s is for %s", ErrNotStatic, name, f.OSABI)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%w: %s is dynamically linked (build it with CGO_ENABLED=0)", ErrNotStatic, name)
		}
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	case elf.EM_RISCV:
		return "riscv64", nil
	case elf.EM_PPC64:
		return "ppc64le", nil
	case elf.EM_S390:
		return "s390x", nil
	}
	return "", fmt.Errorf("%w: %s is for machine %s", ErrNotStatic, name, f.Machine)
}

// layer is one filesystem layer being written as a tar, every entry
// stamped with one modification time.
type layer struct {
	mtime time.Time
	buf   bytes.Buffer
	tw    *tar.Writer
	err   error
}

func newLayer(mtime time.Time) *layer {
	l := &layer{mtime: mtime}
	l.tw = tar.NewWriter(&l.buf)
	return l
}

// dir adds a directory (name ends in "/") owned by uid:gid.
func (l *layer) dir(name string, uid, gid int, mode int64) {
	l.add(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Uid: uid, Gid: gid}, nil)
}

// file adds a regular file owned by root.
func (l *layer) file(name string, mode int64, data []byte) {
	l.add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data)
}

func (l *layer) add(h *tar.Header, data []byte) {
	if l.err != nil {
		return
	}
	// USTAR: no access or change times, no PAX records, so the bytes
	// depend on nothing but the name, mode, owner, time and contents.
	h.Format = tar.FormatUSTAR
	h.ModTime = l.mtime
	if h.Uid == UID {
		h.Uname, h.Gname = UserName, UserName
	} else {
		h.Uname, h.Gname = "root", "root"
	}
	if l.err = l.tw.WriteHeader(h); l.err == nil && data != nil {
		_, l.err = l.tw.Write(data)
	}
}

// build closes the tar and returns it as an OCI gzip layer.
func (l *layer) build() (v1.Layer, error) {
	if l.err == nil {
		l.err = l.tw.Close()
	}
	if l.err != nil {
		return nil, fmt.Errorf("ociimage: layer: %w", l.err)
	}
	data := l.buf.Bytes()
	tl, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("ociimage: layer: %w", err)
	}
	return tl, nil
}
