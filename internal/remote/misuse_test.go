package remote

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/internal/rstore"
)

// TestObserverPanicOnAdmitted: an observer that panics on Admitted reaches
// the caller of Acquire, and the call is released first: nothing stays in
// flight in the engine or in the store. On 3c9e6ad the call stayed in
// flight with nobody to release it.
func TestObserverPanicOnAdmitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e := newEngine(t, f, Config{Observer: func(ev Event) {
			if ev.Kind == Admitted {
				panic("admitted")
			}
		}})
		cs := []rstore.Charge{charge("a", spec(1, time.Second), 1)}
		panicked := func() (r any) {
			defer func() { r = recover() }()
			_, _ = e.Acquire(context.Background(), "s", cs)
			return nil
		}()
		if panicked == nil {
			t.Fatal("the observer's panic did not reach the caller")
		}
		synctest.Wait()
		if st := e.Stats(); st.InFlight != 0 || f.inFlight() != 0 {
			t.Fatalf("after the panic: engine %d, store %d calls in flight", st.InFlight, f.inFlight())
		}
	})
}
