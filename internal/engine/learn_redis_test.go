package engine

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// learnHeaders is a Rule.Learn of the tests: L the limit, R what remains
// (absent: not said), T the delay until the server's window ends (absent:
// a rule not counted in the server's windows).
func learnHeaders(h http.Header, now time.Time) (Learned, bool) {
	n, err := strconv.ParseInt(h.Get("L"), 10, 64)
	if err != nil {
		return Learned{}, false
	}
	in := Learned{Limit: window.Limit{N: n}, Remaining: -1}
	if r, err := strconv.ParseInt(h.Get("R"), 10, 64); err == nil {
		in.Remaining = r
	}
	if d, err := time.ParseDuration(h.Get("T")); err == nil {
		in.Reset = now.Add(d)
	}
	return in, true
}

// reply returns the headers of a reply that says limit n, r remaining
// (r < 0: not said) and a window ending in reset (0: not said).
func reply(n, r int64, reset time.Duration) http.Header {
	h := http.Header{}
	h.Set("L", strconv.FormatInt(n, 10))
	if r >= 0 {
		h.Set("R", strconv.FormatInt(r, 10))
	}
	if reset > 0 {
		h.Set("T", reset.String())
	}
	return h
}

// learnFleet returns k engines, as k processes would hold, each with its
// own client to one redis-server, sharing rule "r" (Learn, limit n per
// hour: 0 unknown) under one prefix.
func learnFleet(t *testing.T, k int, n int64, opts ...Option) []*Engine {
	t.Helper()
	srv := redistest.Start(t)
	var ps []*Engine
	for range k {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		rules := []Rule{{Name: "r", Limit: window.Limit{N: n, Per: time.Hour}, Learn: learnHeaders}}
		p, err := New(rules, "", append(opts, func(cfg *Config) {
			cfg.Shared = &Shared{Opener: rstore.NewOpener(c), Prefix: "learn"}
		})...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		ps = append(ps, p)
	}
	return ps
}

// tryKey tries one call of w units on key k of rule "r"; nil when refused.
func tryKey(t *testing.T, p *Engine, k string, w int64) *Ticket {
	t.Helper()
	tk := new(Ticket)
	d, err := p.TryAcquire(tk, []Charge{{Rule: "r", Key: k, Weight: w}})
	switch {
	case err == nil && d == 0:
		return tk
	case err != nil && !errors.Is(err, ratesem.ErrInFlight):
		t.Fatalf("TryAcquire: %v", err)
	}
	return nil
}

// acquireKey admits one call of w units on key k, waiting at most 5 s
// (a release reaches Redis in the background).
func acquireKey(t *testing.T, p *Engine, k string, w int64) *Ticket {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tk := new(Ticket)
	if err := p.Acquire(ctx, tk, []Charge{{Rule: "r", Key: k, Weight: w}}); err != nil {
		t.Fatalf("Acquire(%s, %d): %v", k, w, err)
	}
	return tk
}

// keySpec returns the Spec p charges key k of rule "r" under, nil when p
// holds no limiter for it.
func keySpec(p *Engine, k string) *rspec.Spec {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.rules["r"].keys[k]; l != nil {
		return l.redisSpec()
	}
	return nil
}

// A key whose limit nobody learned admits one call at a time across the
// fleet, of any weight; each key on its own.
func TestRedisLearnUnknownOneAtATime(t *testing.T) {
	ps := learnFleet(t, 3, 0)
	if _, err := New([]Rule{{Name: "r", Limit: window.Limit{Per: time.Hour}}}, "", func(cfg *Config) {
		cfg.Shared = &Shared{Opener: rstore.NewOpener(goredis.NewClient(&goredis.Options{})), Prefix: "x"}
	}); !errors.Is(err, ratesem.ErrInvalidLimit) {
		t.Fatalf("N 0 without Learn: %v, want ErrInvalidLimit", err)
	}
	tk := tryKey(t, ps[0], "k", 50)
	if tk == nil {
		t.Fatal("the first call of an unknown key: refused")
	}
	if ks := ps[0].Snapshot(); len(ks) != 1 || ks[0].Limit != (window.Limit{Per: time.Hour}) || ks[0].InFlight != 50 {
		t.Fatalf("Snapshot %+v; want the key with N 0 (unknown), 50 units in flight", ks)
	}
	for i, p := range ps {
		if tryKey(t, p, "k", 1) != nil {
			t.Fatalf("process %d: a second call of the unknown key admitted", i)
		}
		if l, _ := p.Limit("r"); l.N != 0 {
			t.Fatalf("process %d: Limit %v before any reply, want N 0", i, l)
		}
	}
	if other := tryKey(t, ps[1], "other", 1); other == nil {
		t.Fatal("another key: refused")
	} else {
		other.Release()
	}
	tk.Release()
	tk2 := acquireKey(t, ps[2], "k", 7) // once the release reached Redis
	if tryKey(t, ps[0], "k", 1) != nil {
		t.Fatal("two calls of the unknown key in flight")
	}
	tk2.Release()
}

// The fleet learns together: one process learns a key's quota from a
// reply, the others adopt it at their next call without being told
// (Pool.Limit, the key's Spec), and the fleet as a whole admits no more
// than the remaining the server gave, until the server's window ends.
func TestRedisLearnFleetSharesBudget(t *testing.T) {
	ps := learnFleet(t, 3, 0)
	tk := acquireKey(t, ps[0], "k", 1)
	tk.ObserveHeaders(reply(10, 4, time.Hour))
	tk.Release()
	want := rspec.Spec{Kind: rspec.Quota, Limit: window.Limit{N: 10, Per: time.Hour}}
	if l, _ := ps[0].Limit("r"); l != want.Limit {
		t.Fatalf("the learner's limit: %v, want %v", l, want.Limit)
	}
	if s := keySpec(ps[0], "k"); s == nil || *s != want {
		t.Fatalf("the learner's Spec: %v, want %v", s, want)
	}
	var held []*Ticket
	admitted, refusedBy := 0, map[int]bool{}
	for round := 0; len(refusedBy) < len(ps) && round < 20; round++ {
		i := round % len(ps)
		if refusedBy[i] {
			continue
		}
		if tk := tryKey(t, ps[i], "k", 1); tk != nil {
			held = append(held, tk)
			admitted++
		} else {
			refusedBy[i] = true
		}
	}
	if admitted != 4 {
		t.Fatalf("the fleet admitted %d calls on a budget of 4 the server gave", admitted)
	}
	for i, p := range ps[1:] {
		if l, _ := p.Limit("r"); l != want.Limit {
			t.Errorf("process %d: limit %v, want %v adopted", i+1, l, want.Limit)
		}
		if s := keySpec(p, "k"); s == nil || *s != want {
			t.Errorf("process %d: Spec %v, want %v adopted", i+1, s, want)
		}
		if ks := p.Snapshot(); len(ks) != 1 || ks[0].Limit != want.Limit {
			t.Errorf("process %d: Snapshot %+v, want the key's limit %v", i+1, ks, want.Limit)
		}
	}
	// The budget is spent until the server's window ends (an hour; the
	// wait told is capped by the pause cap, 5 minutes).
	if d, err := ps[1].TryAcquire(new(Ticket), []Charge{{Rule: "r", Key: "k", Weight: 1}}); err != nil || d < 4*time.Minute {
		t.Fatalf("over the budget: wait %v, %v; want the window's end (capped)", d, err)
	}
	for _, tk := range held {
		tk.Release()
	}
}

// A limit learned without the server's window (no reset) is the rule's
// window at that limit, stored for the fleet: every process adopts it, and
// a call admitted while the limit was unknown counts its real weight.
func TestRedisLearnWindowLimit(t *testing.T) {
	ps := learnFleet(t, 2, 0)
	tk := acquireKey(t, ps[0], "k", 2) // charged 1 while unknown, settled at 2
	tk.ObserveHeaders(reply(5, -1, 0))
	tk.Release()
	if err := ps[0].Close(); err != nil { // sends the settlement
		t.Fatal(err)
	}
	want := rspec.Spec{Kind: rspec.Completion, Limit: window.Limit{N: 5, Per: time.Hour}}
	if s := keySpec(ps[0], "k"); s == nil || *s != want {
		t.Fatalf("the learner's Spec: %v, want %v", s, want)
	}
	// 5 per hour in a completion window: the first call's 2 units count
	// once its settlement reached Redis; 3 are left.
	first := acquireKey(t, ps[1], "k", 1) // adopts
	if s := keySpec(ps[1], "k"); s == nil || *s != want {
		t.Fatalf("the other process's Spec: %v, want %v adopted", s, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	second := new(Ticket)
	if err := ps[1].Acquire(ctx, second, []Charge{{Rule: "r", Key: "k", Weight: 2}}); err != nil {
		t.Fatal(err)
	}
	if tryKey(t, ps[1], "k", 1) != nil {
		t.Fatal("admitted a sixth unit in the hour")
	}
	first.Release()
	second.Release()
}

// Over Redis a Reconciled event carries the units Redis took in, as in
// process (not the raw count), reported on a caller's goroutine after
// Redis answered; a count that tells nothing new reports nothing.
func TestRedisReconciledEvent(t *testing.T) {
	var mu sync.Mutex
	var got []ratesem.Event
	obs := func(cfg *Config) {
		cfg.Observer = func(e ratesem.Event) {
			if e.Kind == ratesem.Reconciled {
				mu.Lock()
				got = append(got, e)
				mu.Unlock()
			}
		}
	}
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	p, err := New([]Rule{{Name: "r", Limit: window.Limit{N: 10, Per: time.Hour}}}, "", obs, func(cfg *Config) {
		cfg.Shared = &Shared{Opener: rstore.NewOpener(c), Prefix: "rec"}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	tk := acquireKey(t, p, "", 2)
	defer tk.Release()
	if err := p.Reconcile("r", "", 5); err != nil { // 2 counted, 5 reported: 3 taken in
		t.Fatal(err)
	}
	wait := func(n int) []ratesem.Event {
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			_ = p.Pause("r", "other", time.Now().Add(-time.Second)) // a caller's goroutine: flushes
			mu.Lock()
			ev := append([]ratesem.Event(nil), got...)
			mu.Unlock()
			if len(ev) >= n {
				return ev
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]ratesem.Event(nil), got...)
	}
	ev := wait(1)
	if len(ev) != 1 || ev[0].Weight != 3 || ev[0].Rule != "r" {
		t.Fatalf("events %+v; want one Reconciled of 3 units", ev)
	}
	if err := p.Reconcile("r", "", 4); err != nil { // below what is counted: nothing
		t.Fatal(err)
	}
	if err := p.Reconcile("r", "", 6); err != nil { // 1 more
		t.Fatal(err)
	}
	ev = wait(2)
	if len(ev) != 2 || ev[1].Weight != 1 {
		t.Fatalf("events %+v; want a second Reconciled of 1 unit, none for the count below", ev)
	}
}

// KeyState.Limit in process: N 0 while the key knows no limit, then the
// one it learned (a quota's N).
func TestKeyStateLimitLearned(t *testing.T) {
	p, err := New([]Rule{{Name: "r", Limit: window.Limit{Per: time.Hour}, Learn: learnHeaders}}, "")
	if err != nil {
		t.Fatal(err)
	}
	tk := new(Ticket)
	if err := p.Acquire(context.Background(), tk, []Charge{{Rule: "r", Key: "k", Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	if ks := p.Snapshot(); len(ks) != 1 || ks[0].Limit != (window.Limit{Per: time.Hour}) {
		t.Fatalf("Snapshot %+v; want N 0 before a reply", ks)
	}
	tk.ObserveHeaders(reply(7, 3, time.Hour))
	tk.Release()
	if ks := p.Snapshot(); len(ks) != 1 || ks[0].Limit != (window.Limit{N: 7, Per: time.Hour}) {
		t.Fatalf("Snapshot %+v; want the learned 7 per hour", ks)
	}
}

// With a limit given (a guess), the first reply corrects it for the whole
// fleet: a process that charged under the guess adopts the learned quota
// at its next call, and the fleet admits no more than the server's
// remaining.
func TestRedisLearnCorrectsGuess(t *testing.T) {
	ps := learnFleet(t, 2, 100)
	acquireKey(t, ps[1], "k", 1).Release() // under the guess
	tk := acquireKey(t, ps[0], "k", 1)
	tk.ObserveHeaders(reply(10, 2, time.Hour))
	tk.Release()
	want := rspec.Spec{Kind: rspec.Quota, Limit: window.Limit{N: 10, Per: time.Hour}}
	var held []*Ticket
	for _, p := range []*Engine{ps[1], ps[0], ps[1], ps[0]} {
		if tk := tryKey(t, p, "k", 1); tk != nil {
			held = append(held, tk)
		}
	}
	if len(held) != 2 {
		t.Fatalf("the fleet admitted %d calls on the 2 the server said remain", len(held))
	}
	if s := keySpec(ps[1], "k"); s == nil || *s != want {
		t.Fatalf("the process that guessed: Spec %v, want %v adopted", s, want)
	}
	if l, _ := ps[1].Limit("r"); l != want.Limit {
		t.Fatalf("the process that guessed: Limit %v, want %v", l, want.Limit)
	}
	for _, tk := range held {
		tk.Release()
	}
}

// A limit learned lower by another process never refuses a call for good:
// a process that knew a higher one sends a call heavier than the new
// limit as one call (rspec.Unknown), adopts the new limit, and the call
// counts its real weight.
func TestRedisLearnLoweredElsewhere(t *testing.T) {
	ps := learnFleet(t, 2, 0)
	tk := acquireKey(t, ps[0], "k", 1)
	tk.ObserveHeaders(reply(10, -1, 0)) // a completion window of 10 per hour
	tk.Release()
	acquireKey(t, ps[1], "k", 1).Release() // adopts 10
	tk = acquireKey(t, ps[0], "k", 1)
	tk.ObserveHeaders(reply(6, -1, 0)) // lowered to 6: stored for the fleet
	tk.Release()
	heavy := acquireKey(t, ps[1], "k", 8) // 3 used; heavier than 6: goes as one call
	want := rspec.Spec{Kind: rspec.Completion, Limit: window.Limit{N: 6, Per: time.Hour}}
	if s := keySpec(ps[1], "k"); s == nil || *s != want {
		t.Fatalf("Spec %v, want %v adopted", s, want)
	}
	heavy.Release()
	if err := ps[1].Close(); err != nil { // sends the settlement: 8 units
		t.Fatal(err)
	}
	if tryKey(t, ps[0], "k", 1) != nil {
		t.Fatal("admitted after 11 units in an hour of 6")
	}
}

// The cap on a reported window's end is the same in both modes: Per and a
// second (resets rounded to whole seconds) and ResetMargin in process
// (budgetLocked), rspec.MaxResetOver in Redis's budget script.
func TestResetCapSameInBothModes(t *testing.T) {
	if rspec.MaxResetOver != time.Second+ResetMargin {
		t.Fatalf("rspec.MaxResetOver %v, want a second and ResetMargin, %v", rspec.MaxResetOver, time.Second+ResetMargin)
	}
}
