package semaphore_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/semaphore"
)

// recorder is an observer that keeps every event and, to show that it runs
// without the semaphore's lock, reads the semaphore's Stats each time.
type recorder struct {
	mu  sync.Mutex
	s   *semaphore.RateSemaphore
	evs []ratesem.Event
}

func (r *recorder) observe(e ratesem.Event) {
	if r.s != nil {
		_ = r.s.Stats() // would deadlock if called with the lock held
	}
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

func (r *recorder) take() []ratesem.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.evs
	r.evs = nil
	for i := range evs {
		evs[i].Err = nil // compared apart
	}
	return evs
}

// Every way out of Acquire reports one event, with the wait on virtual time.
func TestObserverEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		s := semaphore.New(1, time.Second, semaphore.WithObserver(rec.observe))
		rec.s = s
		ctx := t.Context()

		require.NoError(t, s.Acquire(ctx, 1))
		assert.Equal(t, []ratesem.Event{{Kind: ratesem.Admitted, Weight: 1}}, rec.take())

		// Held: the next call queues; released at 200ms, it is admitted a
		// second after the release (the completion window).
		go func() { time.Sleep(200 * ms); s.Release(1) }()
		require.NoError(t, s.Acquire(ctx, 1))
		assert.Equal(t, []ratesem.Event{
			{Kind: ratesem.Queued, Weight: 1},
			{Kind: ratesem.Admitted, Weight: 1, Wait: 1200 * ms, Queued: true},
		}, rec.take())

		// Held again: a call with a 100ms budget waits for its deadline
		// (only a release can make room) and is cancelled.
		dctx, cancel := context.WithTimeout(ctx, 100*ms)
		err := s.Acquire(dctx, 1)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		evs := rec.evs
		require.Len(t, evs, 2)
		assert.Equal(t, ratesem.Cancelled, evs[1].Kind)
		assert.ErrorIs(t, evs[1].Err, context.DeadlineExceeded)
		assert.Equal(t, []ratesem.Event{
			{Kind: ratesem.Queued, Weight: 1},
			{Kind: ratesem.Cancelled, Weight: 1, Wait: 100 * ms, Queued: true},
		}, rec.take())

		// Fail fast: too heavy, negative, a context already done.
		require.ErrorIs(t, s.Acquire(ctx, 2), ratesem.ErrWeightTooLarge)
		require.ErrorIs(t, s.Acquire(ctx, -1), ratesem.ErrNegativeWeight)
		done, cancel := context.WithCancel(ctx)
		cancel()
		require.ErrorIs(t, s.Acquire(done, 1), context.Canceled)
		evs = rec.evs
		require.Len(t, evs, 3)
		assert.ErrorIs(t, evs[0].Err, ratesem.ErrWeightTooLarge)
		assert.ErrorIs(t, evs[1].Err, ratesem.ErrNegativeWeight)
		assert.ErrorIs(t, evs[2].Err, context.Canceled)
		assert.Equal(t, []ratesem.Event{
			{Kind: ratesem.Refused, Weight: 2},
			{Kind: ratesem.Refused, Weight: -1},
			{Kind: ratesem.Cancelled, Weight: 1},
		}, rec.take())

		// A deadline the admission would miss is refused as soon as that is
		// known (ErrDeadline), not cancelled.
		s.Release(1)
		dctx, cancel = context.WithTimeout(ctx, 500*ms)
		err = s.Acquire(dctx, 1)
		cancel()
		require.ErrorIs(t, err, ratesem.ErrDeadline)
		evs = rec.take()
		require.Len(t, evs, 2)
		assert.Equal(t, ratesem.Queued, evs[0].Kind)
		assert.Equal(t, ratesem.Refused, evs[1].Kind)
		assert.True(t, evs[1].Queued)

		// Pause reports the pause and its source; TryAcquire its admission.
		s.PauseFor(300 * ms)
		s.PauseFor(100 * ms) // shorter: no pause set, no event
		now := time.Now()
		assert.Equal(t, []ratesem.Event{{Kind: ratesem.Paused, Pause: 300 * ms, Until: now.Add(300 * ms), Source: ratesem.SourceCaller}}, rec.take())
		time.Sleep(2 * time.Second)
		require.True(t, s.TryAcquire(1))
		require.False(t, s.TryAcquire(1))
		assert.Equal(t, []ratesem.Event{{Kind: ratesem.Admitted, Weight: 1}}, rec.take())
		s.Release(1)
	})
}

// Metrics fed by the observer agree with the semaphore's own Stats, on
// virtual time: totals, the wait histogram and the queue depth.
func TestObserverMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var m ratesem.Metrics
		s := semaphore.New(2, time.Second, semaphore.WithObserver(m.Observe))
		// 6 calls of 100ms arriving 1ns apart: waits 0, 0, then ~1.1s ×2,
		// then ~2.2s ×2.
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() {
				time.Sleep(time.Duration(i))
				require.NoError(t, s.Acquire(t.Context(), 1))
				time.Sleep(100 * ms)
				s.Release(1)
			})
		}
		time.Sleep(10 * ms)
		synctest.Wait()
		snap := m.Snapshot()
		assert.Equal(t, int64(s.Stats().Waiting), snap.QueueDepth)
		assert.Equal(t, int64(4), snap.QueueDepth)
		wg.Wait()

		snap = m.Snapshot()
		st := s.Stats()
		assert.Equal(t, st.Admitted, snap.Admitted)
		assert.Equal(t, uint64(6), snap.Wait.Count)
		assert.Equal(t, st.TotalWait, snap.Wait.Sum)
		assert.Equal(t, int64(0), snap.QueueDepth)
		// Bounds 1ms·2^k: the two waits of 0 are ≤ 1ms; ~1.1s ≤ 1.024s? no,
		// ≤ 2.048s; ~2.2s ≤ 4.096s.
		at := func(d time.Duration) uint64 {
			for i, b := range snap.Wait.Bounds {
				if b == d {
					return snap.Wait.Counts[i]
				}
			}
			t.Fatalf("no bound %v", d)
			return 0
		}
		assert.Equal(t, uint64(2), at(ms))
		assert.Equal(t, uint64(2), at(1024*ms))
		assert.Equal(t, uint64(4), at(2048*ms))
		assert.Equal(t, uint64(6), at(4096*ms))
	})
}

// The admitted fast path allocates nothing, with no observer and with
// ratesem.Metrics as the observer.
func TestObserverAllocs(t *testing.T) {
	var m ratesem.Metrics
	for _, s := range []*semaphore.RateSemaphore{
		semaphore.New(1<<40, time.Hour),
		semaphore.New(1<<40, time.Hour, semaphore.WithObserver(m.Observe)),
	} {
		ctx := context.Background()
		allocs := testing.AllocsPerRun(1000, func() {
			if err := s.Acquire(ctx, 1); err != nil {
				panic(err)
			}
			s.Release(1)
		})
		assert.Zero(t, allocs)
	}
	assert.NotZero(t, m.Snapshot().Admitted)
}

// An observer may call the semaphore (here methods that take its lock)
// from every event: no event is sent with the lock held.
func TestObserverReentrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s *semaphore.RateSemaphore
		var calls sync.WaitGroup
		obs := func(e ratesem.Event) {
			_ = s.Stats()
			_ = s.Limit()
		}
		s = semaphore.New(1, 100*ms, semaphore.WithObserver(obs))
		for range 4 {
			calls.Go(func() {
				if err := s.Acquire(t.Context(), 1); err == nil {
					time.Sleep(10 * ms)
					s.Release(1)
				}
			})
		}
		calls.Wait()
		s.PauseFor(time.Second)
		require.NoError(t, s.SetLimit(2, time.Second))
	})
}
