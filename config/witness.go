package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/witness"
)

// WitnessPolicy is the witness flags of the commands that read rooms and
// of the publisher's receipts (docs/witnesses.md): the deployment's
// origin, and the witnesses whose cosignatures count with the quorum
// they need, given one by one or as a C2SP tlog-policy file.
type WitnessPolicy struct {
	Origin        string   `name:"origin" help:"The deployment's origin (serve --origin): room checkpoints must carry it, and the deployment log is checked against it. Taken from the policy file's log line when that names one." placeholder:"ORIGIN" yaml:"origin"`
	Witnesses     []string `name:"witness" help:"A witness's cosignature verifier key, name+hash+key (C2SP tlog-cosignature; repeatable): with --witness-quorum, a checkpoint counts only when enough of them cosigned it, else witness_quorum." placeholder:"VKEY" yaml:"witness"`
	WitnessQuorum int      `name:"witness-quorum" help:"How many of the --witness keys must have cosigned a checkpoint of the deployment log (default: all of them)." placeholder:"K" yaml:"witness-quorum"`
	Revoked       []string `name:"revoked-witness" help:"A witness cosignature key whose cosignatures never count, whatever the policy says (repeatable): a key that was lost, or the old key of a witness's rotation." placeholder:"VKEY" yaml:"revoked-witness"`
	WitnessPolicy string   `name:"witness-policy" type:"existingfile" help:"A C2SP tlog-policy file (log, witness, group and quorum lines) instead of --witness and --witness-quorum." placeholder:"FILE" yaml:"witness-policy"`
}

// Set reports whether a witness policy was asked for.
func (w *WitnessPolicy) Set() bool { return len(w.Witnesses) > 0 || w.WitnessPolicy != "" }

// Validate checks the flags' combinations, trusted being how many
// --trusted-publisher keys were given; the keys are parsed by Policy.
// Errors wrap ErrInvalid.
func (w *WitnessPolicy) Validate(trusted int) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
	}
	if w.WitnessPolicy != "" && (len(w.Witnesses) > 0 || w.WitnessQuorum != 0) {
		bad("--witness-policy excludes --witness and --witness-quorum")
	}
	if w.WitnessQuorum < 0 || w.WitnessQuorum > len(w.Witnesses) && w.WitnessPolicy == "" {
		bad("--witness-quorum %d of %d --witness keys", w.WitnessQuorum, len(w.Witnesses))
	}
	if w.Set() && trusted == 0 {
		bad("a witness policy needs --trusted-publisher (the keys that sign the deployment log)")
	}
	if w.Origin != "" {
		if err := checkpoint.CheckOrigin(w.Origin); err != nil {
			bad("--origin: %v", err)
		}
	}
	return errors.Join(errs...)
}

// Policy returns the witness policy and t with the deployment origin, or
// nil and t unchanged when no policy was asked for (with --origin alone,
// t pins the origin all the same). Errors wrap ErrInvalid, or are the
// policy file's read error.
func (w *WitnessPolicy) Policy(t *checkpoint.Trust) (*reader.Witnessing, *checkpoint.Trust, error) {
	origin := w.Origin
	var p *witness.Policy
	switch {
	case w.WitnessPolicy != "":
		data, err := os.ReadFile(w.WitnessPolicy)
		if err != nil {
			return nil, nil, err
		}
		if p, err = witness.ParsePolicy(data); err != nil {
			return nil, nil, fmt.Errorf("%w: --witness-policy %s: %v", ErrInvalid, w.WitnessPolicy, err)
		}
		for _, l := range p.Logs() {
			switch {
			case origin == "":
				origin = l.Name()
			case l.Name() != origin:
				return nil, nil, fmt.Errorf("%w: --witness-policy %s names log %q, not --origin %q", ErrInvalid, w.WitnessPolicy, l.Name(), origin)
			}
		}
	case len(w.Witnesses) > 0:
		var ws []witness.Witness
		for _, vkey := range w.Witnesses {
			v, err := witness.ParseVerifierKey(vkey)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: --witness %q: %v", ErrInvalid, vkey, err)
			}
			ws = append(ws, witness.Witness{Name: v.Name(), Verifier: v})
		}
		k := w.WitnessQuorum
		if k == 0 {
			k = len(ws)
		}
		var err error
		if p, err = witness.NewPolicy(ws, k); err != nil {
			return nil, nil, fmt.Errorf("%w: --witness: %v", ErrInvalid, err)
		}
	}
	if origin != "" {
		var err error
		if t, err = t.WithOrigin(origin); err != nil {
			return nil, nil, fmt.Errorf("%w: --origin: %v", ErrInvalid, err)
		}
	}
	if p != nil && t.Len() > 0 {
		// The policy's log lines pin the key that signs the deployment
		// log; readers take only those of them that are trusted
		// publishers, so none would verify nothing.
		if _, pinned := reader.DeploymentLogKeys(p, t); !pinned {
			var named []string
			for _, l := range p.Logs() {
				named = append(named, fmt.Sprintf("%s+%08x", l.Name(), l.KeyHash()))
			}
			return nil, nil, fmt.Errorf("%w: --witness-policy %s: its log line names the key %s, which is none of the --trusted-publisher keys: the deployment log is signed by a trusted publisher, and the policy says which", ErrInvalid, w.WitnessPolicy, strings.Join(named, ", "))
		}
	}
	if p == nil {
		if len(w.Revoked) > 0 {
			return nil, nil, fmt.Errorf("%w: --revoked-witness needs a witness policy", ErrInvalid)
		}
		return nil, t, nil
	}
	for _, vkey := range w.Revoked {
		if err := p.Revoke(vkey); err != nil {
			return nil, nil, fmt.Errorf("%w: --revoked-witness %q: %v", ErrInvalid, vkey, err)
		}
	}
	if origin == "" {
		return nil, nil, fmt.Errorf("%w: a witness policy needs the deployment's --origin (or a policy file whose log line names it)", ErrInvalid)
	}
	return &reader.Witnessing{Policy: p}, t, nil
}
