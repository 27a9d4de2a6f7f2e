package checkpoint

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/roompub/roompub/events"
	"golang.org/x/mod/sumdb/note"
)

// AttestationHeader is the NATS header that carries a publisher's
// attestation of a message: "<node id> <sig> <i>/<n>", where sig is the
// unpadded base64url Ed25519 signature of the message's atomic batch, i the
// message's 0-based index in the batch and n the batch size (one
// signature per atomic batch). In a batch's compact form, which the gate
// writes, only the last message (i = n-1) carries sig and the others
// read "<node id> <i>/<n>"; in the every-message form, written before,
// every message carries it. Readers take both (docs/checkpoints.md, "The
// publisher").
const AttestationHeader = "Roompub-Attestation"

// MaxBatch is the largest batch an attestation may name (n <=
// 1,000,000).
const MaxBatch = 1_000_000

// attestationTag starts every attestation's signed message, so
// the signature can never be replayed as any other roompub signature.
const attestationTag = "roompub-attestation/v1\n"

// sigLen is the length of an Ed25519 signature in unpadded base64url.
var sigLen = base64.RawURLEncoding.EncodedLen(ed25519.SignatureSize)

// JournalPosition is the attested position of a journal entry: "seq:" +
// the entry's chain seq in decimal.
func JournalPosition(seq int64) string { return "seq:" + strconv.FormatInt(seq, 10) }

// OwnedJournalPosition is the attested position of a journal entry of a
// chain owned by a named identity: JournalPosition(seq) + " owner:" +
// owner, the identity token of the chain's owner; owner "" (the anonymous
// identity, and every entry stored before chains had owners) is
// JournalPosition(seq). The attestation thus binds the owner to the
// entry, so an owner header changed after the fact does not verify
// (docs/secure-mode.md, "Chains belong to the identity that starts them").
func OwnedJournalPosition(seq int64, owner string) string {
	if owner == "" {
		return JournalPosition(seq)
	}
	return JournalPosition(seq) + " owner:" + owner
}

// JournalPositionOwner returns the owner an OwnedJournalPosition names
// ("" for the anonymous identity); ok is false when position is no
// journal position ("seq:" + decimal, then " owner:" + a non-empty owner
// or nothing).
func JournalPositionOwner(position string) (owner string, ok bool) {
	rest, ok := strings.CutPrefix(position, "seq:")
	if !ok {
		return "", false
	}
	seq, owner, named := strings.Cut(rest, " owner:")
	if n, err := strconv.ParseInt(seq, 10, 64); err != nil || strconv.FormatInt(n, 10) != seq || (named && owner == "") {
		return "", false
	}
	return owner, true
}

// EntryPosition is the attested position of a journal message whose data
// is entry and whose HeaderOwner is owner: OwnedJournalPosition of the
// entry's seq (events.ParseEntry). Errors: the parse error, or
// ErrBadAttestation wrapped for an entry without a seq.
func EntryPosition(entry []byte, owner string) (string, error) {
	e, err := events.ParseEntry(entry)
	if err != nil {
		return "", err
	}
	seq, ok := e.Seq()
	if !ok {
		return "", fmt.Errorf("%w: the entry has no chain position", ErrBadAttestation)
	}
	return OwnedJournalPosition(seq, owner), nil
}

// NoticePosition is the attested position of a loss notice: it is no
// leaf of the room's tree, and its content names what it acknowledges.
const NoticePosition = "notice"

// RecordPosition is the attested position of an execution record: "index:"
// + the 0-based ordinal of the message among all messages on the room's
// exec subject in stream order, in decimal.
func RecordPosition(index uint64) string { return "index:" + strconv.FormatUint(index, 10) }

// Statement is what an attestation says of one message: it is on
// Subject of Room at Position (JournalPosition or RecordPosition) and its
// data hashes to Content (ContentHash). Fields hold no newline (room ids,
// subjects and positions never do); verification refuses one that does.
type Statement struct {
	Room, Subject, Position string
	Content                 [32]byte
}

// Digest is SHA-256 of the statement's text:
//
//	room + "\n" + subject + "\n" + position + "\n" + hex(content) + "\n"
func (s Statement) Digest() [32]byte {
	var buf [256]byte
	b := append(buf[:0], s.Room...)
	b = append(b, '\n')
	b = append(b, s.Subject...)
	b = append(b, '\n')
	b = append(b, s.Position...)
	b = append(b, '\n')
	b = hex.AppendEncode(b, s.Content[:])
	b = append(b, '\n')
	return sha256.Sum256(b)
}

// hasNewline reports whether a field of s holds a newline, which would make
// two statements share one text.
func (s Statement) hasNewline() bool {
	return strings.ContainsRune(s.Room, '\n') || strings.ContainsRune(s.Subject, '\n') || strings.ContainsRune(s.Position, '\n')
}

// batchMessage is what the Ed25519 key signs for a batch, with no
// hashing beyond Ed25519's own:
//
//	"roompub-attestation/v1\n" + decimal(n) + "\n" + for each i: hex(digest_i) + "\n"
func batchMessage(digests [][32]byte) []byte { return appendBatchMessage(nil, digests) }

// verifyDigests reports whether sig is pub's signature of the batch of
// statements whose digests are given, building the signed message in buf
// (reused; returned for the next call): the one signature check of
// (*Trust).VerifyBatch and BatchCollector.
func verifyDigests(pub ed25519.PublicKey, sig [64]byte, digests [][32]byte, buf []byte) ([]byte, bool) {
	buf = appendBatchMessage(buf[:0], digests)
	return buf, ed25519.Verify(pub, buf, sig[:])
}

func appendBatchMessage(b []byte, digests [][32]byte) []byte {
	if n := len(attestationTag) + 8 + len(digests)*65; cap(b) < n {
		b = make([]byte, 0, n)
	}
	b = append(b, attestationTag...)
	b = strconv.AppendInt(b, int64(len(digests)), 10)
	b = append(b, '\n')
	for i := range digests {
		b = hex.AppendEncode(b, digests[i][:])
		b = append(b, '\n')
	}
	return b
}

// AttestationOf returns a stored message's AttestationHeader from its
// headers (a nats.Header): its one value, several values joined by ", "
// (which ParseAttestation refuses: a message carries one attestation, and
// a reader that took the first of several would admit what the others
// refuse), or "". Every role reads the header through it.
func AttestationOf(h map[string][]string) string {
	vs := h[AttestationHeader]
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	default:
		return strings.Join(vs, ", ")
	}
}

// Form is how the headers of an attested batch carry its one signature
// (AttestationHeader). Readers take both; the gate writes the room
// stream's (room.CompactAttestations).
type Form uint8

const (
	// FormCompact: the signature on the batch's last message only, the
	// others "<node id> <i>/<n>".
	FormCompact Form = iota
	// FormEveryMessage: the signature on every message, the form written
	// before FormCompact, which readers of earlier releases need.
	FormEveryMessage
)

// AttestBatch signs the statements of one atomic batch, in the order its
// messages are appended, with one Ed25519 signature and returns the
// AttestationHeader value of each in FormCompact: headers[i] goes on
// message i. An empty batch gets no headers. It panics if len(stmts) >
// MaxBatch or k holds no usable Ed25519 key (no events.HostKey
// constructor produces one); both are programming errors.
func AttestBatch(k *events.HostKey, stmts []Statement) []string {
	digests := make([][32]byte, len(stmts))
	for i := range stmts {
		digests[i] = stmts[i].Digest()
	}
	return AttestDigests(k, digests, FormCompact)
}

// AttestDigests is AttestBatch for a caller that has the statements'
// digests (Statement.Digest) already, e.g. computed in parallel while the
// batch was being decided, with the headers in form f. It panics as
// AttestBatch does.
func AttestDigests(k *events.HostKey, digests [][32]byte, f Form) []string {
	if len(digests) == 0 {
		return nil
	}
	if len(digests) > MaxBatch {
		panic("checkpoint.AttestBatch: batch of " + strconv.Itoa(len(digests)) + " messages")
	}
	hk, err := signingKey(k)
	if err != nil {
		panic("checkpoint.AttestBatch: " + err.Error())
	}
	sig := ed25519.Sign(hk.priv, batchMessage(digests))
	a := Attestation{Signer: hk.nodeID, Count: len(digests)}
	copy(a.Sig[:], sig)
	return a.headers(f)
}

// headers returns the header of each message of a's batch in form f
// (a's Signer, Sig and Count).
func (a Attestation) headers(f Form) []string {
	headers := make([]string, a.Count)
	var b []byte
	for i := range headers {
		a.Index, a.Signed = i, f == FormEveryMessage || i == a.Count-1
		b = a.appendTo(b[:0])
		headers[i] = string(b)
	}
	return headers
}

// Reform rewrites the headers of one whole batch, in batch order, into
// form f: the same signer, signature and places. Errors are
// ParseAttestation's, or ErrBadAttestation when the headers are not one
// batch (VerifyBatch's rule, without the signature).
func Reform(headers []string, f Form) ([]string, error) {
	if len(headers) == 0 {
		return nil, nil
	}
	last, err := parseBatch(headers)
	if err != nil {
		return nil, err
	}
	return last.headers(f), nil
}

// parseBatch parses the headers of one whole batch (at least one), in
// batch order, and returns the last one's attestation, which carries the
// batch's signature in both forms: header i must be well formed, with
// index i and count n, and each of one batch with message 0 (SameBatch,
// as BatchRun joins them). Errors: ParseAttestation's, ErrBadAttestation.
func parseBatch(headers []string) (last Attestation, err error) {
	var first Attestation
	for i, h := range headers {
		a, err := ParseAttestation(h)
		if err != nil {
			return Attestation{}, err
		}
		if i == 0 {
			first = a
		}
		if a.Index != i || a.Count != len(headers) || !a.SameBatch(first) {
			return Attestation{}, fmt.Errorf("%w: header %d is %d/%d of another batch, want %d/%d of one", ErrBadAttestation, i, a.Index, a.Count, i, len(headers))
		}
		last = a
	}
	return last, nil
}

// Attest returns the AttestationHeader value by which k attests that the
// message with content hash content is on subject of roomID at position:
// AttestBatch of that one statement (suffix "0/1", signed in both forms).
// It panics as AttestBatch does.
func Attest(k *events.HostKey, roomID, subject, position string, content [32]byte) string {
	return AttestBatch(k, []Statement{{Room: roomID, Subject: subject, Position: position, Content: content}})[0]
}

// HeaderLen is the length of the AttestationHeader value a key with node id
// nodeID writes, in form f, on message index of a batch of count, without
// signing (the gate counts it toward a message's size before the batch is
// decided).
func HeaderLen(nodeID string, index, count int, f Form) int {
	n := len(nodeID) + 1 + decimalLen(index) + 1 + decimalLen(count)
	if f == FormEveryMessage || index == count-1 {
		n += sigLen + 1
	}
	return n
}

func decimalLen(v int) int {
	n := 1
	for ; v >= 10; v /= 10 {
		n++
	}
	return n
}

// Attestation is the parsed form of an AttestationHeader value. Parsing
// checks the form only; (*Trust).VerifyBatch and BatchCollector check the
// signature.
type Attestation struct {
	Signer string   // the publisher's node id
	Sig    [64]byte // Ed25519 signature of the batch, when Signed
	Index  int      // 0-based index of the message in its batch, < Count
	Count  int      // batch size, 1..MaxBatch
	// Signed says the header carries Sig: always on a batch's last
	// message, and on every message of the every-message form; a
	// compact batch's other messages carry none (Sig is zero).
	Signed bool
}

// String is the header value of a: what ParseAttestation reads back.
func (a Attestation) String() string { return string(a.appendTo(nil)) }

// appendTo appends the header value of a to b.
func (a Attestation) appendTo(b []byte) []byte {
	b = append(b, a.Signer...)
	b = append(b, ' ')
	if a.Signed {
		b = base64.RawURLEncoding.AppendEncode(b, a.Sig[:])
		b = append(b, ' ')
	}
	b = strconv.AppendInt(b, int64(a.Index), 10)
	b = append(b, '/')
	return strconv.AppendInt(b, int64(a.Count), 10)
}

// SameBatch reports whether a and o, two messages' attestations, may be
// of one batch: same signer and size, the same signature where both carry
// one, and one form: a message without a signature (compact) fits only
// others without one and the batch's last, never a signed message before
// the last (every-message form).
func (a Attestation) SameBatch(o Attestation) bool {
	if a.Signer != o.Signer || a.Count != o.Count {
		return false
	}
	switch {
	case a.Signed && o.Signed:
		return a.Sig == o.Sig
	case a.Signed:
		return a.Index == a.Count-1
	case o.Signed:
		return o.Index == o.Count-1
	}
	return true
}

// ParseAttestation reads an AttestationHeader value. The form is exact
// (docs/checkpoints.md, "The publisher: `serve --publisher-key`"): fields
// separated by single spaces: a node id (its key is checked only against a
// Trust); then, on a signed message, 86 characters of strict unpadded
// base64url (RFC 4648 section 5) encoding 64 bytes; last "i/n" in decimal
// without leading zeros, with i < n and 1 <= n <= MaxBatch. A batch's last
// message (i = n-1) is always signed: its signature is the batch's.
// Errors: ErrNoAttestation (empty header), ErrBadAttestation (wrapped).
func ParseAttestation(header string) (Attestation, error) {
	var a Attestation
	if header == "" {
		return a, ErrNoAttestation
	}
	nodeID, rest, ok1 := strings.Cut(header, " ")
	b64, pos, signed := strings.Cut(rest, " ")
	if !signed {
		b64, pos = "", rest
	}
	if !ok1 || nodeID == "" || strings.Contains(pos, " ") {
		return a, fmt.Errorf("%w: header %q is not \"<node id> <signature> <i>/<n>\" or \"<node id> <i>/<n>\"", ErrBadAttestation, clip(header))
	}
	if !strings.HasPrefix(nodeID, events.NodeIDPrefix) {
		return a, fmt.Errorf("%w: %q is not a node id", ErrBadAttestation, clip(nodeID))
	}
	if signed {
		if len(b64) != sigLen {
			return a, fmt.Errorf("%w: signature is %d characters, want %d", ErrBadAttestation, len(b64), sigLen)
		}
		if n, err := base64.RawURLEncoding.Strict().Decode(a.Sig[:], []byte(b64)); err != nil || n != ed25519.SignatureSize {
			return a, fmt.Errorf("%w: signature is not unpadded base64url of %d bytes", ErrBadAttestation, ed25519.SignatureSize)
		}
	}
	is, ns, ok := strings.Cut(pos, "/")
	index, ok1 := parseDecimal(is)
	count, ok2 := parseDecimal(ns)
	if !ok || !ok1 || !ok2 || count < 1 || count > MaxBatch || index >= count {
		return a, fmt.Errorf("%w: batch position %q is not \"<i>/<n>\" with i < n <= %d", ErrBadAttestation, clip(pos), MaxBatch)
	}
	if !signed && index == count-1 {
		return a, fmt.Errorf("%w: message %d/%d carries no signature, and the last message of a batch carries its batch's", ErrBadAttestation, index, count)
	}
	a.Signer, a.Index, a.Count, a.Signed = nodeID, index, count, signed
	return a, nil
}

// parseDecimal reads a decimal of at most 7 digits without sign or leading
// zeros.
func parseDecimal(s string) (int, bool) {
	if s == "" || len(s) > 7 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		v = v*10 + int(s[i]-'0')
	}
	return v, true
}

// Trust is a set of trusted publisher keys, named by node id
// (--trusted-publisher). It is immutable after NewTrust and safe for
// concurrent use. A nil *Trust trusts nobody.
type Trust struct {
	keys      map[string]ed25519.PublicKey
	ids       []string // sorted
	verifiers note.Verifiers
	origin    string // the deployment origin room checkpoints must carry; "" for any
}

// WithOrigin returns a copy of t whose room checkpoints must name the
// deployment origin o (RoomOrigin; checkpoints in the room-id form stay
// valid). Errors are CheckOrigin's.
func (t *Trust) WithOrigin(o string) (*Trust, error) {
	if err := CheckOrigin(o); err != nil {
		return nil, err
	}
	if t == nil {
		t = &Trust{verifiers: note.VerifierList()}
	}
	c := *t
	c.origin = o
	return &c, nil
}

// Origin is the deployment origin set by WithOrigin, or "".
func (t *Trust) Origin() string {
	if t == nil {
		return ""
	}
	return t.origin
}

// NewTrust returns the set of the given node ids; duplicates collapse. It
// fails on the first id that is not a canonical Ed25519 node id
// (events.ErrBadDIDKey). An empty set is allowed and trusts nobody.
func NewTrust(nodeIDs ...string) (*Trust, error) {
	t := &Trust{keys: make(map[string]ed25519.PublicKey, len(nodeIDs))}
	var vs []note.Verifier
	for _, id := range nodeIDs {
		if _, dup := t.keys[id]; dup {
			continue
		}
		pub, err := parseNodeID(id)
		if err != nil {
			return nil, fmt.Errorf("trusted publisher: %w", err)
		}
		v, err := NewNoteVerifier(id)
		if err != nil {
			return nil, fmt.Errorf("trusted publisher: %w", err)
		}
		t.keys[id] = pub
		t.ids = append(t.ids, id)
		vs = append(vs, v)
	}
	slices.Sort(t.ids)
	t.verifiers = note.VerifierList(vs...)
	return t, nil
}

// Len is the number of trusted keys.
func (t *Trust) Len() int {
	if t == nil {
		return 0
	}
	return len(t.ids)
}

// NodeIDs returns the trusted node ids, sorted (for messages to humans).
func (t *Trust) NodeIDs() []string {
	if t == nil {
		return nil
	}
	return slices.Clone(t.ids)
}

// Trusts reports whether nodeID is in the set.
func (t *Trust) Trusts(nodeID string) bool {
	if t == nil {
		return false
	}
	_, ok := t.keys[nodeID]
	return ok
}

// Verifiers returns the signed-note verifiers of the trusted keys, for
// note.Open (C2SP signed-note).
func (t *Trust) Verifiers() note.Verifiers {
	if t == nil {
		return note.VerifierList()
	}
	return t.verifiers
}

// AttestationSigner returns the node id a well-formed header names if that
// key is trusted, without checking the signature: the readers' optimistic
// path, where a covering checkpoint authenticates the leaf instead.
// Errors: ErrNoAttestation, ErrBadAttestation (malformed),
// ErrUntrustedPublisher.
func (t *Trust) AttestationSigner(header string) (string, error) {
	a, err := ParseAttestation(header)
	if err != nil {
		return "", err
	}
	if !t.Trusts(a.Signer) {
		return "", fmt.Errorf("%w: attestation by %s", ErrUntrustedPublisher, clip(a.Signer))
	}
	return a.Signer, nil
}

// VerifyBatch checks the headers of one whole batch against its messages'
// statements, in batch order, and returns the signer's node id: there are n
// of each, header i is well-formed with index i and count n, all name the
// same signer and are of one form (parseBatch), the signer is in t and
// the last header's signature verifies over the statements' digests.
// Errors: ErrNoAttestation (a header is empty), ErrBadAttestation
// (malformed, not one batch, a field with a newline, or a signature that
// does not verify), ErrUntrustedPublisher.
func (t *Trust) VerifyBatch(headers []string, stmts []Statement) (signer string, err error) {
	if len(headers) == 0 || len(headers) != len(stmts) {
		return "", fmt.Errorf("%w: %d headers for %d messages", ErrBadAttestation, len(headers), len(stmts))
	}
	last, err := parseBatch(headers)
	if err != nil {
		return "", err
	}
	pub, ok := t.key(last.Signer)
	if !ok {
		return "", fmt.Errorf("%w: attestation by %s", ErrUntrustedPublisher, clip(last.Signer))
	}
	digests := make([][32]byte, len(stmts))
	for i := range stmts {
		if stmts[i].hasNewline() {
			return "", fmt.Errorf("%w: room, subject or position of message %d holds a newline", ErrBadAttestation, i)
		}
		digests[i] = stmts[i].Digest()
	}
	if _, ok := verifyDigests(pub, last.Sig, digests, nil); !ok {
		return "", badSignature(last.Signer, stmts[0], len(stmts))
	}
	return last.Signer, nil
}

// badSignature is the refusal of a batch of n whose signature by signer
// does not verify; first is its message 0's statement, named when it is
// the only one.
func badSignature(signer string, first Statement, n int) error {
	if n == 1 {
		return fmt.Errorf("%w: signature by %s does not verify for %s %s %s", ErrBadAttestation, signer, clip(first.Subject), clip(first.Position), hex.EncodeToString(first.Content[:]))
	}
	return fmt.Errorf("%w: signature by %s does not verify for this batch of %d", ErrBadAttestation, signer, n)
}

// VerifyAttestation checks the AttestationHeader value of a batch of one
// against the message it is on and returns the signer's node id. Errors:
// ErrNoAttestation (empty header), ErrIncompleteBatch (the header names a
// batch of more than one message: use VerifyBatch or a BatchCollector),
// ErrBadAttestation (malformed, a field with a newline, or a signature that
// does not verify for this room, subject, position and content),
// ErrUntrustedPublisher (a well-formed header by a key not in t).
func (t *Trust) VerifyAttestation(header, roomID, subject, position string, content [32]byte) (signer string, err error) {
	a, err := ParseAttestation(header)
	if err != nil {
		return "", err
	}
	if a.Count > 1 {
		if !t.Trusts(a.Signer) {
			return "", fmt.Errorf("%w: attestation by %s", ErrUntrustedPublisher, clip(a.Signer))
		}
		return "", fmt.Errorf("%w: message %d of a batch of %d verified alone", ErrIncompleteBatch, a.Index, a.Count)
	}
	return t.VerifyBatch([]string{header}, []Statement{{Room: roomID, Subject: subject, Position: position, Content: content}})
}

func (t *Trust) key(nodeID string) (ed25519.PublicKey, bool) {
	if t == nil {
		return nil, false
	}
	pub, ok := t.keys[nodeID]
	return pub, ok
}
