package remote

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/internal/rstore"
)

// pipeFake is fakeStore with Pipe (a piper): the ends, then the
// admissions of one scope, as one round trip; pipeHook runs before it (an
// error fails the whole round trip).
type pipeFake struct {
	*fakeStore
	pipeHook func(ctx context.Context, ends, calls int) error
}

func (p *pipeFake) Pipe(ctx context.Context, ends []rspec.End, scope string, calls [][]rspec.Charge, by []time.Time) ([]error, []rspec.Decision, []error, error) {
	if p.pipeHook != nil {
		if err := p.pipeHook(ctx, len(ends), len(calls)); err != nil {
			return nil, nil, nil, err
		}
	}
	eerrs := make([]error, len(ends))
	for i, e := range ends {
		if e.Actual != nil {
			eerrs[i] = p.fakeStore.Settle(ctx, e.Scope, e.Charges, e.Token, e.Actual)
		} else {
			eerrs[i] = p.fakeStore.Release(ctx, e.Scope, e.Charges, e.Token)
		}
	}
	ds := make([]rspec.Decision, len(calls))
	errs := make([]error, len(calls))
	for i, cs := range calls {
		ds[i], errs[i] = p.fakeStore.Admit(ctx, scope, cs)
	}
	return eerrs, ds, errs, nil
}

func newPipeEngine(t *testing.T, p *pipeFake, cfg Config) *Engine {
	t.Helper()
	cfg.Store = p
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// gateFirst makes the next k admission round trips wait on the returned
// channel (closed by the test).
func gateFirst(k int) (func(ctx context.Context, ends, calls int) error, chan struct{}) {
	gate := make(chan struct{})
	var mu sync.Mutex
	return func(ctx context.Context, ends, calls int) error {
		mu.Lock()
		wait := calls > 0 && k > 0
		if wait {
			k--
		}
		mu.Unlock()
		if wait {
			<-gate
		}
		return nil
	}, gate
}

// TestReviewBatchExpireThenLateAnswer: a round trip whose Timeout passes
// answers its caller once (Redis not answering); its late answer, an
// admission, is cancelled in Redis (no units left until the lease), and
// the queue is handed on once.
func TestReviewBatchExpireThenLateAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &pipeFake{fakeStore: newFake()}
		hook, gate := gateFirst(1)
		p.pipeHook = hook
		e := newPipeEngine(t, p, Config{Timeout: time.Second})
		cs := []rstore.Charge{charge("a", spec(10, time.Second), 1)}
		_, err := e.Decide(context.Background(), "s", cs)
		if err == nil {
			t.Fatal("Decide admitted although its round trip never answered in Timeout")
		}
		close(gate)
		synctest.Wait()
		if n := p.inFlight(); n != 0 {
			t.Fatalf("%d units left in flight in Redis by a late admission; stats %+v", n, e.Stats())
		}
		if st := e.Stats(); st.Cancelled != 1 {
			t.Fatalf("stats %+v: want the late admission cancelled", st)
		}
	})
}

// TestReviewBatchCloseInFlight: Close while a caller's round trip is under
// way: the caller returns ErrClosed, the admission Redis grants later is
// cancelled, Close returns and no goroutine is left (synctest).
func TestReviewBatchCloseInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &pipeFake{fakeStore: newFake()}
		hook, gate := gateFirst(1)
		p.pipeHook = hook
		e := newPipeEngine(t, p, Config{Timeout: time.Second})
		cs := []rstore.Charge{charge("a", spec(10, time.Second), 1)}
		var err error
		var wg sync.WaitGroup
		wg.Go(func() { _, err = e.Decide(context.Background(), "s", cs) })
		synctest.Wait()
		wg.Go(func() { _ = e.Close() })
		synctest.Wait()
		close(gate)
		wg.Wait()
		synctest.Wait()
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Decide: %v; want ErrClosed", err)
		}
		if n := p.inFlight(); n != 0 {
			t.Fatalf("%d units left in flight after Close; stats %+v", n, e.Stats())
		}
	})
}

// TestReviewBatchRiderOnFailedTrip: a release that rides on an admission
// round trip that fails is counted (ReleasesFailed), never silently lost.
func TestReviewBatchRiderOnFailedTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &pipeFake{fakeStore: newFake()}
		e := newPipeEngine(t, p, Config{Timeout: time.Second})
		cs := []rstore.Charge{charge("a", spec(10, time.Second), 1)}
		o, err := e.Decide(context.Background(), "s", cs)
		if err != nil || o.Call == nil {
			t.Fatal(o, err)
		}
		gate := make(chan struct{})
		var mu sync.Mutex
		held := false
		p.pipeHook = func(ctx context.Context, ends, calls int) error {
			mu.Lock()
			first := !held && calls > 0 && ends == 0
			held = held || first
			mu.Unlock()
			switch {
			case first: // an admission round trip under way: the release waits for it
				<-gate
			case calls > 0 && ends > 0: // the round trip the release rides on fails
				return errors.New("test: connection reset")
			}
			return nil
		}
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = e.Decide(context.Background(), "s", cs) })
		synctest.Wait()
		sent := make(chan struct{})
		o.Call.OnSent(func() { close(sent) })
		o.Call.Release()
		synctest.Wait() // the release waits for the next round trip
		wg.Go(func() { _, _ = e.Decide(context.Background(), "t", cs) })
		synctest.Wait()
		close(gate)
		wg.Wait()
		<-sent
		if st := e.Stats(); st.ReleasesFailed != 1 {
			t.Fatalf("the release that rode on a failed round trip is not counted failed: stats %+v", st)
		}
	})
}

// TestReviewBatchCloseWhileRiding: Close while a release waits in ride for
// an admission round trip under way: the release is sent or counted
// dropped, Close returns, and no goroutine is left (synctest).
func TestReviewBatchCloseWhileRiding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &pipeFake{fakeStore: newFake()}
		e := newPipeEngine(t, p, Config{Timeout: time.Second})
		cs := []rstore.Charge{charge("a", spec(10, time.Second), 1)}
		o, err := e.Decide(context.Background(), "s", cs)
		if err != nil || o.Call == nil {
			t.Fatal(o, err)
		}
		hook, gate := gateFirst(1)
		p.pipeHook = hook
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = e.Decide(context.Background(), "s", cs) })
		synctest.Wait()
		sent := make(chan struct{})
		o.Call.OnSent(func() { close(sent) })
		o.Call.Release()
		synctest.Wait()
		wg.Go(func() { _ = e.Close() })
		synctest.Wait()
		close(gate)
		wg.Wait()
		<-sent
		synctest.Wait()
		st := e.Stats()
		_, rel, _ := p.counts()
		if rel != 1 && st.ReleasesDropped != 1 {
			t.Fatalf("the riding release neither sent (%d) nor counted dropped: stats %+v", rel, st)
		}
	})
}

// TestReviewBatchScopesForgotten: the queues of scopes no longer asked are
// forgotten (e.bq does not grow with the scopes ever used).
func TestReviewBatchScopesForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &pipeFake{fakeStore: newFake()}
		e := newPipeEngine(t, p, Config{Timeout: time.Second})
		cs := []rstore.Charge{charge("a", spec(10, time.Second), 1)}
		for i := range 100 {
			ctx, cancel := context.WithCancel(context.Background())
			if i%3 == 0 {
				cancel()
			}
			o, err := e.Decide(ctx, "s"+strconv.Itoa(i), cs)
			cancel()
			if err == nil && o.Call != nil {
				o.Call.Release()
			}
		}
		synctest.Wait()
		e.mu.Lock()
		n := len(e.bq)
		e.mu.Unlock()
		if n != 0 {
			t.Fatalf("%d scope queues kept", n)
		}
	})
}
