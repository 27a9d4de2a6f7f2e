package validate_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

// A Validator is immutable and safe for concurrent use (its doc comment):
// under -race, goroutines share one while checking records and journals.
func TestValidatorConcurrentUse(t *testing.T) {
	key, _ := testKey(12)
	v := newValidator(t, validate.WithTrustedHosts(key.NodeID()))
	good := signed(t, recordMembers(t), key)
	m := recordMembers(t)
	m["review/digest"] = "sha256:" + string(bytes.Repeat([]byte("Z"), 43))
	bad := signed(t, m, key)
	journal := journalBytes(chainLines(t, 20, nil)...)

	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for range 8 {
		wg.Go(func() {
			for range 10 {
				if _, err := v.Record(good, events.Location{}); err != nil {
					errs <- "good record refused: " + err.Error()
				}
				_, err := v.Record(bad, events.Location{})
				if ref, ok := err.(*events.Refusal); !ok || ref.Code != events.DigestMismatch {
					errs <- "bad record not refused as digest_mismatch"
				}
				if res, err := v.Journal(bytes.NewReader(journal), "j", nil); err != nil || res.Valid != 20 {
					errs <- "journal refused"
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestEmbeddedSchemasCompile: New leaves the embedded schemas to their
// first use, where a compile error could only be a problem's reason; they
// compile.
func TestEmbeddedSchemasCompile(t *testing.T) {
	v, err := validate.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := v.CompileSchemas(); err != nil {
		t.Fatalf("the embedded schemas: %v", err)
	}
}
