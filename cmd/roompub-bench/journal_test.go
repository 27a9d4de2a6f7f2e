package main

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestRetryInProcess: the raw side publishes again on the server's "in
// process" refusal (10164) and on nothing else, and gives up after
// inProcessTries.
func TestRetryInProcess(t *testing.T) {
	inProcess := fmt.Errorf("batch: %w", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Description: "wrong last sequence"})
	stale := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: 7"}
	for _, tc := range []struct {
		name      string
		errs      []error // what each call returns; past the end, inProcess
		wantCalls int
		wantErr   error
	}{
		{"stored at once", []error{nil}, 1, nil},
		{"stored on the third", []error{inProcess, inProcess, nil}, 3, nil},
		{"stale expectation", []error{stale}, 1, stale},
		{"in process stale after", []error{inProcess, stale}, 2, stale},
		{"always in process", nil, inProcessTries, inProcess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := retryInProcess(func() error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return inProcess
			})
			if calls != tc.wantCalls || err != tc.wantErr {
				t.Fatalf("calls %d, err %v; want %d, %v", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
}
