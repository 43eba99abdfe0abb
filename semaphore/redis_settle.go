package semaphore

import (
	"context"

	"github.com/ratesem/ratesem"
)

// begin is Begin over Redis. A call of 0 units makes its admission round
// trip too (Acquire(ctx, 0) makes none), so that End has a call in Redis to
// settle a debit on.
func (r *redisSem) begin(ctx context.Context, n int64) error {
	if n != 0 {
		return r.acquire(ctx, n)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := r.eng.Acquire(ctx, r.name, r.charges(0))
	if err != nil {
		return err
	}
	r.hold(c, 0)
	r.observe(ratesem.Event{Kind: ratesem.Admitted})
	return nil
}

// end is Call.End over Redis: it ends the oldest call of this process of
// exactly n units (as Release(n)), settled to actual units in Redis in the
// background (redisSem.releaseSettled); a call of 0 units from begin too.
func (r *redisSem) end(n, actual int64) {
	if n != 0 {
		r.releaseSettled(n, actual)
		return
	}
	r.mu.Lock()
	if len(r.held[0]) == 0 {
		r.mu.Unlock()
		return
	}
	h := r.held[0][0]
	r.popHeld(0)
	r.mu.Unlock()
	h.call.ReleaseSettled([]int64{actual})
}
