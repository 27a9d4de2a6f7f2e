package reader

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// chainsHole is what the top-level chains member of an AuditReport without
// chains encodes to. Nothing before it in the encoding can hold it: the
// members ahead of it are numbers and strings, whose quotes are escaped.
const chainsHole = `"chains":null`

// WriteJSON writes the report to w as json.Marshal encodes it, followed by
// a newline, but the chains one at a time: the report of an audit of many
// chains is not made whole in memory first (at 100,000 chains its encoding
// was about 24 MB; docs/performance.md, "Audit memory"). Errors: w's, or
// the encoder's.
func (r *AuditReport) WriteJSON(w io.Writer) error {
	rest := *r
	rest.Chains = nil
	b, err := json.Marshal(&rest)
	if err != nil {
		return err
	}
	i := bytes.Index(b, []byte(chainsHole))
	if i < 0 {
		return errors.New("reader: the report's encoding has no chains member")
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(b[:i])
	if r.Chains == nil {
		bw.WriteString(chainsHole)
	} else {
		bw.WriteString(`"chains":[`)
		for k := range r.Chains {
			c, err := json.Marshal(&r.Chains[k])
			if err != nil {
				return err
			}
			if k > 0 {
				bw.WriteByte(',')
			}
			bw.Write(c)
		}
		bw.WriteByte(']')
	}
	bw.Write(b[i+len(chainsHole):])
	bw.WriteByte('\n')
	return bw.Flush()
}
