package integration

// The store roompub v0.1.0 wrote (testdata/store-v0.1.0): every later
// build must serve it, audit it clean with the counts v0.1.0 reported, and
// extend its chains. The counts, heads and roots below are facts of that
// store, copied from its README; they are never recomputed here.

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	v010Dir = "testdata/store-v0.1.0"
	// The keys that wrote the store: the publisher's attests and signs the
	// checkpoints, the host's signed the records.
	v010Publisher = "node:did:key:z6MkfLAunqD4GFjoHddtZFb3Z81k754sksRd6E3YqcfNKzd5"
	v010Host      = "node:did:key:z6Mkeiz3T5HxhLSohWVSiiuK5jRj3QvRXKin11Qezi3huHF7"
	v010Alpha2    = "run-20260910-store-alpha-2/cap-alpha-2"
)

// v010Rooms is what `subscriber audit --json --room ROOM` reported for each
// room of the store when v0.1.0 wrote it (see storeSummary).
var v010Rooms = map[string]string{
	"room:store-alpha": `stream seq 1-103, attestations checked, trusting [` + v010Publisher + `]
totals: 45 messages, 42 entries, 1 records, 0 set aside, 2 chains ok, 0 broken, append-only true, 2 checkpoints; 0 violations
room messages: map[room:store-alpha:45]; records: map[room:store-alpha:1]
chain room:store-alpha run-20260910-store-alpha-1/cap-alpha-1: 12 entries, head 770694c017173759c771f3dde5081d36436332b7697a365d0a9249b73c3862b7, stream seq 1-12, ok
chain room:store-alpha run-20260910-store-alpha-2/cap-alpha-2: 30 entries, head a80225ec7c0059adf5d26830656b5b99df3070c6ac8bdf21446e48025558938a, stream seq 13-76, ok
checkpoints room:store-alpha: 2 verified, 0 refused; 43 admitted, 43 covered, tail 0; latest size 43, root d37c92d99dd12ee8c1368eee9b02381674f697f9f1199e1a5e92e6c38b23eb21, by ` + v010Publisher + `, stream seq 101
`,
	"room:store-beta": `stream seq 1-103, attestations checked, trusting [` + v010Publisher + `]
totals: 49 messages, 47 entries, 0 records, 0 set aside, 1 chains ok, 0 broken, append-only true, 2 checkpoints; 0 violations
room messages: map[room:store-beta:49]; records: map[]
chain room:store-beta run-20260910-store-beta-1/cap-beta-1: 47 entries, head bf1f58074c0e989237aea7435b7eaa5dea9474085f5ae112536dac8dc77cdc78, stream seq 33-98, ok
checkpoints room:store-beta: 2 verified, 0 refused; 47 admitted, 47 covered, tail 0; latest size 47, root 4b31826c427f3eff317402e21cb4b0324e1459385af7c5d50f517ed7d59eeb90, by ` + v010Publisher + `, stream seq 102
`,
	"room:store-gamma": `stream seq 1-103, attestations checked, trusting [` + v010Publisher + `]
totals: 9 messages, 5 entries, 2 records, 0 set aside, 1 chains ok, 0 broken, append-only true, 2 checkpoints; 0 violations
room messages: map[room:store-gamma:9]; records: map[room:store-gamma:2]
chain room:store-gamma run-20260910-store-gamma-1/cap-gamma-1: 5 entries, head 6bcf5c5c0533202c4d5a3551cb8c15d7f2fd8e042c3673d12407ef25c01b3c86, stream seq 58-62, ok
checkpoints room:store-gamma: 2 verified, 0 refused; 7 admitted, 7 covered, tail 0; latest size 7, root 522de50dd1f20f326b1e72af4557f07789b61c4603e8446690a0887f5a0cd965, by ` + v010Publisher + `, stream seq 103
`,
}

// storeAudit is the part of `subscriber audit --json` that storeSummary
// prints.
type storeAudit struct {
	FromSeq uint64 `json:"from_seq"`
	LastSeq uint64 `json:"last_seq"`
	Chains  []struct {
		Room  string `json:"room"`
		Chain struct {
			RunID     string `json:"run_id"`
			CapsuleID string `json:"capsule_id"`
		} `json:"chain"`
		Entries int64  `json:"entries"`
		Head    string `json:"head"`
		First   uint64 `json:"first_stream_seq"`
		Last    uint64 `json:"last_stream_seq"`
		Verdict string `json:"verdict"`
	} `json:"chains"`
	Records    map[string]int    `json:"records"`
	Violations []json.RawMessage `json:"violations"`
	Totals     struct {
		Messages     uint64 `json:"messages"`
		Entries      uint64 `json:"entries"`
		Records      uint64 `json:"records"`
		SetAside     uint64 `json:"set_aside"`
		ChainsOK     int    `json:"chains_ok"`
		ChainsBroken int    `json:"chains_broken"`
		AppendOnly   bool   `json:"stream_append_only"`
		Checkpoints  uint64 `json:"checkpoints"`
	} `json:"totals"`
	Attestation struct {
		Checked           bool     `json:"checked"`
		TrustedPublishers []string `json:"trusted_publishers"`
	} `json:"attestation"`
	Checkpoints []struct {
		Room     string  `json:"room"`
		Admitted uint64  `json:"admitted"`
		Verified uint64  `json:"checkpoints_verified"`
		Refused  uint64  `json:"checkpoints_refused"`
		Latest   *ckFact `json:"latest"`
		Covered  uint64  `json:"covered"`
		Tail     uint64  `json:"tail"`
	} `json:"checkpoints"`
	RoomMessages map[string]uint64 `json:"room_messages"`
	Empty        bool              `json:"empty"`
}

// storeSummary prints an audit report as v010Rooms holds it, so a
// difference shows as a line.
func storeSummary(r storeAudit) string {
	var b strings.Builder
	checked := "not checked"
	if r.Attestation.Checked {
		checked = "checked"
	}
	fmt.Fprintf(&b, "stream seq %d-%d, attestations %s, trusting %v\n", r.FromSeq, r.LastSeq, checked, r.Attestation.TrustedPublishers)
	tot := r.Totals
	fmt.Fprintf(&b, "totals: %d messages, %d entries, %d records, %d set aside, %d chains ok, %d broken, append-only %t, %d checkpoints; %d violations\n",
		tot.Messages, tot.Entries, tot.Records, tot.SetAside, tot.ChainsOK, tot.ChainsBroken, tot.AppendOnly, tot.Checkpoints, len(r.Violations))
	if r.Empty {
		b.WriteString("EMPTY\n")
	}
	fmt.Fprintf(&b, "room messages: %v; records: %v\n", r.RoomMessages, r.Records)
	for _, c := range r.Chains {
		fmt.Fprintf(&b, "chain %s %s/%s: %d entries, head %s, stream seq %d-%d, %s\n", c.Room, c.Chain.RunID, c.Chain.CapsuleID, c.Entries, c.Head, c.First, c.Last, c.Verdict)
	}
	for _, c := range r.Checkpoints {
		fmt.Fprintf(&b, "checkpoints %s: %d verified, %d refused; %d admitted, %d covered, tail %d", c.Room, c.Verified, c.Refused, c.Admitted, c.Covered, c.Tail)
		if c.Latest != nil {
			fmt.Fprintf(&b, "; latest size %d, root %s, by %s, stream seq %d", c.Latest.Size, c.Latest.Root, c.Latest.Signer, c.Latest.Seq)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// auditStoreRoom runs `subscriber audit --json --room roomID` trusting the
// store's keys, with a fresh state directory.
func auditStoreRoom(t *testing.T, url, roomID string) (storeAudit, result) {
	t.Helper()
	res := subRun(t, "audit", "--json", "--room", roomID, "--server", url, "--trusted-publisher", v010Publisher,
		"--trusted-host", v010Host, "--state-dir", t.TempDir())
	var rep storeAudit
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || strings.Count(res.stdout, "\n") != 1 {
		t.Fatalf("audit of %s: exit %d, not one JSON line: %v\n%s%s", roomID, res.status, err, res.stdout, res.stderr)
	}
	return rep, res
}

// copyTree copies the directory src to dst (files and directories only).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// storeCapsule writes a capsule directory of alpha-2: its capsule.json,
// the first n lines the store holds, then the lines of extra files under
// gate/.
func storeCapsule(t *testing.T, n int, extra ...string) string {
	t.Helper()
	src := filepath.Join(root, v010Dir, "capsules", "cap-alpha-2")
	dir := filepath.Join(t.TempDir(), "cap-alpha-2")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	meta, err := os.ReadFile(filepath.Join(src, "capsule.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "capsule.json"), meta, 0o644); err != nil {
		t.Fatal(err)
	}
	lines := fileLines(t, filepath.Join(src, "journal.ndjson"))
	if len(lines) != 30 {
		t.Fatalf("the store's cap-alpha-2 journal has %d lines, want 30", len(lines))
	}
	lines = lines[:n]
	for _, f := range extra {
		lines = append(lines, fileLines(t, filepath.Join(root, v010Dir, "gate", f))...)
	}
	if err := os.WriteFile(filepath.Join(dir, "journal.ndjson"), joinLines(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestStoreV010: a copy of the v0.1.0 store is served with its publisher
// key; every room audits CLEAN with exactly the counts, heads and
// checkpoints v0.1.0 reported; the gate refuses an entry that forks a
// stored chain (fork) and stores the one that continues it; a stored
// record is a duplicate at its v0.1.0 stream seq; the checkpoint written
// for the new entry extends the v0.1.0 ones.
func TestStoreV010(t *testing.T) {
	t.Parallel()
	store := filepath.Join(t.TempDir(), "store")
	copyTree(t, filepath.Join(root, v010Dir, "store"), store)
	// Checked out, the key file is open to others, which serve refuses.
	keyData, err := os.ReadFile(filepath.Join(root, v010Dir, "keys", "publisher-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "publisher-key.pem")
	if err := os.WriteFile(key, keyData, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, store, true, "--listen", "127.0.0.1:-1", "--store-dir", store, "--trusted-host", v010Host,
		"--publisher-key", key, "--checkpoint-interval", "200ms", "--http", "127.0.0.1:0")

	// The whole stream, as text, then each room.
	res := subRun(t, "audit", "--server", srv.url, "--trusted-publisher", v010Publisher, "--trusted-host", v010Host, "--state-dir", t.TempDir())
	const clean = "\nCLEAN: 103 messages, 94 entries and 3 records verified, 0 set aside; 4 chains ok, 0 broken; stream append-only: true\n"
	if res.status != 0 || !strings.HasSuffix(res.stdout, clean) {
		t.Errorf("audit of the store: exit %d, want 0 and a report ending in %q\n%s%s", res.status, clean, res.stdout, res.stderr)
	}
	for _, roomID := range []string{"room:store-alpha", "room:store-beta", "room:store-gamma"} {
		rep, res := auditStoreRoom(t, srv.url, roomID)
		if got := storeSummary(rep); res.status != 0 || got != v010Rooms[roomID] {
			t.Errorf("audit of %s: exit %d, want 0; report\n%s\nwant\n%s\nstderr: %s", roomID, res.status, got, v010Rooms[roomID], res.stderr)
		}
	}

	// Another entry at alpha-2's last stored position: the 29 lines before
	// it are duplicates, it is refused as a fork of the stored head.
	r := runPub(t, nil, "journal", "--json", "--server", srv.url, "--room", "room:store-alpha", storeCapsule(t, 29, "alpha-2-fork.ndjson"))
	l := oneShipLine(t, r)
	if r.status != 1 || l.OK || l.Stored != 0 || l.Duplicates != 29 || l.AlreadyStored != 0 || l.Refused == nil ||
		l.Refused.Code != "fork" || l.Refused.At.Line != 30 || l.Refused.At.Pointer != "/seq" ||
		l.Refused.Reason != "chain position 29 already holds a different entry" ||
		l.Head.Next != 30 || l.Head.Head != "a80225ec7c0059adf5d26830656b5b99df3070c6ac8bdf21446e48025558938a" || l.Head.StreamSeq != 76 {
		t.Errorf("the fork: exit %d, want 1 and a fork at line 30\n%s%s", r.status, r.stdout, r.stderr)
	}
	// The entry that continues alpha-2 lands after the store's last message.
	r = runPub(t, nil, "journal", "--json", "--server", srv.url, "--room", "room:store-alpha", storeCapsule(t, 30, "alpha-2-next.ndjson"))
	if r.status != 0 {
		t.Fatalf("the continuation: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	l = oneShipLine(t, r)
	if l.Chain.RunID+"/"+l.Chain.CapsuleID != v010Alpha2 {
		t.Errorf("the continuation shipped chain %s/%s, want %s", l.Chain.RunID, l.Chain.CapsuleID, v010Alpha2)
	}
	expectShip(t, l, "room:store-alpha", 30, 1, 31, "2d460b9bd616a97c51effadccdce1b51fcb2aa2c8c08792a90328aa56af3dc38", 104)
	// A record v0.1.0 stored is found by the gate.
	r = runPub(t, nil, "execution", "--json", "--server", srv.url, filepath.Join(v010Dir, "records", "gamma-verified.json"))
	if recs := recordLines(t, r.stdout); r.status != 0 || len(recs) != 1 || !recs[0].OK || recs[0].Room != "room:store-gamma" ||
		recs[0].Item.Outcome != "duplicate" || recs[0].Item.StreamSeq != 63 || recs[0].Item.Subject != "rooms.store-gamma.exec" ||
		recs[0].Item.Hash != "corpus-task-pack-execution:sha256:G4AJBnnjdWWQzk_Fx72ih5X2A7h8MyKAT8erLhvqGFk" {
		t.Errorf("the stored record again: exit %d, want 0 and a duplicate at stream seq 63\n%s%s", r.status, r.stdout, r.stderr)
	}

	// The checkpoint of the new entry: size 44, consistent with v0.1.0's of
	// size 43 (else the audit refuses it).
	var rep storeAudit
	deadline := time.Now().Add(20 * time.Second)
	for {
		rep, res = auditStoreRoom(t, srv.url, "room:store-alpha")
		if len(rep.Checkpoints) == 1 && rep.Checkpoints[0].Latest != nil && rep.Checkpoints[0].Latest.Size == 44 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of size 44 in room:store-alpha after 20s:\n%s\nserve:\n%s", storeSummary(rep), srv.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ck := rep.Checkpoints[0]
	if res.status != 0 || rep.Totals.Messages != 47 || rep.Totals.Entries != 43 || rep.Totals.Records != 1 || rep.Totals.SetAside != 0 ||
		rep.Totals.ChainsOK != 2 || rep.Totals.Checkpoints != 3 || len(rep.Violations) != 0 || rep.LastSeq != 105 ||
		ck.Verified != 3 || ck.Refused != 0 || ck.Admitted != 44 || ck.Tail != 0 || ck.Latest.Signer != v010Publisher || ck.Latest.Seq != 105 {
		t.Errorf("room:store-alpha with the new entry: exit %d, want 0\n%s%s", res.status, storeSummary(rep), res.stderr)
	}
	// serve admitted every message v0.1.0 attested and found no stored
	// checkpoint that contradicts the room.
	want := map[string]string{
		"roompub_checkpoints_written_total":            "1",
		"roompub_checkpoint_rooms_blocked":             "0",
		"roompub_checkpoint_unadmitted_messages_total": "0",
		"roompub_store_lost_messages":                  "0",
	}
	if got := scrapeMetrics(t, srv.log.String(), want); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("serve's metrics %v, want %v", got, want)
	}
	srv.stop()
}
