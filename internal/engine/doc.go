// Package engine is ratesem's one waiting engine: the fronts
// (clientpool.Pool, the many-rule front, and semaphore.RateSemaphore, the
// one-rule front) are thin layers over it and hold no waiting, no
// bookkeeping and no "is this Redis" branch of their own.
//
// # What it owns
//
// Limiters keyed by (rule, key), created lazily and evicted when idle
// (evict.go); per-limiter FIFO queues by priority class, a min-heap of wake
// instants and one timer (queue.go); deadline fail-fast, queue caps and
// queue-wait budgets (pool.go: start, await); pauses and throttles
// (throttle.go); usage reports and reconcile (feedback.go); learned limits
// and quotas (learn.go); settling (Ticket.Settle, Call.End); observers and
// their panics (event.go). Engine is the keyed engine; One is an Engine of
// one rule and one limiter, key "", driven without tickets (Release(n)):
// a thin facade whose waiting, tries, pauses, limit changes, settling and
// events are the Engine's own code (there is one admission loop and one
// queue), with a fast path for a call admitted at once with nobody waiting
// (one lock, the window's cached decision, no clock read, no allocation)
// and the semantics of a weighted semaphore when the rule has no rate.
//
// # The bookkeeping under it
//
// Every decision of the engine goes through one set of operations, with two
// implementations:
//
//   - admit a call's charges all-or-nothing, or say the instant it could be
//     admitted (zero: only a release can help): admitLocked in process;
//     redisMode (internal/remote, one Lua script over every charge) in Redis;
//   - take back an admission whose caller left (cancel): undoHeldLocked;
//     remote.Engine does it for Redis;
//   - release and settle: releaseLocked (window.Settler); remote.Call.Release and
//     ReleaseSettled in Redis, in the background;
//   - pause: pauseLocked; remote.Engine.Pause;
//   - reconcile a server's count: consumeLocked, reportedLocked;
//     remote.Engine.ReconcileAt;
//   - learn: learn, budgetLocked (in process only: Redis mode refuses a
//     rule of N 0);
//   - set the limit: setLimitLocked; remote.Engine.SetLimit.
//
// In process the decisions are made by the window policies under the
// engine's lock. In Redis mode (a Config.Shared) the Engine's methods take
// the branch to redisMode, the one seam: the fronts never see it. Waiting
// in Redis mode is still internal/remote's (one head per limiter per
// process asks Redis); the next step is for the engine's own queues to
// drive remote's batch decision (one round trip admitting several queued
// waiters and carrying releases), through the same seam.
//
// # Options
//
// Option (Config) is the type of clientpool.Option and semaphore.Option: the
// options of Redis mode live once, in package redisrate, and apply to both
// fronts. A front refuses an option it cannot honour (Config.CheckFront,
// checkMode): a Redis option in process, a virtual clock over Redis, an
// option of the other front.
package engine
