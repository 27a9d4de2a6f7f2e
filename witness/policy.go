package witness

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// Policy says which witnesses' cosignatures make a checkpoint valid: a set
// of witnesses, a quorum over them (a threshold of witnesses or of nested
// groups, C2SP tlog-policy), the logs whose checkpoints it accepts, and
// revoked witness keys, whose cosignatures never count.
type Policy struct {
	logs      []note.Verifier
	witnesses []Witness
	quorum    *group
	revoked   map[string]bool // Ed25519 public keys
}

// group is a threshold: met when at least k of its members are, each a
// witness (an index into Policy.witnesses) or a group.
type group struct {
	name    string
	k       int
	witness int // -1 for a group of members
	members []*group
}

// PolicyLimit is the most logs, witnesses, or groups a policy may have
// each, the minimum C2SP tlog-policy asks implementations to support.
const PolicyLimit = 32

// NewPolicy returns a policy whose quorum is k of witnesses (0 asks for no
// cosignature). Names must be distinct and keys too. It accepts no log of
// its own: Check is then given the log's verifier.
func NewPolicy(witnesses []Witness, k int) (*Policy, error) {
	p := &Policy{revoked: map[string]bool{}}
	for _, w := range witnesses {
		if err := p.addWitness(w); err != nil {
			return nil, err
		}
	}
	if k < 0 || k > len(witnesses) {
		return nil, fmt.Errorf("witness: quorum %d of %d witnesses", k, len(witnesses))
	}
	p.quorum = &group{name: fmt.Sprintf("%d-of-%d", k, len(witnesses)), k: k, witness: -1}
	for i := range p.witnesses {
		p.quorum.members = append(p.quorum.members, &group{name: p.witnesses[i].Name, k: 1, witness: i})
	}
	return p, nil
}

func (p *Policy) addWitness(w Witness) error {
	if w.Verifier == nil || w.Name == "" || w.Name == "none" {
		return fmt.Errorf("witness: witness %q: needs a name other than none and a key", w.Name)
	}
	if len(p.witnesses) >= PolicyLimit {
		return fmt.Errorf("witness: more than %d witnesses", PolicyLimit)
	}
	for _, o := range p.witnesses {
		if o.Name == w.Name {
			return fmt.Errorf("witness: witness name %q repeated", w.Name)
		}
		if o.Verifier.key.Equal(w.Verifier.key) {
			return fmt.Errorf("witness: witnesses %q and %q have the same key", o.Name, w.Name)
		}
	}
	p.witnesses = append(p.witnesses, w)
	return nil
}

// Revoke makes the cosignatures of a witness key, given as a cosignature
// verifier key, never count, whatever its name: a key is revoked, not a
// name. Revoking a key the policy does not list is allowed.
func (p *Policy) Revoke(vkey string) error {
	v, err := ParseVerifierKey(vkey)
	if err != nil {
		return err
	}
	p.revoked[string(v.key)] = true
	return nil
}

// Witnesses are the policy's witnesses, in the order given or listed,
// revoked ones included (their URLs may still be asked; their
// cosignatures never count).
func (p *Policy) Witnesses() []Witness { return slices.Clone(p.witnesses) }

// Logs are the log keys of the policy file's log lines.
func (p *Policy) Logs() []note.Verifier { return slices.Clone(p.logs) }

// Revoked reports whether v's key is revoked.
func (p *Policy) Revoked(v *Verifier) bool { return p.revoked[string(v.key)] }

// QuorumError is Check's error when the cosignatures do not meet the
// quorum: the quorum's name ("K-of-N" for NewPolicy), the witnesses that
// validly cosigned, and how many witnesses the policy has.
type QuorumError struct {
	Quorum    string
	Cosigned  []string
	Witnesses int
}

func (e *QuorumError) Error() string {
	return fmt.Sprintf("witness: quorum %s not met: %d of %d witnesses cosigned %v", e.Quorum, len(e.Cosigned), e.Witnesses, e.Cosigned)
}

// Check verifies signedNote, a checkpoint signed by log (or, if log is
// nil, by one of the policy's logs), and returns the names of the
// witnesses that validly cosigned it, in policy order. Each witness counts
// once however many lines it has; a line counts only if its name and key
// hash are the witness's, its key is not revoked, and it verifies over
// this note's text (C2SP tlog-cosignature). Lines of unknown keys are
// ignored, and a bad witness line does not spoil the note. The error is a
// note error if the log's signature is missing or invalid, or
// *QuorumError if the quorum is not met.
func (p *Policy) Check(signedNote []byte, log note.Verifier) ([]string, error) {
	var known note.Verifiers
	switch {
	case log != nil:
		known = note.VerifierList(log)
	case len(p.logs) > 0:
		known = note.VerifierList(p.logs...)
	default:
		return nil, errors.New("witness: no log key to check the checkpoint with")
	}
	return p.CheckWith(signedNote, known)
}

// QuorumName names the policy's quorum for messages: "K-of-N" for
// NewPolicy, the quorum line's group name for a policy file.
func (p *Policy) QuorumName() string { return p.quorum.name }

// CheckWith is Check with the log's keys given as note.Verifiers, for a
// log signed by one of several keys (a publisher key being rotated):
// the note must carry a valid signature by one of logs.
func (p *Policy) CheckWith(signedNote []byte, logs note.Verifiers) ([]string, error) {
	n, err := note.Open(signedNote, logs)
	if err != nil {
		return nil, fmt.Errorf("witness: log signature: %w", err)
	}
	text := []byte(n.Text)
	ok := make([]bool, len(p.witnesses))
	var cosigned []string
	for i, w := range p.witnesses {
		if p.revoked[string(w.Verifier.key)] {
			continue
		}
		for _, s := range n.UnverifiedSigs {
			if w.Verifier.verifyLine(text, s) {
				ok[i] = true
				cosigned = append(cosigned, w.Name)
				break
			}
		}
	}
	if !p.quorum.met(ok) {
		return cosigned, &QuorumError{Quorum: p.quorum.name, Cosigned: cosigned, Witnesses: len(p.witnesses)}
	}
	return cosigned, nil
}

func (g *group) met(ok []bool) bool {
	if g.witness >= 0 {
		return ok[g.witness]
	}
	n := 0
	for _, m := range g.members {
		if m.met(ok) {
			n++
		}
	}
	return n >= g.k
}

// ParsePolicy reads a policy file (C2SP tlog-policy), all of it:
//
//	log <vkey> [<url>]              a log's Ed25519 note key (type 0x01)
//	witness <name> <vkey> [<url>]   a witness's cosignature key (type 0x04)
//	group <name> all|any|<k> <name>...
//	quorum <name>|none
//
// Items are separated by spaces or tabs; empty lines and lines starting
// with '#' are ignored; a group or the quorum names only witnesses and
// groups of earlier lines, each member once; exactly one quorum line. Two
// logs or two witnesses with the same public key are refused, as are
// control characters other than tab and newline, and more than 32 logs,
// witnesses or groups. Revocation is not part of the format: see Revoke.
// Errors name the line number.
func ParsePolicy(file []byte) (*Policy, error) {
	p := &Policy{revoked: map[string]bool{}}
	names := map[string]*group{}
	var logKeys [][]byte
	groups := 0
	for i, line := range strings.Split(string(file), "\n") {
		num := i + 1
		fail := func(format string, args ...any) (*Policy, error) {
			return nil, fmt.Errorf("witness: policy line %d: %s", num, fmt.Sprintf(format, args...))
		}
		if num == 1 && strings.HasPrefix(line, "\ufeff") {
			// Saved "UTF-8 with BOM": an unknown keyword, to the eye the right one.
			return fail("the file starts with a UTF-8 byte order mark (bytes EF BB BF): a policy file is UTF-8 without one")
		}
		for _, c := range []byte(line) {
			if c < 0x20 && c != '\t' || c == 0x7f {
				return fail("control character 0x%02x", c)
			}
		}
		f := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' })
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch f[0] {
		case "log":
			if len(f) < 2 || len(f) > 3 {
				return fail("want log <vkey> [<url>]")
			}
			if len(p.logs) >= PolicyLimit {
				return fail("more than %d logs", PolicyLimit)
			}
			v, err := note.NewVerifier(f[1])
			if err != nil {
				return fail("log key: %v", err)
			}
			raw := vkeyMaterial(f[1])
			for _, k := range logKeys {
				if bytes.Equal(k, raw) {
					return fail("log key repeated")
				}
			}
			logKeys = append(logKeys, raw)
			p.logs = append(p.logs, v)
		case "witness":
			if len(f) < 3 || len(f) > 4 {
				return fail("want witness <name> <vkey> [<url>]")
			}
			if _, dup := names[f[1]]; dup || f[1] == "none" {
				return fail("name %q already defined", f[1])
			}
			v, err := ParseVerifierKey(f[2])
			if err != nil {
				return fail("%v", err)
			}
			w := Witness{Name: f[1], Verifier: v}
			if len(f) == 4 {
				w.URL = f[3]
			}
			if err := p.addWitness(w); err != nil {
				return fail("%v", err)
			}
			names[f[1]] = &group{name: f[1], k: 1, witness: len(p.witnesses) - 1}
		case "group":
			if len(f) < 4 {
				return fail("want group <name> all|any|<k> <name>...")
			}
			if _, dup := names[f[1]]; dup || f[1] == "none" {
				return fail("name %q already defined", f[1])
			}
			if groups++; groups > PolicyLimit {
				return fail("more than %d groups", PolicyLimit)
			}
			g := &group{name: f[1], witness: -1}
			seen := map[string]bool{}
			for _, m := range f[3:] {
				mg, ok := names[m]
				if !ok {
					return fail("group member %q not defined on an earlier line", m)
				}
				if seen[m] {
					return fail("group member %q listed twice", m)
				}
				seen[m] = true
				g.members = append(g.members, mg)
			}
			switch f[2] {
			case "all":
				g.k = len(g.members)
			case "any":
				g.k = 1
			default:
				k, err := strconv.Atoi(f[2])
				if err != nil || k < 1 || k > len(g.members) || strconv.Itoa(k) != f[2] {
					return fail("threshold %q: want all, any, or 1 to %d", f[2], len(g.members))
				}
				g.k = k
			}
			names[f[1]] = g
		case "quorum":
			if len(f) != 2 {
				return fail("want quorum <name>")
			}
			if p.quorum != nil {
				return fail("second quorum line")
			}
			if f[1] == "none" {
				p.quorum = &group{name: "none", witness: -1}
				break
			}
			g, ok := names[f[1]]
			if !ok {
				return fail("quorum %q not defined on an earlier line", f[1])
			}
			p.quorum = g
		default:
			return fail("unknown keyword %q", f[0])
		}
	}
	if p.quorum == nil {
		return nil, errors.New("witness: policy has no quorum line")
	}
	return p, nil
}

// vkeyMaterial is the decoded key of a vkey that note.NewVerifier
// accepted: the type byte and the key, without name and key hash.
func vkeyMaterial(vkey string) []byte {
	_, rest, _ := strings.Cut(vkey, "+")
	_, b64, _ := strings.Cut(rest, "+")
	raw, _ := base64.StdEncoding.DecodeString(b64)
	return raw
}
