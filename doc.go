// Package ratesem is a toolkit for the client side of API rate limits: for
// programs that call someone else's API (a crypto exchange, a SaaS API, an
// internal service) and must never be rejected for calling too fast, while
// still going as fast as the limit allows.
//
// The root package holds what every package shares: the Clock interface,
// the error sentinels, and the observability types (Event, Metrics). The
// limiters live in the sub-packages, from the bottom up:
//
//   - window: the time bookkeeping. A Limit ("10/2s", ParseLimit) and the
//     windows that decide when the next call may start, as pure state that
//     takes the current instant as an argument: the completion window
//     (window.Completion, the default), the start window with a margin
//     (window.SlidingLog), fixed windows (window.FixedWindow, and
//     window.NewFixedCompletion for Binance's clock-aligned minute), the
//     sliding and sub-window counters, the token and leaky buckets and
//     GCRA. Implement window.Policy to bring your own.
//   - semaphore: RateSemaphore, a weighted semaphore that also limits the
//     rate. At most N units in flight and, under the completion window, at
//     most N units per interval as the server counts them, whatever the
//     latency. Its method set is a superset of golang.org/x/sync's
//     *semaphore.Weighted (Acquire, TryAcquire, Release), plus Do, Pause,
//     SetLimit and Stats. Reach for it inside an errgroup fan-out.
//     semaphore.NewRedis returns the same type with its window kept in
//     Redis, shared by every process that opens the same name.
//   - clientpool: a registry of limiters keyed by rule and key (IP,
//     account, instrument), created lazily from a Table of rules and
//     endpoints; a call under several rules is admitted when all admit it,
//     taking nothing while it waits; pause by key, usage-header feedback,
//     idle eviction. clientpool.WithRedis keeps a whole Table's rules in
//     Redis: one Lua script admits a call under all of its rules at once,
//     on the Redis server's clock.
//   - httpclient: an http.RoundTripper that acquires before each request,
//     releases when the response body is closed, pauses on 429 or 418 with
//     Retry-After (or a backoff, or a throttle the body reports), and
//     retries a throttled request only when MaxRetries asks for it.
//     NewPool routes each request through a clientpool.Pool.
//   - exchange/binance, exchange/okx: presets, each exchange's limits and
//     endpoint weights as a clientpool Table, with the doc page of every
//     rule. exchange/exchangetest: in-process servers that enforce those
//     rules exactly (OKX's sliding 2 s windows, Binance's clock-aligned
//     weights, usage headers, 429 and 418 bans) and log every arrival, for
//     tests and examples.
//   - redistest: start real redis-server processes (one
//     server, or a 3-master cluster) for tests.
//
// The waiting (FIFO per limiter, pauses, deadlines, the fallback when Redis
// is unreachable) always stays in each process. See the README's Redis
// section and examples/fleet; examples/slog and examples/otel wire the
// observer to log/slog and to OpenTelemetry metrics.
//
// # Conventions
//
// One clock. Every limiter reads time and sets timers through a Clock,
// given with its package's WithClock option. A nil Clock, or no option, is
// the real clock, which testing/synctest fakes, so a test in a synctest
// bubble needs no option; a *clock.Mock of github.com/benbjohnson/clock
// satisfies Clock as it is.
//
// One error family. Every package returns the sentinels of this package,
// wrapped with the details of the case, so errors.Is(err, ratesem.ErrDeadline)
// holds whichever package the error came from; every message starts with
// "ratesem: ".
//
// One option style. Every constructor takes its required arguments, then
// options of its package's Option type, a function applied in order (the
// last of a kind wins): semaphore.New(10, 2*time.Second,
// semaphore.WithClock(c)), clientpool.New(table, clientpool.WithRedis(rdb,
// "bot")).
//
// Panics or errors. A constructor that cannot fail otherwise
// (semaphore.New, semaphore.NewWithPolicy, the window constructors) panics
// on a negative limit, as make does with a negative size: it is a bug in
// the caller's code, caught by the first test that runs it, and an error
// result would burden every correct call. A constructor that returns an
// error anyway, because it reads data or a server (clientpool.New with its
// Table, semaphore.NewRedis), reports a bad limit in that error, matching
// ErrInvalidLimit; so do window.ParseLimit and every parser of a server's
// headers, since a program must be able to refuse bad input without
// crashing. Validate a limit read at run time with window.ParseLimit
// before handing it to a constructor that panics.
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
