package clientpool_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// acquireWithin reports whether a call of charges is admitted within d of
// virtual time (it gives the admission back at once).
func acquireWithin(t *testing.T, p *clientpool.Pool, d time.Duration, charges ...clientpool.Charge) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), max(d, time.Nanosecond))
	defer cancel()
	tk, err := p.Acquire(ctx, charges...)
	if err != nil {
		return false
	}
	tk.Release()
	return true
}

// A ticket settled to fewer units gives the rest back at once; to more, it
// holds the next calls back; misuse is an error.
func TestTicketSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{
			{Name: "tokens", Limit: window.Limit{N: 100, Per: time.Second}},
			{Name: "requests", Limit: window.Limit{N: 10, Per: time.Second}},
		})
		ctx := context.Background()
		tk, err := p.Acquire(ctx, clientpool.Charge{Rule: "tokens", Weight: 100}, clientpool.Charge{Rule: "requests", Weight: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.Settle("tokens", -1); !errors.Is(err, ratesem.ErrNegativeWeight) {
			t.Fatalf("Settle(-1): %v", err)
		}
		if err := tk.Settle("nope", 1); !errors.Is(err, ratesem.ErrUnknownRule) {
			t.Fatalf("Settle of a rule the ticket does not hold: %v", err)
		}
		if err := tk.Settle("tokens", 500); err != nil { // the last Settle wins
			t.Fatal(err)
		}
		if err := tk.Settle("tokens", 30); err != nil {
			t.Fatal(err)
		}
		tk.Release()
		if err := tk.Settle("tokens", 1); err == nil {
			t.Fatal("Settle after Release: no error")
		}
		if !acquireWithin(t, p, 0, clientpool.Charge{Rule: "tokens", Weight: 70}) {
			t.Fatal("70 units refunded: not admitted at once")
		}
		if acquireWithin(t, p, time.Second-time.Nanosecond, clientpool.Charge{Rule: "tokens", Weight: 1}) {
			t.Fatal("100 units counted: admitted before they leave the window")
		}

		tk, _ = p.Acquire(ctx, clientpool.Charge{Rule: "tokens", Weight: 10})
		tk.Settle("tokens", math.MaxInt64) // saturates: full until the window moves
		tk.Release()
		if acquireWithin(t, p, time.Second-time.Nanosecond, clientpool.Charge{Rule: "tokens", Weight: 1}) {
			t.Fatal("admitted under a debit of math.MaxInt64")
		}
		if !acquireWithin(t, p, 2*time.Second, clientpool.Charge{Rule: "tokens", Weight: 100}) {
			t.Fatal("the window never recovered from a huge debit")
		}
	})
}

func rlHeader(limit, remaining int64, reset time.Time) http.Header {
	h := http.Header{}
	h.Set("X-RateLimit-Limit", strconv.FormatInt(limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(remaining, 10))
	if !reset.IsZero() {
		// delta-seconds: synctest's clock starts in 2000, before the
		// epoch values ParseRateLimitAt reads as instants
		h.Set("X-RateLimit-Reset", strconv.FormatInt(int64(max(time.Until(reset), 0)/time.Second), 10))
	}
	return h
}

// A rule with no limit admits one call at a time until a response says
// the limit; from then on it admits what the server said remains, learns
// a new window when the server announces one, and ignores stale and
// hostile reports.
func TestLearnedQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{{
			Name:  "core",
			Limit: window.Limit{Per: time.Hour},
			Learn: clientpool.LearnRateLimit("X-RateLimit-", "", true),
		}})
		ctx := context.Background()
		c := clientpool.Charge{Rule: "core", Weight: 1}
		first, err := p.Acquire(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if acquireWithin(t, p, time.Minute, c) {
			t.Fatal("limit unknown: a second call started while the first was in flight")
		}
		if l, _ := p.Limit("core"); l != (window.Limit{Per: time.Hour}) {
			t.Fatalf("Limit before any response: %v, want N 0 (unknown)", l)
		}
		reset := time.Now().Add(30 * time.Minute).Truncate(time.Second)
		first.ObserveHeaders(http.Header{"X-RateLimit-Limit": {"-5"}}) // malformed: says nothing
		if acquireWithin(t, p, 0, c) {
			t.Fatal("a malformed report taught a limit")
		}
		first.ObserveHeaders(rlHeader(5000, 4, reset)) // mid-window: 4 left, this call counted
		first.Release()                                // ... once (issue 18: was counted again while in flight, 3 left)
		if l, _ := p.Limit("core"); l != (window.Limit{N: 5000, Per: time.Hour}) {
			t.Fatalf("learned limit %v", l)
		}
		var held []*clientpool.Ticket
		for range 4 {
			tk, err := p.Acquire(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, tk)
		}
		start := time.Now()
		// the 5th waits for the server's window to end (30 min), not an hour
		done := make(chan time.Duration)
		go func() {
			tk, err := p.Acquire(ctx, c)
			if err != nil {
				t.Error(err)
			}
			done <- time.Since(start)
			tk.Release()
		}()
		// A stale report (a window that ended) and a same-window report
		// claiming more room change nothing.
		held[0].ObserveHeaders(rlHeader(5000, 4000, time.Now())) // reset 0 s: past
		held[0].ObserveHeaders(rlHeader(5000, 4000, reset))
		if w := <-done; w < 29*time.Minute || w > 31*time.Minute {
			t.Fatalf("5th call waited %v, want the server's window to end (≈30 min)", w)
		}
		for _, tk := range held {
			tk.Release()
		}
		// In the next window: a response announces it, with 2 left (its
		// own call counted).
		tk, _ := p.Acquire(ctx, c)
		tk.ObserveHeaders(rlHeader(5000, 2, time.Now().Add(time.Hour)))
		tk.Release()
		for i := range 2 {
			if !acquireWithin(t, p, 0, c) {
				t.Fatalf("the new window's budget of 2 admitted %d", i)
			}
		}
		if acquireWithin(t, p, time.Minute, c) {
			t.Fatal("admitted beyond the budget the server announced for the new window")
		}
		// Hostile numbers: a limit of 2^63-1 is taken at MaxLearnedN.
		tk, _ = p.Acquire(ctx, c)
		tk.ObserveHeaders(rlHeader(math.MaxInt64, 0, time.Now().Add(time.Hour)))
		tk.Release()
		if l, _ := p.Limit("core"); l.N != clientpool.MaxLearnedN {
			t.Fatalf("limit after a report of 2^63-1: %v", l)
		}
	})
}

// A rule whose limit is learned from a token bucket's headers (no window
// of its own) shrinks the local budget to what the server says remains.
func TestLearnedBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{{
			Name:   "tokens",
			Limit:  window.Limit{N: 1000, Per: time.Minute}, // a guess
			Window: func(l window.Limit) window.Policy { return window.NewTokenBucket(l, 0) },
			Learn:  clientpool.LearnRateLimit("X-RateLimit-", "", false),
		}})
		ctx := context.Background()
		tk, _ := p.Acquire(ctx, clientpool.Charge{Rule: "tokens", Weight: 10})
		tk.ObserveHeaders(rlHeader(600, 100, time.Time{})) // another client spent 490
		tk.Release()
		if l, _ := p.Limit("tokens"); l != (window.Limit{N: 600, Per: time.Minute}) {
			t.Fatalf("learned %v", l)
		}
		if !acquireWithin(t, p, 0, clientpool.Charge{Rule: "tokens", Weight: 100}) {
			t.Fatal("the 100 the server said remain were not admitted")
		}
		if acquireWithin(t, p, 0, clientpool.Charge{Rule: "tokens", Weight: 10}) {
			t.Fatal("admitted beyond what the server said remains")
		}
	})
}

// A reset announced absurdly far away (a hostile header) holds a spent
// budget for at most the rule's window, not for years.
func TestLearnedResetCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{{
			Name:  "core",
			Limit: window.Limit{Per: time.Hour},
			Learn: clientpool.LearnRateLimit("X-RateLimit-", "", true),
		}})
		c := clientpool.Charge{Rule: "core", Weight: 1}
		tk, _ := p.Acquire(context.Background(), c)
		h := rlHeader(100, 0, time.Time{})
		h.Set("X-RateLimit-Reset", "999999999") // 31.7 years, as delta-seconds
		tk.ObserveHeaders(h)
		tk.Release()
		start := time.Now()
		tk, err := p.Acquire(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		tk.Release()
		if w := time.Since(start); w > time.Hour+time.Second+clientpool.ResetMargin || w < time.Hour {
			t.Fatalf("waited %v for a reset 31.7 years away with nothing left: want the hour", w)
		}
	})
}

// The IETF RateLimit fields teach a limit too (draft 08 and later).
func TestLearnIETF(t *testing.T) {
	learn := clientpool.LearnRateLimit("RateLimit-", "burst", false)
	h := http.Header{}
	h.Set("RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`)
	h.Set("RateLimit", `"burst";r=40;t=30`)
	in, ok := learn(h, time.Now())
	if !ok || in.Limit.N != 100 || in.Remaining != 40 || !in.Reset.IsZero() {
		t.Fatalf("learned %+v, %v", in, ok)
	}
	h.Set("RateLimit", `"burst";r=-4;t=30`) // malformed: says nothing
	if _, ok := learn(h, time.Now()); ok {
		t.Fatal("a malformed field taught a limit")
	}
}

// tokensRule is an LLM-like rule: a token bucket of 1000 per minute whose
// limit is learned from x-limit-tokens (as saas/openai's
// x-ratelimit-limit-tokens).
func tokensRule() clientpool.Rule {
	return clientpool.Rule{
		Name:   "tokens",
		Limit:  window.Limit{N: 1000, Per: time.Minute},
		Window: func(l window.Limit) window.Policy { return window.NewTokenBucket(l, 0) },
		Learn: func(h http.Header, _ time.Time) (clientpool.Learned, bool) {
			n, err := strconv.ParseInt(h.Get("x-limit-tokens"), 10, 64)
			if err != nil || n <= 0 {
				return clientpool.Learned{}, false
			}
			return clientpool.Learned{Limit: window.Limit{N: n}, Remaining: -1}, true
		},
	}
}

// Issue 18 (a): a reply whose usage says 2^62−1 tokens must not brick the
// key. The settled debit saturates at "full until the window moves": the
// next call is admitted within about one Per (on the base commit it failed
// with ErrDeadline, "admission in 2562047h"), and the key is back at its
// full rate a Per later.
func TestSettleHugeDebitDoesNotBrick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{tokensRule()})
		c := clientpool.Charge{Rule: "tokens", Weight: 100}
		tk := acquire(t, p, c)
		if err := tk.Settle("tokens", 1<<62-1); err != nil {
			t.Fatal(err)
		}
		tk.Release()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		tk, err := p.Acquire(ctx, c)
		if err != nil {
			t.Fatalf("next call after a debit of 2^62−1: %v", err)
		}
		tk.Release()
		if w := time.Since(start); w > 2*time.Minute+6*time.Second {
			t.Fatalf("next call admitted after %v, want within two Pers and its own refill", w)
		}
		time.Sleep(2 * time.Minute)
		if !acquireWithin(t, p, 0, clientpool.Charge{Rule: "tokens", Weight: 1000}) {
			t.Fatal("a full bucket not admitted two Pers later")
		}
	})
}

// Issue 18 (b): a reply announcing a limit of 1 token must not brick the
// key. A call heavier than the learned limit is not refused: it goes alone
// (nothing else in flight on the key), charged as the whole window, within
// a bounded time, and is reported (ratesem.Distrusted, KeyState); a later
// reply that corrects the limit restores the key's rate. On the base commit
// every later call failed at once with ErrWeightTooLarge (10 of 10 over 10
// minutes), and no reply could correct it.
func TestLearnedLimitBelowWeightDoesNotBrick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var distrusted []ratesem.Event
		p := newPool(t, []clientpool.Rule{tokensRule()}, clientpool.WithObserver(func(e ratesem.Event) {
			if e.Kind == ratesem.Distrusted {
				mu.Lock()
				distrusted = append(distrusted, e)
				mu.Unlock()
			}
		}))
		c := clientpool.Charge{Rule: "tokens", Weight: 100}
		hostile := http.Header{"X-Limit-Tokens": {"1"}}
		tk := acquire(t, p, c)
		tk.ObserveHeaders(hostile)
		tk.Release()
		if l, _ := p.Limit("tokens"); l.N != 1 {
			t.Fatalf("learned %v, want the server's word (N 1)", l)
		}
		// Ten calls over ten minutes, each told the limit is 1 again.
		sent := 0
		deadline := time.Now().Add(10 * time.Minute)
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			tk, err := p.Acquire(ctx, c)
			cancel()
			if errors.Is(err, ratesem.ErrWeightTooLarge) {
				t.Fatalf("call %d refused for good: %v", sent+1, err)
			}
			if err != nil {
				t.Logf("call %d: %v", sent+1, err)
				break
			}
			sent++
			// one at a time: a second call waits while this one is in flight
			if acquireWithin(t, p, 5*time.Second, clientpool.Charge{Rule: "tokens", Weight: 100}) {
				t.Fatal("a second call heavier than the learned limit started while one was in flight")
			}
			time.Sleep(time.Second)
			tk.ObserveHeaders(hostile)
			tk.Release()
		}
		if sent < 5 {
			t.Fatalf("%d calls reached the server in ten minutes under a learned limit of 1: want about one per window", sent)
		}
		mu.Lock()
		n := len(distrusted)
		e := distrusted[0]
		mu.Unlock()
		if n != sent || e.Rule != "tokens" || e.Weight != 100 || !errors.Is(e.Err, ratesem.ErrWeightTooLarge) {
			t.Fatalf("%d Distrusted events for %d calls sent alone; first %+v", n, sent, e)
		}
		// (the call that met the loop's deadline may have been admitted,
		// and counted, at the instant its caller gave up)
		if ks := p.Snapshot(); len(ks) != 1 || ks[0].Distrusted < uint32(sent) || ks[0].Distrusted > uint32(sent)+1 {
			t.Fatalf("Snapshot %+v, want Distrusted %d", ks, sent)
		}
		// A reply that corrects the limit: the key is back at its rate.
		tk = acquire(t, p, c)
		tk.ObserveHeaders(http.Header{"X-Limit-Tokens": {"1000"}})
		tk.Release()
		time.Sleep(2 * time.Minute)
		for i := range 9 {
			if !acquireWithin(t, p, 0, c) {
				t.Fatalf("call %d of 100 tokens refused after the limit was corrected to 1000", i+1)
			}
		}
	})
}

// epochRule is a rule counted in the server's windows of 10 s whose reset
// is an epoch instant on the server's clock (X-Reset-At, Unix seconds, as
// GitHub's x-ratelimit-reset), read against the response's Date.
func epochRule() clientpool.Rule {
	return clientpool.Rule{
		Name:  "core",
		Limit: window.Limit{Per: 10 * time.Second},
		Learn: func(h http.Header, _ time.Time) (clientpool.Learned, bool) {
			n, err1 := strconv.ParseInt(h.Get("X-Limit"), 10, 64)
			r, err2 := strconv.ParseInt(h.Get("X-Remaining"), 10, 64)
			s, err3 := strconv.ParseInt(h.Get("X-Reset-At"), 10, 64)
			if err1 != nil || err2 != nil || err3 != nil || n <= 0 {
				return clientpool.Learned{}, false
			}
			return clientpool.Learned{Limit: window.Limit{N: n}, Remaining: r, Reset: time.Unix(s, 0), Epoch: true}, true
		},
	}
}

func epochHeader(limit, remaining int64, reset, date time.Time) http.Header {
	h := http.Header{}
	h.Set("X-Limit", strconv.FormatInt(limit, 10))
	h.Set("X-Remaining", strconv.FormatInt(remaining, 10))
	h.Set("X-Reset-At", strconv.FormatInt(reset.Unix(), 10))
	if !date.IsZero() {
		h.Set("Date", date.UTC().Format(http.TimeFormat))
	}
	return h
}

// An epoch reset is read against the Date header: a server whose clock is
// 5 s behind the host's announces a window ending 10 s after its Date: the
// host's 10 s (and ResetMargin), not the host's reading of the epoch
// value (5 s, when the server's window still runs).
func TestLearnEpochResetReadAgainstDate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{epochRule()})
		c := clientpool.Charge{Rule: "core", Weight: 1}
		t0 := time.Now()
		server := t0.Add(-5 * time.Second) // the server's clock, 5 s behind
		tk := acquire(t, p, c)
		tk.ObserveHeaders(epochHeader(3, 0, server.Add(10*time.Second), server))
		tk.Release()
		start := time.Now()
		tk = acquire(t, p, c)
		tk.Release()
		if w := time.Since(start); w != 10*time.Second+clientpool.ResetMargin {
			t.Fatalf("the next window began %v later, want the server's 10 s and the margin", w)
		}
	})
}

// A reply whose window contradicts the key's (the key rolled to a new
// window on its own, and the server says the old one still runs) is
// counted (ratesem.Distrusted, KeyState.Distrusted) and taken in on the
// safe side: a lower budget with its earlier end is taken; an earlier end
// with more budget is not.
func TestLearnContradictingWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var events []ratesem.Event
		p := newPool(t, []clientpool.Rule{epochRule()}, clientpool.WithObserver(func(e ratesem.Event) {
			if e.Kind == ratesem.Distrusted {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}
		}))
		c := clientpool.Charge{Rule: "core", Weight: 1}
		t0 := time.Now()
		tk := acquire(t, p, c)
		tk.ObserveHeaders(epochHeader(10, 9, t0.Add(10*time.Second), t0))
		tk.Release()
		// The key's window ends at 11 s (the margin); it then rolls on its
		// own to a fresh 10 until 21 s.
		time.Sleep(11 * time.Second)
		tk = acquire(t, p, c)
		// A reply without a Date (skew 0 kept) from a server whose window
		// still runs until 13 s, with nothing left: counted, and the key
		// holds until then.
		tk.ObserveHeaders(epochHeader(10, 0, t0.Add(13*time.Second), time.Time{}))
		tk.Release()
		if ks := p.Snapshot(); len(ks) != 1 || ks[0].Distrusted != 1 {
			t.Fatalf("Snapshot %+v, want one report distrusted", ks)
		}
		mu.Lock()
		if len(events) != 1 || events[0].Rule != "core" || events[0].Err == nil {
			t.Fatalf("events %+v, want one Distrusted", events)
		}
		mu.Unlock()
		if acquireWithin(t, p, 3*time.Second-time.Millisecond, c) {
			t.Fatal("admitted while the server said its window still ran with nothing left")
		}
		// At 14 s (13 s and the margin) the key rolls again: until 24 s.
		tk = acquire(t, p, c)
		// A reply claiming the window ends at 16 s with 10 left (more than
		// the key's 9): not trusted, the key's window stands.
		tk.ObserveHeaders(epochHeader(10, 10, t0.Add(16*time.Second), time.Time{}))
		tk.Release()
		if ks := p.Snapshot(); ks[0].Distrusted != 2 {
			t.Fatalf("Snapshot %+v, want two reports distrusted", ks)
		}
		for i := range 9 {
			if !acquireWithin(t, p, 0, c) {
				t.Fatalf("call %d of the key's budget refused", i+2)
			}
		}
		time.Sleep(4 * time.Second) // 18 s: past the end the reply claimed
		if acquireWithin(t, p, 0, c) {
			t.Fatal("admitted beyond the key's budget at the end the distrusted reply claimed")
		}
	})
}
