package rstore

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/window"
)

// fillUp admits calls of weight 1 on cs until one is refused, releasing
// each (leased or not), and returns how many were admitted.
func fillUp(t *testing.T, s *Store, scope string, cs []Charge) int {
	t.Helper()
	ctx := context.Background()
	for i := range 10_000 {
		d, err := s.Admit(ctx, scope, cs)
		if err != nil {
			t.Fatal(err)
		}
		if !d.OK {
			return i
		}
		if d.Leased {
			if err := s.Release(ctx, scope, cs, d.Token); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Fatal("never full")
	return 0
}

// TestWholeLoss: every window, filled by calls that have ended, then
// FLUSHALL (Redis loses everything): the next admission of the process
// that saw the state finds it lost and refuses (Decision.Lost), and the
// limiter admits again once a limiter full at the loss would (a Per for
// the completion window, the sliding log's Per and margin, the next
// window for the fixed ones, a refill for the buckets). Before: the
// admission right after the FLUSHALL was admitted, and N more with it.
func TestWholeLoss(t *testing.T) {
	per := time.Second
	for _, tc := range []struct {
		name string
		sp   *Spec
		back time.Duration // admits again this long after the loss (not sooner)
	}{
		{"completion", spec(Completion, 4, per), per},
		{"fixed-completion", spec(FixedCompletion, 4, per), per}, // the clock is on a Per boundary
		{"sliding-log", &Spec{Kind: SlidingLog, Limit: window.Limit{N: 4, Per: per}, Margin: 100 * time.Millisecond}, per + 100*time.Millisecond},
		{"fixed-window", spec(FixedWindow, 4, per), per},
		{"sliding-window-counter", spec(SlidingWindowCounter, 4, per), per + per/4}, // N in the window before: room for 1 a quarter into the next
		{"sub-window-counter", &Spec{Kind: SubWindowCounter, Limit: window.Limit{N: 4, Per: per}, Blocks: 4}, per},
		{"token-bucket", &Spec{Kind: TokenBucket, Limit: window.Limit{N: 4, Per: per}, Burst: 4}, per / 4},
		{"leaky-bucket", &Spec{Kind: LeakyBucket, Limit: window.Limit{N: 4, Per: per}, Burst: 4}, per / 4},
		{"gcra", &Spec{Kind: GCRA, Limit: window.Limit{N: 4, Per: per}, Burst: 4}, per / 4},
		{"pacer", &Spec{Kind: GCRA, Limit: window.Limit{N: 4, Per: per}}, per},
		{"concurrency", &Spec{Kind: FixedWindow, Limit: window.Limit{N: 4, Per: per}, Concurrency: 2}, per},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			clk.t = time.Unix(1_700_000_000, 0) // on a Per boundary
			s, rdb := newStore(t, clk, time.Minute)
			ctx := context.Background()
			cs := []Charge{{Rule: "r", Key: "k", Spec: tc.sp, Weight: 1}}
			if n := fillUp(t, s, "sc", cs); n == 0 {
				t.Fatal("nothing admitted")
			}
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			d, err := s.Admit(ctx, "sc", cs)
			if err != nil || d.OK || !d.Lost {
				t.Fatalf("right after FLUSHALL: %+v %v; want refused, lost", d, err)
			}
			clk.add(tc.back - time.Millisecond)
			if d, err := s.Admit(ctx, "sc", cs); err != nil || d.OK {
				t.Fatalf("%v after the loss: %+v %v; want refused", tc.back-time.Millisecond, d, err)
			}
			clk.add(time.Millisecond)
			if d, err := s.Admit(ctx, "sc", cs); err != nil || !d.OK {
				t.Fatalf("%v after the loss: %+v %v; want admitted", tc.back, d, err)
			}
		})
	}
}

// TestWholeLossCompletionWait: the completion window held full by a loss
// says how long: a Per from the loss, whatever the weight.
func TestWholeLossCompletionWait(t *testing.T) {
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	ctx := context.Background()
	cs := []Charge{{Rule: "r", Key: "k", Spec: spec(Completion, 30, 2*time.Second), Weight: 1}}
	fillUp(t, s, "", cs)
	clk.add(500 * time.Millisecond)
	rdb.FlushAll(ctx)
	d, err := s.Admit(ctx, "", cs)
	if err != nil || d.OK || !d.Lost || d.Wait != 2*time.Second {
		t.Fatalf("after FLUSHALL: %+v %v; want refused, lost, for 2s", d, err)
	}
	clk.add(2 * time.Second)
	if n := fillUp(t, s, "", cs); n != 30 {
		t.Fatalf("a Per after the loss: %d admitted, want 30", n)
	}
}

// TestWholeLossEveryLimiterOfTheScope: the loss found through one limiter
// holds the scope's others too, in every process, and a process that never
// saw the scope is held once one that did has found the loss; the scope's
// epoch key outlives its limiters' keys.
func TestWholeLossEveryLimiterOfTheScope(t *testing.T) {
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	ctx := context.Background()
	a := []Charge{{Rule: "a", Key: "k", Spec: spec(Completion, 2, time.Second), Weight: 1}}
	b := []Charge{{Rule: "b", Key: "k", Spec: spec(FixedWindow, 2, time.Second), Weight: 1}}
	fillUp(t, s, "sc", a)
	fillUp(t, s, "sc", b)
	ek := s.EpochKey("sc")
	ka := s.Keys("sc", a[0])
	for _, k := range append(ka[:], s.Keys("sc", b[0])[0]) {
		// E is read first: the two TTLs are set equal (PEXPIRE GT) and
		// both run down between the two reads, so E read second could
		// look a millisecond shorter than a key it outlives.
		e := rdb.PTTL(ctx, ek).Val()
		if ttl := rdb.PTTL(ctx, k).Val(); ttl > 0 && e < ttl {
			t.Errorf("epoch key TTL %v < %s's %v", e, k, ttl)
		}
	}
	rdb.FlushAll(ctx)
	if d, _ := s.Admit(ctx, "sc", a); d.OK || !d.Lost {
		t.Fatalf("a after FLUSHALL: %+v", d)
	}
	other, _ := New(rdb, s.prefix, Options{Now: clk.now}) // another process, which never saw the scope
	if d, _ := other.Admit(ctx, "sc", b); d.OK || !d.Lost {
		t.Fatalf("b, from another process, after the loss was found: %+v", d)
	}
	if d, _ := s.Admit(ctx, "sc", b); d.OK {
		t.Fatalf("b after the loss was found: %+v", d)
	}
	// A limiter of the scope made new within the Per: held as well
	// (nobody can tell it from a lost one).
	c := []Charge{{Rule: "c", Key: "k", Spec: spec(Completion, 2, time.Second), Weight: 1}}
	if d, _ := other.Admit(ctx, "sc", c); d.OK {
		t.Fatalf("c, new after the loss: %+v", d)
	}
	clk.add(time.Second)
	for _, cs := range [][]Charge{a, b, c} {
		if d, _ := other.Admit(ctx, "sc", cs); !d.OK {
			t.Fatalf("%s a Per after the loss: %+v", cs[0].Rule, d)
		}
	}
}

// TestWholeLossRemadeByAnotherProcess: after FLUSHALL a process that never
// saw the scope admits first (it cannot tell a loss from a new scope, and
// makes the scope's epoch again); the process that saw it still finds the
// loss at its next admission, and from then on both are held.
func TestWholeLossRemadeByAnotherProcess(t *testing.T) {
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	ctx := context.Background()
	cs := []Charge{{Rule: "r", Key: "k", Spec: spec(Completion, 4, time.Second), Weight: 1}}
	fillUp(t, s, "sc", cs)
	rdb.FlushAll(ctx)
	other, _ := New(rdb, s.prefix, Options{Now: clk.now})
	d, err := other.Admit(ctx, "sc", cs)
	if err != nil || !d.OK || d.Lost {
		t.Fatalf("the process that never saw the scope: %+v %v; want admitted", d, err)
	}
	if d, _ := s.Admit(ctx, "sc", cs); d.OK || !d.Lost {
		t.Fatalf("the process that saw it: %+v; want refused, lost", d)
	}
	if d, _ := other.Admit(ctx, "sc", cs); d.OK {
		t.Fatalf("the other, once the loss was found: %+v; want refused", d)
	}
}

// TestExpiryIsNoLoss: a scope idle for longer than its keys live (they
// expired: deleted here, the clock moved on) is new, not lost; keys deleted
// before then are a loss.
func TestExpiryIsNoLoss(t *testing.T) {
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	ctx := context.Background()
	sp := spec(Completion, 4, time.Second)
	cs := []Charge{{Rule: "r", Key: "k", Spec: sp, Weight: 1}}
	fillUp(t, s, "sc", cs)
	ttl := time.Duration(sp.TTL(time.Minute)) * time.Millisecond
	clk.add(ttl - time.Second) // the keys must still be there
	rdb.FlushAll(ctx)
	if d, _ := s.Admit(ctx, "sc", cs); d.OK || !d.Lost {
		t.Fatalf("keys gone before their TTL: %+v; want lost", d)
	}
	clk.add(time.Second)
	fillUp(t, s, "sc", cs)
	clk.add(ttl) // they expired
	rdb.FlushAll(ctx)
	if d, _ := s.Admit(ctx, "sc", cs); !d.OK || d.Lost {
		t.Fatalf("keys expired: %+v; want admitted, not lost", d)
	}
}

// TestLateAdmission: an admission that reaches Redis after the instant its
// caller set (rspec.WithAnswerBy) is refused, Late, and leaves nothing; one
// in time is admitted. On the server's clock (its TIME read first, then
// from the replies) and on Options.Now's.
func TestLateAdmission(t *testing.T) {
	for _, virtual := range []bool{false, true} {
		t.Run(map[bool]string{false: "server clock", true: "Options.Now"}[virtual], func(t *testing.T) {
			var clk *vclock
			if virtual {
				clk = newClock()
			}
			s, rdb := newStore(t, clk, time.Minute)
			ctx := context.Background()
			cs := []Charge{{Rule: "r", Key: "k", Spec: spec(Completion, 3, time.Second), Weight: 1}}
			if d, err := s.Admit(rspec.WithAnswerBy(ctx, time.Now().Add(time.Second)), "sc", cs); err != nil || !d.OK || d.Late {
				t.Fatalf("in time: %+v %v", d, err)
			}
			for _, late := range []time.Duration{time.Hour, time.Second, 100 * time.Millisecond} {
				d, err := s.Admit(rspec.WithAnswerBy(ctx, time.Now().Add(-late)), "sc", cs)
				if err != nil || d.OK || !d.Late || d.Lost || d.Wait != 0 {
					t.Fatalf("%v late: %+v %v; want refused, Late", late, d, err)
				}
			}
			// The zero instant (long past): late; one centuries away: no
			// deadline at all (beyond a lease it bounds nothing).
			if d, err := s.Admit(rspec.WithAnswerBy(ctx, time.Time{}), "sc", cs); err != nil || d.OK || !d.Late {
				t.Fatalf("answer by the zero time: %+v %v; want Late", d, err)
			}
			far := time.Unix(1<<62, 0)
			d, err := s.Admit(rspec.WithAnswerBy(ctx, far), "sc", cs)
			if err != nil || !d.OK {
				t.Fatalf("answer by %v: %+v %v; want admitted", far, d, err)
			}
			if err := s.Cancel(ctx, "sc", cs, d.Token); err != nil {
				t.Fatal(err)
			}
			leases := rdb.ZCard(ctx, s.Keys("sc", cs[0])[1]).Val()
			if leases != 1 {
				t.Fatalf("%d leases; want 1 (the late admissions left none)", leases)
			}
			for i := range 2 {
				if d, err := s.Admit(ctx, "sc", cs); err != nil || !d.OK {
					t.Fatalf("admission %d after the late ones: %+v %v", i+2, d, err)
				}
			}
		})
	}
}

// TestLateAdmissionFrozenServer: admissions sent to a Redis frozen by
// DEBUG SLEEP, with a deadline long gone when it wakes, are refused there:
// no lease is left.
func TestLateAdmissionFrozenServer(t *testing.T) {
	s, rdb := newStore(t, nil, time.Minute)
	ctx := context.Background()
	cs := []Charge{{Rule: "r", Key: "k", Spec: spec(Completion, 10, time.Second), Weight: 1}}
	if d, err := s.Admit(rspec.WithAnswerBy(ctx, time.Now().Add(time.Second)), "sc", cs); err != nil || !d.OK {
		t.Fatal(d, err)
	}
	sleeper := goredis.NewClient(&goredis.Options{Addr: rdb.Options().Addr, ReadTimeout: 10 * time.Second})
	defer sleeper.Close()
	slept := make(chan error, 1)
	go func() { slept <- sleeper.Do(ctx, "DEBUG", "SLEEP", "1").Err() }()
	time.Sleep(100 * time.Millisecond)
	results := make(chan rspec.Decision, 5)
	for range 5 {
		go func() {
			d, _ := s.Admit(rspec.WithAnswerBy(ctx, time.Now().Add(200*time.Millisecond)), "sc", cs)
			results <- d
		}()
	}
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if d := <-results; d.OK || !d.Late {
			t.Errorf("an admission run after the freeze: %+v; want Late", d)
		}
	}
	if n := rdb.ZCard(ctx, s.Keys("sc", cs[0])[1]).Val(); n != 1 {
		t.Fatalf("%d leases after the freeze; want 1", n)
	}
}

// TestLateAdmissionClockOff: a reading of Redis's clock an hour off (the
// server's clock stepped forward since) makes an admission in time look
// late: it is refused, Late, and the reply's reading corrects the next
// one, which is admitted.
func TestLateAdmissionClockOff(t *testing.T) {
	s, _ := newStore(t, nil, time.Minute)
	ctx := context.Background()
	cs := []Charge{{Rule: "r", Key: "k", Spec: spec(Completion, 3, time.Second), Weight: 1}}
	by := func() context.Context { return rspec.WithAnswerBy(ctx, time.Now().Add(time.Second)) }
	if d, err := s.Admit(by(), "sc", cs); err != nil || !d.OK {
		t.Fatal(d, err)
	}
	s.mu.Lock()
	s.scopes["sc"].clock.srv -= time.Hour.Microseconds()
	s.mu.Unlock()
	if d, err := s.Admit(by(), "sc", cs); err != nil || d.OK || !d.Late {
		t.Fatalf("with the clock an hour off: %+v %v; want Late", d, err)
	}
	if d, err := s.Admit(by(), "sc", cs); err != nil || !d.OK {
		t.Fatalf("after the reading was corrected: %+v %v", d, err)
	}
}

// TestWholeLossCallsInFlight: calls in flight when Redis loses everything
// end after it; their releases find no lease, though it cannot have run
// out, and count their ends from then (ErrNotInFlight all the same), so the
// window held full for a Per after the loss does not then forget them: a
// completion window refuses until a Per after those ends, a fixed
// completion window counts them in the window they end in. Before: the
// limiter admitted N at once after the loss, and again a Per later while
// the calls then in flight had just ended.
func TestWholeLossCallsInFlight(t *testing.T) {
	for _, k := range []Kind{Completion, FixedCompletion} {
		t.Run(k.String(), func(t *testing.T) {
			clk := newClock()
			clk.t = time.Unix(1_700_000_000, 0) // on a Per boundary
			s, rdb := newStore(t, clk, time.Minute)
			ctx := context.Background()
			cs := []Charge{{Rule: "r", Key: "k", Spec: spec(k, 2, time.Second), Weight: 1}}
			var toks []string
			for range 2 {
				d, err := s.Admit(ctx, "sc", cs)
				if err != nil || !d.OK {
					t.Fatal(d, err)
				}
				toks = append(toks, d.Token)
			}
			rdb.FlushAll(ctx)
			if d, _ := s.Admit(ctx, "sc", cs); d.OK || !d.Lost {
				t.Fatalf("after FLUSHALL: %+v; want refused, lost", d)
			}
			clk.add(1500 * time.Millisecond) // the calls end after the hold (fixed: in the next window)
			for _, tok := range toks {
				if err := s.Release(ctx, "sc", cs, tok); !errors.Is(err, ErrNotInFlight) {
					t.Fatalf("release of a call in flight at the loss: %v; want ErrNotInFlight", err)
				}
			}
			if d, _ := s.Admit(ctx, "sc", cs); d.OK {
				t.Fatalf("right after the calls in flight at the loss ended: %+v; want refused", d)
			}
			if k == Completion {
				clk.add(time.Second)
			} else {
				clk.add(500 * time.Millisecond) // the next window
			}
			if d, _ := s.Admit(ctx, "sc", cs); !d.OK {
				t.Fatalf("a Per after their ends: %+v", d)
			} else if err := s.Cancel(ctx, "sc", cs, d.Token); err != nil {
				t.Fatal(err)
			}
			// A release repeated (a client's retry) logs nothing more.
			clk.add(time.Minute)
			d, _ := s.Admit(ctx, "sc", cs)
			for range 2 {
				if err := s.Release(ctx, "sc", cs, d.Token); err != nil && !errors.Is(err, ErrNotInFlight) {
					t.Fatal(err)
				}
			}
			if k == Completion {
				if d, _ := s.Admit(ctx, "sc", cs); !d.OK || d.Lost {
					t.Fatalf("after a release repeated: %+v; want admitted (1 of 2 counted)", d)
				}
			}
		})
	}
}

// TestEpochKeyTampered: whatever string another client writes into the
// scope's epoch key, admissions go on without a script error; the process
// that saw the scope takes a value it never saw, while its key must exist,
// as a loss (held full), and the next Per admits again.
func TestEpochKeyTampered(t *testing.T) {
	for _, v := range []string{"", ":", "x", "x:", ":5", "0:0", "abc:-1", "abc:1e9", string(make([]byte, 4096))} {
		clk := newClock()
		s, rdb := newStore(t, clk, time.Minute)
		ctx := context.Background()
		cs := []Charge{{Rule: "r", Key: "k", Spec: spec(Completion, 2, time.Second), Weight: 1}}
		admit := func(s *Store) error {
			d, err := s.Admit(ctx, "sc", cs)
			if err == nil && d.OK {
				err = s.Release(ctx, "sc", cs, d.Token)
			}
			return err
		}
		if err := admit(s); err != nil {
			t.Fatal(err)
		}
		rdb.Set(ctx, s.EpochKey("sc"), v, time.Minute)
		if err := admit(s); err != nil {
			t.Fatalf("epoch key %q: %v", v, err)
		}
		other, _ := New(rdb, s.prefix, Options{Now: clk.now})
		if err := admit(other); err != nil {
			t.Fatalf("epoch key %q, another process: %v", v, err)
		}
		clk.add(2 * time.Second)
		if d, err := s.Admit(ctx, "sc", cs); err != nil || !d.OK {
			t.Fatalf("epoch key %q, 2 s later: %+v %v", v, d, err)
		}
	}
}
