// Package window holds the time bookkeeping of client-side rate limits:
// which calls count against a limit, and when the next one may start.
//
// A Limit is N units per duration ("10/2s"); a unit is one call, or one
// weight unit when calls carry weights. The windows are pure state: every
// method takes the current instant as an argument, none reads a clock, starts
// a goroutine or owns a timer, so they can be driven by real time, by a mock
// clock or by a simulation, and tested exhaustively. A RateSemaphore (package
// github.com/ratesem/ratesem/semaphore) adds waiting, cancellation, FIFO order
// and a concurrency cap on top of any Policy.
//
// Two windows are provided, each with an exact guarantee:
//
//   - Completion, the completion window (the OKEx scheme, and the default of
//     a RateSemaphore): units in flight + units of calls that ended in the
//     last Per ≤ N at every instant. The server sees at most N arrivals in
//     any window of Per whatever the latency; throughput ≈ N/(Per+latency).
//   - SlidingLog, the start window with a margin (a sliding log of starts,
//     each recorded Margin late): units of calls that started in the last
//     Per + Margin ≤ N. Throughput ≈ N/(Per+Margin); safe at the server
//     while latency jitter ≤ Margin.
//
// Instants must not go backwards for one window; a window is not safe for
// concurrent use.
package window
