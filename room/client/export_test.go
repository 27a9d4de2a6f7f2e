package client

import "time"

// WithStopWait returns o with the wait after ctx ended a shipment (for
// the replies in flight, then for the head) set to d instead of
// stopTimeout, so that tests of a cut-off reply take d, not 5 s.
func WithStopWait(o ShipOptions, d time.Duration) ShipOptions {
	o.stopWait = d
	return o
}
