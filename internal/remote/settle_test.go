package remote

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/internal/rstore"
)

// TestReleaseSettled: a settlement reaches the store as Settle with one
// actual weight per charge, in the background (a copy: the caller's slice
// may change at once), and the fake then counts the settled weights; a
// settlement whose weights are all the estimates is a plain Release.
func TestReleaseSettled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		var room atomic.Int32
		e := newEngine(t, f, Config{OnRoom: func(string, []rstore.Charge) { room.Add(1) }})
		sa, sb := spec(5, time.Second), spec(5, time.Second)
		cs := []rstore.Charge{charge("a", sa, 3), charge("b", sb, 2)}
		c, err := acquire(e, context.Background(), "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		actual := []int64{1, 4}
		c.ReleaseSettled(actual)
		actual[0] = 99
		synctest.Wait()
		if len(f.settles) != 1 || !slices.Equal(f.settles[0], []int64{1, 4}) {
			t.Fatalf("settles %v; want [[1 4]]", f.settles)
		}
		if _, r, _ := f.counts(); r != 0 {
			t.Fatalf("%d releases; want the settlement alone", r)
		}
		if room.Load() != 1 {
			t.Fatalf("OnRoom called %d times; want once, for the settlement", room.Load())
		}
		// a counts 1 unit ended, b 4: 4 more fit on a, 1 on b
		if c2, ok, _ := tryAcquire(e, "s", []rstore.Charge{charge("a", sa, 4), charge("b", sb, 1)}); !ok {
			t.Fatal("the settled weights not counted")
		} else {
			c2.ReleaseSettled([]int64{4, 1}) // plain
		}
		synctest.Wait()
		if _, r, _ := f.counts(); r != 1 || len(f.settles) != 1 {
			t.Fatalf("%d releases, settles %v; want the plain settlement as a Release", r, f.settles)
		}
		if st := e.Stats(); st.InFlight != 0 || st.ReleasesDropped != 0 || st.ReleasesFailed != 0 {
			t.Fatalf("%+v", st)
		}
	})
}

// TestReleaseSettledPanics: a settlement with the wrong number of weights,
// and a second release, panic.
func TestReleaseSettledPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		e := newEngine(t, f, Config{})
		cs := []rstore.Charge{charge("a", spec(5, time.Second), 1)}
		c, err := acquire(e, context.Background(), "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		mustPanic := func(name string, fn func()) {
			t.Helper()
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			fn()
		}
		mustPanic("two weights for one charge", func() { c.ReleaseSettled([]int64{1, 2}) })
		c.ReleaseSettled([]int64{0})
		mustPanic("a second release", func() { c.ReleaseSettled([]int64{0}) })
		mustPanic("a Release after it", c.Release)
	})
}

// TestReleaseSettledFallback: a call the fallback admitted is released
// locally (its estimate counted there), nothing is sent to Redis.
func TestReleaseSettledFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.admitHook = func(context.Context) error { return errors.New("connection refused") }
		fb := &localFallback{}
		e := newEngine(t, f, Config{Fallback: fb})
		cs := []rstore.Charge{charge("a", spec(5, time.Second), 2)}
		c, err := acquire(e, context.Background(), "s", cs)
		if err != nil || !c.Local() {
			t.Fatal(err)
		}
		c.ReleaseSettled([]int64{7})
		synctest.Wait()
		if fb.held || len(f.settles) != 0 {
			t.Fatalf("local held %v, settles %v", fb.held, f.settles)
		}
	})
}
