// Package ratesem is a toolkit for the client side of API rate limits: for
// programs that call someone else's API (a crypto exchange, a SaaS API, an
// internal service) and must never be rejected for calling too fast, while
// still going as fast as the limit allows.
//
// The root package holds only this overview; the code lives in its
// sub-packages, from the bottom up:
//
//   - window: the time bookkeeping. A Limit ("10/2s", ParseLimit) and the
//     windows that decide when the next call may start, as pure state that
//     takes the current instant as an argument: the completion window
//     (window.Completion, the default) and the start window with a margin
//     (window.SlidingLog).
//   - semaphore: RateSemaphore, a weighted semaphore that also limits the
//     rate. At most N units in flight and, under the completion window, at
//     most N units per interval as the server counts them, whatever the
//     latency. Its method set is a superset of golang.org/x/sync's
//     *semaphore.Weighted (Acquire, TryAcquire, Release), plus Do, Pause,
//     SetLimit and Stats. Reach for it inside an errgroup fan-out.
//   - clientpool: a registry of limiters keyed by rule and key (IP,
//     account, instrument), created lazily from a table of rules and
//     endpoints; a call under several rules is admitted when all admit it,
//     taking nothing while it waits; pause by key, usage-header feedback,
//     idle eviction.
//   - httpclient: an http.RoundTripper that acquires before each request,
//     releases when the response body is closed, and pauses on 429 or 418
//     with Retry-After. Reach for it to wrap an http.Client; NewPool routes
//     each request through a clientpool.Pool instead.
//   - exchange/binance, exchange/okx: presets, each exchange's limits and
//     endpoint weights as a clientpool Table, with the doc page of every
//     rule; exchange/exchangetest: in-process servers that enforce those
//     rules exactly (OKX's sliding 2 s windows, Binance's clock-aligned
//     weights, usage headers, 429 and 418 bans), for tests and examples.
//
// Many processes share their limits through Redis: semaphore.NewRedis
// returns the same RateSemaphore with its window kept in Redis, and
// clientpool.WithRedis keeps a whole Table's rules there, a call under
// several rules admitted by one Lua script over all of them, on the Redis
// server's clock. The waiting (FIFO per limiter, pauses, deadlines, the
// fallback when Redis is unreachable) stays in each process. See the
// README's Redis section and examples/fleet.
//
// The problem it solves: an exchange such as OKX allows "10 requests per
// 2 seconds" in any window of 2 seconds. A token bucket either breaks that
// rule (a full bucket plus the refill admits up to 2N−1 in some window) or
// gives up most of the throughput (a bucket of 1). A semaphore alone limits
// concurrency, not rate. RateSemaphore starts the clock of each slot when
// the call that held it ends, so the server never counts more than N
// arrivals in any window, and the next call goes at the earliest instant the
// rule allows.
//
// A fan-out in the style of Python's `async with sem:`:
//
//	sem := semaphore.New(10, 2*time.Second) // OKX: 10 requests per 2 s
//	g, ctx := errgroup.WithContext(ctx)
//	for _, id := range ids {
//		g.Go(func() error {
//			return sem.Do(ctx, func(ctx context.Context) error {
//				return fetch(ctx, id)
//			})
//		})
//	}
//	err := g.Wait()
//
// Or wrap an http.Client:
//
//	client := &http.Client{Transport: httpclient.New(sem, nil)}
package ratesem
