package clientpool_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
	goredis "github.com/redis/go-redis/v9"
)

// adaptField returns a field of the adaptive state of (rule, key "") in
// scope prefix, kept in Redis (-1: absent).
func adaptField(t *testing.T, c goredis.UniversalClient, prefix, rule, f string) int64 {
	t.Helper()
	st, err := rstore.New(c, prefix, rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.HGet(context.Background(), st.Keys(prefix, rstore.Charge{Rule: rule, Key: ""})[0]+":a", f).Result()
	if err != nil {
		return -1
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// holdN acquires tickets of ch in p until one is refused (at most max):
// it returns how many it got, all released after Per.
func holdN(t *testing.T, p *clientpool.Pool, ch clientpool.Charge, max int) int {
	t.Helper()
	var tks []*clientpool.Ticket
	defer func() {
		for _, tk := range tks {
			tk.Release()
		}
	}()
	for range max {
		tk, _, err := p.TryAcquire(ch)
		if err != nil || tk == nil {
			break
		}
		tks = append(tks, tk)
	}
	return len(tks)
}

// TestAdaptiveRedisSetLimit: SetLimit on an adaptive rule over Redis sets
// the fleet's ceiling: the level comes down to it at once, for every
// process (another process admits no more than it); the clean windows of
// another process that never set it never raise the level above it; the
// latest SetLimit of the fleet wins; a SetLimit that changes the Per is
// refused.
func TestAdaptiveRedisSetLimit(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	per := 300 * time.Millisecond
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "api", Limit: window.Limit{N: 40, Per: per},
		Adapt: &clientpool.Adaptive{Floor: 2}, Window: window.NewCompletion}}}
	a, b := newRedisPool(t, table, c, "fleet"), newRedisPool(t, table, c, "fleet")
	ch := clientpool.Charge{Rule: "api", Weight: 1}
	acquire(t, a, ch).Release()
	acquire(t, b, ch).Release()
	waitFor(t, func() bool { return adaptField(t, c, "fleet", "api", "n") == 40 }, "the level 40 in Redis")
	if err := b.SetLimit("api", window.Limit{N: 10, Per: time.Second}); !errors.Is(err, ratesem.ErrInvalidLimit) {
		t.Fatalf("SetLimit with another Per: %v, want ErrInvalidLimit", err)
	}
	if err := b.SetLimit("api", window.Limit{N: 10, Per: per}); err != nil {
		t.Fatalf("SetLimit(10) on an adaptive rule over Redis: %v", err)
	}
	if n, ce := adaptField(t, c, "fleet", "api", "n"), adaptField(t, c, "fleet", "api", "C"); n != 10 || ce != 10 {
		t.Fatalf("after SetLimit(10): level %d, ceiling %d in Redis, want 10 and 10 at once", n, ce)
	}
	if n := adaptLevel(b, "api"); n != 10 {
		t.Fatalf("the setter's level after SetLimit(10): %d", n)
	}
	time.Sleep(per + 50*time.Millisecond) // the first calls leave the window
	if got := holdN(t, a, ch, 40); got != 10 {
		t.Fatalf("the other process admits %d calls at once, want the ceiling 10", got)
	}
	// the other process's clean windows, 10 successes each: held at 10
	for range 6 {
		time.Sleep(per + 20*time.Millisecond)
		for range 10 {
			acquire(t, a, ch).Release()
		}
	}
	time.Sleep(per + 50*time.Millisecond)
	acquire(t, a, ch).Release() // the last successes reach Redis with it
	time.Sleep(100 * time.Millisecond)
	if n := adaptField(t, c, "fleet", "api", "n"); n != 10 {
		t.Fatalf("after 6 clean windows of another process: level %d, want the ceiling 10", n)
	}
	if n := adaptLevel(a, "api"); n != 10 {
		t.Fatalf("the other process's level: %d, want 10", n)
	}
	// the latest SetLimit wins, from either process
	if err := a.SetLimit("api", window.Limit{N: 25, Per: per}); err != nil {
		t.Fatal(err)
	}
	if ce := adaptField(t, c, "fleet", "api", "C"); ce != 25 {
		t.Fatalf("after SetLimit(25) in the other process: ceiling %d, want 25", ce)
	}
	if err := b.SetLimit("api", window.Limit{N: 5, Per: per}); err != nil {
		t.Fatal(err)
	}
	if n, ce := adaptField(t, c, "fleet", "api", "n"), adaptField(t, c, "fleet", "api", "C"); n != 5 || ce != 5 {
		t.Fatalf("after SetLimit(5): level %d, ceiling %d, want 5 and 5", n, ce)
	}
	time.Sleep(per + 50*time.Millisecond)
	if got := holdN(t, a, ch, 40); got != 5 {
		t.Fatalf("after SetLimit(5) elsewhere: %d calls at once, want 5", got)
	}
}

// TestAdaptiveRedisLearn: an adaptive rule that also learns its limit
// (Rule.Learn) over Redis: the limit a reply names is the fleet's
// ceiling of the key's level (as in process: the published limit is the
// ceiling), at once for every process, and the clean windows of another
// process never raise the level above it; a higher limit named later
// lifts the ceiling; the remaining count reaches the key's window.
func TestAdaptiveRedisLearn(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	per := 300 * time.Millisecond
	learn := func(h http.Header, _ time.Time) (clientpool.Learned, bool) {
		n, err := strconv.ParseInt(h.Get("X-Limit"), 10, 64)
		if err != nil {
			return clientpool.Learned{}, false
		}
		rem := int64(-1)
		if v := h.Get("X-Remaining"); v != "" {
			rem, _ = strconv.ParseInt(v, 10, 64)
		}
		return clientpool.Learned{Limit: window.Limit{N: n, Per: per}, Remaining: rem}, true
	}
	table := clientpool.Table{Rules: []clientpool.Rule{{Name: "api", Limit: window.Limit{N: 40, Per: per},
		Adapt: &clientpool.Adaptive{Floor: 2}, Window: window.NewCompletion, Learn: learn}}}
	a, err := newRedisPoolErr(t, table, c, "fleet")
	if err != nil {
		t.Fatalf("an adaptive rule with Learn over Redis: %v", err)
	}
	b := newRedisPool(t, table, c, "fleet")
	ch := clientpool.Charge{Rule: "api", Weight: 1}
	acquire(t, b, ch).Release()
	waitFor(t, func() bool { return adaptField(t, c, "fleet", "api", "n") == 40 }, "the level 40 in Redis")
	tk := acquire(t, a, ch)
	tk.ObserveHeaders(http.Header{"X-Limit": {"12"}})
	tk.Release()
	if n, l := adaptField(t, c, "fleet", "api", "n"), adaptField(t, c, "fleet", "api", "L"); n != 12 || l != 12 {
		t.Fatalf("after a reply naming 12: level %d, learned %d in Redis, want 12 and 12 at once", n, l)
	}
	if n := adaptLevel(a, "api"); n != 12 {
		t.Fatalf("the learner's level: %d, want 12", n)
	}
	time.Sleep(per + 50*time.Millisecond)
	if got := holdN(t, b, ch, 40); got != 12 {
		t.Fatalf("the other process admits %d calls at once, want the learned 12", got)
	}
	for range 6 {
		time.Sleep(per + 20*time.Millisecond)
		for range 12 {
			acquire(t, b, ch).Release()
		}
	}
	time.Sleep(per + 50*time.Millisecond)
	acquire(t, b, ch).Release()
	time.Sleep(100 * time.Millisecond)
	if n := adaptField(t, c, "fleet", "api", "n"); n != 12 {
		t.Fatalf("after 6 clean windows of another process: level %d, want the learned ceiling 12", n)
	}
	// a higher published limit lifts the ceiling (the level climbs to it
	// on its own), and the remaining count is the server's: 12 − 2 used
	time.Sleep(per + 50*time.Millisecond)
	tk = acquire(t, a, ch)
	tk.ObserveHeaders(http.Header{"X-Limit": {"30"}, "X-Remaining": {"2"}})
	if l := adaptField(t, c, "fleet", "api", "L"); l != 30 {
		t.Fatalf("after a reply naming 30: learned %d, want 30", l)
	}
	tk.Release()
	time.Sleep(100 * time.Millisecond) // the reconcile lands
	if got := holdN(t, b, ch, 40); got > 2 {
		t.Fatalf("after the server's count of 10 (12, 2 remaining): %d calls at once, want at most 2", got)
	}
	// hostile reports: a limit of 2^63−1 is capped at 2^40 (the level
	// stays), 0 and negative limits and remaining counts change nothing
	for _, h := range []http.Header{
		{"X-Limit": {"9223372036854775807"}, "X-Remaining": {"-5"}},
		{"X-Limit": {"0"}},
		{"X-Limit": {"-7"}, "X-Remaining": {"9223372036854775807"}},
	} {
		tk := acquire(t, a, ch)
		tk.ObserveHeaders(h)
		tk.Release()
	}
	if l, n := adaptField(t, c, "fleet", "api", "L"), adaptField(t, c, "fleet", "api", "n"); l != clientpool.MaxLearnedN || n < 12 || n > 30 {
		t.Fatalf("after hostile reports: learned %d, level %d; want 2^40 and the level as it was", l, n)
	}
}

// TestAdaptiveRedisBuckets: adaptive token buckets, leaky buckets and GCRA
// over Redis (a burst given, which stays put as in process): the level is
// the bucket's rate for every process; SetLimit(10) on a rule started at
// 40/s makes another process's bucket refill at 10/s (3 units in 300 ms,
// not 12).
func TestAdaptiveRedisBuckets(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	for _, w := range []struct {
		name string
		f    func(window.Limit) window.Policy
	}{
		{"token", func(l window.Limit) window.Policy { return window.NewTokenBucket(l, 20) }},
		{"gcra", func(l window.Limit) window.Policy { return window.NewGCRA(l, 20) }},
	} {
		t.Run(w.name, func(t *testing.T) {
			table := clientpool.Table{Rules: []clientpool.Rule{{Name: "api", Limit: window.Limit{N: 40, Per: time.Second},
				Adapt: &clientpool.Adaptive{Floor: 2}, Window: w.f}}}
			a, err := newRedisPoolErr(t, table, c, w.name)
			if err != nil {
				t.Fatalf("an adaptive %s with a burst over Redis: %v", w.name, err)
			}
			b := newRedisPool(t, table, c, w.name)
			ch := clientpool.Charge{Rule: "api", Weight: 1}
			acquire(t, a, ch).Release()
			if got := holdN(t, b, ch, 40); got < 15 || got > 20 {
				t.Fatalf("the burst: %d at once, want about 20", got)
			}
			time.Sleep(300 * time.Millisecond)
			if got := holdN(t, b, ch, 40); got < 9 {
				t.Fatalf("300 ms at 40/s: %d, want about 12", got)
			}
			if err := a.SetLimit("api", window.Limit{N: 10, Per: time.Second}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			if got := holdN(t, b, ch, 40); got > 5 {
				t.Fatalf("300 ms at 10/s (SetLimit in another process): %d, want about 3", got)
			}
		})
	}
}
