package jsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SubjectCounts returns how many messages the stream holds on each
// subject that filter matches (wildcards allowed), as the stream leader
// counts them ($JS.API.STREAM.INFO with subjects_filter, read page by page:
// the server lists at most 100,000 subjects a reply). Subjects with no
// message are absent. Each page waits at most timeout. Errors: ctx's, the
// request's (nats.ErrTimeout, nats.ErrNoResponders), the API's (a
// *jetstream.APIError, wrapped), or a reply the server did not form.
//
// Unlike jetstream.Stream.Info it leaves the caller's cached stream info
// alone, which other goroutines read.
func SubjectCounts(ctx context.Context, nc *nats.Conn, stream, filter string, timeout time.Duration) (map[string]uint64, error) {
	out := map[string]uint64{}
	for offset := 0; ; {
		body, err := json.Marshal(map[string]any{"subjects_filter": filter, "offset": offset})
		if err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		m, err := nc.RequestWithContext(rctx, "$JS.API.STREAM.INFO."+stream, body)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("subject counts of %s in stream %s: %w", filter, stream, err)
		}
		var resp struct {
			Error *jetstream.APIError `json:"error"`
			Total int                 `json:"total"`
			State struct {
				Subjects map[string]uint64 `json:"subjects"`
			} `json:"state"`
		}
		if err := json.Unmarshal(m.Data, &resp); err != nil {
			return nil, fmt.Errorf("subject counts of %s in stream %s: %w", filter, stream, err)
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("subject counts of %s in stream %s: %w", filter, stream, resp.Error)
		}
		for subj, n := range resp.State.Subjects {
			out[subj] = n
		}
		offset += len(resp.State.Subjects)
		if len(resp.State.Subjects) == 0 || offset >= resp.Total {
			return out, nil
		}
	}
}
