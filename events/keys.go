package events

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
)

// HostKey is an execution host's Ed25519 signing key. Its String, GoString,
// Format and MarshalJSON print only the public node id, so a key that
// reaches a log or an error message never leaks: a secret redacts
// itself.
type HostKey struct {
	priv ed25519.PrivateKey
}

// ErrBadHostKey is wrapped by ParseHostKey.
var ErrBadHostKey = errors.New("not an Ed25519 host key")

// GenerateHostKey makes a new key from rand (crypto/rand.Reader in
// production).
func GenerateHostKey(rand io.Reader) (*HostKey, error) {
	_, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return nil, fmt.Errorf("generate host key: %w", err)
	}
	return &HostKey{priv: priv}, nil
}

// NewHostKey wraps an existing private key.
func NewHostKey(priv ed25519.PrivateKey) *HostKey { return &HostKey{priv: priv} }

// ParseHostKey reads a PEM "PRIVATE KEY" block (PKCS #8, RFC 8410), the
// format MarshalPEM writes and openssl reads. Errors wrap ErrBadHostKey and
// never include key material.
func ParseHostKey(data []byte) (*HostKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: no PEM PRIVATE KEY block", ErrBadHostKey)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: PKCS #8 parse failed", ErrBadHostKey)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: key is %T", ErrBadHostKey, k)
	}
	return &HostKey{priv: priv}, nil
}

// MarshalPEM encodes the key as a PEM PKCS #8 "PRIVATE KEY" block.
func (k *HostKey) MarshalPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.priv)
	if err != nil {
		return nil, fmt.Errorf("marshal host key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Public returns the public key.
func (k *HostKey) Public() ed25519.PublicKey { return k.priv.Public().(ed25519.PublicKey) }

// DIDKey returns key/public: the did:key method-specific id "z6Mk…".
func (k *HostKey) DIDKey() string { return EncodeDIDKey(k.Public()) }

// NodeID returns host/node-id: "node:did:key:" + DIDKey.
func (k *HostKey) NodeID() string { return NodeID(k.Public()) }

func (k *HostKey) sign(domain string, payload []byte) string {
	m := SigningMessage(domain, payload)
	return base64.RawURLEncoding.EncodeToString(ed25519.Sign(k.priv, m[:]))
}

// String redacts the private key. String, GoString and Format have value
// receivers so that a HostKey value (not only a *HostKey), or a struct
// holding one, is redacted too.
func (k HostKey) String() string { return "HostKey(" + k.NodeID() + ")" }

// GoString redacts the private key from %#v.
func (k HostKey) GoString() string { return k.String() }

// Format redacts the private key from every fmt verb.
func (k HostKey) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, k.String()) }

// MarshalJSON emits only the node id.
func (k *HostKey) MarshalJSON() ([]byte, error) { return []byte(`"` + k.NodeID() + `"`), nil }
