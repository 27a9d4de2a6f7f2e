package reader_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/client"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/reader"
)

// The conformance suite: one suite for the chain rules, run against the
// offline verifier, the publisher's gate and the subscriber, so the three
// cannot disagree. Its rows for the trust rules (attestations and
// checkpoints), which the checkpointer sees too and the offline verifier
// does not, are in conformance_trust_test.go.
// Every case is a journal (its lines) or one execution record, with the
// verdict: ok, or the code of the first refused line and that line. The
// three must agree; where they differ by design the table says so, case by
// case, with the reason.

// verdict is ok (Code "") or the first refusal's code and 1-based line (1
// for a record).
type verdict struct {
	Code events.Code
	Line int
}

func (v verdict) String() string {
	if v.Code == "" {
		return "ok"
	}
	return fmt.Sprintf("%s at line %d", v.Code, v.Line)
}

var accepted = verdict{}

func refusedAt(code events.Code, line int) verdict { return verdict{Code: code, Line: line} }

type confCase struct {
	name   string
	lines  [][]byte // a journal's lines, without "\n"
	record []byte   // or one execution record
	roomID string   // records: the room whose record subject the subscriber's copy is written on

	want verdict // the offline verifier's verdict, and the others' unless set below
	// gate and reader, when set, are where the gate or the subscriber
	// differ from the offline verifier by design; each case says why.
	gate, reader *verdict
	// readerAll lists every message the subscriber sets aside, as
	// "line:code" (journals only): the chain is broken from its first
	// failure and later entries are chain_broken.
	readerAll string
	// problems, for records, is every problem's code, the same from all three.
	problems []events.Code
}

func (c confCase) gateWant() verdict {
	if c.gate != nil {
		return *c.gate
	}
	return c.want
}

func (c confCase) readerWant() verdict {
	if c.reader != nil {
		return *c.reader
	}
	return c.want
}

// brokenFrom is the subscriber's list for a chain of n lines broken at
// line k with code.
func brokenFrom(k, n int, code events.Code) string {
	parts := []string{fmt.Sprintf("%d:%s", k, code)}
	for l := k + 1; l <= n; l++ {
		parts = append(parts, fmt.Sprintf("%d:%s", l, events.ChainBroken))
	}
	return strings.Join(parts, " ")
}

func canon(es ...*events.Entry) [][]byte {
	out := make([][]byte, len(es))
	for i, e := range es {
		out[i] = e.Canonical()
	}
	return out
}

// edited returns rec's members, changed by edit after signing, as JSON.
func edited(t testing.TB, rec *events.Record, edit func(m, sig map[string]any)) []byte {
	t.Helper()
	m := map[string]any{}
	for k, v := range rec.Object() {
		m[k] = v
	}
	sig := map[string]any{}
	for k, v := range rec.Object()["signature"].(map[string]any) {
		sig[k] = v
	}
	m["signature"] = sig
	edit(m, sig)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out, err := events.Canonicalize(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func conformanceCases(t *testing.T, key *events.HostKey) []confCase {
	const n = 6
	var cases []confCase
	// Each journal case has its own chain (run conf-<i>), so the gate sees
	// every one afresh.
	chain := func() []*events.Entry {
		es, _ := roomtest.Journal(t, fmt.Sprintf("conf-%d", len(cases)), "cap", n)
		return es
	}
	add := func(c confCase) { cases = append(cases, c) }
	var es []*events.Entry

	es = chain()
	add(confCase{name: "valid chain", lines: canon(es...), want: accepted})

	es = chain()
	add(confCase{name: "invalid_entry: payload changed after hashing",
		lines: append(canon(es[:2]...), append([][]byte{roomtest.Tampered(t, es[2])}, canon(es[3:]...)...)...),
		want:  refusedAt(events.InvalidEntry, 3), readerAll: brokenFrom(3, n, events.InvalidEntry)})

	es = chain()
	secret := roomtest.Rebuilt(t, es[2], map[string]any{"payload": map[string]any{"tool": "AKIAABCDEFGHIJKLMNOP", "status": "ok"}})
	add(confCase{name: "invalid_entry: secret canary",
		lines: append(canon(es[:2]...), append([][]byte{secret.Canonical()}, canon(es[3:]...)...)...),
		want:  refusedAt(events.InvalidEntry, 3), readerAll: brokenFrom(3, n, events.InvalidEntry)})

	// A negative seq claims no chain position: a reader refuses it by the
	// entry rules, as the others do, not as a fork of an earlier one.
	es = chain()
	negative := roomtest.Rebuilt(t, es[2], map[string]any{"seq": -1})
	add(confCase{name: "invalid_entry: a negative seq",
		lines: append(canon(es[:2]...), append([][]byte{negative.Canonical()}, canon(es[3:]...)...)...),
		want:  refusedAt(events.InvalidEntry, 3), readerAll: brokenFrom(3, n, events.InvalidEntry)})

	// A position out of order: the offline verifier and the gate decide a
	// line against the one before it (reordered); in the stream a reader
	// sees that the chain's next position is missing (gap).
	es = chain()
	add(confCase{name: "reordered: lines 3 and 4 swapped",
		lines: canon(es[0], es[1], es[3], es[2], es[4], es[5]),
		want:  refusedAt(events.Reordered, 3), reader: &verdict{events.Gap, 3}, readerAll: brokenFrom(3, n, events.Gap)})

	es = chain()
	add(confCase{name: "reordered: line 3 missing",
		lines: canon(es[0], es[1], es[3], es[4], es[5]),
		want:  refusedAt(events.Reordered, 3), reader: &verdict{events.Gap, 3}, readerAll: brokenFrom(3, n-1, events.Gap)})

	// A second, different entry for a position already taken: the offline
	// verifier reads one file and sees a position out of order; the gate
	// and a reader know the position is held (fork).
	es = chain()
	add(confCase{name: "fork: another entry at position 1",
		lines: append(canon(es[:3]...), roomtest.ForkOf(t, es[1]).Canonical(), es[3].Canonical(), es[4].Canonical()),
		want:  refusedAt(events.Reordered, 4), gate: &verdict{events.Fork, 4}, reader: &verdict{events.Fork, 4}, readerAll: brokenFrom(4, n, events.Fork)})

	// The head sent again, byte for byte: the offline verifier refuses the
	// file (position out of order); the gate takes it as a resend of what
	// is stored (duplicate, success, nothing stored) and goes on; a reader
	// that finds the copy in the stream sets it aside (replayed) without
	// breaking the chain.
	es = chain()
	add(confCase{name: "the head again",
		lines: canon(es[0], es[1], es[2], es[2], es[3], es[4]),
		want:  refusedAt(events.Reordered, 4), gate: &accepted, reader: &verdict{events.Replayed, 4}, readerAll: "4:replayed"})

	// An older entry sent again, byte for byte: the gate takes it as a
	// resend (duplicate) as above; a reader keeps only the chain's head
	// (its state is per chain, not per entry), so it cannot tell the copy
	// from another entry at a held position and reports a fork, which
	// breaks the chain. A known limit of the bounded reader, not a rule.
	es = chain()
	add(confCase{name: "an older entry again",
		lines: canon(es[0], es[1], es[2], es[1], es[3], es[4]),
		want:  refusedAt(events.Reordered, 4), gate: &accepted, reader: &verdict{events.Fork, 4}, readerAll: brokenFrom(4, n, events.Fork)})

	es = chain()
	link := roomtest.Rebuilt(t, es[2], map[string]any{"parent_hash": strings.Repeat("ab", 32)})
	add(confCase{name: "broken_link",
		lines: append(canon(es[:2]...), append([][]byte{link.Canonical()}, canon(es[3:]...)...)...),
		want:  refusedAt(events.BrokenLink, 3), readerAll: brokenFrom(3, n, events.BrokenLink)})

	es = chain()
	spaced := roomtest.ReplaceOnce(t, bytes.Clone(es[2].Canonical()), `{"`, `{ "`)
	add(confCase{name: "non_canonical: extra space",
		lines: append(canon(es[:2]...), append([][]byte{spaced}, canon(es[3:]...)...)...),
		want:  refusedAt(events.NonCanonical, 3), readerAll: brokenFrom(3, n, events.NonCanonical)})

	es = chain()
	notUTF8 := roomtest.ReplaceOnce(t, bytes.Clone(es[2].Canonical()), `"bash"`, "\"ba\xffh\"")
	add(confCase{name: "non_canonical: invalid UTF-8",
		lines: append(canon(es[:2]...), append([][]byte{notUTF8}, canon(es[3:]...)...)...),
		want:  refusedAt(events.NonCanonical, 3), readerAll: brokenFrom(3, n, events.NonCanonical)})

	es = chain()
	add(confCase{name: "non_canonical: invalid UTF-8 in the first line",
		lines: append([][]byte{roomtest.ReplaceOnce(t, bytes.Clone(es[0].Canonical()), `"bash"`, "\"ba\xffh\"")}, canon(es[1:]...)...),
		want:  refusedAt(events.NonCanonical, 1), readerAll: brokenFrom(1, n, events.NonCanonical)})

	es = chain()
	add(confCase{name: "corrupt_entry",
		lines: append(canon(es[:2]...), append([][]byte{[]byte(`{"seq":2,"run_id":`)}, canon(es[3:]...)...)...),
		want:  refusedAt(events.CorruptEntry, 3), readerAll: brokenFrom(3, n, events.CorruptEntry)})

	// JSON, but not an object: not an envelope (the upstream: "envelope
	// must be a plain data object").
	es = chain()
	add(confCase{name: "invalid_entry: JSON but not an object",
		lines: append(canon(es[:2]...), append([][]byte{[]byte(`[]`)}, canon(es[3:]...)...)...),
		want:  refusedAt(events.InvalidEntry, 3), readerAll: brokenFrom(3, n, events.InvalidEntry)})

	// Lone surrogates, as the upstream's JSON.stringify writes them.
	es = chain()
	add(confCase{name: "lone surrogates", lines: withLoneSurrogates(t, es), want: accepted})

	es = chain()
	upper := withLoneSurrogates(t, es)
	upper[2] = roomtest.ReplaceOnce(t, upper[2], `\udbff\udbff`, `\uDBFF\udbff`)
	add(confCase{name: "non_canonical: a lone surrogate in upper-case hex", lines: upper,
		want: refusedAt(events.NonCanonical, 3), readerAll: brokenFrom(3, n, events.NonCanonical)})

	es = chain()
	add(confCase{name: "corrupt_entry in the first line",
		lines: append([][]byte{[]byte(`not json`)}, canon(es[1:]...)...),
		want:  refusedAt(events.CorruptEntry, 1), readerAll: brokenFrom(1, n, events.CorruptEntry)})

	// The file verdict checks metadata after the whole chain, as upstream
	// (docs/upstream.md, "Check order"): the rebuilt line 3 has a new
	// entry_hash, so line 4's broken link comes first there; the gate and
	// the readers refuse line 3 itself, the first line they cannot take.
	es = chain()
	hv := roomtest.Rebuilt(t, es[2], map[string]any{"harness_version": "test/2"})
	add(confCase{name: "metadata_mismatch: harness_version",
		lines: append(canon(es[:2]...), append([][]byte{hv.Canonical()}, canon(es[3:]...)...)...),
		want:  refusedAt(events.BrokenLink, 4), gate: ptrTo(refusedAt(events.MetadataMismatch, 3)),
		reader: ptrTo(refusedAt(events.MetadataMismatch, 3)), readerAll: brokenFrom(3, n, events.MetadataMismatch)})

	// An entry of another capsule in the chain: in a file or a request it
	// differs from the chain's metadata; in the stream the subject names
	// the chain, and an entry naming another capsule is on the wrong
	// subject (wrong_room): it is set aside without touching the chain,
	// whose next entry then finds its position missing.
	es = chain()
	other := roomtest.Rebuilt(t, es[2], map[string]any{"capsule_id": "cap-other"})
	add(confCase{name: "metadata_mismatch: capsule_id",
		lines: append(canon(es[:2]...), append([][]byte{other.Canonical()}, canon(es[3:]...)...)...),
		want:  refusedAt(events.BrokenLink, 4), gate: ptrTo(refusedAt(events.MetadataMismatch, 3)), reader: &verdict{events.WrongRoom, 3},
		readerAll: "3:wrong_room " + brokenFrom(4, n, events.Gap)})

	// Records: the room is the record's own; one line.
	rec := func(name string, changes map[string]any) *events.Record {
		return roomtest.RecordIn(t, key, "room:conf-"+name, name, changes)
	}
	one := func(codes ...events.Code) verdict {
		if len(codes) == 0 {
			return accepted
		}
		return refusedAt(codes[0], 1)
	}
	record := func(name string, raw []byte, roomID string, codes ...events.Code) {
		add(confCase{name: "record: " + name, record: raw, roomID: roomID, want: one(codes...), problems: codes})
	}
	record("valid", rec("valid", nil).Canonical(), "room:conf-valid")
	record("malformed_json", []byte(`{"schema/v":1,"room/id":"room:conf-malformed","schema/v":1}`), "room:conf-malformed", events.MalformedJSON)
	record("schema_invalid", rec("schema", map[string]any{"recorded-at": "yesterday"}).Canonical(), "room:conf-schema", events.SchemaInvalid)
	record("ref_mismatch", edited(t, rec("ref", nil), func(m, _ map[string]any) {
		m["execution/ref"] = "corpus-task-pack-execution:sha256:" + strings.Repeat("A", 43)
	}), "room:conf-ref", events.RefMismatch, events.SignatureInvalid)
	record("digest_mismatch", rec("digest", map[string]any{"proposal/digest": "sha256:" + strings.Repeat("B", 43)}).Canonical(),
		"room:conf-digest", events.DigestMismatch)
	record("host_mismatch", edited(t, rec("host", nil), func(_, sig map[string]any) {
		sig["key/public"] = roomtest.NewHostKey(t).DIDKey()
	}), "room:conf-host", events.HostMismatch, events.SignatureInvalid)
	record("signature_invalid", edited(t, rec("sig", nil), func(_, sig map[string]any) {
		v := sig["value"].(string)
		if v[0] == 'A' {
			sig["value"] = "B" + v[1:]
		} else {
			sig["value"] = "A" + v[1:]
		}
	}), "room:conf-sig", events.SignatureInvalid)
	record("foreign_evidence", rec("foreign", map[string]any{"evidence": roomtest.EvidenceOn("environment:qmail-00", 1)}).Canonical(),
		"room:conf-foreign", events.ForeignEvidence)
	record("foreign_evidence: the reference foreign-evidence.json", roomtest.ReferenceBytes(t, "foreign-evidence.json"), roomtest.RefRoom, events.ForeignEvidence)
	record("untrusted_host", roomtest.RecordIn(t, roomtest.NewHostKey(t), "room:conf-untrusted", "untrusted", nil).Canonical(), "room:conf-untrusted", events.UntrustedHost)
	return cases
}

func problemCodes(ps []events.Problem) []events.Code {
	out := make([]events.Code, len(ps))
	for i, p := range ps {
		out[i] = p.Code
	}
	return out
}

// TestConformance runs every case through the offline verifier (the
// Validator and VerifyPath, what `publisher verify` runs), the gate (the
// ingest service, with client.Client) and the subscriber (the lines written
// straight into a second stream, then reader.Audit).
func TestConformance(t *testing.T) {
	e := roomtest.NewEnv(t)
	cl := client.New(e.Nc, client.Options{})
	rawSubj := room.Subjects{Prefix: "raw"}
	if _, err := room.EnsureStream(context.Background(), e.Js, room.StreamConfig("RAW", rawSubj, 1), rawSubj); err != nil {
		t.Fatal(err)
	}
	for i, c := range conformanceCases(t, e.Key) {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			var body []byte
			var offline, byPath, byGate, byReader verdict
			var offlineProblems, gateProblems, readerProblems []events.Code
			subject := rawSubj.Records(c.roomID)
			if c.record == nil {
				body = append(bytes.Join(c.lines, []byte("\n")), '\n')
			}

			// (a) the offline verifier.
			var err error
			path := filepath.Join(dir, "journal.ndjson")
			if c.record != nil {
				_, err = e.V.Record(c.record, events.Location{})
				path = filepath.Join(dir, "record.json")
				if werr := os.WriteFile(path, c.record, 0o644); werr != nil {
					t.Fatal(werr)
				}
			} else {
				_, err = e.V.Journal(bytes.NewReader(body), "journal.ndjson", nil)
				if werr := os.WriteFile(path, body, 0o644); werr != nil {
					t.Fatal(werr)
				}
			}
			if err != nil {
				var ref *events.Refusal
				if !errors.As(err, &ref) {
					t.Fatal(err)
				}
				offline = refusedAt(ref.Code, max(ref.At.Line, 1))
				offlineProblems = problemCodes(ref.Problems)
			}
			rep, err := e.V.VerifyPath(path)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK {
				byPath = refusedAt(rep.Refusal.Code, max(rep.Refusal.At.Line, 1))
				if rep.Refusal.At.File != path {
					t.Errorf("verify: refusal located in %q", rep.Refusal.At.File)
				}
			}

			// (b) the gate, through the ingest service.
			if c.record != nil {
				r, err := cl.AppendRecord(ctx, c.record)
				if err != nil {
					t.Fatal(err)
				}
				switch r.Item.Outcome {
				case room.OutcomeRefused:
					byGate = refusedAt(r.Item.Code, 1)
					gateProblems = problemCodes(r.Item.Problems)
				case room.OutcomeStored:
				default:
					t.Fatalf("gate: %+v", r.Item)
				}
			} else {
				r, err := cl.AppendJournal(ctx, fmt.Sprintf("room:conf-%d", i), nil, body)
				if err != nil {
					t.Fatal(err)
				}
				refused := -1
				for j, it := range r.Items {
					switch {
					case refused >= 0 && it.Outcome != room.OutcomeSkipped,
						refused < 0 && it.Outcome != room.OutcomeStored && it.Outcome != room.OutcomeDuplicate && it.Outcome != room.OutcomeRefused:
						t.Errorf("gate: item %d after refused line %d: %+v", j, refused+1, it)
					case refused < 0 && it.Outcome == room.OutcomeRefused:
						refused = j
						byGate = refusedAt(it.Code, it.Index+1)
						if it.At == nil || it.At.Line != it.Index+1 || it.Index != j {
							t.Errorf("gate: refused item %d located at %+v", j, it.At)
						}
					}
				}
				if len(r.Items) != len(c.lines) {
					t.Errorf("gate: %d items for %d lines", len(r.Items), len(c.lines))
				}
			}

			// (c) the subscriber: the same bytes straight into the stream.
			lineOf := map[uint64]int{}
			roomID := c.roomID
			if c.record != nil {
				lineOf[roomtest.PublishRaw(t, e.Js, subject, c.record)] = 1
			} else {
				roomID = fmt.Sprintf("room:conf-%d", i)
				subject = rawSubj.Journal(roomID, events.ChainKey{RunID: fmt.Sprintf("conf-%d", i), CapsuleID: "cap"})
				for j, l := range c.lines {
					lineOf[roomtest.PublishRaw(t, e.Js, subject, l)] = j + 1
				}
			}
			audit, err := reader.Audit(ctx, e.Js, reader.AuditOptions{Stream: "RAW", Subjects: rawSubj, Rooms: []string{roomID}, Validator: e.V})
			if err != nil {
				t.Fatal(err)
			}
			if audit.Totals.Messages != uint64(len(lineOf)) {
				t.Fatalf("subscriber read %d messages, %d written", audit.Totals.Messages, len(lineOf))
			}
			var all []string
			for j, v := range audit.Violations {
				if v.Subject != subject {
					t.Errorf("subscriber: set aside on %s, written on %s", v.Subject, subject)
				}
				if j == 0 {
					byReader = refusedAt(v.Code, lineOf[v.Seq])
					readerProblems = problemCodes(v.Problems)
				}
				all = append(all, fmt.Sprintf("%d:%s", lineOf[v.Seq], v.Code))
			}

			for _, g := range []struct {
				who       string
				got, want verdict
			}{
				{"offline verifier (Validator)", offline, c.want},
				{"offline verifier (VerifyPath, publisher verify)", byPath, c.want},
				{"gate (ingest service)", byGate, c.gateWant()},
				{"subscriber (Audit)", byReader, c.readerWant()},
			} {
				if g.got != g.want {
					t.Errorf("%s: %s, want %s", g.who, g.got, g.want)
				}
			}
			if c.record != nil {
				for who, ps := range map[string][]events.Code{"offline verifier": offlineProblems, "gate": gateProblems, "subscriber": readerProblems} {
					if !slices.Equal(ps, c.problems) {
						t.Errorf("%s: problems %v, want %v", who, ps, c.problems)
					}
				}
			} else if got := strings.Join(all, " "); got != c.readerAll {
				t.Errorf("subscriber set aside %q, want %q", got, c.readerAll)
			}
			if (c.readerWant() == accepted) != audit.Clean() {
				t.Errorf("subscriber: audit clean %v for %s", audit.Clean(), c.readerWant())
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }
