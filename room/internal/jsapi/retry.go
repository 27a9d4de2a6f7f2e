package jsapi

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// JetStream API error codes the retry classification names (nats-server's
// errors.json).
const (
	// ErrCodeLastSeqNotReady is JSStreamExpectedLastSeqPerSubjectNotReady
	// (10163): a clustered stream cannot check the expected last subject
	// sequence yet; the append did not happen and may be retried.
	ErrCodeLastSeqNotReady jetstream.ErrorCode = 10163
	// ErrCodeDupInProcess is JSStreamDuplicateMessageConflict (10158): an
	// append with the same Nats-Msg-Id is still being stored (a resend
	// after an ambiguous timeout, in a cluster); wait and read back.
	ErrCodeDupInProcess jetstream.ErrorCode = 10158
	// ErrCodeInsufficientResources is JSInsufficientResourcesErr (10023,
	// status 503): the server's JetStream store is full. It is not waited
	// out: space comes back only when an operator makes some.
	ErrCodeInsufficientResources jetstream.ErrorCode = 10023
)

// IsWrongLastSequence reports whether err is the server's refusal of an
// append whose expected last (subject) sequence no longer holds: another
// append came first.
func IsWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// IsStoreFull reports whether err is the server's JetStream store being
// full (ErrCodeInsufficientResources).
func IsStoreFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == ErrCodeInsufficientResources
}

// IsRetryable reports whether a JetStream call that failed with err may
// be tried again after a while: no responder or no stream response (no
// leader for now), a stream not ready to check an expected sequence, an
// append with the same id still in process, an atomic batch refused for
// too many in flight or lost by the server, any other 503 but a full
// store, or a leader that may be cut off (ErrStaleLeader).
func IsRetryable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case ErrCodeLastSeqNotReady, ErrCodeDupInProcess, jetstreamext.JSErrCodeAtomicPublishTooManyInflight,
			jetstreamext.JSErrCodeBatchPublishTooManyInflight, jetstreamext.JSErrCodeBatchPublishIncomplete:
			return true
		}
		return apiErr.Code == 503 && apiErr.ErrorCode != ErrCodeInsufficientResources
	}
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, ErrStaleLeader)
}

// Backoff is how long to wait before attempt (from 0) of a retried call:
// 25 ms doubling, at most 2 s.
func Backoff(attempt int) time.Duration {
	d := 25 * time.Millisecond << min(attempt, 6)
	return min(d, 2*time.Second)
}

// WithDefaultTimeout returns ctx bounded by d when it has no deadline (the
// nats.go jetstream convention), and the cancel func to call.
func WithDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
