package window

import (
	"time"

	"github.com/ratesem/ratesem/internal/win"
)

// NewCompletion returns the completion window, the OKEx scheme and the
// default of a RateSemaphore: a call's units count against l from the moment
// it is admitted until l.Per after it ended, so at every instant t
//
//	units in flight at t + units of calls that ended in (t−Per, t] ≤ N.
//
// A server that counts arrivals sees at most N in any window of Per whatever
// the network latency (each arrival lies between its call's start and end);
// the price is a throughput of about N/(Per + latency). The caller must
// report every end with Done (a RateSemaphore and a clientpool.Pool do).
// Memory: 112 bytes plus one 16-byte entry per distinct end instant in the
// last Per (at most N; past 1024 entries, ends within 1.024 µs share one,
// counted up to 1.024 µs longer, never shorter).
func NewCompletion(l Limit) Policy { return win.NewCompletion(l) }

// NewSlidingLog returns the start window with a margin: a sliding log of
// start instants, each recorded as start + margin (buffer time), so at every
// instant t
//
//	units of calls that started in (t − Per − margin, t] ≤ N.
//
// It ignores how long calls take (about N/(Per+margin) calls per second) and
// holds at the server while the spread of one-way latency is at most margin.
// Memory: 112 bytes plus one 16-byte entry per distinct start instant in the
// last Per + margin.
func NewSlidingLog(l Limit, margin time.Duration) Policy { return win.NewSlidingLog(l, margin) }

// NewFixedWindow returns the fixed window counter: time is cut into windows
// of l.Per aligned to the Unix epoch (a minute window at every full minute
// UTC, a day window at midnight UTC, as Binance counts), at most l.N units
// start in each, and the count resets at each boundary. Up to 2N can start in
// a window of Per that straddles a boundary, and a call started just before
// one may reach the server just after it. The instants passed to it must
// carry the wall clock (time.Now and clock.Mock do). With Per 0 every call of
// at most N units is admitted. Memory: 96 bytes.
func NewFixedWindow(l Limit) Policy { return win.NewFixedWindow(l) }

// NewFixedCompletion returns the fixed window counter in which a call counts
// in every aligned window its [start, end] touches, so a server that counts
// arrivals in the same aligned windows (Binance) never sees more than l.N in
// one of them, whatever the latency: the completion window's idea applied to
// fixed windows. A call that straddles a boundary spends from both windows.
// The caller must report every end with Done. Memory: 96 bytes.
func NewFixedCompletion(l Limit) Policy { return win.NewFixedCompletion(l) }

// NewSlidingWindowCounter returns the sliding window counter that Cloudflare
// describes: two fixed windows of l.Per aligned to the Unix epoch, the
// current one counted exactly and the previous one weighted by how much of
// it still overlaps (now−Per, now]. It admits at most N in one aligned window
// and, in the worst case, 2N−1 in a window of Per. Instants must carry the
// wall clock. Memory: 48 bytes.
func NewSlidingWindowCounter(l Limit) Policy { return win.NewSlidingWindowCounter(l) }

// NewSubWindowCounter returns the sliding window counter built from blocks
// sub-window blocks of l.Per/blocks, aligned to the Unix epoch: a call is
// admitted when the units started in the current block and the blocks−1
// before it, plus its own, are at most N. So at most N start in any window
// of Per − Per/blocks, up to 2N in one of Per. Instants must carry the wall
// clock. It panics if blocks < 1. Memory: 72 bytes plus 8 bytes per block.
func NewSubWindowCounter(l Limit, blocks int) Policy { return win.NewSubWindowCounter(l, blocks) }

// NewTokenBucket returns a full token bucket that holds burst units and
// refills at l.N units per l.Per, computed exactly in integer arithmetic; a
// call of n units takes n tokens. A burst of 0 means l.N (and then follows N
// through SetLimit). At most burst + N − 1 units start in any window of Per
// (2N−1 for burst = N): it limits the average rate, not the count in every
// window. With Per 0 every call of at most burst units is admitted; with N 0
// and Per > 0 the bucket never refills. Memory: 112 bytes.
func NewTokenBucket(l Limit, burst int64) Policy { return win.NewTokenBucket(l, burst) }

// NewLeakyBucket returns the leaky bucket as a meter: an empty bucket of
// capacity units that leaks l.N units per l.Per; a call of n units is
// admitted only if they fit. It is the token bucket seen from the other side
// (level = capacity − tokens) and makes the same decisions: at most
// capacity + N − 1 units in any window of Per. A capacity of 0 means l.N.
// For the leaky bucket as a queue that spaces calls evenly, see NewPacer.
func NewLeakyBucket(l Limit, capacity int64) Policy { return win.NewLeakyBucket(l, capacity) }

// NewGCRA returns the generic cell rate algorithm, the token bucket kept as
// one instant (the theoretical arrival time, TAT), as Redis limiters such as
// go-redis/redis_rate use it: each unit moves the TAT on by I = Per/N
// (rounded up to a whole nanosecond, on the slow side) and a call of n units
// is admitted at t when max(TAT, t) + n·I − t ≤ burst·I. Its decisions are
// the token bucket's: at most burst + N − 1 units in any window of Per. A
// burst of 0 means l.N (and then follows N through SetLimit). With Per 0
// every call of at most burst units is admitted; with N 0 and Per > 0 none
// is. Memory: 104 bytes.
func NewGCRA(l Limit, burst int64) Policy { return win.NewGCRA(l, burst) }

// NewPacer returns the leaky bucket as a pacer (a queue that leaks at a
// constant rate; uber-go/ratelimit without slack): calls start evenly
// spaced, one unit every Per/N, with no burst; a call of n units holds the
// next one back n·Per/N, and a call after an idle spell starts at once. With
// unit weights at most N start in any window of Per; with weights up to w,
// at most N − 1 + w units. Its capacity is N. Memory: 104 bytes.
func NewPacer(l Limit) Policy { return win.NewPacer(l) }
