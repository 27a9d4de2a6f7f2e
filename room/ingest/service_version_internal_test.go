package ingest

import "testing"

// TestServiceVersion: what `make build` stamps (git describe: a tag, a
// tag with commits after it, dirty) reaches micro without Go's "v";
// what is no full SemVer is a development build.
func TestServiceVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v0.1.0":                   "0.1.0",
		"0.1.0":                    "0.1.0",
		"v0.1.0-13-g0c663f9":       "0.1.0-13-g0c663f9",
		"v0.1.0-13-g0c663f9-dirty": "0.1.0-13-g0c663f9-dirty",
		"v1.2.3-rc.1+build.7":      "1.2.3-rc.1+build.7",
		"15c32bc":                  "0.0.0-dev",
		"15c32bc-dirty":            "0.0.0-dev",
		"(devel)":                  "0.0.0-dev",
		"":                         "0.0.0-dev",
		"v1.2":                     "0.0.0-dev",
		"v01.2.3":                  "0.0.0-dev",
		"v1.2.3-01":                "0.0.0-dev",
		"vv1.2.3":                  "0.0.0-dev",
	} {
		if got := serviceVersion(in); got != want {
			t.Errorf("serviceVersion(%q) = %q, want %q", in, got, want)
		}
	}
}
