package main

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/reader"
)

// offlineProof returns the proof document of leaf 2 of a room of 5
// messages whose checkpoint pub signed under the room's origin in the
// deployment example.org/roompub, as prove prints it.
func offlineProof(t *testing.T, pub *events.HostKey) string {
	t.Helper()
	const subject = "roompub.cli.journal.x"
	tree := checkpoint.NewTree()
	var content [][32]byte
	for i := range 5 {
		c := checkpoint.ContentHash([]byte{byte(i)})
		content = append(content, c)
		tree.Append(checkpoint.LeafHash(cliRoom, subject, c))
	}
	origin := checkpoint.RoomOrigin("example.org/roompub", cliRoom)
	s, err := checkpoint.NewNamedNoteSigner(pub, origin)
	if err != nil {
		t.Fatal(err)
	}
	note, err := checkpoint.Sign(s, origin, 5, tree.Root())
	if err != nil {
		t.Fatal(err)
	}
	path, err := tree.InclusionProof(2, 5)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(&checkpoint.Proof{Room: cliRoom, Subject: subject, StreamSeq: 3, ContentHash: content[2], LeafIndex: 2,
		LeafHash: checkpoint.LeafHash(cliRoom, subject, content[2]), TreeSize: 5, Path: path, Checkpoint: string(note)})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestVerifyProofRefusals: every refusal names its code (events.Code) and
// one reason, in text and in --json, and the document is read strictly.
func TestVerifyProofRefusals(t *testing.T) {
	pub, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	good := offlineProof(t, pub)
	origin := checkpoint.RoomOrigin("example.org/roompub", cliRoom)
	// A member put first, ahead of the document's own members.
	first := func(member string) string { return "{" + member + "," + good[1:] }
	otherRoom := strings.Replace(good, `"room":"room:cli"`, `"room":"room:other"`, 1)
	if otherRoom == good {
		t.Fatalf("the fixture does not name %s: %s", cliRoom, good)
	}
	for _, c := range []struct {
		name, doc string
		json      bool
		status    int
		// out holds substrings of stdout, in order; without JSON the
		// first is its start.
		out []string
		// not must not be in stdout.
		not string
	}{
		{"valid", good, false, config.ExitOK, []string{"valid: room:cli (roompub.cli.journal.x) is leaf 2 of the checkpoint of size 5"}, "invalid"},
		{"valid, JSON", good, true, config.ExitOK, []string{`{"valid":true,"room":"room:cli","subject":"roompub.cli.journal.x","reported_stream_seq":3,"leaf_index":2,"tree_size":5,`}, `"code"`},
		// Duplicate names: the last one would win in encoding/json.
		{"duplicate room", first(`"room":"room:a"`), false, config.ExitRefused,
			[]string{"invalid: malformed_json: not a proof document: not strict JSON: Duplicate key: \"room\"\n"}, ""},
		{"duplicate room, escaped", first(`"r\u006fom":"room:a"`), false, config.ExitRefused,
			[]string{"invalid: malformed_json: not a proof document: not strict JSON: Duplicate key: \"room\"\n"}, ""},
		{"duplicate room, JSON", first(`"room":"room:a"`), true, config.ExitRefused,
			[]string{`{"valid":false,"code":"malformed_json","reason":"not a proof document: not strict JSON: Duplicate key: \"room\""}` + "\n"}, ""},
		// encoding/json matches member names regardless of case.
		{"a second spelling of room", strings.Replace(otherRoom, `"tree_size"`, `"Room":"room:cli","tree_size"`, 1), false, config.ExitRefused,
			[]string{"invalid: schema_invalid: not a proof document: unknown member \"Room\"\n"}, ""},
		{"unknown member", first(`"extra":1`), false, config.ExitRefused,
			[]string{"invalid: schema_invalid: not a proof document: unknown member \"extra\"\n"}, ""},
		{"another room", otherRoom, false, config.ExitRefused,
			[]string{fmt.Sprintf("invalid: checkpoint_mismatch: bad checkpoint: origin %q is of room %q, not %q\n", origin, cliRoom, "room:other")}, "untrusted"},
		{"another room, JSON", otherRoom, true, config.ExitRefused,
			[]string{fmt.Sprintf(`{"valid":false,"code":"checkpoint_mismatch","reason":%s,"leaf_index":2}`, jsonString(t, fmt.Sprintf("bad checkpoint: origin %q is of room %q, not %q", origin, cliRoom, "room:other"))) + "\n"}, ""},
		{"another leaf, JSON", strings.Replace(good, `"leaf_index":2`, `"leaf_index":3`, 1), true, config.ExitRefused,
			[]string{`{"valid":false,"code":"checkpoint_mismatch","reason":"proof does not verify: inclusion of leaf 3 at size 5`, `"leaf_index":3}` + "\n"}, ""},
		{"not JSON", "{", false, config.ExitRefused,
			[]string{"invalid: malformed_json: not a proof document: unexpected end of JSON input\n"}, "does not verify"},
		{"not JSON, JSON", "{", true, config.ExitRefused,
			[]string{`{"valid":false,"code":"malformed_json","reason":"not a proof document: unexpected end of JSON input"}` + "\n"}, "leaf_index"},
		{"a journal", "{\"seq\":0}\n{\"seq\":1}\n", false, config.ExitRefused,
			[]string{"invalid: malformed_json: not a proof document: "}, "does not verify"},
		{"empty", "", false, config.ExitRefused,
			[]string{"invalid: empty_input: not a proof document: "}, "does not verify"},
		{"missing member", strings.Replace(good, `"subject"`, `"subjekt"`, 1), false, config.ExitRefused,
			[]string{"invalid: schema_invalid: not a proof document: unknown member \"subjekt\"\n"}, "does not verify"},
		// Strict JSON of another form: no proof, and nothing a publisher
		// signed or did not sign.
		{"null", "null", false, config.ExitRefused,
			[]string{"invalid: schema_invalid: not a proof document: "}, "does not verify"},
		{"an array, JSON", "[" + good + "]", true, config.ExitRefused,
			[]string{`{"valid":false,"code":"schema_invalid","reason":"not a proof document: `}, "leaf_index"},
		{"a hash out of its form", strings.Replace(good, `"proof":["`, `"proof":["zz`, 1), false, config.ExitRefused,
			[]string{"invalid: schema_invalid: not a proof document: "}, "does not verify"},
		{"larger than a bundle", good + strings.Repeat(" ", reader.MaxEvidenceBytes), false, config.ExitRefused,
			[]string{fmt.Sprintf("invalid: too_large: not a proof document: more than %d bytes, the most an evidence bundle holds (a proof: 1048576)\n", reader.MaxEvidenceBytes)}, "does not verify"},
		{"too large", good + strings.Repeat(" ", 1<<20), false, config.ExitRefused,
			[]string{"invalid: too_large: not a proof document: more than 1048576 bytes\n"}, "does not verify"},
	} {
		args := []string{"verify-proof", "--trusted-publisher", pub.NodeID(), "-"}
		if c.json {
			args = append(args, "--json")
		}
		status, out, errOut := invoke(t, c.doc, args...)
		rest, ok := out, status == c.status && (c.json || strings.HasPrefix(out, c.out[0]))
		for _, want := range c.out {
			i := strings.Index(rest, want)
			ok = ok && i >= 0
			if i >= 0 {
				rest = rest[i+len(want):]
			}
		}
		if !ok || c.not != "" && strings.Contains(out, c.not) {
			t.Errorf("%s: status %d (want %d)\nstdout %q\nwant   %q (not %q)\nstderr %s", c.name, status, c.status, out, c.out, c.not, errOut)
		}
	}
}

// jsonString is s as a JSON string, as encoding/json writes it.
func jsonString(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestVerifyProofPinsOrigin: --origin pins the deployment for a plain
// proof as for every reader: a proof whose checkpoint the trusted key
// signed in the deployment example.org/roompub is refused under another
// --origin (a staging proof shown to a verifier of production, one key
// for both) and valid under its own, which the verdict names.
func TestVerifyProofPinsOrigin(t *testing.T) {
	pub, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	doc := offlineProof(t, pub)
	origin := checkpoint.RoomOrigin("example.org/roompub", cliRoom)
	for _, c := range []struct {
		name   string
		args   []string
		status int
		out    string
	}{
		{"another deployment", []string{"--origin", "prod.example.net/roompub"}, config.ExitRefused,
			`invalid: checkpoint_mismatch: bad checkpoint: origin "` + origin + `" is of deployment "example.org/roompub", not "prod.example.net/roompub"` + "\n"},
		{"its deployment", []string{"--origin", "example.org/roompub"}, config.ExitOK,
			"is leaf 2 of the checkpoint of size 5 (origin " + origin + ") signed by " + pub.NodeID()},
		{"its deployment, JSON", []string{"--origin", "example.org/roompub", "--json"}, config.ExitOK,
			`"signer":"` + pub.NodeID() + `","origin":"` + origin + `"}`},
		{"no origin pinned", nil, config.ExitOK, "(origin " + origin + ")"},
	} {
		args := append([]string{"verify-proof", "--trusted-publisher", pub.NodeID()}, c.args...)
		status, out, errOut := invoke(t, doc, append(args, "-")...)
		if status != c.status || !strings.Contains(out, c.out) {
			t.Errorf("%s: status %d (want %d), stdout %q (want it to hold %q), stderr %q", c.name, status, c.status, out, c.out, errOut)
		}
	}
}
