package ociimage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// tiny is a tiny static Linux program, built once in TestMain (the
// image's checks read only its ELF headers).
var tiny string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ociimage-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	tiny = filepath.Join(dir, "tiny")
	// Built in dir, outside the module: a program of the standard
	// library alone.
	cmd := exec.Command("go", "build", "-o", tiny, src)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if msg, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, msg)
		return 2
	}
	return m.Run()
}

// certs writes a stand-in CA bundle.
func certs(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(p, []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidateReportsEveryMissingOption(t *testing.T) {
	err := Options{}.Validate()
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("Validate of the zero Options: %v; want ErrInvalidOptions", err)
	}
	for _, name := range []string{"Publisher", "Subscriber", "Version"} {
		if !strings.Contains(err.Error(), name+" is required") {
			t.Errorf("Validate: %q does not name %s", err, name)
		}
	}
	if _, err := Build(context.Background(), Options{}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("Build of the zero Options: %v; want ErrInvalidOptions", err)
	}
}

// TestBuildIsReproducible: the same inputs give the same digest, written
// layouts included; another created time gives another.
func TestBuildIsReproducible(t *testing.T) {
	bin, ca := tiny, certs(t)
	opts := Options{Publisher: bin, Subscriber: bin, CACerts: ca, Version: "v1.2.3", Created: time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)}
	var digests []string
	for range 2 {
		img, err := Build(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		d, err := Write(context.Background(), filepath.Join(t.TempDir(), "image"), opts)
		if err != nil {
			t.Fatal(err)
		}
		if built, _ := img.Digest(); built != d {
			t.Errorf("Write: digest %s; Build's image has %s", d, built)
		}
		digests = append(digests, d.String())
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if want := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC); !cf.Created.Time.Equal(want) || cf.Architecture != runtime.GOARCH {
			t.Errorf("created %s, architecture %s; want %s (to the second), %s", cf.Created.Time, cf.Architecture, want, runtime.GOARCH)
		}
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds of the same inputs: %s and %s", digests[0], digests[1])
	}
	opts.Created = time.Time{}
	img, err := Build(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	if d.String() == digests[0] || cf.Created.Time.Unix() != 0 {
		t.Errorf("zero Created: digest %s, created %s; want another digest and the Unix epoch", d, cf.Created.Time)
	}
}

func TestBuildRefusesWhatCannotRunInTheImage(t *testing.T) {
	bin, ca := tiny, certs(t)
	text := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{"not ELF": text}
	// A dynamically linked executable, where the machine has one.
	if sh, err := filepath.EvalSymlinks("/bin/sh"); err == nil {
		if data, err := os.ReadFile(sh); err == nil && strings.Contains(string(data), "ld-linux") {
			cases["dynamic"] = sh
		}
	}
	for name, sub := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Build(context.Background(), Options{Publisher: bin, Subscriber: sub, CACerts: ca, Version: "v1"})
			if !errors.Is(err, ErrNotStatic) {
				t.Errorf("Build with %s: %v; want ErrNotStatic", sub, err)
			}
		})
	}
	if _, ok := cases["dynamic"]; !ok {
		t.Log("no dynamically linked /bin/sh here: that case is not run")
	}
}

func TestWriteLayoutRefusesANonEmptyDirectory(t *testing.T) {
	bin, ca := tiny, certs(t)
	img, err := Build(context.Background(), Options{Publisher: bin, Subscriber: bin, CACerts: ca, Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "old"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteLayout(dir, img, ""); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("WriteLayout into a directory with a file: %v; want ErrNotEmpty", err)
	}
}
