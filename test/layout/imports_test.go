// Package layout holds the repository's import rules as a test: the
// package map of docs/design.md, "Package map and import rules", checked
// against what `go list` says the code imports.
package layout

import (
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/roompub/roompub"

// rule is what one package may import: the roompub packages (paths below
// the module), whether NATS may be among its dependencies at all, and
// whether the NATS server may (only what runs or configures a server:
// readers and clients never link it).
type rule struct {
	imports []string
	nats    bool // github.com/nats-io/... anywhere in its dependencies
	server  bool // github.com/nats-io/nats-server/... among them
}

// rules is the package map. A package missing here fails the test: a new
// package takes its place in the map deliberately.
var rules = map[string]rule{
	"events":     {},
	"schemas":    {},
	"validate":   {imports: []string{"events", "internal/regularfile", "schemas"}},
	"checkpoint": {imports: []string{"events"}},
	// Witness cosignatures: the add-checkpoint client, cosigning rounds
	// and the witness policy. No roompub package, no NATS.
	"witness": {},
	// Real litewitness processes for tests: no roompub package, no NATS;
	// no package imports it but tests and cmd/roompub-bench, whose rule
	// lists it.
	"internal/witnesstest": {},
	// The C2SP tlog-tiles server over an entry source: no NATS, no
	// roompub package.
	"tiles": {},
	// roompub's OCI image, built offline from the binaries it is given
	// (go-containerregistry): no roompub package, no NATS.
	"internal/ociimage":    {},
	"internal/regularfile": {},
	// config names the room package's roles and defaults (a departure
	// docs/design.md records).
	"config": {imports: []string{"checkpoint", "events", "room", "room/reader", "witness"}, nats: true},
	// The shared vocabulary: subjects, stream configuration, wire types,
	// headers, names and defaults. No server, no role.
	"room": {imports: []string{"events", "room/internal/jsapi"}, nats: true},
	// The checkpointer: signed checkpoints of every room, under a lease.
	"room/checkpointer": {imports: []string{"checkpoint", "events", "room", "room/internal/jsapi", "witness"}, nats: true},
	// The readers: Reader, Audit, Follow, Prove, EvidenceIndex and the
	// readers' checkpoint state. Never the server, never the gate.
	"room/reader": {imports: []string{"checkpoint", "events", "room", "room/internal/jsapi", "validate", "witness"}, nats: true},
	// The gate, the ingest service, its quotas and metrics: no server.
	"room/ingest": {imports: []string{"checkpoint", "events", "room", "room/internal/jsapi", "validate"}, nats: true},
	// The JetStream API reads a verifier needs: no roompub package.
	"room/internal/jsapi": {nats: true},
	// The ingest service's client and the shipper of capsules.
	"room/client": {imports: []string{"events", "internal/regularfile", "room", "room/internal/jsapi", "validate"}, nats: true},
	// What the room packages' tests share (an embedded server with a
	// gate and the ingest service): no package imports it but tests, as
	// no rule here lists it.
	"room/internal/roomtest": {imports: []string{"checkpoint", "events", "internal/witnesstest", "room", "room/checkpointer", "room/embedded", "room/ingest", "room/internal/jsapi", "room/reader", "validate", "witness"}, nats: true, server: true},
	// The logs read from JetStream as tiles sources: the checkpoint
	// package's rules over batch direct gets. No server, no role.
	"room/tilesource": {imports: []string{"checkpoint", "room", "room/internal/jsapi", "tiles"}, nats: true},
	// The in-process nats-server and its store lock: no roompub package.
	"room/embedded": {nats: true, server: true},
	// Stream backup and restore through jsm.go's snapshot API, held to
	// room's stream rules. jsm.go imports the nats-server package itself,
	// so the server is among its dependencies: no reader or client may
	// import it.
	"room/backup": {imports: []string{"room", "room/internal/jsapi"}, nats: true, server: true},
	// Secure mode's roles and permissions, on room's vocabulary.
	"room/secure": {imports: []string{"room"}, nats: true, server: true},
	// The process: serve's assembly of server, stream guard, gate,
	// ingest service and checkpointer.
	"room/node": {imports: []string{"checkpoint", "events", "room", "room/checkpointer", "room/embedded", "room/ingest", "room/internal/jsapi", "room/tilesource", "tiles", "validate"}, nats: true, server: true},

	// The commands. cmd/roompub-bench is a measurement command: its
	// witnessed mode runs real witnesses as the tests do
	// (internal/witnesstest), the one command that may.
	// The publisher's receipts (--receipt) read rooms as a subscriber does.
	"cmd/publisher":     {imports: []string{"checkpoint", "config", "events", "internal/regularfile", "room", "room/backup", "room/checkpointer", "room/client", "room/embedded", "room/ingest", "room/node", "room/reader", "room/secure", "validate", "witness"}, nats: true, server: true},
	"cmd/subscriber":    {imports: []string{"checkpoint", "config", "events", "internal/regularfile", "room", "room/reader", "validate"}, nats: true},
	"cmd/roompub-bench": {imports: []string{"checkpoint", "config", "events", "internal/witnesstest", "room", "room/checkpointer", "room/client", "room/embedded", "room/ingest", "room/node", "room/reader", "validate", "witness"}, nats: true, server: true},

	// make image: its flags wired to one internal/ociimage call.
	"cmd/roompub-image": {imports: []string{"internal/ociimage"}},
}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// list runs go list -json over the module's packages, tests' packages
// left out (test/..., testdata/...).
func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", "./...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if strings.HasPrefix(rel, "test/") || strings.HasPrefix(rel, "testdata/") {
			continue
		}
		p.ImportPath = rel
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestImportsFollowThePackageMap(t *testing.T) {
	pkgs := list(t)
	if len(pkgs) < len(rules) {
		t.Fatalf("go list found %d packages, the map has %d", len(pkgs), len(rules))
	}
	for _, p := range pkgs {
		r, ok := rules[p.ImportPath]
		if !ok {
			t.Errorf("package %s is not in the package map (test/layout, docs/design.md)", p.ImportPath)
			continue
		}
		for _, imp := range p.Imports {
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok && !slices.Contains(r.imports, rel) {
				t.Errorf("%s imports %s, which the package map does not allow", p.ImportPath, rel)
			}
		}
		for _, d := range p.Deps {
			if !r.nats && strings.HasPrefix(d, "github.com/nats-io/") {
				t.Errorf("%s depends on %s: it must not depend on NATS at all", p.ImportPath, d)
				break
			}
			if !r.server && strings.HasPrefix(d, "github.com/nats-io/nats-server/") {
				t.Errorf("%s depends on %s: it must not link the NATS server", p.ImportPath, d)
				break
			}
		}
	}
}

// layers are docs/design.md's layers, lowest first: a package imports
// only packages of lower layers, or of its own layer along an arrow
// sameLayer names. The allowlist of rules is the stricter check; this one
// keeps the map itself pointing down.
var layers = [][]string{
	{"events", "schemas", "internal/regularfile"},
	{"validate", "checkpoint", "witness", "internal/witnesstest", "tiles", "internal/ociimage"},
	{"room/internal/jsapi", "room"},
	{"room/ingest", "room/client", "room/reader", "room/checkpointer", "room/embedded", "room/secure", "room/tilesource", "room/backup", "room/internal/roomtest"},
	{"room/node", "config"},
	{"cmd/publisher", "cmd/subscriber", "cmd/roompub-bench", "cmd/roompub-image"},
}

// sameLayer are the arrows allowed within a layer.
var sameLayer = map[[2]string]bool{
	{"room", "room/internal/jsapi"}: true, // the vocabulary's stream checks read with jsapi
	// The tests' shared helpers assemble roles as node does.
	{"room/internal/roomtest", "room/ingest"}:       true,
	{"room/internal/roomtest", "room/reader"}:       true,
	{"room/internal/roomtest", "room/checkpointer"}: true,
	{"room/internal/roomtest", "room/embedded"}:     true,
}

func TestPackageMapPointsDown(t *testing.T) {
	layer := map[string]int{}
	for i, ps := range layers {
		for _, p := range ps {
			layer[p] = i
		}
	}
	for p := range rules {
		if _, ok := layer[p]; !ok {
			t.Errorf("package %s has no layer (test/layout, docs/design.md)", p)
		}
	}
	for p, r := range rules {
		for _, imp := range r.imports {
			switch {
			case layer[imp] < layer[p]:
			case layer[imp] == layer[p] && sameLayer[[2]string{p, imp}]:
			default:
				t.Errorf("%s (layer %d) may import %s (layer %d): the map points up or sideways", p, layer[p], imp, layer[imp])
			}
		}
	}
}
