package validate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/schemas"
	"github.com/roompub/roompub/validate"
)

// canaries are strings each of the upstream's nine secret patterns matches
// (reference/capsule-journals/README.md), by the canary's upstream name and
// what it finds. They are assembled at run time from harmless pieces, so
// this file holds no literal that a secret scanner would flag.
func canaries() []struct{ upstream, name, value string } {
	j := strings.Join
	r := strings.Repeat
	return []struct{ upstream, name, value string }{
		{"private_key_block", "a PEM private key block", j([]string{"-----", "BEGIN ", "EC ", "PRIVATE", " KEY", "-----"}, "") + "\nMHcCAQEE"},
		{"aws_access_key", "an AWS access key id", "key " + j([]string{"AK", "IA"}, "") + r("Z3", 8)},
		{"openai_style_key", "an sk- API key", "use " + j([]string{"s", "k", "-"}, "") + r("aB3_", 6)},
		{"github_token", "a GitHub token", j([]string{"g", "h", "p", "_"}, "") + r("x9Y", 12)},
		{"slack_token", "a Slack token", j([]string{"xo", "xb", "-"}, "") + "1234-5678-" + r("q", 10)},
		{"stripe_key", "a Stripe key", j([]string{"r", "k_", "li", "ve_"}, "") + r("Q7", 10)},
		{"bearer_header", "a Bearer header", "Authorization: " + j([]string{"Bear", "er"}, "") + " " + r("t0k.", 6)},
		{"jwt", "a JWT", j([]string{"ey", "J"}, "") + "hbGciOiJub25lIn0." + j([]string{"ey", "J"}, "") + "zdWIiOiIxIn0." + r("c2ln", 4)},
		// Upstream's \b wants the keyword to start a word, which in DB_PASSWORD it does not.
		{"env_assignment", "a credential assignment", "export " + j([]string{"PASS", "WORD"}, "") + " = '" + r("hunter2", 2) + "'"},
	}
}

func TestSecretCanaries(t *testing.T) {
	v := newValidator(t)
	cs := canaries()
	if len(cs) != 9 {
		t.Fatalf("%d canaries, want the upstream's 9", len(cs))
	}
	for _, c := range cs {
		t.Run(c.name, func(t *testing.T) {
			lines := chainLines(t, 1, func(_ int, m map[string]any) { payload(m)["message"] = c.value })
			_, err := v.Journal(bytes.NewReader(journalBytes(lines...)), "j", nil)
			ref := expectRefusal(t, err, want{events.InvalidEntry, 1, "/payload/message"})
			if wantReason := "secret canary " + c.upstream + " (" + c.name + "): "; !strings.HasPrefix(ref.Reason, wantReason) {
				t.Errorf("reason %q does not start %q", ref.Reason, wantReason)
			}
			js, err := json.Marshal(ref)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{ref.Reason, ref.Error(), ref.Expected, ref.Actual, string(js)} {
				for _, part := range []string{c.value, strings.Fields(c.value)[len(strings.Fields(c.value))-1]} {
					if strings.Contains(s, part) {
						t.Errorf("refusal repeats the secret %q: %s", part, s)
					}
				}
			}
		})
	}
	t.Run("the shortest a canary matches", func(t *testing.T) {
		// 14 bytes (canaryMinBytes), read through the fast path.
		s := strings.Join([]string{"TO", "KEN="}, "") + "abcdefgh"
		lines := chainLines(t, 1, func(_ int, m map[string]any) { payload(m)["note"] = s })
		_, err := v.Journal(bytes.NewReader(journalBytes(lines...)), "j", nil)
		expectRefusal(t, err, want{events.InvalidEntry, 1, "/payload/note"})
	})
	t.Run("in any payload key, even one not allowlisted", func(t *testing.T) {
		lines := chainLines(t, 1, func(_ int, m map[string]any) { payload(m)["zz_extra"] = cs[3].value })
		_, err := v.Journal(bytes.NewReader(journalBytes(lines...)), "j", nil)
		expectRefusal(t, err, want{events.InvalidEntry, 1, "/payload"}, want{events.InvalidEntry, 1, "/payload/zz_extra"})
	})
	t.Run("near misses are accepted", func(t *testing.T) {
		for _, s := range []string{
			"sk-short", "AKIA lower", "Bearer short", "password = short", "eyJonly.two", "ghp_short",
			"BEGIN PUBLIC KEY", "rk_live_short",
		} {
			lines := chainLines(t, 1, func(_ int, m map[string]any) { payload(m)["message"] = s })
			_, err := v.Journal(bytes.NewReader(journalBytes(lines...)), "j", nil)
			if err != nil {
				t.Errorf("%q refused: %v", s, err)
			}
		}
	})
}

func TestCheckEntryDirect(t *testing.T) {
	v := newValidator(t)
	e, err := events.NewEntry(entryMembers(0, events.ZeroHash))
	if err != nil {
		t.Fatal(err)
	}
	at := events.Location{File: "f", Line: 9, Seq: 4}
	if ps := v.CheckEntry(e, at); len(ps) != 0 {
		t.Fatalf("valid entry: %v", ps)
	}
	m := entryMembers(0, events.ZeroHash)
	m["effect_class"] = "SE9"
	payload(m)["note"] = false
	e, err = events.NewEntry(m)
	if err != nil {
		t.Fatal(err)
	}
	ps := v.CheckEntry(e, at)
	if len(ps) != 3 {
		t.Fatalf("%d problems, want 3: %v", len(ps), ps)
	}
	for i, wantPtr := range []string{"/effect_class", "/payload/note", "/payload/note"} {
		p := ps[i]
		if p.Code != events.InvalidEntry || p.At.File != "f" || p.At.Line != 9 || p.At.Seq != 4 || p.At.Pointer != wantPtr {
			t.Errorf("problem %d = %+v, want invalid_entry at f:9 seq 4 %s", i, p, wantPtr)
		}
	}
}

// TestWithSchemaFS validates against another envelope revision: the
// upstream's later allowlist with seven more payload keys.
func TestWithSchemaFS(t *testing.T) {
	fsys := fstest.MapFS{}
	for _, name := range []string{
		schemas.EnvelopeFile, schemas.RecordFile,
		"corpus-reasoning-experiment-proposal.v1.schema.json", "corpus-reasoning-experiment-proposal.v2.schema.json",
		"corpus-task-pack-candidate-adoption.v1.schema.json", "operator-task-common.v1.schema.json",
	} {
		data, err := schemasFile(name)
		if err != nil {
			t.Fatal(err)
		}
		fsys[name] = &fstest.MapFile{Data: data}
	}
	var env map[string]any
	if err := json.Unmarshal(fsys[schemas.EnvelopeFile].Data, &env); err != nil {
		t.Fatal(err)
	}
	props := env["properties"].(map[string]any)["payload"].(map[string]any)["properties"].(map[string]any)
	props["event_id"] = map[string]any{"type": "string"}
	props["blocked"] = map[string]any{"type": "integer"}
	widened, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	fsys[schemas.EnvelopeFile] = &fstest.MapFile{Data: widened}

	lines := chainLines(t, 1, func(_ int, m map[string]any) {
		payload(m)["event_id"] = "ev-1"
		payload(m)["blocked"] = 0
	})
	_, err = newValidator(t).Journal(bytes.NewReader(journalBytes(lines...)), "j", nil)
	expectRefusal(t, err, want{events.InvalidEntry, 1, "/payload"})

	wide := newValidator(t, validate.WithSchemaFS(fsys))
	_, err = wide.Journal(bytes.NewReader(journalBytes(lines...)), "j", nil)
	expectRefusal(t, err)

	// A directory with only the envelope takes the record schemas from the
	// embedded set.
	only := fstest.MapFS{schemas.EnvelopeFile: fsys[schemas.EnvelopeFile]}
	partial := newValidator(t, validate.WithSchemaFS(only))
	if _, err := partial.Journal(bytes.NewReader(journalBytes(lines...)), "j", nil); err != nil {
		t.Fatalf("envelope-only schema dir: %v", err)
	}
	ref, err := os.ReadFile("../testdata/reference/execution-records/verified.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := partial.Record(ref, events.Location{}); err != nil {
		t.Fatalf("envelope-only schema dir, record: %v", err)
	}
	// A directory with neither root schema is an error, not a fallback.
	if _, err := validate.New(validate.WithSchemaFS(fstest.MapFS{"other.json": &fstest.MapFile{Data: []byte("{}")}})); !errors.Is(err, validate.ErrInvalidOption) {
		t.Fatalf("schema dir without a root schema: %v", err)
	}

	// The default-deny value rule holds whatever the schema allows.
	props["blob"] = map[string]any{}
	widened, _ = json.Marshal(env)
	fsys[schemas.EnvelopeFile] = &fstest.MapFile{Data: widened}
	lax := newValidator(t, validate.WithSchemaFS(fsys))
	lines = chainLines(t, 1, func(_ int, m map[string]any) { payload(m)["blob"] = map[string]any{"a": 1} })
	_, err = lax.Journal(bytes.NewReader(journalBytes(lines...)), "j", nil)
	expectRefusal(t, err, want{events.InvalidEntry, 1, "/payload/blob"})
}

func schemasFile(name string) ([]byte, error) {
	f, err := schemas.FS().Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(f)
	return b.Bytes(), err
}

// TestCapsuleCheckIsCheckEntry: the entry check of a capsule's journal,
// which checks capsule.json's run_id and capsule_id once, finds in every
// entry what CheckEntry finds, whether the entry's ids are capsule.json's
// or not, and whether those match their pattern or not; and so does
// jsonschema.
func TestCapsuleCheckIsCheckEntry(t *testing.T) {
	v := newValidator(t)
	ids := []string{"run-7", "cap-7", "-bad", "", "r", "x/y", strings.Repeat("a", 129), "cap-8"}
	for _, runID := range ids {
		for _, capsuleID := range ids {
			check := v.CapsuleCheck(events.CapsuleMeta{RunID: runID, CapsuleID: capsuleID, HarnessVersion: "test/1", TaskFamily: "slugify"})
			for _, line := range chainLines(t, len(ids), func(i int, m map[string]any) {
				m["run_id"], m["capsule_id"] = ids[i], ids[(i+3)%len(ids)]
				if i%2 == 0 {
					m["run_id"], m["capsule_id"] = runID, capsuleID
				}
			}) {
				e, err := events.ParseEntry(line)
				if err != nil {
					t.Fatal(err)
				}
				got := check(e, events.Location{})
				if want := v.CheckEntry(e, events.Location{}); !reflect.DeepEqual(got, want) {
					t.Fatalf("capsule %q/%q, entry %s: %v, CheckEntry %v", runID, capsuleID, line, got, want)
				}
				if want := v.CheckEntrySchema(e, events.Location{}); !reflect.DeepEqual(got, want) {
					t.Fatalf("capsule %q/%q, entry %s: %v, jsonschema %v", runID, capsuleID, line, got, want)
				}
			}
		}
	}
}
