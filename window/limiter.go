package window

import (
	"fmt"
	"sync"
	"time"

	"github.com/ratesem/ratesem"
)

// Limiter makes any Policy safe for concurrent use, with an allow / try
// style API for callers that must not block: decide now, or learn how long
// until the call could start. It never blocks (beyond its mutex) and never
// sleeps; for waiting, cancellation, FIFO order and a concurrency cap, use a
// RateSemaphore (package github.com/ratesem/ratesem/semaphore) over the
// same policy.
//
// Every method takes the instant explicitly, like x/time/rate's AllowN
// (pass time.Now() for the real clock); the instants must come from one
// clock and not go backwards. The
// zero Limiter is not usable; call NewLimiter. A Limiter is safe for
// concurrent use by multiple goroutines.
type Limiter struct {
	mu sync.Mutex
	p  Policy
}

// NewLimiter returns a Limiter over p. The Limiter owns p from then on: do
// not call p's methods directly, nor share it with another Limiter or
// RateSemaphore.
func NewLimiter(p Policy) *Limiter { return &Limiter{p: p} }

// AllowN reports whether a call of n units (n ≥ 0) may start at now, and if
// so records it: the caller must then make the call (and, for the
// completion windows, call DoneN when it ends). On false nothing changes.
// A negative n is refused (false): it would credit the window. It never
// blocks beyond the Limiter's mutex.
func (l *Limiter) AllowN(now time.Time, n int64) bool {
	if n < 0 {
		return false
	}
	l.mu.Lock()
	_, ok := l.p.Admit(now, n)
	l.mu.Unlock()
	return ok
}

// TryN admits a call of n units (n ≥ 0) at now if the policy allows, and
// then returns (0, nil) and records it, as AllowN. Otherwise it changes
// nothing and returns how long after now the call could start if nothing
// else changed (a time.Duration > 0, nil error); an error matching
// ratesem.ErrWeightTooLarge when n exceeds the policy's capacity;
// ratesem.ErrInFlight itself when time alone cannot make room (only DoneN,
// or a larger limit, can); or an error matching ratesem.ErrNegativeWeight
// when n is negative. It never blocks beyond the Limiter's mutex.
func (l *Limiter) TryN(now time.Time, n int64) (retryAfter time.Duration, err error) {
	if n < 0 {
		return 0, fmt.Errorf("%w %d: Limiter.TryN", ratesem.ErrNegativeWeight, n)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.p.Admit(now, n)
	switch {
	case ok:
		return 0, nil
	case n > l.p.Capacity():
		return 0, fmt.Errorf("%w: weight %d, capacity %d (%v)", ratesem.ErrWeightTooLarge, n, l.p.Capacity(), l.p.Limit())
	case at.IsZero():
		return 0, ratesem.ErrInFlight
	}
	return max(at.Sub(now), 1), nil
}

// DoneN records that a call of n units admitted earlier ended at now. The
// completion windows need it: NewCompletion counts a call until Per after
// its end, and NewFixedCompletion counts a call in every aligned window
// until its end, so a call never reported ended stays in flight forever
// and, once N units are, TryN fails with ratesem.ErrInFlight from then on.
// The windows that count starts only ignore it; calling it for every call
// that ended is always right. It panics if n is negative (a caller's bug, as
// Release of a negative weight in x/sync), and, for NewCompletion, if more
// units end than are in flight.
func (l *Limiter) DoneN(now time.Time, n int64) {
	if n < 0 {
		panic(fmt.Sprintf("ratesem: Limiter.DoneN with negative weight %d", n))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.p.Done(now, n)
}

// SetLimit changes the policy's limit at now, keeping its accounting (see
// Policy.SetLimit). It panics on a negative limit. There is no getter: the
// limit is the one given to the policy's constructor or to the latest
// SetLimit.
func (l *Limiter) SetLimit(now time.Time, lim Limit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.p.SetLimit(now, lim)
}
