// Package semaphore provides RateSemaphore: a weighted semaphore that also
// limits the rate, for clients of rate-limited APIs.
//
// semaphore.New(n, interval) admits at most n units in flight and, under the
// completion window (the default, window.NewCompletion), at most n units per
// interval as a server counts arrivals: at every instant, units in flight +
// units of calls that ended within the last interval ≤ n. A call starts when
// Acquire returns and ends when Release is called, so release as soon as the
// response has been read. WithStartWindow(margin) switches to the start
// window (window.NewSlidingLog): faster, and safe while latency jitter ≤ margin.
// WithMaxUnitsInFlight(c) caps units in flight below n. With interval 0 a
// RateSemaphore is golang.org/x/sync/semaphore.NewWeighted(n), except that
// a negative weight is an error (ratesem.ErrNegativeWeight) where x/sync
// panics (see New).
// NewWithPolicy(p) takes any other window of package window as the rate
// policy (fixed window, sliding window counter, token bucket, leaky bucket,
// GCRA, pacer), each with the exact guarantee its doc states, so the
// semaphore can match whatever the server enforces.
//
// The method set is a superset of x/sync's *semaphore.Weighted (Acquire,
// TryAcquire, Release), so a RateSemaphore is a drop-in replacement; Do is
// the form of Python's `async with sem:`; Pause and PauseFor hold new starts
// after a 429; SetLimit changes the limit at run time; Stats reports counters.
//
// Waiters are served FIFO within a priority class (ratesem.WithPriority on
// the context; a waiter is passed by at most 16 (see ratesem.Priority) later
// waiters of each higher class), sleep on one timer set for the instant the
// head can be admitted (no polling), and leave no trace when their context
// ends; WithMaxQueue and ratesem.WithQueueWait bound the queue and the time
// in it. Time comes from one clock: the real monotonic clock by default,
// which testing/synctest fakes, or a ratesem.Clock given with WithClock (a
// *clock.Mock of github.com/benbjohnson/clock is one).
//
// redisrate.NewSemaphore returns the same RateSemaphore with its state in
// Redis, shared by every process that opens the same name: replicas behind one
// API key or one IP share one limit, decided atomically on the server's clock.
// Waiting stays in each process, in the engine and queues of the in-process
// semaphore (a refused head talks to Redis and sleeps until the instant Redis
// gives), Release never waits on Redis, SetLimit
// changes the limit for every process, and processes opened with different
// limits get ratesem.ErrLimitMismatch; redisrate.NewSemaphoreWithPolicy keeps
// any window of package window in Redis the same way. The options of that
// mode (redisrate.WithLease, WithTimeout, WithJitter, WithFallback,
// WithPrefix, WithEvictionAllowed, WithDeferredChecks) live in package
// redisrate and are refused in process (New panics), as WithClock is over
// Redis; Close releases its resources (a no-op in process).
//
//	sem := semaphore.New(10, 2*time.Second) // 10 calls per 2 s, in any window
//	g, ctx := errgroup.WithContext(ctx)
//	for _, id := range ids {
//		g.Go(func() error {
//			return sem.Do(ctx, func(ctx context.Context) error { return fetch(ctx, id) })
//		})
//	}
//	err := g.Wait()
package semaphore
