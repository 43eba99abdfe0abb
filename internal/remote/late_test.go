package remote

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/internal/rstore"
)

// TestAdmitCarriesAnswerBy: every admission tells the store when its
// caller stops waiting (rspec.WithAnswerBy): the end of Timeout, or ctx's
// deadline when sooner; a probe while Redis is taken as down, the end of
// its shorter bound.
func TestAdmitCarriesAnswerBy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		got := make(chan time.Time, 10)
		f.admitHook = func(ctx context.Context) error {
			by, ok := rspec.AnswerBy(ctx)
			if !ok {
				t.Error("an admission without an answer-by instant")
			}
			got <- by
			return nil
		}
		e := newEngine(t, f, Config{Timeout: 2 * time.Second})
		cs := []rstore.Charge{charge("a", spec(10, time.Second), 1)}
		start := time.Now()
		c, err := acquire(e, context.Background(), "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
		if by := <-got; !by.Equal(start.Add(2 * time.Second)) {
			t.Errorf("answer by %v after the call; want the Timeout, 2s", by.Sub(start))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		c, err = acquire(e, ctx, "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
		if by := <-got; !by.Equal(start.Add(300 * time.Millisecond)) {
			t.Errorf("answer by %v after the call; want ctx's deadline, 300ms", by.Sub(start))
		}
	})
}

// TestLateDecisionAsksAgain: a decision refused as late (the store's
// reading of Redis's clock was off while the caller still waits) is asked
// again after MinRetry at least, not at once, and admits the call.
func TestLateDecisionAsksAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		lates := 3
		f.decide = func() *rstore.Decision {
			if lates == 0 {
				return nil
			}
			lates--
			return &rstore.Decision{Late: true, Now: time.Now()}
		}
		e := newEngine(t, f, Config{})
		start := time.Now()
		c, err := acquire(e, context.Background(), "s", []rstore.Charge{charge("a", spec(10, time.Second), 1)})
		if err != nil {
			t.Fatal(err)
		}
		c.Release()
		if took := time.Since(start); took < 3*MinRetry || took >= 6*MinRetry+time.Millisecond {
			t.Errorf("admitted after %v; want 3 retries of [MinRetry, 2·MinRetry)", took)
		}
		if a, _, _ := f.counts(); a != 4 {
			t.Errorf("%d admissions; want 4", a)
		}
		if st := e.Stats(); st.Admitted != 1 {
			t.Errorf("stats %+v", st)
		}
	})
}
