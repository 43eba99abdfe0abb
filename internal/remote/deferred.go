package remote

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/ratesem/ratesem"
)

// DeferredCheck is the eviction check that WithDeferredRedisChecks (of
// semaphore and clientpool) leaves to the first call that finds Redis
// answering. A nil *DeferredCheck defers nothing. It is safe for
// concurrent use.
type DeferredCheck struct {
	check func() error          // one round trip (rspec.Opener.Check)
	wrap  func(error) error     // adds what to do to a failure's message
	mu    sync.Mutex            // held by the one call running check
	res   atomic.Pointer[error] // nil until the check passed (*res nil) or failed
}

// NewDeferredCheck returns the check that runs check once Redis answers;
// a failure matching ratesem.ErrEviction is passed through wrap and then
// returned by every call.
func NewDeferredCheck(check func() error, wrap func(error) error) *DeferredCheck {
	return &DeferredCheck{check: check, wrap: wrap}
}

// Err runs the check, at most once and in one caller at a time, unless e
// finds Redis unavailable: the other callers go on without waiting for
// it. It returns the check's ratesem.ErrEviction (wrapped) once found,
// nil otherwise; a Redis that does not answer leaves it for a later call.
func (d *DeferredCheck) Err(e *Engine) error {
	if d == nil {
		return nil
	}
	if p := d.res.Load(); p != nil {
		return *p
	}
	if e.Stats().Unavailable || !d.mu.TryLock() {
		return nil
	}
	defer d.mu.Unlock()
	if p := d.res.Load(); p != nil {
		return *p
	}
	err := d.check()
	switch {
	case err == nil:
		d.res.Store(new(error))
	case errors.Is(err, ratesem.ErrEviction):
		err = d.wrap(err)
		d.res.Store(&err)
		return err
	}
	return nil
}
