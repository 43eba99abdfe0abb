// Package clientpool is a registry of rate limiters keyed by rule and key,
// for APIs whose limits are not one number: an OKX order counts against
// 60 per 2 s for its (user, instrument) and 1000 per 2 s for the
// sub-account at once; a Binance order spends the IP's request weight and
// the account's order counts.
//
// A Table holds an API's limits as data: Rules (a Limit per key, a window
// policy from package window, an optional concurrency cap, a Key function
// saying which IP, account or instrument a request counts against, a
// Weight function, a Usage function reading the server's own count from
// response headers), Endpoints (method + path pattern, in
// net/http.ServeMux's syntax such as "GET /v1/items/{id}" → the rules a
// request falls under, with weights) and the Default costs of a request
// that matches no endpoint (without Default such a request is an error,
// ratesem.ErrNoEndpoint, unless the Table sets UnmatchedUnlimited). The
// presets in github.com/ratesem/ratesem/exchange are Tables.
//
// A Pool creates each key's limiter lazily on first use and:
//
//   - admits a call under several rules only when all of them admit it at
//     the same instant, taking nothing while it waits, so no capacity of
//     one rule is burned waiting on another, a cancelled call leaves no
//     trace, and calls taking overlapping rules in any order cannot
//     deadlock; waiters are FIFO per limiter within a priority class
//     (ratesem.WithPriority: a call refused by a rule is served before
//     later calls of its class or a lower one on that rule and key, and
//     at most 16 (see ratesem.Priority) later calls of each higher class pass
//     it, so it cannot starve), and a rule with room is not held up by a
//     call waiting on another rule; WithMaxQueue and ratesem.WithQueueWait
//     bound the queue and the time in it;
//   - pauses by key (Pause, Throttled): a 429 on one instrument pauses that
//     instrument's rule, not the others; for the server's Retry-After,
//     spread by jitter, or without one with capped exponential backoff per
//     key (about 200 ms, doubling on each throttle in a row, reset by a
//     call that goes through), never beyond WithMaxPause (5 minutes by
//     default) and, for a rejection naming several rules, only on the
//     shortest window that can explain it;
//   - reconciles with usage headers (Reconcile, Ticket.ObserveHeaders): when the
//     server counts more than the local window, the local budget shrinks
//     for the rest of that window; feedback never loosens it, and an
//     absurd count saturates at "full until the window moves";
//   - changes a rule's limit at run time, keeping the accounting (SetLimit);
//   - costs one key the same whatever waits on other keys (per-limiter
//     queues and a heap of wake instants);
//   - evicts idle keys a few at a time (WithIdleTimeout), so memory follows
//     the live keys (about 370 bytes per live key under the completion
//     window, BenchmarkBytesPerKey), and caps them against
//     attacker-chosen keys (WithMaxKeys, ratesem.ErrTooManyKeys);
//   - reports events to an observer (WithObserver).
//
// With redisrate.Shared a Pool keeps every rule's state in Redis instead, so
// that a fleet of replicas (processes sharing one IP or one API key) shares
// each rule exactly: a call's charges are admitted together across the fleet by
// one Lua script in one round trip, on the Redis server's clock; pauses, usage
// reports and SetLimit reach every replica; two replicas built with different
// limits for one rule get ratesem.ErrLimitMismatch instead of silently
// enforcing the larger one. Table.Scope names the hash tag every key of the
// Pool shares: on a Redis Cluster one scope lives in one slot. Close stops a
// Redis-mode Pool.
//
// For HTTP, httpclient.NewPool wraps a Pool in an http.RoundTripper. A Pool
// is safe for concurrent use by multiple goroutines.
package clientpool
