package redisrate_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// An option a mode cannot honour is refused, never ignored: a virtual
// clock over Redis (both fronts), a Redis option in process (both fronts),
// an option of one front given to the other. None of these needs Redis to
// answer: the constructors refuse before any round trip.
func TestOptionsRefusedWhereTheyCannotApply(t *testing.T) {
	c := newClient(t, "127.0.0.1:1") // never reached
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 5, Per: time.Minute}}}}
	mock := clock.NewMock()
	if s, err := redisrate.NewSemaphore(c, "x", 10, time.Second, semaphore.WithClock(mock)); err == nil {
		s.Close()
		t.Error("redisrate.NewSemaphore with WithClock: no error")
	}
	if p, err := clientpool.New(table, redisrate.Shared(c, "p"), clientpool.WithClock(mock)); err == nil {
		p.Close()
		t.Error("a Pool with Shared and WithClock: no error")
	}
	for _, o := range []clientpool.Option{redisrate.WithLease(time.Minute), redisrate.WithTimeout(time.Second),
		redisrate.WithFallback(0.5), redisrate.WithEvictionAllowed(), redisrate.WithDeferredChecks(),
		redisrate.WithJitter(time.Millisecond), redisrate.WithPrefix("x")} {
		if _, err := clientpool.New(table, o); err == nil {
			t.Error("clientpool.New in process with a Redis option: no error")
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Error("semaphore.New with a Redis option: no panic")
				}
			}()
			semaphore.New(1, time.Second, o)
		}()
	}
	if _, err := clientpool.New(table, semaphore.WithStartWindow(time.Millisecond)); err == nil {
		t.Error("clientpool.New with semaphore.WithStartWindow: no error")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("semaphore.New with clientpool.WithMaxKeys: no panic")
			}
		}()
		semaphore.New(1, time.Second, clientpool.WithMaxKeys(3))
	}()
}
