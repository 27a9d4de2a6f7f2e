package reader

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestPullStatus: how a message without an acknowledgement subject ends a
// pull request: the server's 404 and 408 end it as pull requests end, a
// heartbeat and a message with no status do not end it, a 409 Batch
// Completed ends it as the bytes asked for were delivered, and any other
// status ends it with an error naming the status (errConsumerGone for a
// consumer deleted or nothing answering).
func TestPullStatus(t *testing.T) {
	for _, c := range []struct {
		status, desc string
		end          bool
		err          string // "" none; else a substring of the error
	}{
		{"", "", false, ""},
		{"100", "Idle Heartbeat", false, ""},
		{"404", "No Messages", true, ""},
		{"408", "Request Timeout", true, ""},
		{"409", "Batch Completed", true, ""},
		{"409", "Consumer Deleted", true, "consumer d: the consumer is gone or does not answer: 409 Consumer Deleted"},
		{"409", "Consumer is push based", true, "consumer d: 409 Consumer is push based"},
		{"409", "Leadership Change", true, "consumer d: pull ended: 409 Leadership Change"},
		{"503", "", true, "consumer d: the consumer is gone or does not answer: 503 no responders"},
		{"500", "", true, "consumer d: pull request: status 500"},
	} {
		m := &nats.Msg{Header: nats.Header{}}
		if c.status != "" {
			m.Header.Set("Status", c.status)
			m.Header.Set("Description", c.desc)
		}
		end, err := pullStatus("d", m)
		gone := errors.Is(err, errConsumerGone)
		if end != c.end || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) ||
			gone != strings.Contains(c.err, "gone") {
			t.Errorf("%s %s: end %v, error %v; want %v, %q", c.status, c.desc, end, err, c.end, c.err)
		}
	}
}
