package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/witness"
)

// publisherTrust is the trusted-publisher flag of the commands that read rooms.
type publisherTrust struct {
	TrustedPublishers []string `name:"trusted-publisher" help:"Node id of a publisher key (made by 'publisher keygen') whose attestations and checkpoints are trusted (repeatable). With it, a message must carry a valid attestation by one of them and every checkpoint must cover its room as read, else checkpoint_mismatch; without it, follow, audit and evidence check neither, and prove and verify-proof refuse to run." placeholder:"NODE_ID" yaml:"trusted-publisher"`
}

// validate reports every bad node id, joined.
func (p *publisherTrust) validate() error {
	var errs []error
	for _, id := range p.TrustedPublishers {
		if _, err := events.ParseNodeID(id); err != nil {
			errs = append(errs, fmt.Errorf("%w: --trusted-publisher %q: %v", config.ErrInvalid, id, err))
		}
	}
	return errors.Join(errs...)
}

// trust returns the trusted keys (an empty set without the flag).
func (p *publisherTrust) trust() (*checkpoint.Trust, error) {
	t, err := checkpoint.NewTrust(p.TrustedPublishers...)
	if err != nil {
		return nil, fmt.Errorf("%w: --trusted-publisher: %v", config.ErrInvalid, err)
	}
	return t, nil
}

// stateDir returns dir, or the default state directory when it is "".
func stateDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "roompub"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%w: no --state-dir and no home directory: %v", config.ErrInvalid, err)
	}
	return filepath.Join(home, ".local", "state", "roompub"), nil
}

// checkpointState returns the state of dir when t holds keys, else nil.
func checkpointState(t *checkpoint.Trust, dir string) (*reader.CheckpointState, error) {
	if t.Len() == 0 {
		return nil, nil
	}
	d, err := stateDir(dir)
	if err != nil {
		return nil, err
	}
	return &reader.CheckpointState{Dir: d}, nil
}

// externalCheckpoints reads audit --checkpoint files.
func externalCheckpoints(files []string) ([]reader.ExternalCheckpoint, error) {
	var out []reader.ExternalCheckpoint
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, reader.ExternalCheckpoint{Name: f, Note: b})
	}
	return out, nil
}

// attestationNote says whether attestations are checked, for people.
func attestationNote(t *checkpoint.Trust) string {
	if t.Len() == 0 {
		return "attestations not checked: no --trusted-publisher"
	}
	return fmt.Sprintf("attestations and checkpoints checked against %d trusted publisher key(s)", t.Len())
}

// witnessPolicy is the witness flags of the commands that read rooms
// (docs/witnesses.md, "What readers check"): the deployment's origin, and
// the witnesses whose cosignatures count with the quorum they need, given
// one by one or as a C2SP tlog-policy file.
type witnessPolicy struct {
	Origin        string   `name:"origin" help:"The deployment's origin (serve --origin): room checkpoints must carry it, and the deployment log is checked against it. Taken from the policy file's log line when that names one." placeholder:"ORIGIN" yaml:"origin"`
	Witnesses     []string `name:"witness" help:"A witness's cosignature verifier key, name+hash+key (C2SP tlog-cosignature; repeatable): with --witness-quorum, a checkpoint counts only when enough of them cosigned it, else witness_quorum." placeholder:"VKEY" yaml:"witness"`
	WitnessQuorum int      `name:"witness-quorum" help:"How many of the --witness keys must have cosigned a checkpoint of the deployment log (default: all of them)." placeholder:"K" yaml:"witness-quorum"`
	Revoked       []string `name:"revoked-witness" help:"A witness cosignature key whose cosignatures never count, whatever the policy says (repeatable): a key that was lost, or the old key of a witness's rotation." placeholder:"VKEY" yaml:"revoked-witness"`
	WitnessPolicy string   `name:"witness-policy" type:"existingfile" help:"A C2SP tlog-policy file (log, witness, group and quorum lines) instead of --witness and --witness-quorum." placeholder:"FILE" yaml:"witness-policy"`
}

// set reports whether a witness policy was asked for.
func (w *witnessPolicy) set() bool { return len(w.Witnesses) > 0 || w.WitnessPolicy != "" }

// validate checks the flags' combinations; the keys are parsed by policy.
func (w *witnessPolicy) validate(trusted int) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{config.ErrInvalid}, args...)...))
	}
	if w.WitnessPolicy != "" && (len(w.Witnesses) > 0 || w.WitnessQuorum != 0) {
		bad("--witness-policy excludes --witness and --witness-quorum")
	}
	if w.WitnessQuorum < 0 || w.WitnessQuorum > len(w.Witnesses) && w.WitnessPolicy == "" {
		bad("--witness-quorum %d of %d --witness keys", w.WitnessQuorum, len(w.Witnesses))
	}
	if w.set() && trusted == 0 {
		bad("a witness policy needs --trusted-publisher (the keys that sign the deployment log)")
	}
	if w.Origin != "" {
		if err := checkpoint.CheckOrigin(w.Origin); err != nil {
			bad("--origin: %v", err)
		}
	}
	return errors.Join(errs...)
}

// policy returns the witness policy and t with the deployment origin, or
// nil and t unchanged when no policy was asked for (with --origin alone,
// t pins the origin all the same).
func (w *witnessPolicy) policy(t *checkpoint.Trust) (*reader.Witnessing, *checkpoint.Trust, error) {
	origin := w.Origin
	var p *witness.Policy
	switch {
	case w.WitnessPolicy != "":
		data, err := os.ReadFile(w.WitnessPolicy)
		if err != nil {
			return nil, nil, err
		}
		if p, err = witness.ParsePolicy(data); err != nil {
			return nil, nil, fmt.Errorf("%w: --witness-policy %s: %v", config.ErrInvalid, w.WitnessPolicy, err)
		}
		for _, l := range p.Logs() {
			switch {
			case origin == "":
				origin = l.Name()
			case l.Name() != origin:
				return nil, nil, fmt.Errorf("%w: --witness-policy %s names log %q, not --origin %q", config.ErrInvalid, w.WitnessPolicy, l.Name(), origin)
			}
		}
	case len(w.Witnesses) > 0:
		var ws []witness.Witness
		for _, vkey := range w.Witnesses {
			v, err := witness.ParseVerifierKey(vkey)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: --witness %q: %v", config.ErrInvalid, vkey, err)
			}
			ws = append(ws, witness.Witness{Name: v.Name(), Verifier: v})
		}
		k := w.WitnessQuorum
		if k == 0 {
			k = len(ws)
		}
		var err error
		if p, err = witness.NewPolicy(ws, k); err != nil {
			return nil, nil, fmt.Errorf("%w: --witness: %v", config.ErrInvalid, err)
		}
	}
	if origin != "" {
		var err error
		if t, err = t.WithOrigin(origin); err != nil {
			return nil, nil, fmt.Errorf("%w: --origin: %v", config.ErrInvalid, err)
		}
	}
	if p == nil {
		if len(w.Revoked) > 0 {
			return nil, nil, fmt.Errorf("%w: --revoked-witness needs a witness policy", config.ErrInvalid)
		}
		return nil, t, nil
	}
	for _, vkey := range w.Revoked {
		if err := p.Revoke(vkey); err != nil {
			return nil, nil, fmt.Errorf("%w: --revoked-witness %q: %v", config.ErrInvalid, vkey, err)
		}
	}
	if origin == "" {
		return nil, nil, fmt.Errorf("%w: a witness policy needs the deployment's --origin (or a policy file whose log line names it)", config.ErrInvalid)
	}
	return &reader.Witnessing{Policy: p}, t, nil
}
