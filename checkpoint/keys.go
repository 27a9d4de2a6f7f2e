package checkpoint

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"weak"

	"github.com/roompub/roompub/events"
	"golang.org/x/mod/sumdb/note"
)

// noteAlgEd25519 is the signed-note key type byte of Ed25519 (C2SP
// signed-note; x/mod/sumdb/note's algEd25519).
const noteAlgEd25519 = 0x01

// hostKey is what Attest needs of an events.HostKey.
type hostKey struct {
	priv   ed25519.PrivateKey
	nodeID string
}

// hostKeys caches the Ed25519 private key and node id behind each
// *events.HostKey: reading the key back from its PEM form costs about 30 us
// (PKCS #8 parsing derives the public key), base58 another microsecond, and
// Attest runs for every appended message. Entries are keyed by weak
// pointers and dropped when the HostKey is collected.
var hostKeys sync.Map // weak.Pointer[events.HostKey] -> hostKey

// signingKey returns the Ed25519 key inside k and k's node id.
// events.HostKey keeps the key unexported and offers only its PKCS #8 PEM
// form, so it is read back from there once per key. The key never reaches
// an error or a log.
func signingKey(k *events.HostKey) (hostKey, error) {
	if k == nil {
		return hostKey{}, errors.New("nil host key")
	}
	wp := weak.Make(k)
	if v, ok := hostKeys.Load(wp); ok {
		return v.(hostKey), nil
	}
	priv, err := privateKey(k)
	if err != nil {
		return hostKey{}, err
	}
	hk := hostKey{priv: priv, nodeID: k.NodeID()}
	if _, loaded := hostKeys.LoadOrStore(wp, hk); !loaded {
		runtime.AddCleanup(k, func(wp weak.Pointer[events.HostKey]) { hostKeys.Delete(wp) }, wp)
	}
	return hk, nil
}

// privateKey reads the Ed25519 key inside k from its PEM form (uncached).
func privateKey(k *events.HostKey) (ed25519.PrivateKey, error) {
	der, err := k.MarshalPEM()
	if err != nil {
		return nil, fmt.Errorf("host key %s: %w", k.NodeID(), err)
	}
	block, _ := pem.Decode(der)
	if block == nil {
		return nil, fmt.Errorf("host key %s: no PEM block", k.NodeID())
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("host key %s: PKCS #8 parse failed", k.NodeID())
	}
	priv, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("host key %s: not Ed25519", k.NodeID())
	}
	return priv, nil
}

// NewNoteSigner returns a signed-note signer for k, named by k's node id
// ("node:did:key:z6Mk...") with the Ed25519 key hash of the C2SP signed-note
// spec (SHA-256(name || "\n" || 0x01 || public key)[:4]). It is built by
// note.NewSigner from the encoded signer key, which x/mod checks against
// that hash. The returned signer holds the private key; never log it.
func NewNoteSigner(k *events.HostKey) (note.Signer, error) {
	if k == nil {
		return nil, errors.New("nil host key")
	}
	return NewNamedNoteSigner(k, k.NodeID())
}

// NewNamedNoteSigner is NewNoteSigner with the key named name instead of
// the node id: C2SP tlog-checkpoint wants a log's key name to match its
// origin, so a room's checkpoints are signed under RoomOrigin and the
// deployment log's under the deployment origin. Errors are x/mod's for a
// name a signed note cannot carry (empty, white space, '+').
func NewNamedNoteSigner(k *events.HostKey, name string) (note.Signer, error) {
	if k == nil {
		return nil, errors.New("nil host key")
	}
	priv, err := privateKey(k)
	if err != nil {
		return nil, err
	}
	vkey, err := note.NewEd25519VerifierKey(name, priv.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, fmt.Errorf("note key for %s: %w", name, err)
	}
	// vkey is name+hash+base64(0x01||pub); the signer key is
	// PRIVATE+KEY+name+hash+base64(0x01||seed).
	hash := vkey[len(name)+1 : len(name)+9]
	skey := "PRIVATE+KEY+" + name + "+" + hash + "+" +
		base64.StdEncoding.EncodeToString(append([]byte{noteAlgEd25519}, priv.Seed()...))
	s, err := note.NewSigner(skey)
	if err != nil {
		// The error of x/mod never includes the key.
		return nil, fmt.Errorf("note signer for %s: %w", name, err)
	}
	return s, nil
}

// NewNoteVerifier returns the signed-note verifier of a publisher node id:
// name = the node id, Ed25519 key and key hash per C2SP signed-note. Errors
// wrap events.ErrBadDIDKey for a malformed node id.
func NewNoteVerifier(nodeID string) (note.Verifier, error) {
	pub, err := parseNodeID(nodeID)
	if err != nil {
		return nil, err
	}
	vkey, err := note.NewEd25519VerifierKey(nodeID, pub)
	if err != nil {
		return nil, fmt.Errorf("note key for %s: %w", nodeID, err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, fmt.Errorf("note key for %s: %w", nodeID, err)
	}
	return v, nil
}

// parseNodeID accepts only the canonical spelling of a node id (the one
// events.NodeID prints), so one key has one name in headers and notes.
func parseNodeID(nodeID string) (ed25519.PublicKey, error) {
	pub, err := events.ParseNodeID(nodeID)
	if err != nil {
		return nil, err
	}
	if events.NodeID(pub) != nodeID {
		return nil, fmt.Errorf("%w: %q is not in canonical form", events.ErrBadDIDKey, clip(nodeID))
	}
	if strings.ContainsAny(nodeID, " +") { // impossible for base58; keeps note names valid
		return nil, fmt.Errorf("%w: %q", events.ErrBadDIDKey, clip(nodeID))
	}
	return pub, nil
}

// clip shortens untrusted text quoted in an error.
func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}
