package events_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/roompub/roompub/events"
)

func TestHostKeyPEMRoundTrip(t *testing.T) {
	key, err := events.GenerateHostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	data, err := key.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	if block, _ := pem.Decode(data); block == nil || block.Type != "PRIVATE KEY" {
		t.Fatalf("MarshalPEM wrote %q", data)
	}
	back, err := events.ParseHostKey(data)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Public().Equal(key.Public()) || back.NodeID() != key.NodeID() || back.DIDKey() != key.DIDKey() {
		t.Fatalf("round trip changed the key: %s vs %s", back.NodeID(), key.NodeID())
	}
	// The parsed key signs exactly as the original (Ed25519 is deterministic).
	m := members(t, readRef(t, "execution-records", "verified.json"))
	r1, err := events.SignRecord(m, key)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := events.SignRecord(m, back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r1.Canonical(), r2.Canonical()) {
		t.Error("the parsed key signs differently")
	}
}

func TestGenerateHostKeyUsesRand(t *testing.T) {
	seed := bytes.Repeat([]byte{7}, ed25519.SeedSize)
	key, err := events.GenerateHostKey(bytes.NewReader(seed))
	if err != nil {
		t.Fatal(err)
	}
	want := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	if !key.Public().Equal(want) {
		t.Error("GenerateHostKey did not derive the key from rand")
	}
	if _, err := events.GenerateHostKey(bytes.NewReader(seed[:5])); err == nil {
		t.Error("GenerateHostKey with a short rand succeeded")
	}
}

func TestParseHostKeyRefuses(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKCS8PrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	_, priv := seededKey(9)
	edDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"not PEM", []byte("-----BEGIN nothing")},
		{"public key block", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: edDER})},
		{"garbage DER", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("garbage")})},
		{"truncated DER", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: edDER[:len(edDER)-3]})},
		{"ECDSA key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := events.ParseHostKey(tt.data)
			if !errors.Is(err, events.ErrBadHostKey) || k != nil {
				t.Fatalf("ParseHostKey = %v, %v; want nil, ErrBadHostKey", k, err)
			}
			assertNoKeyMaterial(t, "error", err.Error(), priv)
		})
	}
}

// keyEncodings are the forms in which private key bytes could leak.
func keyEncodings(priv ed25519.PrivateKey) map[string]string {
	seed := priv.Seed()
	out := map[string]string{}
	for name, b := range map[string][]byte{"seed": seed, "private key": priv} {
		out[name+" hex"] = hex.EncodeToString(b)
		out[name+" HEX"] = strings.ToUpper(hex.EncodeToString(b))
		out[name+" base64"] = base64.StdEncoding.EncodeToString(b)
		out[name+" base64url"] = base64.RawURLEncoding.EncodeToString(b)
		out[name+" decimal"] = strings.Trim(fmt.Sprint(b[:6]), "[]") // as %v prints a []byte
		out[name+" raw"] = string(b[:8])
	}
	return out
}

func assertNoKeyMaterial(t *testing.T, what, s string, priv ed25519.PrivateKey) {
	t.Helper()
	for name, enc := range keyEncodings(priv) {
		// A prefix is enough to identify the key: 12 hex digits are 6 bytes.
		probe := enc
		if len(probe) > 12 && !strings.HasSuffix(name, "decimal") {
			probe = probe[:12]
		}
		if strings.Contains(s, probe) {
			t.Errorf("%s leaks the %s: %q", what, name, s)
		}
	}
}

func TestHostKeyRedacts(t *testing.T) {
	// A seed with distinctive bytes so that a leak cannot hide in the node id.
	seed := []byte("roompub-test-seed-0123456789abcd")
	priv := ed25519.NewKeyFromSeed(seed)
	key := events.NewHostKey(priv)
	nodeID := key.NodeID()

	type config struct {
		Name string
		Key  *events.HostKey
	}
	type byValue struct{ Key events.HostKey }
	formatted := map[string]string{
		"%v %+v %#v %s":        fmt.Sprintf("%v %+v %#v %s", key, key, key, key),
		"%x %X %q %d":          fmt.Sprintf("%x %X %q %d", key, key, key, key),
		"value %v %+v %#v %s":  fmt.Sprintf("%v %+v %#v %s", *key, *key, *key, *key),
		"value %x %d":          fmt.Sprintf("%x %d", *key, *key),
		"in a struct":          fmt.Sprintf("%v %+v %#v", config{"h", key}, config{"h", key}, config{"h", key}),
		"by value in a struct": fmt.Sprintf("%v %+v %#v %x", byValue{*key}, byValue{*key}, byValue{*key}, byValue{*key}),
		"in a slice":           fmt.Sprint([]*events.HostKey{key}),
		"wrapped error":        fmt.Errorf("signing with %v: %w", key, errors.New("x")).Error(),
	}
	for name, s := range formatted {
		assertNoKeyMaterial(t, name, s, priv)
	}
	if got := fmt.Sprint(key); got != "HostKey("+nodeID+")" {
		t.Errorf("fmt.Sprint(key) = %q", got)
	}
	if got := fmt.Sprint(*key); got != "HostKey("+nodeID+")" {
		t.Errorf("fmt.Sprint(*key) = %q", got)
	}
	if got := fmt.Sprint((*events.HostKey)(nil)); got != "<nil>" {
		t.Errorf("fmt.Sprint(nil key) = %q", got)
	}

	js, err := json.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	if string(js) != `"`+nodeID+`"` {
		t.Errorf("json.Marshal(key) = %s, want the node id", js)
	}
	for _, v := range []any{config{"h", key}, byValue{*key}, map[string]any{"k": key}} {
		js, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		assertNoKeyMaterial(t, "json.Marshal", string(js), priv)
	}

	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	logger.Info("signing", "key", key, "cfg", config{"h", key}, "val", *key)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("signing", "key", key, "val", *key)
	assertNoKeyMaterial(t, "slog", logs.String(), priv)
}
