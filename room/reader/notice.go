package reader

import (
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// Notice is a loss notice a reader found in the stream: where, the
// notice, and, for a trusting reader, the publisher whose attestation it
// carries (Verified).
type Notice struct {
	Seq      uint64          `json:"stream_seq"`
	Notice   room.LossNotice `json:"notice"`
	Verified bool            `json:"verified"`
	Signer   string          `json:"signer,omitempty"`
}

// takeNotice keeps x's loss notice, or sets x aside: a message on a
// notice subject that is no loss notice of its room, or, for a trusting
// reader, one no trusted publisher attested.
func (r *Reader) takeNotice(x *prepared) *SetAside {
	at := events.Location{Seq: x.m.Seq}
	if x.noticeErr != nil {
		return r.aside(x.m, x.p, nil, []events.Problem{{Code: events.MalformedJSON, At: at, Reason: "not a loss notice: " + x.noticeErr.Error()}})
	}
	n := Notice{Seq: x.m.Seq, Notice: *x.notice}
	if r.trust != nil {
		if x.sigErr != nil {
			return r.aside(x.m, x.p, nil, []events.Problem{{Code: events.CheckpointMismatch, At: at, Reason: "a loss notice no trusted publisher attested: " + x.sigErr.Error()}})
		}
		n.Verified, n.Signer = true, x.signer
	}
	r.notices = append(r.notices, n)
	return nil
}

// Notices returns the loss notices read so far, in stream order.
func (r *Reader) Notices() []Notice { return r.notices }
