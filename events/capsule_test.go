package events_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
)

const goodCapsule = `{"capsule_id":"cap-min-1","created_at":"2026-01-01T00:00:00.000Z","harness_version":"ecc-eval/1.4.0","run_id":"run-min-1","schema":"capsule-envelope/v1","task_family":"slugify"}`

func TestCheckCapsule(t *testing.T) {
	c := events.CheckCapsule([]byte(goodCapsule+"\n"), "capsule.json")
	want := events.CapsuleMeta{RunID: "run-min-1", CapsuleID: "cap-min-1", HarnessVersion: "ecc-eval/1.4.0", TaskFamily: "slugify"}
	if len(c.Problems) != 0 || c.Meta != want {
		t.Fatalf("CheckCapsule(good) = %+v, want %+v and no problems", c, want)
	}
	with := func(key string, value any) string {
		var m map[string]any
		if err := json.Unmarshal([]byte(goodCapsule), &m); err != nil {
			t.Fatal(err)
		}
		if value == nil {
			delete(m, key)
		} else {
			m[key] = value
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tt := range []struct {
		name, in string
		pointers []string // every problem's pointer, in order
	}{
		{"schema v2", with("schema", "capsule-envelope/v2"), []string{"/schema"}},
		{"no schema", with("schema", nil), []string{"/schema"}},
		{"run_id off the id pattern", with("run_id", "-run"), []string{"/run_id"}},
		{"run_id of 129 characters", with("run_id", "r"+strings.Repeat("x", 128)), []string{"/run_id"}},
		{"capsule_id with a space", with("capsule_id", "cap 1"), []string{"/capsule_id"}},
		{"capsule_id a number", with("capsule_id", 7), []string{"/capsule_id"}},
		{"blank harness_version", with("harness_version", " "), []string{"/harness_version"}},
		{"harness_version of JavaScript white space", with("harness_version", "\u00a0\ufeff\u3000\u2028"), []string{"/harness_version"}},
		{"empty task_family", with("task_family", ""), []string{"/task_family"}},
		{"created_at without milliseconds", with("created_at", "2026-01-01T00:00:00Z"), []string{"/created_at"}},
		{"created_at with an offset", with("created_at", "2026-01-01T00:00:00.000+00:00"), []string{"/created_at"}},
		{"created_at on February 30", with("created_at", "2026-02-30T00:00:00.000Z"), []string{"/created_at"}},
		{"no created_at", with("created_at", nil), []string{"/created_at"}},
		{"everything wrong, in the upstream's order", `{"schema":1,"run_id":"","capsule_id":"","harness_version":"","task_family":"","created_at":""}`,
			[]string{"/schema", "/run_id", "/capsule_id", "/harness_version", "/task_family", "/created_at"}},
		{"not JSON", `{"run_id":`, []string{""}},
		{"an array", `[]`, []string{""}},
		{"a duplicate key (I-JSON, a deliberate divergence)", strings.Replace(goodCapsule, "{", `{"run_id":"dup-first",`, 1), []string{""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := events.CheckCapsule([]byte(tt.in), "capsule.json")
			var got []string
			for _, p := range c.Problems {
				if p.Code != events.InvalidCapsule || p.At.File != "capsule.json" {
					t.Errorf("problem %v, want invalid_capsule in capsule.json", p)
				}
				if field := strings.TrimPrefix(p.At.Pointer, "/"); field != "" && !strings.Contains(p.Reason, field) {
					t.Errorf("reason %q does not name the field %s", p.Reason, field)
				}
				got = append(got, p.At.Pointer)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.pointers) {
				t.Errorf("problems at %q, want %q: %v", got, tt.pointers, c.Problems)
			}
		})
	}
}

// TestCheckCapsuleBOM: a capsule.json saved "UTF-8 with BOM" is refused
// naming the byte order mark, which no editor shows, not only as JSON
// that does not parse.
func TestCheckCapsuleBOM(t *testing.T) {
	c := events.CheckCapsule(append([]byte{0xef, 0xbb, 0xbf}, goodCapsule+"\n"...), "capsule.json")
	want := "capsule.json starts with a UTF-8 byte order mark (bytes EF BB BF): a capsule file is UTF-8 without one (not strict JSON"
	if len(c.Problems) != 1 || c.Problems[0].Code != events.InvalidCapsule || !strings.HasPrefix(c.Problems[0].Reason, want) {
		t.Fatalf("CheckCapsule(BOM + good) = %+v, want one invalid_capsule problem starting %q", c.Problems, want)
	}
}

func TestCanonicalISOTime(t *testing.T) {
	for s, want := range map[string]bool{
		"2026-01-01T00:00:00.000Z":    true,
		"0000-01-01T00:00:00.000Z":    true,
		"9999-12-31T23:59:59.999Z":    true,
		"2024-02-29T12:00:00.000Z":    true,  // a leap day
		"2023-02-29T12:00:00.000Z":    false, // not a leap year
		"+010000-01-01T00:00:00.000Z": true,  // how toISOString writes year 10000
		"-000001-01-01T00:00:00.000Z": true,
		"+275760-09-13T00:00:00.000Z": true,  // the last instant of the time range
		"+275760-09-13T00:00:00.001Z": false, // past it
		"-271821-04-20T00:00:00.000Z": true,
		"-271821-04-19T23:59:59.999Z": false,
		"+002026-01-01T00:00:00.000Z": false, // toISOString writes four digits
		"-000000-01-01T00:00:00.000Z": false,
		"2026-01-01T24:00:00.000Z":    false,
		"2026-01-01T00:00:60.000Z":    false, // toISOString never writes a leap second
		"2026-13-01T00:00:00.000Z":    false,
		"2026-01-01t00:00:00.000Z":    false,
		"2026-01-01T00:00:00.000z":    false,
		"2026-01-01T00:00:00.00Z":     false,
		"2026-01-01":                  false,
		"":                            false,
		"2026-01-01T00:00:00.000Z ":   false,
		"२०२६-01-01T00:00:00.000Z":    false,
	} {
		if got := events.CanonicalISOTime(s); got != want {
			t.Errorf("CanonicalISOTime(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestCanonicalISOTimeNode holds CanonicalISOTime to JavaScript itself:
// new Date(s).toISOString() === s, over a corpus of near-canonical strings.
func TestCanonicalISOTimeNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on this machine: the golden comparison with JavaScript's Date is skipped")
	}
	r := rand.New(rand.NewPCG(7, 8))
	pick := func(opts ...string) string { return opts[r.IntN(len(opts))] }
	two := func(hi int) string { return fmt.Sprintf("%02d", r.IntN(hi)) }
	corpus := []string{"2026-01-01T00:00:00.000Z", "+275760-09-13T00:00:00.000Z", "-271821-04-20T00:00:00.000Z"}
	for range 4000 {
		year := pick(fmt.Sprintf("%04d", r.IntN(10000)), fmt.Sprintf("+%06d", r.IntN(280000)), fmt.Sprintf("-%06d", r.IntN(280000)), "1970", "2024", "2100", "+010000", "-000000")
		s := year + "-" + two(14) + "-" + two(33) + "T" + two(26) + ":" + two(61) + ":" + two(62) + "." + fmt.Sprintf("%03d", r.IntN(1000)) + pick("Z", "Z", "Z", "z", "+00:00")
		corpus = append(corpus, s)
	}
	in, err := json.Marshal(corpus)
	if err != nil {
		t.Fatal(err)
	}
	const program = `let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{` +
		`const out=JSON.parse(s).map(x=>{const d=new Date(x);return Number.isFinite(d.getTime())&&d.toISOString()===x});` +
		`process.stdout.write(JSON.stringify(out))})`
	cmd := exec.Command(node, "-e", program)
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var verdicts []bool
	if err := json.Unmarshal(out, &verdicts); err != nil || len(verdicts) != len(corpus) {
		t.Fatalf("node answered %d verdicts (%v) for %d strings", len(verdicts), err, len(corpus))
	}
	canonical := 0
	for i, s := range corpus {
		if got := events.CanonicalISOTime(s); got != verdicts[i] {
			t.Errorf("CanonicalISOTime(%q) = %v, JavaScript says %v", s, got, verdicts[i])
		}
		if verdicts[i] {
			canonical++
		}
	}
	t.Logf("%d strings, %d canonical per JavaScript; CanonicalISOTime agrees on all", len(corpus), canonical)
}

// FuzzParseCapsule: a Roompub-Capsule header (the request's sender
// writes it) parses to the four members the gate compares entries
// against, each non-empty, or is refused with ErrInvalidCapsule, without
// a panic.
func FuzzParseCapsule(f *testing.F) {
	f.Add([]byte(`{"run_id":"r","capsule_id":"c","harness_version":"1","task_family":"t"}`))
	f.Add([]byte(`{"run_id":"r","run_id":"s","capsule_id":"c","harness_version":"1","task_family":"t"}`))
	f.Add([]byte(`{"run_id":1}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := events.ParseCapsule(raw)
		if err != nil {
			if !errors.Is(err, events.ErrInvalidCapsule) {
				t.Fatalf("ParseCapsule(%q): %v does not wrap ErrInvalidCapsule", raw, err)
			}
			return
		}
		if m.RunID == "" || m.CapsuleID == "" || m.HarnessVersion == "" || m.TaskFamily == "" {
			t.Fatalf("ParseCapsule(%q) = %+v", raw, m)
		}
	})
}
