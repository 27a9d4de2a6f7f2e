package tilesource_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"filippo.io/torchwood"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/checkpointer"
	"github.com/roompub/roompub/room/ingest"
	"github.com/roompub/roompub/room/internal/roomtest"
	"github.com/roompub/roompub/room/tilesource"
	"github.com/roompub/roompub/tiles"
)

// The verification here is torchwood's and x/mod's, never roompub's: a
// torchwood TileFetcher and Client read the served logs as any tlog
// client would, the notes are opened with x/mod's Ed25519 verifiers, and
// the expected entries come from the stream itself (roomtest.Rebuild,
// the tests' own admission of a room's messages).

const tOrigin = "evidence.example.org/roompub"

// served is the two logs of an Env behind one HTTP server, mounted as
// serve mounts them.
type served struct {
	srv  *httptest.Server
	deps *tilesource.Deployment
}

func serveLogs(t *testing.T, e *roomtest.Env, trust *checkpoint.Trust) *served {
	t.Helper()
	o := tilesource.Options{Trust: trust, MaxAge: 20 * time.Millisecond}
	rooms, err := tilesource.NewRooms(e.Connect(), o)
	if err != nil {
		t.Fatal(err)
	}
	dep, err := tilesource.NewDeployment(e.Connect(), o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/tiles/room/", http.StripPrefix("/tiles/room", tiles.NewMux(rooms.Resolve, nil)))
	mux.Handle("/tiles/deployment/", http.StripPrefix("/tiles/deployment", tiles.NewHandler(dep, nil)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &served{srv: srv, deps: dep}
}

// logClient is a tlog client of one served log.
type logClient struct {
	f      *torchwood.TileFetcher
	c      *torchwood.Client
	v      note.Verifier
	origin string
}

func newLogClient(t *testing.T, url, origin string, key *events.HostKey) *logClient {
	t.Helper()
	f, err := torchwood.NewTileFetcher(url)
	if err != nil {
		t.Fatal(err)
	}
	c, err := torchwood.NewClient(f)
	if err != nil {
		t.Fatal(err)
	}
	vkey, err := note.NewEd25519VerifierKey(origin, key.Public())
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return &logClient{f: f, c: c, v: v, origin: origin}
}

// tree fetches the checkpoint, verifies its signature under the log's
// key and returns its tree and note.
func (l *logClient) tree(t *testing.T, ctx context.Context) (tlog.Tree, []byte) {
	t.Helper()
	b, err := l.f.ReadEndpoint(ctx, "checkpoint")
	if err != nil {
		t.Fatalf("%s checkpoint: %v", l.origin, err)
	}
	n, err := note.Open(b, note.VerifierList(l.v))
	if err != nil {
		t.Fatalf("%s checkpoint signature: %v\n%s", l.origin, err, b)
	}
	c, err := torchwood.ParseCheckpoint(n.Text)
	if err != nil {
		t.Fatal(err)
	}
	if c.Origin != l.origin {
		t.Fatalf("origin %q, want %q", c.Origin, l.origin)
	}
	return c.Tree, b
}

// waitTree polls the checkpoint until it is of size n.
func (l *logClient) waitTree(t *testing.T, ctx context.Context, n int64) (tlog.Tree, []byte) {
	t.Helper()
	var tree tlog.Tree
	var b []byte
	roomtest.WaitFor(t, 20*time.Second, fmt.Sprintf("%s: a served checkpoint of size %d", l.origin, n), func() bool {
		if _, err := l.f.ReadEndpoint(ctx, "checkpoint"); err != nil {
			return false
		}
		tree, b = l.tree(t, ctx)
		return tree.N >= n
	})
	if tree.N != n {
		t.Fatalf("%s: checkpoint of size %d, want %d", l.origin, tree.N, n)
	}
	return tree, b
}

// entries reads every entry of tree with client.Entries, which checks
// each against the tree, resuming after a stop before a trailing partial
// bundle.
func (l *logClient) entries(t *testing.T, ctx context.Context, tree tlog.Tree) [][]byte {
	t.Helper()
	var out [][]byte
	for int64(len(out)) < tree.N {
		before := len(out)
		for i, e := range l.c.Entries(ctx, tree, int64(len(out))) {
			if i != int64(len(out)) {
				t.Fatalf("entry %d yielded, want %d", i, len(out))
			}
			out = append(out, bytes.Clone(e))
		}
		if err := l.c.Err(); err != nil {
			t.Fatalf("%s: entries from %d: %v", l.origin, before, err)
		}
		if len(out) == before {
			t.Fatalf("%s: entries from %d: no progress", l.origin, before)
		}
	}
	return out
}

// included checks entry i's inclusion in tree with its proof.
func (l *logClient) included(t *testing.T, ctx context.Context, tree tlog.Tree, i int64, want []byte) {
	t.Helper()
	e, proof, err := l.c.Entry(ctx, tree, i)
	if err != nil {
		t.Fatalf("%s: entry %d: %v", l.origin, i, err)
	}
	if !bytes.Equal(e, want) {
		t.Fatalf("%s: entry %d is\n%q, want\n%q", l.origin, i, e, want)
	}
	if err := tlog.CheckRecord(proof, tree.N, tree.Hash, i, tlog.RecordHash(e)); err != nil {
		t.Fatalf("%s: entry %d's inclusion in size %d: %v", l.origin, i, tree.N, err)
	}
}

// consistent checks that newer extends older, by a proof built from the
// served tiles.
func (l *logClient) consistent(t *testing.T, ctx context.Context, older, newer tlog.Tree) {
	t.Helper()
	p, err := tlog.ProveTree(newer.N, older.N, torchwood.TileHashReaderWithContext(ctx, newer, l.f))
	if err != nil {
		t.Fatalf("%s: prove %d -> %d: %v", l.origin, older.N, newer.N, err)
	}
	if err := tlog.CheckTree(p, newer.N, newer.Hash, older.N, older.Hash); err != nil {
		t.Fatalf("%s: %d -> %d not consistent: %v", l.origin, older.N, newer.N, err)
	}
	if older.N < newer.N {
		bad := newer
		bad.Hash[0] ^= 1
		if tlog.CheckTree(p, bad.N, bad.Hash, older.N, older.Hash) == nil {
			t.Fatalf("%s: the proof also checks against a wrong root", l.origin)
		}
	}
}

// roomEntries is what a room's log must hold: LeafData of each message
// Rebuild admits, in stream order; and the stream seqs it refused.
func roomEntries(t *testing.T, e *roomtest.Env, roomID string, trust *checkpoint.Trust) ([][]byte, []uint64) {
	t.Helper()
	stored := map[uint64]*jetstream.RawStreamMsg{}
	for _, m := range e.Stored() {
		stored[m.Sequence] = m
	}
	rt := roomtest.Rebuild(e, roomID, trust)
	var out [][]byte
	for _, seq := range rt.LeafSeqs {
		m := stored[seq]
		out = append(out, checkpoint.LeafData(roomID, m.Subject, checkpoint.ContentHash(m.Data)))
	}
	return out, rt.NotLeaves
}

// roomCheckpoints is what the deployment log must hold: every room
// checkpoint note as stored, in stream order.
func roomCheckpoints(e *roomtest.Env) [][]byte {
	var out [][]byte
	for _, m := range e.Stored() {
		if p, err := (room.Subjects{}).Parse(m.Subject); err == nil && p.Kind == room.KindCheckpoint {
			out = append(out, m.Data)
		}
	}
	return out
}

func status(t *testing.T, url string) int {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

func checkEntries(t *testing.T, what string, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%s: entry %d is\n%q, want\n%q", what, i, got[i], want[i])
		}
	}
}

// TestLogsReadByATlogClient writes two rooms through an attesting gate,
// with a real checkpointer keeping the deployment log, and reads both
// logs over HTTP as a tlog client: every entry, one inclusion proof and
// the consistency of two checkpoints of each. Room A's 303 leaves span a
// full tile whose last entries and the partial tile after it start inside
// a batch of 100, after records whose positions count (so a tile's read
// from the index resumes the batch and the exec count); a message written
// around the gate is no entry.
func TestLogsReadByATlogClient(t *testing.T) {
	// The fetcher retries a 500 for long: a bound makes a failure quick.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := roomtest.NewEnv(t)
	key := roomtest.NewPublisherKey(t)
	ckp, _ := roomtest.StartCheckpointer(t, e.Connect(), checkpointer.Options{Key: key, Origin: tOrigin, Every: 100_000, Interval: 150 * time.Millisecond,
		Deployment: checkpointer.DeploymentOptions{Interval: 50 * time.Millisecond}})
	gate := roomtest.AttestingGate(e, e.Nc, key, ckp, ingest.GateOptions{})
	trust, err := roomtest.Trusting(t, key).WithOrigin(tOrigin)
	if err != nil {
		t.Fatal(err)
	}
	s := serveLogs(t, e, trust)

	roomA, roomB := "room:tiles-a", "room:tiles+b/2"
	esA, _ := roomtest.Journal(t, "run-t", "cap-a", 320)
	esB, _ := roomtest.Journal(t, "run-t", "cap-b", 5)
	journal := func(r string, es []*events.Entry) {
		t.Helper()
		if res, err := gate.AppendJournal(ctx, r, roomtest.Lines(es), nil); err != nil || res.Stored != len(es) {
			t.Fatalf("%+v %v", res, err)
		}
	}
	record := func(r, name string) {
		t.Helper()
		if res := gate.AppendRecord(ctx, roomtest.RecordNamed(e, r, name)); res.Item.Outcome != room.OutcomeStored {
			t.Fatalf("record %s: %+v", name, res)
		}
	}
	journal(roomA, esA[0:100])
	record(roomA, "r1")
	record(roomA, "r2")
	journal(roomA, esA[100:200])
	journal(roomA, esA[200:300]) // leaves 202 to 301: entry 256 inside
	record(roomA, "r3")
	// Around the gate: a sound entry on a chain of its own, with no
	// attestation.
	forgedEs, _ := roomtest.Journal(t, "run-x", "cap-x", 1)
	forgedSubject := (room.Subjects{}).Journal(roomA, events.ChainKey{RunID: "run-x", CapsuleID: "cap-x"})
	forged := roomtest.PublishRaw(t, e.Js, forgedSubject, roomtest.Lines(forgedEs))
	// And one under a genuine attestation header copied from message 1
	// of the first batch: its batch is not read whole, so no leaf.
	genuine, err := roomtest.LeaderMsg(ctx, e.Nc, room.DefaultStream, 2)
	if err != nil || genuine.Header.Get(checkpoint.AttestationHeader) == "" {
		t.Fatalf("stream seq 2: %v", err)
	}
	copied := nats.NewMsg(forgedSubject)
	copied.Data = genuine.Data
	copied.Header.Set(checkpoint.AttestationHeader, genuine.Header.Get(checkpoint.AttestationHeader))
	ack, err := e.Js.PublishMsg(ctx, copied)
	if err != nil {
		t.Fatal(err)
	}
	journal(roomB, esB)

	url := s.srv.URL
	a := newLogClient(t, url+"/tiles/room/"+checkpoint.RoomSegment(roomA)+"/", checkpoint.RoomOrigin(tOrigin, roomA), key)
	b := newLogClient(t, url+"/tiles/room/"+checkpoint.RoomSegment(roomB)+"/", checkpoint.RoomOrigin(tOrigin, roomB), key)
	treeA1, _ := a.waitTree(t, ctx, 303)
	wantA, notLeaves := roomEntries(t, e, roomA, trust)
	if len(wantA) != 303 || len(notLeaves) != 2 || notLeaves[0] != forged || notLeaves[1] != ack.Sequence {
		t.Fatalf("the stream holds %d leaves and no-leaves %v of room A; want 303 and the forged seqs %d, %d", len(wantA), notLeaves, forged, ack.Sequence)
	}
	checkEntries(t, "room A", a.entries(t, ctx, treeA1), wantA)
	a.included(t, ctx, treeA1, 280, wantA[280])
	treeB, _ := b.waitTree(t, ctx, 5)
	wantB, _ := roomEntries(t, e, roomB, trust)
	checkEntries(t, "room B", b.entries(t, ctx, treeB), wantB)

	// The deployment log: the room checkpoints as stored.
	d := newLogClient(t, url+"/tiles/deployment/", tOrigin, key)
	var treeD1 tlog.Tree
	roomtest.WaitFor(t, 20*time.Second, "a deployment checkpoint covering both rooms' checkpoints", func() bool {
		treeD1, _ = d.tree(t, ctx)
		return treeD1.N >= 2 && treeD1.N == int64(len(roomCheckpoints(e)))
	})
	wantD := roomCheckpoints(e)
	checkEntries(t, "deployment log", d.entries(t, ctx, treeD1), wantD)
	d.included(t, ctx, treeD1, treeD1.N-1, wantD[treeD1.N-1])

	// More of room A, a new checkpoint: consistent with the first.
	journal(roomA, esA[300:320])
	record(roomA, "r4")
	treeA2, _ := a.waitTree(t, ctx, 324)
	wantA, _ = roomEntries(t, e, roomA, trust)
	checkEntries(t, "room A, later", a.entries(t, ctx, treeA2), wantA)
	a.consistent(t, ctx, treeA1, treeA2)
	a.included(t, ctx, treeA2, 323, wantA[323])

	var treeD2 tlog.Tree
	roomtest.WaitFor(t, 20*time.Second, "a deployment checkpoint covering room A's second checkpoint", func() bool {
		treeD2, _ = d.tree(t, ctx)
		return treeD2.N > treeD1.N && treeD2.N == int64(len(roomCheckpoints(e)))
	})
	checkEntries(t, "deployment log, later", d.entries(t, ctx, treeD2), roomCheckpoints(e))
	d.consistent(t, ctx, treeD1, treeD2)

	// A checkpoint signed by the trusted key whose root the entries do
	// not have is never served: the one before stays.
	for _, c := range []struct {
		l       *logClient
		subject string
		tree    tlog.Tree
	}{
		{a, (room.Subjects{}).Checkpoint(roomA), treeA2},
		{d, room.DeploymentLog{}.Checkpoint(), treeD2},
	} {
		signer, err := checkpoint.NewNamedNoteSigner(key, c.l.origin)
		if err != nil {
			t.Fatal(err)
		}
		root := [32]byte(c.tree.Hash)
		root[0] ^= 1
		bad, err := checkpoint.Sign(signer, c.l.origin, uint64(c.tree.N), root)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Js.Publish(ctx, c.subject, bad); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // past MaxAge: the stream is read again
		if got, b := c.l.tree(t, ctx); got != c.tree || bytes.Equal(b, bad) {
			t.Fatalf("%s: after a checkpoint with another root, %v is served, want %v", c.l.origin, got, c.tree)
		}
	}

	// Names that are no log.
	for _, p := range []string{
		"/tiles/room/" + checkpoint.RoomSegment("room:nope") + "/checkpoint",
		"/tiles/room/" + checkpoint.RoomSegment("room:nope") + "/tile/0/000",
		"/tiles/room/tiles%2da/checkpoint", // a spelling RoomSegment never writes
	} {
		if got := status(t, url+p); got != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, got)
		}
	}
	if got := status(t, url+"/tiles/room/"+checkpoint.RoomSegment(roomA)+"/checkpoint"); got != http.StatusOK {
		t.Errorf("room A's checkpoint: %d", got)
	}
}
