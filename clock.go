package ratesem

import "time"

// Clock is the time source of every limiter in ratesem: the instant now and
// a one-shot timer. Every package that waits takes it through its WithClock
// option (semaphore.WithClock, clientpool.WithClock, …) and uses it for all
// of its reading of time and all of its timers.
//
// The default (a nil Clock, or no option at all) is the real clock: time.Now
// and time.After. testing/synctest fakes those, so a test in a synctest
// bubble needs no option. A *clock.Mock of github.com/benbjohnson/clock
// satisfies Clock as it is, for tests that advance time by hand.
//
// Implementations must be safe for concurrent use. Now must carry the wall
// clock (windows aligned to the clock, such as Binance's minute, read the
// Unix time); After(d) must send once, no earlier than d after it was
// called. A limiter never stops the channel After returns: it stops
// listening to it (the real clock's timers are then collected, since Go
// 1.23).
type Clock interface {
	// Now returns the current instant.
	Now() time.Time
	// After returns a channel that receives the instant once d has
	// elapsed; d ≤ 0 fires at once.
	After(d time.Duration) <-chan time.Time
}
