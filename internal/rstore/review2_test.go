package rstore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rspec"
)

// TestWholeLossSettledCallsInFlight: calls in flight when Redis loses
// everything, ended after it by Settle (their weights known only then),
// count their ends from then with their actual weights, as a Release does
// with its estimate (TestWholeLossCallsInFlight): the completion window
// logs them, the fixed completion window counts them in the window they
// end in. Before: Settle found no lease and counted only a debit, so the
// window forgot the calls in flight at the loss.
func TestWholeLossSettledCallsInFlight(t *testing.T) {
	for _, k := range []Kind{Completion, FixedCompletion} {
		t.Run(k.String(), func(t *testing.T) {
			clk := newClock()
			clk.t = time.Unix(1_700_000_000, 0) // on a Per boundary
			s, rdb := newStore(t, clk, time.Minute)
			ctx := context.Background()
			cs := func(n int64) []Charge {
				return []Charge{{Rule: "r", Key: "k", Spec: spec(k, 4, time.Second), Weight: n}}
			}
			var toks []string
			for range 2 {
				d, err := s.Admit(ctx, "sc", cs(2))
				if err != nil || !d.OK {
					t.Fatal(d, err)
				}
				toks = append(toks, d.Token)
			}
			rdb.FlushAll(ctx)
			if d, _ := s.Admit(ctx, "sc", cs(1)); d.OK || !d.Lost {
				t.Fatalf("after FLUSHALL: %+v; want refused, lost", d)
			}
			clk.add(1500 * time.Millisecond) // after the hold (fixed: in the next window)
			for _, tok := range toks {
				if err := s.Settle(ctx, "sc", cs(2), tok, []int64{1}); !errors.Is(err, ErrNotInFlight) {
					t.Fatalf("settle of a call in flight at the loss: %v; want ErrNotInFlight", err)
				}
			}
			if d, _ := s.Admit(ctx, "sc", cs(3)); d.OK {
				t.Fatalf("right after the settled calls ended (2 units): %+v; want a weight of 3 refused", d)
			}
			if d, _ := s.Admit(ctx, "sc", cs(2)); !d.OK {
				t.Fatalf("2 of 4 units counted: %+v; want a weight of 2 admitted", d)
			}
		})
	}
}

// TestCarryLateFrozenServer: carries of calls in flight sent to a Redis
// frozen by DEBUG SLEEP, with their answer-by instant long gone when it
// wakes, are refused there (Decision.Late), as late admissions are: no
// lease is left that nobody would release (the process gave up on the
// carry and carries the call again later). Before: each left a lease
// holding its units for the whole lease.
func TestCarryLateFrozenServer(t *testing.T) {
	s, rdb := newStore(t, nil, time.Minute)
	ctx := context.Background()
	cs := []Charge{{Rule: "r", Key: "k", Spec: spec(Completion, 10, time.Second), Weight: 1}}
	by := func(d time.Duration) context.Context { return rspec.WithAnswerBy(ctx, time.Now().Add(d)) }
	if d, err := s.Carry(by(time.Second), "sc", cs, false); err != nil || !d.OK || d.Late {
		t.Fatal(d, err)
	}
	sleeper := goredis.NewClient(&goredis.Options{Addr: rdb.Options().Addr, ReadTimeout: 10 * time.Second})
	defer sleeper.Close()
	slept := make(chan error, 1)
	go func() { slept <- sleeper.Do(ctx, "DEBUG", "SLEEP", "1").Err() }()
	time.Sleep(100 * time.Millisecond)
	results := make(chan rspec.Decision, 4)
	for i := range 4 {
		go func() {
			d, _ := s.Carry(by(200*time.Millisecond), "sc", cs, i%2 == 0)
			results <- d
		}()
	}
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if d := <-results; d.OK || !d.Late {
			t.Errorf("a carry run after the freeze: %+v; want Late", d)
		}
	}
	k := s.Keys("sc", cs[0])
	if n := rdb.ZCard(ctx, k[1]).Val(); n != 1 {
		t.Errorf("%d leases after the freeze; want 1", n)
	}
	if n := rdb.ZCard(ctx, k[2]).Val(); n != 0 {
		t.Errorf("%d ends logged after the freeze; want 0", n)
	}
}

// TestCarryFindsWholeLoss: a whole loss (FLUSHALL) whose first round trip
// after it is a carry (a process that fell back meanwhile): the carry
// finds the loss, by the scope's epoch key, as an admission would, and the
// hold runs from the carry, a Per (the carried call, ended at the carry,
// counts as long). Before: the carry made the limiter's state without
// looking at the epoch key; the loss was found by the next admission, 600
// ms later, and held a Per from then.
func TestCarryFindsWholeLoss(t *testing.T) {
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	ctx := context.Background()
	cs := []Charge{{Rule: "r", Key: "k", Spec: spec(Completion, 4, time.Second), Weight: 1}}
	if d, err := s.Admit(ctx, "sc", cs); err != nil || !d.OK {
		t.Fatal(d, err)
	} else if err := s.Release(ctx, "sc", cs, d.Token); err != nil {
		t.Fatal(err)
	}
	clk.add(10 * time.Millisecond)
	rdb.FlushAll(ctx)
	clk.add(100 * time.Millisecond)
	if d, err := s.Carry(ctx, "sc", cs, true); err != nil || !d.OK {
		t.Fatal(d, err)
	}
	clk.add(500 * time.Millisecond)
	if d, _ := s.Admit(ctx, "sc", cs); d.OK || !d.Lost {
		t.Fatalf("after the loss and the carry: %+v; want refused, lost", d)
	}
	clk.add(510 * time.Millisecond) // a Per and 10 ms after the carry
	if d, _ := s.Admit(ctx, "sc", cs); !d.OK {
		t.Fatalf("a Per after the carry: %+v; want admitted (the hold ran from the carry)", d)
	}
}

// TestReconcileAfterWholeLossKeepsTheHold: a fixed completion window whose
// state Redis lost: a server's report taken in after the loss (5 units
// from elsewhere), then the admission that finds the loss (the window held
// full in the loss's window), then a report with a call's mark that
// bounds the units from elsewhere lower (4): the reconcile gives back
// what its own looser bound took, never the hold's units: the window
// admits nothing until the next. Before: the hold made the window count N
// with the 5 units of the first report still counted apart (field e), so
// the give-back of 1 came out of the hold and a call was admitted.
func TestReconcileAfterWholeLossKeepsTheHold(t *testing.T) {
	clk := newClock()
	clk.t = time.Unix(1_700_000_000, 0) // on a Per boundary
	s, rdb := newStore(t, clk, time.Minute)
	ctx := context.Background()
	c := Charge{Rule: "r", Key: "k", Spec: spec(FixedCompletion, 10, time.Second), Weight: 1}
	cs := []Charge{c}
	if d, err := s.Admit(ctx, "sc", cs); err != nil || !d.OK {
		t.Fatal(d, err)
	} else if err := s.Release(ctx, "sc", cs, d.Token); err != nil {
		t.Fatal(err)
	}
	clk.add(10 * time.Millisecond)
	rdb.FlushAll(ctx)
	clk.add(10 * time.Millisecond)
	if x, err := s.ReconcileAt(ctx, "sc", c, 5, Read{Seen: clk.now()}); err != nil || x != 5 {
		t.Fatalf("a report of 5 after the loss: %d %v; want 5 taken", x, err)
	}
	clk.add(10 * time.Millisecond)
	if d, _ := s.Admit(ctx, "sc", cs); d.OK || !d.Lost {
		t.Fatalf("after the loss: %+v; want refused, lost", d)
	}
	w := clk.now().UnixMicro() / time.Second.Microseconds()
	mark := strconv.FormatInt(w, 10) + ":0"
	if _, err := s.ReconcileAt(ctx, "sc", c, 5, Read{Seen: clk.now(), Mark: mark, Weight: 1}); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.Admit(ctx, "sc", cs); d.OK {
		t.Fatalf("in the window held full after the loss: %+v; want refused", d)
	}
	clk.add(time.Second)
	if d, _ := s.Admit(ctx, "sc", cs); !d.OK {
		t.Fatalf("in the next window: %+v; want admitted", d)
	}
}
