package checkpoint

import (
	"errors"
	"fmt"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// emptyRoot is the RFC 6962 root of the empty tree: SHA-256 of "".
var emptyRoot = to32(rfc6962.DefaultHasher.EmptyRoot())

// slices32 turns hashes into what merkle/proof takes.
func slices32(hs [][32]byte) [][]byte {
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}

// VerifyInclusion checks that leaf is at index in the tree of size leaves
// whose root is root, by merkle/proof.VerifyInclusion (RFC 6962/9162).
// Errors wrap ErrBadProof and the merkle/proof error (proof.RootMismatchError
// carries both roots).
func VerifyInclusion(leaf [32]byte, index, size uint64, path [][32]byte, root [32]byte) error {
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, index, size, leaf[:], slices32(path), root[:]); err != nil {
		return fmt.Errorf("%w: inclusion of leaf %d at size %d: %w", ErrBadProof, index, size, readable(err))
	}
	return nil
}

// VerifyConsistency checks that the tree of size2 leaves with root root2
// extends the tree of size1 leaves with root root1, by
// merkle/proof.VerifyConsistency (RFC 6962/9162). The empty tree (size 0,
// root SHA-256 of "") is consistent with every tree, and equal sizes need
// equal roots and an empty proof. Errors wrap ErrBadProof and the merkle/proof error.
func VerifyConsistency(size1, size2 uint64, path [][32]byte, root1, root2 [32]byte) error {
	if size1 == 0 && size2 > 0 && root1 != emptyRoot {
		// merkle/proof accepts any root1 at size 0; the empty tree has one root.
		return fmt.Errorf("%w: consistency from size 0: root %x is not the empty tree's", ErrBadProof, root1)
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, size1, size2, slices32(path), root1[:], root2[:]); err != nil {
		return fmt.Errorf("%w: consistency from size %d to %d: %w", ErrBadProof, size1, size2, readable(err))
	}
	return nil
}

// rootMismatch prints merkle/proof's RootMismatchError with hex roots (its
// own text lists them as decimal bytes) and keeps it in the error chain.
type rootMismatch struct{ proof.RootMismatchError }

func (e rootMismatch) Error() string {
	return fmt.Sprintf("calculated root %x does not match the expected root %x", e.CalculatedRoot, e.ExpectedRoot)
}

func (e rootMismatch) Unwrap() error { return e.RootMismatchError }

func readable(err error) error {
	var m proof.RootMismatchError
	if errors.As(err, &m) {
		return rootMismatch{m}
	}
	return err
}
