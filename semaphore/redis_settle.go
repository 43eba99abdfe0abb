package semaphore

import (
	"context"
	"time"

	"github.com/ratesem/ratesem/internal/remote"
)

// begin is Begin over Redis: the admission of a call of n units that
// Call.End ends (RateSemaphore.beginRemote keeps it with the Call, not among
// the calls Release ends). A call of 0 units makes its admission round trip
// too (Acquire(ctx, 0) makes none), so that End has a call in Redis to
// settle a debit on. The call is reported (Admitted) before it is returned;
// if the observer panics, the call is released first.
func (r *redisSem) begin(ctx context.Context, n int64) (*remote.Call, error) {
	var since time.Time
	if r.obs != nil {
		since = time.Now()
	}
	c, err := r.admit(ctx, n, true)
	if err != nil {
		r.observeFailed(n, since, err)
		return nil, err
	}
	r.observeAdmitted(n, since, c)
	return c, nil
}

// endCall is Call.End over Redis for the call c of n units: c leaves
// flight in Redis in the background, settled to actual units when they
// differ from n (remote.Call.ReleaseSettled: a refund where the window
// still counts it, a debit from now on). It never waits on Redis.
func (r *redisSem) endCall(c *remote.Call, n, actual int64) {
	if actual == n {
		c.Release()
		return
	}
	c.ReleaseSettled([]int64{actual})
}
