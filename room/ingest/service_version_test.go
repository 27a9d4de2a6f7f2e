package ingest_test

import (
	"testing"

	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// TestServiceStartsWithStampedVersions: the ingest service registers with
// micro whatever `make build` stamps, and reports it as micro takes it.
func TestServiceStartsWithStampedVersions(t *testing.T) {
	e := roomtest.NewEnv(t)
	for in, want := range map[string]string{
		"v0.1.0":                   "0.1.0",
		"v0.1.0-13-g0c663f9-dirty": "0.1.0-13-g0c663f9-dirty",
		"15c32bc":                  "0.0.0-dev",
	} {
		nc := e.Connect()
		svc, err := ingest.StartService(nc, e.Gate, ingest.ServiceOptions{Version: in})
		if err != nil {
			t.Fatalf("version %q: %v", in, err)
		}
		if got := svc.Info().Version; got != want {
			t.Errorf("version %q: the service reports %q, want %q", in, got, want)
		}
		_ = svc.Stop()
	}
}
