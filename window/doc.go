// Package window holds the time bookkeeping of client-side rate limits:
// which calls count against a limit, and when the next one may start.
//
// A Limit is N units per duration ("10/2s"); a unit is one call, or one
// weight unit when calls carry weights. The windows are pure state: every
// method takes the current instant as an argument, none reads a clock, starts
// a goroutine or owns a timer, so they can be driven by real time, by a mock
// clock or by a simulation, and tested exhaustively. Each constructor
// (NewCompletion, NewGCRA, ...) returns a Policy (six methods; implement
// them to bring a window of your own), so any of
// them can be the window of a RateSemaphore (package
// github.com/ratesem/ratesem/semaphore, NewWithPolicy), which adds waiting,
// cancellation, FIFO order, Pause and a concurrency cap. Used alone, Limiter
// makes any of them safe for concurrent use with an allow / try API for
// callers that must not block: AllowN decides, TryN decides or says how long
// until the call could start.
//
// # Which window
//
// Pick the one that matches what the server enforces, knowing its exact
// guarantee. N units per Per; a call of weight w counts w units; "starts" are
// counted at the client, so a server that counts arrivals sees the same
// bound only while one-way latency jitter does not bunch them (except the
// completion window, which holds at the server for any latency, for every
// call released after its reply: a server answers only what it has read,
// so the arrival lies between the call's start and end; a call released
// without a reply, cancelled while its request was still on its way, may
// reach the server after its end).
//
//	constructor                    most units in any window of Per           at the server               burst from idle   memory per key
//	NewCompletion (default)        N: in flight + ended in (t−Per, t]        yes, whatever the latency   N                 112 B + 16 B per distinct end in the last Per
//	NewSlidingLog, margin m        N over any Per+m (start stamped +m)       while jitter ≤ m            N                 112 B + 16 B per distinct start in the last Per+m
//	NewFixedWindow (aligned, UTC)  2N across a boundary; N per aligned one   no                          N                 96 B
//	NewFixedCompletion             N arrivals per aligned window (server)    yes, for fixed windows      N                 96 B
//	NewSlidingWindowCounter        2N−1; N per aligned window                no                          N                 48 B
//	NewSubWindowCounter, B blocks  2N; N over any Per−Per/B                  no                          N                 72 B + 8 B per block
//	NewTokenBucket, burst b        b+N−1 (2N−1 for b = N)                    no                          b                 112 B
//	NewLeakyBucket, size c         c+N−1                                     no                          c                 112 B
//	NewGCRA, burst b               b+N−1 (2N−1 for b = N)                    no                          b                 104 B
//	NewPacer (GCRA, no burst)      N with unit weights; N−1+w with weights   no                          1                 104 B
//
// Every row is enforced by a test that builds its worst case (a boundary
// burst for the fixed window, N at the very end of one window then a steady
// stream for the sliding window counter, a full bucket then the refill for
// the token bucket, ...) and asserts the bound is reached, and that random
// schedules with weights, idle spells and cancellations never exceed it
// (internal/win/guarantee_test.go). Throughput: the completion window
// reaches about N/(Per+latency), the sliding log N/(Per+m); the others N/Per
// on average.
// The buckets and GCRA compute the refill in exact integer arithmetic; GCRA
// and the pacer round the emission interval Per/N up to a whole nanosecond
// (slower, never faster).
//
// Windows aligned to the clock (NewFixedWindow, NewFixedCompletion,
// NewSlidingWindowCounter, NewSubWindowCounter) cut time at multiples of
// Per since the Unix epoch, as Binance counts its minute and day limits, so
// their instants must carry the wall clock (time.Now and clock.Mock do).
//
// Instants must not go backwards for one window (an earlier one is treated
// as the latest seen); a window is not safe for concurrent use: give it to
// one Limiter, RateSemaphore or clientpool.Rule, which serialises its calls.
// Every constructor panics if l.N, l.Per or its size argument (burst,
// capacity, margin, blocks) is negative, a caller's bug.
package window
