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
//     admitted (zero: only a release can help): decideLocked, the seam of
//     the queues (queue.go). In process admitLocked, the window policies
//     under the lock; in Redis mode redisMode.decideLocked: the head's own
//     goroutine asks remote.Engine.Decide (one Lua script over every
//     charge) outside the lock (askRedis; the waiter is marked asking, so
//     nobody else asks for it), and the answer is applied under the lock
//     at its next try: granted, its wake at the instant Redis named
//     (jittered), or woken by a release of this process reaching Redis
//     (remote.Config.OnRoom, onRoom) or after remote.ReleaseRetry;
//   - take back an admission whose caller left (cancel): undoLocked;
//     remote.Decide cancels one granted after its caller left, abandon
//     releases one granted meanwhile;
//   - release and settle: releaseLocked (window.Settler); remote.Call.Release and
//     ReleaseSettled in Redis, in the background (a try waits for this
//     process's releases on their way: awaitSent);
//   - pause: pauseLocked; remote.Engine.Pause;
//   - reconcile a server's count: consumeLocked, reportedLocked;
//     remote.Engine.ReconcileAtThen (the units Redis took in, for the
//     Reconciled event, as in process);
//   - learn: learn, budgetLocked in process; in Redis mode learn_redis.go:
//     a key not learned yet is charged under rspec.Unknown (one call at a
//     time for the fleet), a learned limit is stored for every process
//     (remote.Engine.SetLimit) and adopted from the answers
//     (remote.Call.Adopted), a quota's budget is shared
//     (remote.Engine.BudgetThen);
//   - set the limit: inProc.setLimit; remote.Engine.SetLimit.
//   - adapt the limit (Rule.Adapt, adapt.go): each key's window N is an
//     internal/adapt law fed by book.adaptSuccess (releaseLocked) and
//     book.adaptThrottle (ThrottledTicket, OverloadedTicket,
//     ThrottledTargets); in process only: New refuses it in Redis mode
//     until the law runs in the scripts.
//
// The queues, priorities, WithMaxQueue, queue-wait budgets, deadline
// fail-fast, cancellation and the Queued/Admitted/Refused/Cancelled events
// are the same code in both modes: internal/remote waits for nothing. A
// waiter over Redis counts as waiting (Stats.Waiting, WithMaxQueue,
// Queued) from its first refusal, or when it queues behind another. The
// next step is for one round trip to decide several ready heads
// (remote.Engine's ask, driven as DecideAll in remote's tests) and carry
// releases: the heads wanting a decision are known under the lock (those
// asking), so one goroutine can take them all.
//
// # Options
//
// Option (Config) is the type of clientpool.Option and semaphore.Option: the
// options of Redis mode live once, in package redisrate, and apply to both
// fronts. A front refuses an option it cannot honour (Config.CheckFront,
// CheckMode): a Redis option in process, a virtual clock over Redis, an
// option of the other front.
package engine
