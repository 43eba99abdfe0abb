package clientpool_test

import (
	"context"
	"errors"
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
		if err != nil {
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
