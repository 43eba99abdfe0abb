// Package ratesem is a toolkit for the client side of API rate limits: for
// programs that call someone else's API (a crypto exchange, a SaaS API, an
// internal service) and must never be rejected for calling too fast, while
// still going as fast as the limit allows.
//
// The root package holds what every sub-package shares: the [Clock]
// interface and the one family of errors ([ErrDeadline], [ErrInvalidLimit],
// …). The limiters live in its sub-packages, from the bottom up:
//
//   - window: the time bookkeeping. A Limit ("10/2s", window.ParseLimit) and
//     every window of the field as pure state that takes the current instant
//     as an argument: the completion window (window.NewCompletion, the
//     default), the start window with a margin (window.NewSlidingLog), fixed
//     windows aligned to the clock (window.NewFixedWindow, and
//     window.NewFixedCompletion, which counts a call in every window its
//     start..end touches), sliding-window counters, token and leaky buckets,
//     GCRA and a pacer. window.NewLimiter uses one alone, without blocking
//     (AllowN, TryN).
//   - semaphore: RateSemaphore, a weighted semaphore that also limits the
//     rate. At most N units in flight and, under the completion window, at
//     most N units per interval as the server counts them, whatever the
//     latency. Its method set is a superset of golang.org/x/sync's
//     *semaphore.Weighted (Acquire, TryAcquire, Release), plus Do,
//     Pause, PauseFor, SetLimit, Stats and Close; semaphore.NewWithPolicy
//     puts any window of package window under it. Reach for it inside an
//     errgroup fan-out.
//   - clientpool: a registry of limiters keyed by rule and key (IP,
//     account, instrument), created lazily from a Table of rules and
//     endpoints; a call under several rules is admitted when all admit it,
//     taking nothing while it waits; pause by key, usage-header feedback,
//     idle eviction, a cap on live keys (WithMaxKeys), events
//     (WithObserver).
//   - httpclient: an http.RoundTripper that acquires before each request,
//     releases when the response body is closed or read to io.EOF, pauses
//     the limiter on 429 or 418 (for the Retry-After, or a capped backoff),
//     and resends a throttled request only when httpclient.WithMaxRetries asks
//     for it, within a retry budget (httpclient.WithRetryBudget). httpclient.New wraps one Limiter (a RateSemaphore);
//     httpclient.NewPool routes each request through a clientpool.Pool.
//   - exchange/binance, exchange/okx: presets, each exchange's limits and
//     endpoint weights as a clientpool.Table (binance.Spot(), okx.Table()),
//     with the doc page of every rule.
//   - exchange/exchangetest: in-process HTTP servers that enforce those
//     rules exactly (OKX's sliding 2 s windows, Binance's clock-aligned
//     weights, usage headers, 429 and 418 bans, and a hostile mode), for
//     tests and examples.
//   - saas/openai, saas/anthropic, saas/github: presets for LLM and SaaS
//     APIs, whose calls cost what their reply says (tokens) and whose
//     limits the client learns from the response headers: each call is
//     admitted for an estimate and settled to its usage when it ends
//     (window.Settler, semaphore.RateSemaphore.Begin and Call.End,
//     clientpool.Ticket.Settle), and a rule with Learn takes N and what
//     remains from the headers (clientpool.Learned).
//   - saas/saastest: in-process servers that enforce OpenAI's, Anthropic's
//     and GitHub's limits with their real headers and statuses and log
//     every arrival.
//
// # Redis: one limit for many processes
//
// Many processes share their limits through Redis (github.com/redis/go-redis/v9
// against a redis-server, a Sentinel group or a Redis Cluster), in package
// redisrate, the one package that imports go-redis: a program that uses only
// the packages above does not link it. redisrate.NewSemaphore and
// redisrate.NewSemaphoreWithPolicy return the same *semaphore.RateSemaphore,
// with its window kept in Redis; redisrate.Shared keeps a whole Table's rules
// there, a call under several rules admitted by one Lua script over all of
// them, on the Redis server's clock. The waiting (FIFO per limiter, pauses,
// deadlines, the fallback when Redis is unreachable) stays in each process. For
// tests, redistest starts a real redis-server child process on a free loopback
// port (redistest.Start), or a 3-master cluster, and stops it when the test
// ends; without the binary the test is skipped (failed under CI). See the
// README's Redis section and examples/fleet.
//
// # Conventions shared by every package
//
// One clock. Every part that reads time takes a [Clock]: the limiters
// through their WithClock option (semaphore.WithClock, clientpool.WithClock,
// httpclient.WithClock), the exchangetest servers through their Config's
// Clock. A nil Clock, or no option, is the real clock (time.Now,
// time.After), so tests in a testing/synctest bubble need no option; a
// *clock.Mock of github.com/benbjohnson/clock satisfies Clock as it is, and
// no package of the library imports it. The windows of package window take
// the instant as an argument and read no clock. Over Redis the server's
// clock decides (redisrate).
//
// One error family. Every package returns the sentinels of this package,
// wrapped with the details of the case, and defines none of its own, so one
// check works whichever package returned the error:
//
//	if errors.Is(err, ratesem.ErrDeadline) { … }
//
// Every message starts with "ratesem: ". A wait that fails because its
// admission would come after the context's deadline matches both
// [ErrDeadline] and context.DeadlineExceeded; a wait ended by its context
// returns ctx.Err() (possibly wrapped).
//
// One option style. A constructor takes its required arguments, then
// variadic options of its package's type Option func(*config):
// semaphore.New(n, interval, opts...), clientpool.New(table, opts...),
// binance.Spot(opts...), okx.Table(opts...), httpclient.New(limiter,
// opts...), redisrate.NewSemaphore(client, name, n, interval, opts...) (the
// semaphore's options). What a constructor returns cannot be reconfigured
// except through its methods (SetLimit, Pause).
//
// Panics versus errors. A limit passed to a constructor as numbers, or another
// misuse fixed in the caller's source (a nil policy, conflicting options,
// Release of more than is held), panics, as make([]T, -1) does: it is a bug in
// the calling code, not a condition to handle at run time (semaphore.New(-1,
// time.Second) and window.NewCompletion with a negative Limit panic). A limit
// that comes from data — a clientpool.Table, window.ParseLimit,
// RateSemaphore.SetLimit and Pool.SetLimit at run time — returns an error
// matching [ErrInvalidLimit] instead (a server's unreadable rate-limit header,
// an error from clientpool.ParseRateLimitAt), so validate a limit read at run time (a
// flag, a config file) with window.ParseLimit before passing its numbers to a
// constructor. Constructors that return an error anyway because they talk to
// Redis (redisrate.NewSemaphore) return ErrInvalidLimit for a bad limit too,
// rather than panic.
//
// # Why
//
// An exchange such as OKX allows "10 requests per 2 seconds" in any window
// of 2 seconds. A token bucket either breaks that rule (a full bucket plus
// the refill admits up to 2N−1 in some window) or gives up most of the
// throughput (a bucket of 1). A semaphore alone limits concurrency, not
// rate. RateSemaphore starts the clock of each slot when the call that held
// it ends, so the server never counts more than N arrivals in any window,
// and the next call goes at the earliest instant the rule allows.
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
//	client := &http.Client{Transport: httpclient.New(sem)}
package ratesem
