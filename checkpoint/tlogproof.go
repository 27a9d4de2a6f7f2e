package checkpoint

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// TlogProofHeader is the first line of a C2SP tlog-proof.
const TlogProofHeader = "c2sp.org/tlog-proof@v1"

// TlogProof is a C2SP tlog-proof (c2sp.org/tlog-proof@v1): the inclusion
// proof of the entry at Index in the tree a signed checkpoint commits to,
// with optional opaque Extra data. It is the text
//
//	c2sp.org/tlog-proof@v1
//	extra <base64 of Extra>          (only when Extra is not empty)
//	index <Index>
//	<base64 hash>                    (one line per Path hash, leaf side first)
//	<empty line>
//	<the checkpoint, verbatim, with its signature and cosignature lines>
//
// base64 is the standard encoding of RFC 4648 section 4, with padding.
// The format says nothing of the checkpoint's signers or of what the
// entry is: Verify checks the inclusion only; the caller checks the
// checkpoint's signatures (Parse, ParseDeployment, a witness policy)
// and recomputes the leaf.
type TlogProof struct {
	Extra      []byte     // not authenticated: C2SP says never to trust it implicitly
	Index      uint64     // the entry's 0-based index in the log
	Path       [][32]byte // RFC 6962 audit path, leaf side first, at most 64 hashes
	Checkpoint []byte     // the signed note, verbatim (ends with a newline)
}

// Marshal returns p's text. It does not check p: ParseTlogProof of the
// output succeeds only for an Index, Path and Checkpoint it accepts.
func (p *TlogProof) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString(TlogProofHeader + "\n")
	if len(p.Extra) > 0 {
		b.WriteString("extra " + base64.StdEncoding.EncodeToString(p.Extra) + "\n")
	}
	b.WriteString("index " + strconv.FormatUint(p.Index, 10) + "\n")
	for _, h := range p.Path {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
	}
	b.WriteString("\n")
	b.Write(p.Checkpoint)
	return b.Bytes()
}

// ParseTlogProof reads a C2SP tlog-proof strictly, so that one proof has
// one text: the header line, an optional extra line whose data is not
// empty, an index line (decimal, no sign, no leading zeros), at most 64
// hash lines (each the canonical base64 of 32 bytes), an empty line, then
// the checkpoint, which must be non-empty and end with a newline (its
// signatures are not checked here). Errors wrap ErrBadProof and name the
// line.
func ParseTlogProof(text []byte) (*TlogProof, error) {
	rest := text
	line := 0
	next := func() (string, bool) {
		line++
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return "", false
		}
		l := string(rest[:i])
		rest = rest[i+1:]
		return l, true
	}
	bad := func(format string, args ...any) (*TlogProof, error) {
		return nil, fmt.Errorf("%w: tlog-proof line %d: %s", ErrBadProof, line, fmt.Sprintf(format, args...))
	}
	l, ok := next()
	if !ok || l != TlogProofHeader {
		return bad("want %q", TlogProofHeader)
	}
	p := &TlogProof{}
	if l, ok = next(); !ok {
		return bad("want an extra or index line")
	}
	if b64, isExtra := strings.CutPrefix(l, "extra "); isExtra {
		extra, err := base64.StdEncoding.Strict().DecodeString(b64)
		if err != nil || len(extra) == 0 || base64.StdEncoding.EncodeToString(extra) != b64 {
			return bad("extra is not canonical base64 of at least one byte")
		}
		p.Extra = extra
		if l, ok = next(); !ok {
			return bad("want an index line")
		}
	}
	dec, isIndex := strings.CutPrefix(l, "index ")
	if !isIndex {
		return bad("want \"index <N>\"")
	}
	idx, err := strconv.ParseUint(dec, 10, 64)
	if err != nil || strconv.FormatUint(idx, 10) != dec {
		return bad("index %q is not a decimal without sign or leading zeros", clip(dec))
	}
	p.Index = idx
	for {
		if l, ok = next(); !ok {
			return bad("want a hash line or the empty line before the checkpoint")
		}
		if l == "" {
			break
		}
		if len(p.Path) == maxProofLen {
			return bad("more than %d hashes", maxProofLen)
		}
		h, err := base64.StdEncoding.Strict().DecodeString(l)
		if err != nil || len(h) != 32 || base64.StdEncoding.EncodeToString(h) != l {
			return bad("not the canonical base64 of a 32-byte hash")
		}
		p.Path = append(p.Path, [32]byte(h))
	}
	if len(rest) == 0 || rest[len(rest)-1] != '\n' {
		line++
		return bad("the checkpoint is empty or does not end with a newline")
	}
	p.Checkpoint = bytes.Clone(rest)
	return p, nil
}

// Verify checks that leaf is the RFC 6962 leaf hash at p.Index in the
// tree of c (whose note the caller verified, and which must be p's
// Checkpoint), by VerifyInclusion (merkle/proof). Errors wrap ErrBadProof.
func (p *TlogProof) Verify(leaf [32]byte, c *Checkpoint) error {
	if !bytes.Equal(c.Note, p.Checkpoint) {
		return fmt.Errorf("%w: the checkpoint verified is not the proof's", ErrBadProof)
	}
	return VerifyInclusion(leaf, p.Index, c.Size, p.Path, c.Root)
}
