package checkpoint

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/roompub/roompub/events"
)

// ErrBadLease is returned (wrapped) by SignLease for a lease key that
// cannot be signed, and by (*Trust).VerifyLease for a lease value that is
// not a signed lease statement (an unsigned value, such as the bare node
// id older publishers wrote, included) or whose signature does not verify.
var ErrBadLease = errors.New("bad lease")

// leaseTag starts every lease statement's signed message, so a lease
// signature can never be taken for another roompub signature: attestations
// sign messages that start "roompub-attestation/v1\n", event signatures a
// 32-byte hash (events, ed25519+domain-v1), and checkpoint notes a
// three-line body whose third line is a base64 root, which never holds the
// ':' of the node id on a lease message's third line.
const leaseTag = "roompub-checkpoint-lease/v1\n"

// Lease is a signed lease statement: NodeID holds the checkpoint lease
// Key (a lease bucket key) as of At, when it took or renewed it.
type Lease struct {
	Key    string
	NodeID string
	At     time.Time // millisecond precision, UTC
}

// leaseMessage is what the publisher key signs for a lease:
//
//	"roompub-checkpoint-lease/v1\n" + key + "\n" + node id + "\n" + decimal(unix ms) + "\n"
func leaseMessage(key, nodeID string, ms int64) []byte {
	b := make([]byte, 0, len(leaseTag)+len(key)+len(nodeID)+24)
	b = append(b, leaseTag...)
	b = append(b, key...)
	b = append(b, '\n')
	b = append(b, nodeID...)
	b = append(b, '\n')
	b = strconv.AppendInt(b, ms, 10)
	return append(b, '\n')
}

// SignLease returns the lease value by which k says it holds the lease key
// as of at (truncated to the millisecond): "<node id> <unix ms> <sig>",
// sig the unpadded base64url Ed25519 signature of leaseMessage. The key is
// signed, so a value cannot be moved to another room's key. Errors wrap
// ErrBadLease for a key that is empty or holds a space or a control
// character, or are k's.
func SignLease(k *events.HostKey, key string, at time.Time) (string, error) {
	if key == "" || strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", fmt.Errorf("%w: lease key %q", ErrBadLease, clip(key))
	}
	hk, err := signingKey(k)
	if err != nil {
		return "", err
	}
	ms := at.UnixMilli()
	sig := ed25519.Sign(hk.priv, leaseMessage(key, hk.nodeID, ms))
	return hk.nodeID + " " + strconv.FormatInt(ms, 10) + " " + base64.RawURLEncoding.EncodeToString(sig), nil
}

// VerifyLease checks a lease value of key (what SignLease returns) and
// returns what it says. It does not look at the time: how old a lease may
// be is the caller's rule (the lease bucket's TTL). Errors wrap
// ErrBadLease (not three fields, a time that is not a decimal, a
// signature that is not 64 bytes of unpadded base64url or does not
// verify) or ErrUntrustedPublisher (a node id not in t).
func (t *Trust) VerifyLease(key string, value []byte) (Lease, error) {
	fields := strings.Split(string(value), " ")
	if len(fields) != 3 {
		return Lease{}, fmt.Errorf("%w: %d fields, want node id, time and signature (an unsigned value?)", ErrBadLease, len(fields))
	}
	nodeID, msText, sigText := fields[0], fields[1], fields[2]
	ms, err := strconv.ParseInt(msText, 10, 64)
	if err != nil || strconv.FormatInt(ms, 10) != msText {
		return Lease{}, fmt.Errorf("%w: time %q is not a decimal number of milliseconds", ErrBadLease, clip(msText))
	}
	sig, err := base64.RawURLEncoding.Strict().DecodeString(sigText)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return Lease{}, fmt.Errorf("%w: the signature is not %d bytes of unpadded base64url", ErrBadLease, ed25519.SignatureSize)
	}
	pub, ok := t.key(nodeID)
	if !ok {
		return Lease{}, fmt.Errorf("%w: lease by %s", ErrUntrustedPublisher, clip(nodeID))
	}
	if !ed25519.Verify(pub, leaseMessage(key, nodeID, ms), sig) {
		return Lease{}, fmt.Errorf("%w: signature by %s does not verify for lease key %q", ErrBadLease, nodeID, clip(key))
	}
	return Lease{Key: key, NodeID: nodeID, At: time.UnixMilli(ms).UTC()}, nil
}
