// Package wake holds what the blocking limiters of ratesem share: one clock
// (the real monotonic clock or an injected ratesem.Clock),
// one timer re-armed for the earliest instant a waiter could be admitted,
// and the error for an admission that would come after a deadline.
package wake

import (
	"context"
	"fmt"
	"time"

	"github.com/ratesem/ratesem"
)

// Clock reads the time of one limiter: clk when set, else the real clock
// read as a monotonic offset from a fixed instant (time.Since of a
// monotonic reading skips the wall clock and costs about half of time.Now;
// testing/synctest fakes it too). The zero Clock is not usable; call
// NewClock. A Clock is safe for concurrent use.
type Clock struct {
	clk   ratesem.Clock
	epoch time.Time
}

// NewClock returns a Clock over clk, or over the real clock if clk is nil.
func NewClock(clk ratesem.Clock) Clock {
	if clk != nil {
		return Clock{clk: clk}
	}
	return Clock{epoch: time.Now()}
}

// Now reads the clock once.
func (c Clock) Now() time.Time {
	if c.clk == nil {
		return c.epoch.Add(time.Since(c.epoch))
	}
	return c.clk.Now()
}

// After returns a channel that receives the instant once d has elapsed on
// the clock (ratesem.Clock.After).
func (c Clock) After(d time.Duration) <-chan time.Time {
	if c.clk == nil {
		return time.After(d)
	}
	return c.clk.After(d)
}

// Timer is one timer, created on first use, that calls a function at an
// instant. It is not safe for concurrent use: its owner holds a lock around
// every call, and the function it calls takes that lock.
type Timer struct {
	t    *time.Timer   // the real clock's timer, made on first use
	stop chan struct{} // an injected clock's armed wait: closed to abandon it
	at   time.Time     // when the armed timer fires; zero: not armed
}

// Arm sets the timer to call f at the instant at (read on c, now being c's
// current reading). f must be the same function on every call.
func (t *Timer) Arm(c Clock, now, at time.Time, f func()) {
	if t.at.Equal(at) {
		return
	}
	t.at = at
	d := at.Sub(now)
	switch {
	case c.clk != nil:
		// An injected clock has only After: one goroutine waits for the
		// armed instant, and the next Arm or Stop abandons it.
		if t.stop != nil {
			close(t.stop)
		}
		stop, ch := make(chan struct{}), c.clk.After(d)
		t.stop = stop
		go func() {
			select {
			case <-ch:
				f()
			case <-stop:
			}
		}()
	case t.t != nil:
		t.t.Reset(d)
	default:
		t.t = time.AfterFunc(d, f)
	}
}

// Fired records that the timer went off; call it first in f.
func (t *Timer) Fired() { t.at = time.Time{} }

// Stop disarms the timer.
func (t *Timer) Stop() {
	if t.at.IsZero() {
		return
	}
	if t.stop != nil {
		close(t.stop)
		t.stop = nil
	} else {
		t.t.Stop()
	}
	t.at = time.Time{}
}

// DeadlineError is the error of an admission known to come after the
// context's deadline: it matches both its Sentinel and
// context.DeadlineExceeded with errors.Is.
type DeadlineError struct {
	Sentinel error
	Wait     time.Duration // how far away the admission was
}

// Error says how far away the admission was.
func (e *DeadlineError) Error() string {
	return fmt.Sprintf("%v: admission in %v", e.Sentinel, e.Wait)
}

// Is makes errors.Is hold for the Sentinel and context.DeadlineExceeded.
func (e *DeadlineError) Is(target error) bool {
	return target == e.Sentinel || target == context.DeadlineExceeded
}
