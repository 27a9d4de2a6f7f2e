package reader

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// leaderGetTimeout bounds one stream-get request to the stream leader.
const leaderGetTimeout = 10 * time.Second

// leaderHasMore reports whether the stream leader holds a message on any
// of filters with a sequence in (after, last]. A replay asks it before it
// takes "nothing pending" for the end: an ordered consumer is an R1
// consumer that the server may place on any replica, and on a follower
// that lags (routes cut and just healed) it reports nothing pending while
// the leader holds more. The stream-get API ($JS.API.STREAM.MSG.GET) is
// answered by the leader, unlike a direct get, which any replica answers
// from its own copy.
func leaderHasMore(ctx context.Context, nc *nats.Conn, stream string, filters []string, after, last uint64) (bool, error) {
	if after >= last {
		return false, nil
	}
	for _, f := range filters {
		m, err := jsapi.LeaderGetRaw(ctx, nc, stream, leaderGetTimeout, map[string]any{"seq": after + 1, "next_by_subj": f})
		if err != nil {
			return false, err
		}
		if m != nil && m.Sequence <= last {
			return true, nil
		}
	}
	return false, nil
}
