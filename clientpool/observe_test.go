package clientpool_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
)

// poolRecorder keeps the pool's events; it calls the pool from each one
// (Len and Snapshot take the pool's lock), which would deadlock if an event
// came with the lock held.
type poolRecorder struct {
	mu  sync.Mutex
	p   *clientpool.Pool
	evs []ratesem.Event
}

func (r *poolRecorder) observe(e ratesem.Event) {
	if r.p != nil {
		_ = r.p.Len()
	}
	r.mu.Lock()
	e.Err = nil
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

func (r *poolRecorder) take() []ratesem.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.evs
	r.evs = nil
	return evs
}

// The Pool reports per charge: queued, admitted with the wait, cancelled,
// refused; paused with its source; evicted keys after the lock is let go.
func TestPoolObserverEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &poolRecorder{}
		p := newPool(t, []clientpool.Rule{ruleN("ip", 1, time.Second)},
			clientpool.WithObserver(rec.observe), clientpool.WithMaxKeys(1))
		rec.p = p
		a := clientpool.Charge{Rule: "ip", Key: "a", Weight: 1}
		tk := acquire(t, p, a)
		tk.Release()
		assert.Equal(t, []ratesem.Event{{Kind: ratesem.Admitted, Rule: "ip", Key: "a", Weight: 1}}, rec.take())

		// The window holds until 1s: the next call queues and waits 1s.
		tk = acquire(t, p, a)
		assert.Equal(t, []ratesem.Event{
			{Kind: ratesem.Queued, Rule: "ip", Key: "a", Weight: 1},
			{Kind: ratesem.Admitted, Rule: "ip", Key: "a", Weight: 1, Wait: time.Second, Queued: true},
		}, rec.take())

		// Held: a call cancelled after 300ms.
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		_, err := p.Acquire(ctx, a)
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, []ratesem.Event{
			{Kind: ratesem.Queued, Rule: "ip", Key: "a", Weight: 1},
			{Kind: ratesem.Cancelled, Rule: "ip", Key: "a", Weight: 1, Wait: 300 * time.Millisecond, Queued: true},
		}, rec.take())

		// Refused at once: a new key in a full pool; a negative weight
		// (before the charges are known: no rule).
		_, err = p.Acquire(context.Background(), clientpool.Charge{Rule: "ip", Key: "b", Weight: 1})
		require.ErrorIs(t, err, ratesem.ErrTooManyKeys)
		_, err = p.Acquire(context.Background(), clientpool.Charge{Rule: "ip", Key: "a", Weight: -1})
		require.ErrorIs(t, err, ratesem.ErrNegativeWeight)
		assert.Equal(t, []ratesem.Event{
			{Kind: ratesem.Refused, Rule: "ip", Key: "b", Weight: 1},
			{Kind: ratesem.Refused},
		}, rec.take())

		// A throttle with Retry-After pauses the key: throttled, then
		// paused, both with the source. A direct Pause says caller.
		p.Throttled(clientpool.Throttle{Status: 429, RetryAfter: 2 * time.Second}, tk.Charges())
		evs := rec.take()
		require.Len(t, evs, 2)
		assert.Equal(t, ratesem.Event{Kind: ratesem.Throttled, Rule: "ip", Key: "a", Weight: 1, Status: 429, Source: ratesem.SourceRetryAfter}, evs[0])
		assert.Equal(t, ratesem.Paused, evs[1].Kind)
		assert.Equal(t, ratesem.SourceRetryAfter, evs[1].Source)
		assert.GreaterOrEqual(t, evs[1].Pause, 2*time.Second)
		assert.Equal(t, time.Now().Add(evs[1].Pause), evs[1].Until)
		p.Throttled(clientpool.Throttle{Status: 418}, tk.Charges()) // same episode: no pause
		assert.Equal(t, []ratesem.Event{{Kind: ratesem.Throttled, Rule: "ip", Key: "a", Weight: 1, Status: 418, Source: ratesem.SourceBackoff}}, rec.take())
		tk.Release()
		require.NoError(t, p.Pause("ip", "a", time.Now().Add(time.Hour)))
		assert.Equal(t, []ratesem.Event{{Kind: ratesem.Paused, Rule: "ip", Key: "a", Pause: time.Hour, Until: time.Now().Add(time.Hour), Source: ratesem.SourceCaller}}, rec.take())

		// Once its pause and window are over, key a is evicted for b: the
		// eviction is reported, then b's admission.
		time.Sleep(2 * time.Hour)
		acquire(t, p, clientpool.Charge{Rule: "ip", Key: "b", Weight: 1}).Release()
		assert.Equal(t, []ratesem.Event{
			{Kind: ratesem.Evicted, Rule: "ip", Key: "a"},
			{Kind: ratesem.Admitted, Rule: "ip", Key: "b", Weight: 1},
		}, rec.take())
	})
}

// Metrics fed by a Pool: one count per charge, and the queue depth back to
// zero once every caller is through.
func TestPoolObserverMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var m ratesem.Metrics
		p := newPool(t, []clientpool.Rule{ruleN("ip", 2, time.Second), ruleN("acct", 10, time.Second)},
			clientpool.WithObserver(m.Observe))
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() {
				time.Sleep(time.Duration(i))
				tk := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 1}, clientpool.Charge{Rule: "acct", Key: fmt.Sprint(i % 2), Weight: 1})
				time.Sleep(100 * time.Millisecond)
				tk.Release()
			})
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		assert.Equal(t, int64(8), m.Snapshot().QueueDepth) // 4 callers × 2 charges
		wg.Wait()
		s := m.Snapshot()
		assert.Equal(t, uint64(12), s.Admitted)
		assert.Equal(t, uint64(12), s.Wait.Count)
		assert.Equal(t, int64(0), s.QueueDepth)
		// Waits: 0, 0, 1.1s, 1.1s, 2.2s, 2.2s (less a few ns), per charge.
		assert.Equal(t, uint64(4), s.Wait.Counts[0])
		assert.Equal(t, uint64(8), s.Wait.Counts[11]) // ≤ 2.048s
	})
}
