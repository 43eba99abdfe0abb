package win

import "time"

// Accessors the tests read; the engine never needs them.

// InFlight returns the units admitted and not yet Done.
func (c *Completion) InFlight() int64 { return c.inflight }

// Tokens returns the whole units in the bucket at now, refilling it first.
func (b *TokenBucket) Tokens(now time.Time) int64 {
	b.refill(now)
	return b.tokens
}

// Level returns the units in the bucket at now, rounded up to a whole unit.
func (b *LeakyBucket) Level(now time.Time) int64 {
	b.refill(now)
	return b.burst - b.tokens // the unit leaking now (frac) is still in
}
