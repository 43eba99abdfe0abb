// Package exchangetest provides in-process HTTP servers that behave like real
// exchange APIs and enforce their documented rate limits exactly, so that tests
// and examples can check a client's limiter against the rule it must obey
// without touching the network.
//
// The servers are built on [net/http/httptest]. Each records every request it
// receives with the time the server counted it, and offers functions that
// compute, from such a log, the most units any window held — the quantity the
// exchange's rule bounds — so a test can assert "the server's own log shows
// each rule respected".
//
// # Servers
//
//   - [NewOKX]: sixteen OKX v5 endpoints (market data, public data, trade
//     and account) with each endpoint's own limit and OKX's sub-account
//     order limit; sliding windows of 2 s (OKXConfig.Scale stretches them,
//     OKXConfig.Limits overrides a rule's N); rejections with code 50011.
//   - [NewBinance]: eight Binance spot endpoints with request weights, the
//     IP's REQUEST_WEIGHT and RAW_REQUESTS limits and the account's ORDERS
//     limits in fixed windows aligned to the clock; 429 with Retry-After,
//     then 418 IP bans for clients that do not back off.
//
// Both servers log [Entry] values (arrival time, endpoint, the
// [Charge] of each rule key, [Outcome]) and are checked with [PeakUsage],
// [Violations] and [Summarize], or their methods Peak, Violations and Stats.
//
// # Counting
//
// OKX (https://www.okx.com/docs-v5/en/#overview-rate-limits) bounds the
// requests in any window of 2 s: a request arriving at t is admitted iff the
// accepted units of its key in (t−2s, t], plus its own, are within the limit.
// Binance
// (https://developers.binance.com/docs/binance-spot-api-docs/rest-api/limits)
// counts in fixed windows that restart at each full minute (10 s, 5 min, day)
// of UTC. Both servers count accepted requests only: a rejected request does
// not extend the window.
//
// # Time
//
// Every server reads arrival times from one clock, the real clock unless its
// Config's Clock is set (a ratesem.Clock, e.g. a *clock.Mock from
// github.com/benbjohnson/clock, to place arrivals exactly on a window
// boundary). OKXConfig.Scale and BinanceConfig.Scale divide every window
// (and Binance's bans), so that Binance's minute lasts 3 s at Scale 20 and an
// example or test finishes quickly; fixed windows stay aligned to multiples of
// the scaled length since the Unix epoch.
//
// With InMemory set, a server listens on in-memory pipes instead of TCP, so it
// can run inside a testing/synctest bubble (create it inside the bubble and use
// its Client or ClientFrom), where virtual time makes timing tests exact and
// instant. ClientFrom also lets a test send from several client IPs.
//
// Latency functions ([FixedLatency], [UniformLatency]) delay each answer after
// the rate-limit decision, as the network and the exchange's processing would.
//
// # Hostile mode
//
// BinanceConfig.Hostile and OKXConfig.Hostile ([Hostile]) make a server
// answer the way a broken or adversarial one might, on a seeded share of its
// answers: absurd usage headers ([AbsurdHeaders]: counts at and beyond the
// int64 limits, negative, garbage, 10 KB values, a Unix-time
// X-RateLimit-Reset), garbage or missing Retry-After on rejections
// ([AbsurdRetryAfters]), spurious throttles (Binance 429 with -1015 and no
// Retry-After; OKX 50011 or 50061 in a 200), and bodies that stall after the
// headers. The real rules are still enforced and every arrival logged
// (Entry.Hostile marks the altered answers), so a test asserts what a client
// must keep whatever it is told: Violations([Offered](log), rules) is empty
// when the client never sent more than a rule allows.
package exchangetest
