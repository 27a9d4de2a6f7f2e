package validate

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"time"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/schemas"
)

// ErrInvalidOption is wrapped by New for an option that cannot be applied.
var ErrInvalidOption = errors.New("invalid option")

// Validator checks entries, journals and records. It is immutable once
// built and safe for concurrent use.
type Validator struct {
	schemas *compiledSchemas
	trust   map[string]bool // nil: host trust is not checked
}

// Option configures New.
type Option func(*options) error

type options struct {
	schemaFS fs.FS
	trust    map[string]bool
	// patternTimeout bounds one regexp2 match (newECMAEngine); tests set
	// it (export_test.go).
	patternTimeout time.Duration
}

// WithSchemaFS validates against the schema files in fsys (flat, by file
// name; see package schemas) instead of the embedded ones, for example the
// upstream's later envelope revision with seven more payload keys. A file
// fsys lacks is taken from the embedded set, so a directory may hold just
// the one schema it replaces; but it must hold at least one of the two
// root schemas (schemas.EnvelopeFile, schemas.RecordFile), so that a wrong
// directory is an error rather than a silent fallback.
func WithSchemaFS(fsys fs.FS) Option {
	return func(o *options) error {
		if fsys == nil {
			return fmt.Errorf("%w: nil schema FS", ErrInvalidOption)
		}
		_, errEnv := fs.Stat(fsys, schemas.EnvelopeFile)
		_, errRec := fs.Stat(fsys, schemas.RecordFile)
		if errEnv != nil && errRec != nil {
			return fmt.Errorf("%w: the schema directory holds neither %s nor %s", ErrInvalidOption, schemas.EnvelopeFile, schemas.RecordFile)
		}
		o.schemaFS = fsys
		return nil
	}
}

// WithTrustedHosts turns on the untrusted_host rule: a record is accepted
// only from these host/node-id values. An empty list trusts no host.
// Without this option host trust is not checked (offline verification of
// files from unknown hosts). Every id must be a valid node:did:key.
func WithTrustedHosts(nodeIDs ...string) Option {
	return func(o *options) error {
		if o.trust == nil {
			o.trust = map[string]bool{}
		}
		var errs []error
		for _, id := range nodeIDs {
			if _, err := events.ParseNodeID(id); err != nil {
				errs = append(errs, fmt.Errorf("%w: trusted host %q: %v", ErrInvalidOption, id, err))
				continue
			}
			o.trust[id] = true
		}
		return errors.Join(errs...)
	}
}

// New compiles the schemas and returns a Validator. Errors wrap ErrSchema
// or ErrInvalidOption, all problems joined. The embedded schemas, known to
// compile, are compiled when first needed instead: the fast checks accept
// most inputs without them.
func New(opts ...Option) (*Validator, error) {
	var o options
	var errs []error
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s, err := compileSchemas(o.schemaFS, o.patternTimeout)
	if err != nil {
		return nil, err
	}
	return &Validator{schemas: s, trust: o.trust}, nil
}

// TrustedHosts lists the trusted host/node-id values in order, or nil when
// host trust is not checked.
func (v *Validator) TrustedHosts() []string {
	if v.trust == nil {
		return nil
	}
	out := make([]string, 0, len(v.trust))
	for id := range v.trust {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// ChecksTrust reports whether the untrusted_host rule is on.
func (v *Validator) ChecksTrust() bool { return v.trust != nil }

// Journal verifies a whole journal read from r as one chain (see
// events.VerifyJournal). meta is capsule.json's metadata, nil for a bare
// journal. A refusal is returned as *events.Refusal.
func (v *Validator) Journal(r io.Reader, file string, meta *events.CapsuleMeta) (events.JournalResult, error) {
	return events.VerifyJournal(r, file, meta, v.CheckEntry)
}

// NewChain returns a chain verifier that applies this validator's entry
// rules; the gate and the subscriber use it.
func (v *Validator) NewChain(meta *events.CapsuleMeta) *events.ChainVerifier {
	return events.NewChainVerifier(meta, v.CheckEntry)
}
