package checkpoint_test

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
)

// A publisher attests a message; a reader holding the publisher's node id
// verifies it.
func ExampleAttest() {
	key := events.NewHostKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)))
	const room, subject = "room:demo", "roompub.cm9vbTpkZW1v.journal.cnVu.Y2Fw"
	content := checkpoint.ContentHash([]byte(`{"seq":0}` + "\n"))

	header := checkpoint.Attest(key, room, subject, checkpoint.JournalPosition(0), content)

	trust, _ := checkpoint.NewTrust(key.NodeID())
	signer, err := trust.VerifyAttestation(header, room, subject, checkpoint.JournalPosition(0), content)
	fmt.Println(signer == key.NodeID(), err)
	_, err = trust.VerifyAttestation(header, room, subject, checkpoint.JournalPosition(1), content)
	fmt.Println(errors.Is(err, checkpoint.ErrBadAttestation))
	// Output:
	// true <nil>
	// true
}

// A publisher attests an atomic batch with one signature; a reader
// verifies the batch whole, or collects its messages in stream order.
func ExampleAttestBatch() {
	key := events.NewHostKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)))
	const room, subject = "room:demo", "roompub.cm9vbTpkZW1v.journal.cnVu.Y2Fw"
	var stmts []checkpoint.Statement
	for seq := range 3 {
		data := fmt.Sprintf(`{"seq":%d}`+"\n", seq)
		stmts = append(stmts, checkpoint.Statement{Room: room, Subject: subject,
			Position: checkpoint.JournalPosition(int64(seq)), Content: checkpoint.ContentHash([]byte(data))})
	}
	headers := checkpoint.AttestBatch(key, stmts)
	a, _ := checkpoint.ParseAttestation(headers[2])
	fmt.Println(a.Index, a.Count)

	trust, _ := checkpoint.NewTrust(key.NodeID())
	_, err := trust.VerifyBatch(headers, stmts)
	fmt.Println(err)

	c := checkpoint.NewBatchCollector(trust)
	for i := range stmts {
		for _, v := range c.Add(uint64(100+i), headers[i], stmts[i]) {
			fmt.Println(v.ID, v.Err)
		}
	}
	// Output:
	// 2 3
	// <nil>
	// 100 <nil>
	// 101 <nil>
	// 102 <nil>
}

// A publisher signs a checkpoint over the room's tree; a reader proves a
// message is covered by it.
func ExampleTree() {
	key := events.NewHostKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)))
	const room, subject = "room:demo", "roompub.cm9vbTpkZW1v.exec"
	tree := checkpoint.NewTree()
	for i := range 5 {
		tree.Append(checkpoint.LeafHash(room, subject, checkpoint.ContentHash([]byte{byte(i)})))
	}
	signer, _ := checkpoint.NewNoteSigner(key)
	note, _ := checkpoint.Sign(signer, room, tree.Size(), tree.Root())

	trust, _ := checkpoint.NewTrust(key.NodeID())
	cp, _ := checkpoint.Parse(note, room, trust)
	path, _ := tree.InclusionProof(3, cp.Size)
	leaf := checkpoint.LeafHash(room, subject, checkpoint.ContentHash([]byte{3}))
	fmt.Println(cp.Size, len(path), checkpoint.VerifyInclusion(leaf, 3, cp.Size, path, cp.Root))
	// Output: 5 3 <nil>
}
