// Package accuracy measures how well client-side rate limiters keep a fan-out
// of calls inside a server's rule "at most N arrivals in any window of T", and
// how much of the allowed throughput they use.
//
// # The model
//
// Workers goroutines share Calls calls. A call acquires the limiter (the time
// spent there is the call's wait), then travels to the server, which reads the
// clock at that instant (the arrival) and accepts or rejects it, then travels
// back; the call releases the limiter when the response is back. There is no
// network: the trips are time.Sleep calls and the server is an in-process
// object with a mutex ([Server]).
//
// Each call draws a round-trip latency L from a [Latency] distribution and
// splits it into two one-way trips: out = L/2 (rounded down to the
// nanosecond) to the server, back = L − out to the client; the server itself
// answers at once. The one-way jitter that matters for start-based limiters
// is therefore the spread of L/2. Latencies are drawn from a seeded generator
// before the run and handed out in the order the limiter admits calls, so
// every limiter sees the same sequence.
//
// The server counts accepted arrivals only, as the OKX test server in
// github.com/ratesem/ratesem/exchange/exchangetest does: an arrival at t is
// accepted iff fewer than N accepted arrivals lie in (t−T, t]. A rejected
// call is not retried; it counts in Result.Rejected.
//
// # The measures
//
//   - Throughput (steady state): with M accepted arrivals and t_k the instant
//     of the k-th of them, (M − N) / (t_M − t_N) calls per second. Counting
//     from the N-th arrival leaves out the initial burst of N that every
//     limiter may send at once. Result.ShareNT is it divided by N/T, and
//     Result.ShareNTL is it divided by N/(T + L̄), where L̄ is the mean
//     measured round trip (from Acquire's return to the response, before
//     release), the most the completion window can reach.
//   - Rejections: arrivals the server rejected.
//   - Peak: the most arrivals, accepted or not, in any window (t−T, t]; more
//     than N means the limiter let too many calls reach the server.
//   - Wait: how long each call blocked in the limiter's Acquire, as p50 and
//     p99 over all calls (nearest rank). With Workers well above N most of
//     it is queueing behind other workers, so compare it between limiters
//     rather than read it alone.
//
// # The limiters
//
// [Peers] lists the rows: ratesem's completion window and start window (with
// the distribution's [Latency.Margin]: the outbound trip's max − min, or for
// the heavy tail its p99 − min, so about 1% of calls travel beyond it), an
// x/sync semaphore that sleeps T inside the permit, x/time/rate with burst N
// and burst 1, go.uber.org/ratelimit with its default slack and without
// slack, and ratesem's GCRA (burst N) as the policy of a RateSemaphore. Each
// is put behind [Limiter].
//
// # Time
//
// The harness uses only the time package (time.Now, time.Sleep, timers) and
// limiters on the real clock, so the same code runs in real time (the program
// in cmd/accuracy) and on virtual time inside a testing/synctest bubble (the
// package's tests). Create the limiters, through [Run], inside the bubble.
// On virtual time the runs are exact and repeatable; in real time goroutine
// wake-ups, timer overshoot and other load on the machine add jitter that no
// distribution states (Result.OutSpread shows it).
//
// The results directory holds the reports: virtual.md and virtual.svg, from
//
//	go test ./accuracy -run TestWriteResults -update
//
// and realtime.md and realtime.svg, from
//
//	go run ./cmd/accuracy
//
// both run in the benchmarks module's directory.
package accuracy
