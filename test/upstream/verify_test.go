package upstream

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/roompub/roompub/validate"
)

// perClass is how many capsules of each class go through verify.
const perClass = 12

// pendingFor is why class is pending on path (verify, gate-batched,
// gate-per-line, readers), or "".
func pendingFor(class, path string) string {
	p := pendingClasses()
	if why, ok := p[class]; ok {
		return why
	}
	return p[class+"/"+path]
}

// skipPending skips a class roompub does not agree on yet on path, unless
// ROOMPUB_UPSTREAM_PENDING=run asks to see whether it now does.
func skipPending(t *testing.T, class, path string) {
	t.Helper()
	if why := pendingFor(class, path); why != "" && os.Getenv("ROOMPUB_UPSTREAM_PENDING") != "run" {
		t.Skip("pending: " + why)
	}
}

// writeCapsule writes c as a capsule directory under parent.
func writeCapsule(t *testing.T, parent, name string, c *capsule) string {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if c.metaRaw != nil {
		if err := os.WriteFile(filepath.Join(dir, validate.CapsuleFile), c.metaRaw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, validate.JournalFile), c.journal(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// classSeed makes each class's draws its own, whatever the order of the
// table: a class keeps its capsules when another is added.
func classSeed(name string, i int) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range []byte(name) {
		h = (h ^ uint64(b)) * 1099511628211
	}
	return h + uint64(i)
}

// verifyVerdict is what `publisher verify` says of dir, as a verdict.
func verifyVerdict(t *testing.T, v *validate.Validator, dir string) (got verdict, reason string) {
	t.Helper()
	rep, err := v.VerifyPath(dir)
	if err != nil {
		t.Fatalf("verify %s: %v", dir, err)
	}
	if rep.OK {
		return accepted(), ""
	}
	if rep.Refusal == nil {
		t.Fatalf("verify %s: refused without a refusal: %+v", dir, rep)
	}
	return verdict{code: rep.Refusal.Code, line: rep.Refusal.At.Line}, rep.Refusal.Reason
}

// agrees reports whether verify's verdict got is want: the same first
// code at the same line (none for capsule.json; none or the bad line for a
// journal that is not UTF-8).
func (want verdict) agrees(got verdict) bool {
	if got.code != want.code {
		return false
	}
	if want.code == "" || got.line == want.line {
		return true
	}
	return want.anyLine && got.line == 0
}

// TestVerifyAgreesWithUpstream runs every class's capsules through the
// library `publisher verify` uses: each must get its class's verdict,
// first code and line.
func TestVerifyAgreesWithUpstream(t *testing.T) {
	v, err := validate.New()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	total := 0
	for _, cl := range classes() {
		t.Run(cl.name, func(t *testing.T) {
			skipPending(t, cl.name, "verify")
			byWant := map[string]int{}
			// Every variant at least once: as many capsules as the class
			// has variants, perClass at least.
			n := perClass
			for i := 0; i < n; i++ {
				g := newGen(classSeed(cl.name, i))
				g.turn = i
				s := cl.make(g, g.ids())
				n = max(n, g.widest)
				dir := writeCapsule(t, root, fmt.Sprintf("%s-%d", cl.name, i), s.c)
				got, reason := verifyVerdict(t, v, dir)
				if !s.want.agrees(got) {
					t.Errorf("%s #%d (%s): verify says %v (%s), the upstream's rules %v\n%s",
						cl.name, i, s.variant, got, reason, s.want, dir)
				}
				byWant[s.want.codeName()]++
			}
			total += n
			whose := "the upstream's verdict"
			if cl.kept {
				whose = "roompub's verdict (a deliberate divergence)"
			}
			t.Logf("%d capsules, %s: %v", n, whose, byWant)
		})
	}
	t.Logf("%d capsules through verify", total)
}
