package remote

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/rstore"
)

// TestFallbackHandover: a call the fallback admitted while Redis was
// unreachable is carried into Redis when it answers again, by the prober,
// with no caller asking: Redis then counts it in flight, and its release
// ends it there. A waiter blocked on the fallback leaves it as soon as
// Redis answers, and is admitted by Redis and the fallback both until the
// fallback's window has drained (one Per after its last call ended); then
// by Redis alone.
func TestFallbackHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		var down atomic.Bool
		down.Store(true)
		f.admitHook = func(context.Context) error {
			if down.Load() {
				return errors.New("connection refused")
			}
			return nil
		}
		fb := &localFallback{}
		e := newEngine(t, f, Config{Fallback: fb})
		per := time.Second
		cs := []rstore.Charge{charge("a", spec(5, per), 1)}
		c1, err := acquire(e, context.Background(), "s", cs)
		if err != nil || !c1.Local() {
			t.Fatalf("%v, local %v", err, c1 != nil && c1.Local())
		}
		type result struct {
			c   *Call
			err error
		}
		res := make(chan result, 1)
		go func() {
			c, err := acquire(e, context.Background(), "s", cs)
			res <- result{c, err}
		}()
		synctest.Wait() // blocked on the fallback's one unit
		down.Store(false)
		time.Sleep(carryProbeMax + time.Millisecond)
		synctest.Wait()
		if f.inFlight() != 1 || f.carries != 1 {
			t.Fatalf("Redis holds %d calls in flight after %d carries; want the fallback's call carried", f.inFlight(), f.carries)
		}
		if st := e.Stats(); st.Unavailable || st.Carried != 1 {
			t.Fatalf("%+v", st)
		}
		select {
		case r := <-res:
			t.Fatalf("admitted while the fallback's call holds its window: %v", r.err)
		default:
		}
		c1.Release() // ends in Redis and in the fallback
		r := <-res
		if r.err != nil || r.c.Local() {
			t.Fatalf("the waiter: %v, local %v; want Redis", r.err, r.c != nil && r.c.Local())
		}
		synctest.Wait()
		if _, releases, _ := f.counts(); releases != 1 {
			t.Fatalf("%d releases reached Redis; want the carried call's", releases)
		}
		if _, ok := fb.TryAcquire("s", cs); ok {
			t.Fatal("the waiter admitted by Redis does not hold the fallback's unit while its window drains")
		}
		r.c.Release()
		time.Sleep(per) // the fallback's window drains
		c3, err := acquire(e, context.Background(), "s", cs)
		if err != nil || c3.Local() {
			t.Fatal(err)
		}
		rel, ok := fb.TryAcquire("s", cs)
		if !ok {
			t.Fatal("a call after the fallback's window drained holds its unit")
		}
		rel()
		c3.Release()
	})
}

// TestFallbackEndedCallsCarried: calls the fallback admitted that ended
// before Redis answered are carried as ended now (one round trip for the
// limiter, whatever their number), so that Redis counts them for a Per;
// calls ended longer ago than Per are not carried.
func TestFallbackEndedCallsCarried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		var down atomic.Bool
		down.Store(true)
		f.admitHook = func(context.Context) error {
			if down.Load() {
				return errors.New("connection refused")
			}
			return nil
		}
		e := newEngine(t, f, Config{Fallback: &localFallback{}})
		per := time.Second
		sp := spec(5, per)
		cs := []rstore.Charge{charge("a", sp, 1)}
		old, err := acquire(e, context.Background(), "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		old.Release()
		time.Sleep(per + time.Millisecond) // it stops counting
		for range 3 {
			c, err := acquire(e, context.Background(), "s", cs)
			if err != nil || !c.Local() {
				t.Fatal(err)
			}
			c.Release()
		}
		down.Store(false)
		time.Sleep(carryProbeMax + time.Millisecond)
		synctest.Wait()
		f.mu.Lock()
		used := f.lim("s", cs[0]).used(time.Now(), per)
		carries := f.carries
		f.mu.Unlock()
		if used != 3 || carries != 1 {
			t.Fatalf("Redis counts %d units after %d carries; want the 3 recent calls in one", used, carries)
		}
		// Redis has room for 2 more, and the fallback's window holds the
		// process to what it left.
		c, err := acquire(e, context.Background(), "s", cs)
		if err != nil || c.Local() {
			t.Fatal(err)
		}
		c.Release()
	})
}

// TestUnavailableMessage: the error of an unreachable Redis says so once
// ("ratesem: " once), and names no deadline the caller never set.
func TestUnavailableMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		stall := make(chan struct{})
		f.admitHook = func(ctx context.Context) error {
			<-stall
			return errors.New("ratesem: redis admit: i/o timeout")
		}
		e := newEngine(t, f, Config{Timeout: 200 * time.Millisecond})
		cs := []rstore.Charge{charge("a", spec(5, time.Second), 1)}
		_, err := acquire(e, context.Background(), "s", cs)
		close(stall)
		msg := err.Error()
		if !errors.Is(err, ratesem.ErrUnavailable) || strings.Count(msg, "ratesem:") != 1 || strings.Contains(msg, "deadline") {
			t.Fatalf("%q", msg)
		}
		synctest.Wait()
		time.Sleep(probeMin)
		_, err = acquire(e, context.Background(), "s", cs)
		if msg := err.Error(); !errors.Is(err, ratesem.ErrUnavailable) || strings.Count(msg, "ratesem:") != 1 || !strings.Contains(msg, "i/o timeout") {
			t.Fatalf("%q", msg)
		}
		t.Log(msg)
	})
}
