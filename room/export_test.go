package room

import "context"

// VerifyInBatches verifies msgs with r the way Audit and Follow do:
// prepared on workers in batches of the sizes cut returns (at least one
// message each), decided in stream order. It returns, per message, the
// event or the set-aside.
func VerifyInBatches(r *Reader, msgs []StreamMsg, cut func() int) ([]*Event, []*SetAside) {
	evs := make([]*Event, len(msgs))
	asides := make([]*SetAside, len(msgs))
	i := 0
	produce := func(ctx context.Context, emit func(*batch) bool) error {
		for from := 0; from < len(msgs); {
			to := min(from+max(cut(), 1), len(msgs))
			b := newBatch()
			for _, m := range msgs[from:to] {
				b.add(m, nil)
			}
			if !emit(b) {
				return ctx.Err()
			}
			from = to
		}
		return nil
	}
	err := runOrdered(context.Background(), r, produce, func(b *batch) error {
		for j := range b.xs {
			evs[i], asides[i] = r.apply(&b.xs[j])
			i++
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	return evs, asides
}
