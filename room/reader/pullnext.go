package reader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// pullRequest is the body of a pull request to a consumer
// ($JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>; nats-server's
// JSApiConsumerGetNextRequest, ADR-13): up to Batch messages, the
// request lapsing after Expires (nanoseconds on the wire).
type pullRequest struct {
	Expires  time.Duration `json:"expires"`
	Batch    int           `json:"batch"`
	MaxBytes int           `json:"max_bytes,omitempty"`
}

// pullGrace is how long past its expiry, and past its last delivery, a
// pull waits for the server's word that the request ended (408) before
// taking it as ended: deliveries still on their way would be dropped with
// the subscription, and the consumer would number the next one past them.
const pullGrace = 2 * time.Second

// errConsumerGone: the server says the consumer of a pull no longer
// exists (409 Consumer Deleted), or nothing answers the pull (503).
var errConsumerGone = errors.New("the consumer is gone or does not answer")

// pulled is what one pull request delivered: the stored messages, in the
// order they arrive, and once Messages is closed, Error.
type pulled struct {
	msgs chan *nats.Msg
	err  error // written before msgs is closed
}

// Messages returns the stored messages as they arrive; it is closed when
// the request ended.
func (p *pulled) Messages() <-chan *nats.Msg { return p.msgs }

// Error says why the request ended badly, once Messages is closed: nil
// when it ended as pull requests end (its batch delivered, no message
// left, expired, or a pull the server cut short that the next one
// repeats).
func (p *pulled) Error() error { return p.err }

// ackPrefix begins the reply subject of every message a consumer
// delivers: the subject its acknowledgement goes to.
const ackPrefix = "$JS.ACK."

// pullNext sends one pull request for up to n messages and maxBytes bytes
// (at least the largest message, or it could never be delivered) to the
// consumer durable of stream, lapsing after wait, and returns what it
// delivers as it comes. It tells a stored message from the server's status by
// its acknowledgement reply subject (ackPrefix), which only a delivery
// has, never by its header: nats.go's own pull consumer takes a stored
// message with no data whose header block begins with a status line
// ("NATS/1.0 409 Consumer Deleted", written around the gate) for the
// server's status, and ends every fetch on it, so a follower never got
// past it (docs/design.md, "Where a direct get says a message is
// stored"). Errors: the subscription's or the publish's; a status that
// says the consumer is gone, or one of no known meaning, as Error.
func pullNext(ctx context.Context, nc *nats.Conn, stream, durable string, n, maxBytes int, wait time.Duration) (*pulled, error) {
	inbox := nc.NewInbox()
	ch := make(chan *nats.Msg, n+16)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, fmt.Errorf("pull: %w", err)
	}
	body, err := json.Marshal(pullRequest{Expires: wait, Batch: n, MaxBytes: maxBytes})
	if err == nil {
		err = nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+stream+"."+durable, inbox, body)
	}
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("pull: %w", err)
	}
	// Buffered for the whole batch: the goroutine never waits on a
	// reader that stopped reading.
	out := &pulled{msgs: make(chan *nats.Msg, n)}
	go func() {
		defer close(out.msgs)
		defer func() { _ = sub.Unsubscribe() }()
		timer := time.NewTimer(wait + pullGrace)
		defer timer.Stop()
		for got := 0; got < n; {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
				return // the server's word was lost: the next pull asks again
			case m := <-ch:
				if strings.HasPrefix(m.Reply, ackPrefix) {
					got++
					out.msgs <- m
					// Re-armed at each delivery, as a slow link brings
					// a large batch in after its expiry.
					timer.Reset(wait + pullGrace)
					continue
				}
				if end, err := pullStatus(durable, m); end {
					out.err = err
					return
				}
			}
		}
	}()
	return out, nil
}

// pullStatus reads m, a message without an acknowledgement subject (the
// server's status to a pull request, ADR-13), and reports whether the
// request ended, and, when it ended badly, why.
func pullStatus(durable string, m *nats.Msg) (end bool, err error) {
	status, desc := m.Header.Get("Status"), m.Header.Get("Description")
	switch status {
	case "":
		return false, nil // no status: nothing of the request's
	case "100":
		return false, nil // a heartbeat or flow control (none is asked for)
	case "404", "408":
		return true, nil // no message now; the request expired
	case "503":
		return true, fmt.Errorf("consumer %s: %w: %s no responders", durable, errConsumerGone, status)
	case "409":
		d := strings.ToLower(desc)
		switch {
		case strings.Contains(d, "batch completed"):
			return true, nil // its bytes delivered: the next pull asks again
		case strings.Contains(d, "consumer deleted"):
			return true, fmt.Errorf("consumer %s: %w: %s %s", durable, errConsumerGone, status, desc)
		case strings.Contains(d, "push based"):
			return true, fmt.Errorf("consumer %s: %s %s", durable, status, desc)
		}
		// Leadership change, server shutdown, batch or bytes limits,
		// too many waiting requests: this request is over (the caller
		// says so), the next one asks again.
		return true, fmt.Errorf("consumer %s: pull ended: %s %s", durable, status, desc)
	}
	return true, fmt.Errorf("consumer %s: pull request: status %s %s", durable, status, desc)
}
