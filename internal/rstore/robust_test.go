package rstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// binanceOrder is the three charges of a Binance order: the IP's weight
// and the account's two order counts, all fixed completion windows.
func binanceOrder() []Charge {
	return []Charge{
		{Rule: "REQUEST_WEIGHT", Key: "1.2.3.4", Spec: spec(FixedCompletion, 6000, time.Minute), Weight: 1},
		{Rule: "ORDERS_10S", Key: "acct", Spec: spec(FixedCompletion, 10, 10*time.Second), Weight: 1},
		{Rule: "ORDERS_1D", Key: "acct", Spec: spec(FixedCompletion, 200000, 24*time.Hour), Weight: 1},
	}
}

// TestMultiRuleAtomic: a call refused by one of its rules changes nothing
// in the others, and the refusal names that rule and its wait.
func TestMultiRuleAtomic(t *testing.T) {
	clk := newClock()
	clk.t = time.Unix(1_700_000_000, 0) // on a 10 s and a minute boundary
	s, rdb := newStore(t, clk, time.Minute)
	ctx := context.Background()
	cs := binanceOrder()
	for i := range 10 {
		d, err := s.Admit(ctx, "acct", cs)
		if err != nil || !d.OK {
			t.Fatalf("order %d: %+v %v", i, d, err)
		}
		if err := s.Release(ctx, "acct", cs, d.Token); err != nil {
			t.Fatal(err)
		}
	}
	clk.add(2 * time.Second)
	d, err := s.Admit(ctx, "acct", cs)
	if err != nil || d.OK || d.Refused != 1 || d.Wait != 8*time.Second || d.Release {
		t.Fatalf("11th order: %+v %v; want refused by ORDERS_10S for 8s", d, err)
	}
	k := s.Keys("acct", cs[0])
	if u, _ := rdb.HGet(ctx, k[0], "u").Int64(); u != 10 {
		t.Fatalf("REQUEST_WEIGHT counts %d after a refused order, want 10", u)
	}
	k = s.Keys("acct", cs[2])
	if u, _ := rdb.HGet(ctx, k[0], "u").Int64(); u != 10 {
		t.Fatalf("ORDERS_1D counts %d after a refused order, want 10", u)
	}
	clk.add(8 * time.Second)
	if d, _ := s.Admit(ctx, "acct", cs); !d.OK {
		t.Fatalf("next 10 s window: %+v", d)
	}
}

// TestLimitMismatchAndSetLimit: a process with another limit gets an
// error naming both; after SetLimit every process adopts the new one.
func TestLimitMismatchAndSetLimit(t *testing.T) {
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	other, _ := New(rdb, s.prefix, Options{Now: clk.now})
	ctx := context.Background()
	a := []Charge{{Rule: "r", Key: "k", Spec: spec(SlidingLog, 3, time.Second), Weight: 1}}
	b := []Charge{{Rule: "r", Key: "k", Spec: spec(SlidingLog, 30, time.Second), Weight: 1}}
	if d, err := s.Admit(ctx, "", a); err != nil || !d.OK {
		t.Fatal(d, err)
	}
	_, err := other.Admit(ctx, "", b)
	if !errors.Is(err, ErrLimitMismatch) || !strings.Contains(err.Error(), "3/1s") || !strings.Contains(err.Error(), "30/1s") {
		t.Fatalf("mismatch: %v", err)
	}
	if err := other.SetLimit(ctx, "", b[0]); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		d, err := s.Admit(ctx, "", a) // a says 3; Redis says 30 now
		if err != nil || !d.OK || len(d.Adopted) != 1 {
			t.Fatalf("admission %d after SetLimit: %+v %v", i, d, err)
		}
	}
}

// TestPauseSharedAndOnlyExtends: a pause written by one process refuses
// the admissions of another for its time left; a shorter pause does not
// shorten it.
func TestPauseSharedAndOnlyExtends(t *testing.T) {
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	other, _ := New(rdb, s.prefix, Options{Now: clk.now})
	ctx := context.Background()
	c := Charge{Rule: "r", Key: "k", Spec: spec(GCRA, 10, time.Second)}
	c.Spec.Burst = 10
	until, err := s.Pause(ctx, "", c, 3*time.Second)
	if err != nil || !until.Equal(clk.t.Add(3*time.Second)) {
		t.Fatal(until, err)
	}
	if _, err := s.Pause(ctx, "", c, time.Second); err != nil {
		t.Fatal(err)
	}
	clk.add(time.Second)
	c.Weight = 1
	d, err := other.Admit(ctx, "", []Charge{c})
	if err != nil || d.OK || !d.Paused || d.Wait != 2*time.Second {
		t.Fatalf("paused: %+v %v", d, err)
	}
	clk.add(2 * time.Second)
	if d, _ := other.Admit(ctx, "", []Charge{c}); !d.OK {
		t.Fatalf("after the pause: %+v", d)
	}
	// An absurd pause is capped, not wrapped.
	if until, err := s.Pause(ctx, "", c, time.Duration(math.MaxInt64)); err != nil || until.Sub(clk.t) != MaxPer {
		t.Fatalf("huge pause: until %v (%v from now), %v", until, until.Sub(clk.t), err)
	}
}

// TestReconcileOnlyTightens: a server's count raises what the window
// counts, never lowers it, and is clamped to N whatever it says.
func TestReconcileOnlyTightens(t *testing.T) {
	ctx := context.Background()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			clk := newClock()
			clk.t = time.Unix(1_700_000_000, 0)
			s, _ := newStore(t, clk, time.Minute)
			sp := k.spec
			c := Charge{Rule: "r", Key: "k", Spec: &sp, Weight: 1}
			if d, err := s.Admit(ctx, "", []Charge{c}); err != nil || !d.OK {
				t.Fatal(d, err)
			}
			if _, err := s.Reconcile(ctx, "", c, math.MaxInt64); err != nil {
				t.Fatal(err)
			}
			if d, err := s.Admit(ctx, "", []Charge{c}); err != nil || d.OK {
				t.Fatalf("after the server said full: %+v %v", d, err)
			}
			if extra, err := s.Reconcile(ctx, "", c, 0); err != nil || extra != 0 {
				t.Fatalf("a lower count loosened by %d (%v)", extra, err)
			}
			if d, _ := s.Admit(ctx, "", []Charge{c}); d.OK {
				t.Fatalf("a lower count loosened the window: %+v", d)
			}
		})
	}
}

// TestLeaseFreesUnits: a call never released (its process died) frees
// its units when its lease runs out; the completion window counts it as
// ended then, for a Per.
func TestLeaseFreesUnits(t *testing.T) {
	clk := newClock()
	s, _ := newStore(t, clk, 50*time.Millisecond)
	ctx := context.Background()
	c := []Charge{{Rule: "r", Key: "k", Spec: spec(Completion, 1, time.Second), Weight: 1}}
	d, err := s.Admit(ctx, "", c)
	if err != nil || !d.OK {
		t.Fatal(d, err)
	}
	clk.add(10 * time.Millisecond)
	if d, _ := s.Admit(ctx, "", c); d.OK || !d.Release || d.Wait != 1040*time.Millisecond {
		t.Fatalf("in flight: %+v; want only a release, bounded by lease end + Per", d)
	}
	clk.add(100 * time.Millisecond)
	if d, _ := s.Admit(ctx, "", c); d.OK || d.Release || d.Wait != 940*time.Millisecond {
		t.Fatalf("lease ran out 60ms ago: %+v; want a wait of 940ms (lease end + Per)", d)
	}
	clk.add(940 * time.Millisecond)
	if d, _ := s.Admit(ctx, "", c); !d.OK {
		t.Fatalf("lease end + Per: %+v", d)
	}
	if err := s.Release(ctx, "", c, d.Token); !errors.Is(err, ErrNotInFlight) {
		t.Fatalf("release after the lease: %v", err)
	}
	// Extend keeps a long call in flight.
	clk.add(2 * time.Second)
	d, _ = s.Admit(ctx, "", c)
	clk.add(40 * time.Millisecond)
	if err := s.Extend(ctx, "", c, d.Token, time.Second); err != nil {
		t.Fatal(err)
	}
	clk.add(500 * time.Millisecond)
	if d2, _ := s.Admit(ctx, "", c); d2.OK || !d2.Release {
		t.Fatalf("extended call: %+v", d2)
	}
	if err := s.Release(ctx, "", c, d.Token); err != nil {
		t.Fatal(err)
	}
}

// TestLostState: a limiter whose leases were deleted while calls were in
// flight is held full for a Per, Decision.Lost set, from the next full
// sweep (within a second: until then the counts kept in its hash, upper
// bounds, decide), even when admissions made the leases' key again.
func TestLostState(t *testing.T) {
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	ctx := context.Background()
	c := []Charge{{Rule: "r", Key: "k", Spec: spec(Completion, 5, 2*time.Second), Weight: 1}}
	if d, _ := s.Admit(ctx, "", c); !d.OK {
		t.Fatal(d)
	}
	k := s.Keys("", c[0])
	rdb.Del(ctx, k[1])
	if d, _ := s.Admit(ctx, "", c); !d.OK || d.Lost { // the counts still bound the state
		t.Fatalf("right after losing the leases: %+v", d)
	}
	clk.add(time.Second)
	d, err := s.Admit(ctx, "", c)
	if err != nil || d.OK || !d.Lost || d.Wait != 2*time.Second {
		t.Fatalf("after losing the leases: %+v %v", d, err)
	}
	clk.add(2 * time.Second)
	if d, _ := s.Admit(ctx, "", c); !d.OK {
		t.Fatalf("a Per later: %+v", d)
	}
	// The hash gone while its log is there: lost too.
	clk.add(time.Millisecond)
	rdb.Del(ctx, k[0])
	if d, _ := s.Admit(ctx, "", c); d.OK || !d.Lost {
		t.Fatalf("after losing the hash: %+v", d)
	}
}

// TestRestartAndScriptFlush: after SCRIPT FLUSH the next call works (EVAL
// fallback); after a restart without persistence a token from before is
// not in flight, and the limiter is held full (a whole loss).
func TestRestartAndScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	s, _ := New(rdb, "restart", Options{})
	ctx := context.Background()
	c := binanceOrder()
	d, err := s.Admit(ctx, "acct", c)
	if err != nil || !d.OK {
		t.Fatal(d, err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "acct", c, d.Token); err != nil {
		t.Fatalf("release after SCRIPT FLUSH: %v", err)
	}
	d, err = s.Admit(ctx, "acct", c)
	if err != nil || !d.OK {
		t.Fatal(d, err)
	}
	srv.Restart()
	var err2 error
	for range 50 { // the client reconnects
		if err2 = s.Release(ctx, "acct", c, d.Token); err2 == nil || errors.Is(err2, ErrNotInFlight) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !errors.Is(err2, ErrNotInFlight) {
		t.Fatalf("release of a call from before the restart: %v", err2)
	}
	// The restart lost the scope's state: this Store, which saw it, holds
	// it full (TestWholeLoss); one that never saw it starts empty.
	if d, err := s.Admit(ctx, "acct", c); err != nil || d.OK || !d.Lost {
		t.Fatalf("after restart: %+v %v; want refused, lost", d, err)
	}
	fresh, _ := New(rdb, "restart", Options{})
	if d, err := fresh.Admit(ctx, "other", c); err != nil || !d.OK {
		t.Fatalf("a new scope after restart: %+v %v", d, err)
	}
}

// TestHostileInputs: bad weights, limits, names and charge counts fail
// before any round trip (the client points nowhere); any scope or key,
// binary and braces included, gets keys of one hash tag that never
// collide.
func TestHostileInputs(t *testing.T) {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	defer rdb.Close()
	s, err := New(rdb, "h", Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := spec(Completion, 10, time.Second)
	for _, tc := range []struct {
		name string
		cs   []Charge
		want error
	}{
		{"negative weight", []Charge{{Spec: ok, Weight: -1}}, ratesem.ErrNegativeWeight},
		{"weight above N", []Charge{{Spec: ok, Weight: 11}}, ratesem.ErrWeightTooLarge},
		{"weight MaxInt64", []Charge{{Spec: ok, Weight: math.MaxInt64}}, ratesem.ErrWeightTooLarge},
		{"Per not whole µs", []Charge{{Spec: spec(Completion, 1, 1500*time.Nanosecond), Weight: 1}}, ErrSpec},
		{"Per too long", []Charge{{Spec: spec(Completion, 1, MaxPer+time.Microsecond), Weight: 1}}, ErrSpec},
		{"huge N", []Charge{{Spec: spec(Completion, math.MaxInt64, time.Second), Weight: 1}}, ErrSpec},
		{"negative N", []Charge{{Spec: spec(Completion, -1, time.Second), Weight: 0}}, ErrSpec},
		{"bucket without burst", []Charge{{Spec: spec(TokenBucket, 10, time.Second), Weight: 1}}, ErrSpec},
		{"fixed window Per 0", []Charge{{Spec: spec(FixedWindow, 10, 0), Weight: 1}}, ErrSpec},
		{"unknown kind", []Charge{{Spec: spec(Kind(200), 10, time.Second), Weight: 1}}, ErrSpec},
		{"refill overflow", []Charge{{Spec: &Spec{Kind: TokenBucket, Limit: window.Limit{N: MaxN, Per: MaxPer}, Burst: MaxN}, Weight: 1}}, ErrSpec},
	} {
		if _, err := s.Admit(ctx, "", tc.cs); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	many := make([]Charge, MaxCharges+1)
	for i := range many {
		many[i] = Charge{Rule: "r", Key: string(rune('a' + i)), Spec: ok, Weight: 1}
	}
	if _, err := s.Admit(ctx, "", many); err == nil || !strings.Contains(err.Error(), "charges") {
		t.Errorf("%d charges: %v", len(many), err)
	}
	if _, err := s.Admit(ctx, strings.Repeat("x", MaxNameLen+1), many[:1]); err == nil {
		t.Error("a scope over MaxNameLen was accepted")
	}
	if _, err := New(rdb, "a{b}", Options{}); err == nil {
		t.Error("a prefix with braces was accepted")
	}
	if _, err := New(rdb, "p", Options{Lease: 1500 * time.Nanosecond}); err == nil {
		t.Error("a lease not in whole µs was accepted")
	}
	seen := map[string]string{}
	for _, sc := range []string{"", "{", "}", "a}b{", "%7B", "\x00\xff", "a:b"} {
		for _, p := range [][2]string{{"r", "k"}, {"r:k", ""}, {"r", ":k"}, {"r%3Ak", ""}, {"{r}", "{k}"}} {
			k := s.Keys(sc, Charge{Rule: p[0], Key: p[1]})
			tag := k[0][strings.Index(k[0], "{")+1 : strings.Index(k[0], "}")]
			for _, key := range k {
				if got := key[strings.Index(key, "{")+1 : strings.Index(key, "}")]; got != tag || tag == "" {
					t.Errorf("scope %q: key %q has tag %q, want %q", sc, key, got, tag)
				}
			}
			if prev, dup := seen[k[0]]; dup {
				t.Errorf("keys collide: %q for %q and %q", k[0], prev, sc+"|"+p[0]+"|"+p[1])
			}
			seen[k[0]] = sc + "|" + p[0] + "|" + p[1]
		}
	}
}

// TestTTL: every key a decision writes expires just after its state stops
// mattering.
func TestTTL(t *testing.T) {
	s, rdb := newStore(t, nil, 2*time.Second)
	ctx := context.Background()
	c := []Charge{{Rule: "r", Key: "k", Spec: spec(Completion, 5, time.Second), Weight: 1}}
	d, err := s.Admit(ctx, "", c)
	if err != nil || !d.OK {
		t.Fatal(d, err)
	}
	if err := s.Release(ctx, "", c, d.Token); err != nil {
		t.Fatal(err)
	}
	k := s.Keys("", c[0])
	for _, key := range []string{k[0], k[2]} {
		ttl := rdb.PTTL(ctx, key).Val()
		if ttl <= 0 || ttl > 4*time.Second {
			t.Errorf("%s: TTL %v, want (0, Per + lease + 1s]", key, ttl)
		}
	}
}

// TestMaxChargesOddNames: a call of MaxCharges charges of every kind, with
// binary, empty and longest names, in a binary scope, is admitted and
// released in one round trip each; when its last charge refuses, none of
// the others changed.
func TestMaxChargesOddNames(t *testing.T) {
	clk := newClock()
	s, _ := newStore(t, clk, time.Minute)
	ctx := context.Background()
	scope := "\x00{}%:" + strings.Repeat("\xff", MaxNameLen-6)
	names := []string{"", ":", "\x00", "{", "}", "%", strings.Repeat("k", MaxNameLen-2), "a:b"}
	cs := make([]Charge, MaxCharges)
	for i := range cs {
		sp := kinds[i%len(kinds)].spec
		cs[i] = Charge{Rule: names[i%len(names)], Key: names[(i/len(names))%len(names)] + fmt.Sprint(i), Spec: &sp, Weight: 1}
	}
	d, err := s.Admit(ctx, scope, cs)
	if err != nil || !d.OK {
		t.Fatalf("%d charges: %+v %v", len(cs), d, err)
	}
	if err := s.Release(ctx, scope, cs, d.Token); err != nil {
		t.Fatal(err)
	}
	// Fill the last charge's limiter alone, then a call of all of them is
	// refused by it and leaves the others as they were: each still takes
	// its whole capacity minus what the first call used.
	last := cs[len(cs)-1]
	full := last
	full.Weight = last.Spec.Capacity() - 1
	if d, err := s.Admit(ctx, scope, []Charge{full}); err != nil || !d.OK {
		t.Fatalf("filling the last: %+v %v", d, err)
	}
	if d, err := s.Admit(ctx, scope, cs); err != nil || d.OK || d.Refused != len(cs)-1 {
		t.Fatalf("refused call: %+v %v", d, err)
	}
	for i, c := range cs[:len(cs)-1] {
		c.Weight = c.Spec.Capacity() - 1
		if c.Spec.Kind == GCRA && c.Spec.Burst == 0 {
			// A pacer spaced the first call: the next one waits one
			// emission interval, not two.
			c.Weight = 1
			if d, err := s.Admit(ctx, scope, []Charge{c}); err != nil || d.OK || d.Wait != c.Spec.Limit.Per/time.Duration(c.Spec.Limit.N) {
				t.Fatalf("pacer %d after the refused call: %+v %v", i, d, err)
			}
			continue
		}
		if d, err := s.Admit(ctx, scope, []Charge{c}); err != nil || !d.OK {
			t.Fatalf("charge %d (%s) after the refused call: %+v %v", i, c.Spec, d, err)
		}
	}
}

// TestExtendKeepsKeys: a lease extended past the keys' TTL keeps them:
// later admissions, which refresh TTLs only when the recorded expiry comes
// near, do not shorten them under the extended lease.
func TestExtendKeepsKeys(t *testing.T) {
	clk := newClock()
	s, rdb := newStore(t, clk, time.Second)
	ctx := context.Background()
	c := []Charge{{Rule: "r", Key: "k", Spec: spec(Completion, 5, 100*time.Millisecond), Weight: 1}}
	d, err := s.Admit(ctx, "", c)
	if err != nil || !d.OK {
		t.Fatal(d, err)
	}
	if err := s.Extend(ctx, "", c, d.Token, time.Hour); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clk.add(1500 * time.Millisecond)
		if d, err := s.Admit(ctx, "", c); err != nil || !d.OK {
			t.Fatal(d, err)
		}
	}
	ks := s.Keys("", c[0])
	for _, k := range ks[:2] {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl < 30*time.Minute {
			t.Errorf("%s: TTL %v under a lease extended by an hour", k, ttl)
		}
	}
}

// TestSweepMany: a thousand leases that ran out at once are ended in one
// sweep (their log entries added in batches), each counted as ended at its
// lease's end.
func TestSweepMany(t *testing.T) {
	clk := newClock()
	s, rdb := newStore(t, clk, time.Millisecond)
	ctx := context.Background()
	c := []Charge{{Rule: "r", Key: "k", Spec: spec(Completion, 1500, time.Second), Weight: 1}}
	start := clk.t
	for i := range 1000 {
		if d, err := s.Admit(ctx, "", c); err != nil || !d.OK {
			t.Fatalf("call %d: %+v %v", i, d, err)
		}
	}
	clk.add(2 * time.Millisecond)
	c[0].Weight = 501
	d, err := s.Admit(ctx, "", c)
	if err != nil || d.OK || d.Release || d.Wait != start.Add(time.Millisecond+time.Second).Sub(clk.t) {
		t.Fatalf("501 over 1000 ended: %+v %v", d, err)
	}
	if n := rdb.ZCard(ctx, s.Keys("", c[0])[2]).Val(); n != 1000 {
		t.Fatalf("log holds %d entries, want 1000", n)
	}
	c[0].Weight = 500
	if d, err := s.Admit(ctx, "", c); err != nil || !d.OK {
		t.Fatalf("500 over 1000 ended: %+v %v", d, err)
	}
}

// TestFixedCompletionCarryAfterExpiry: a fixed completion window carries
// into a new window only the calls still in flight at its start: a call
// whose lease ran out before (not yet swept) is not carried when a release
// is what rolls the window.
func TestFixedCompletionCarryAfterExpiry(t *testing.T) {
	clk := newClock()
	clk.t = clk.t.Truncate(100 * time.Millisecond) // a window starts
	s, _ := newStore(t, clk, 10*time.Millisecond)
	ctx := context.Background()
	c := []Charge{{Rule: "r", Key: "k", Spec: spec(FixedCompletion, 5, 100*time.Millisecond), Weight: 1}}
	if d, err := s.Admit(ctx, "", c); err != nil || !d.OK { // A: its lease runs out at 10 ms
		t.Fatal(d, err)
	}
	clk.add(95 * time.Millisecond)
	b, err := s.Admit(ctx, "", c) // B: in flight across the window's end
	if err != nil || !b.OK {
		t.Fatal(b, err)
	}
	clk.add(6 * time.Millisecond) // the next window: B carried, A not
	if err := s.Release(ctx, "", c, b.Token); err != nil {
		t.Fatal(err)
	}
	c[0].Weight = 4
	if d, err := s.Admit(ctx, "", c); err != nil || !d.OK {
		t.Fatalf("4 units over B carried alone: %+v %v", d, err)
	}
}

// TestReconcileAtDropsAnEarlierWindowsCount: a fixed window's count read
// before the boundary and reaching Redis after it is the old window's and
// changes nothing in the new one; one read in the current window tightens
// it; a sliding kind applies it whenever it was read.
func TestReconcileAtDropsAnEarlierWindowsCount(t *testing.T) {
	clk := newClock()
	clk.t = time.Unix(1_700_000_040, 0).Add(-10 * time.Millisecond) // just before a whole minute
	s, _ := newStore(t, clk, time.Minute)
	ctx := context.Background()
	c := Charge{Rule: "REQUEST_WEIGHT", Key: "ip", Spec: spec(FixedCompletion, 6000, time.Minute), Weight: 2}
	d, err := s.Admit(ctx, "", []Charge{c})
	if err != nil || !d.OK {
		t.Fatal(d, err)
	}
	if err := s.Release(ctx, "", []Charge{c}, d.Token); err != nil {
		t.Fatal(err)
	}
	clk.add(20 * time.Millisecond) // the response is handled after the boundary
	if extra, err := s.ReconcileAt(ctx, "", c, 5000, Read{Seen: d.Now}); err != nil || extra != 0 {
		t.Fatalf("the old window's count of 5000 added %d units to the new window (%v)", extra, err)
	}
	// Read after the boundary, but of a call admitted before it: the server
	// may have counted it in either window, so its count (however large)
	// says nothing certain of the new one.
	if len(d.Marks) != 1 || d.Marks[0] == "" {
		t.Fatalf("a fixed completion admission has no mark: %q", d.Marks)
	}
	if extra, err := s.ReconcileAt(ctx, "", c, 5990, Read{Seen: clk.t, Mark: d.Marks[0], Weight: 2}); err != nil || extra != 0 {
		t.Fatalf("a count of a call admitted in the window before added %d units (%v)", extra, err)
	}
	c.Weight = 1000
	d2, err := s.Admit(ctx, "", []Charge{c})
	if err != nil || !d2.OK {
		t.Fatalf("the new window is not held by the old one's count: %+v %v", d2, err)
	}
	if extra, err := s.ReconcileAt(ctx, "", c, 5500, Read{Seen: d2.Now}); err != nil || extra != 4500 {
		t.Fatalf("a count of the current window added %d units, want 4500 (%v)", extra, err)
	}
	if extra, err := s.Reconcile(ctx, "", c, 5999); err != nil || extra != 499 {
		t.Fatalf("Reconcile without an admission instant added %d, want 499 (%v)", extra, err)
	}
	comp := Charge{Rule: "c", Key: "k", Spec: spec(Completion, 10, time.Minute), Weight: 1}
	d3, _ := s.Admit(ctx, "", []Charge{comp})
	clk.add(time.Minute)
	if extra, err := s.ReconcileAt(ctx, "", comp, 8, Read{Seen: d3.Now}); err != nil || extra == 0 {
		t.Fatalf("a completion window ignored a report: %d %v", extra, err)
	}
}

// TestReconcileMarkCountsCallsOnTheirWay: a fixed completion window learns
// of units from elsewhere from a call's response without taking the fleet's
// calls still on their way to the server for room. P (100 units) is
// admitted first and reaches the server after X (2 units); the server
// counts 1500 units of a foreign client, Q (10, ended before X was
// admitted) and X: 1512. Against the window's count now (112) the report
// would add 1400 and leave the window 100 units short of the server's final
// count (1500 + 10 + 2 + 100); with X's mark it adds 1500, and the fleet
// can then admit exactly what the server has left.
func TestReconcileMarkCountsCallsOnTheirWay(t *testing.T) {
	clk := newClock()
	clk.t = time.Unix(1_700_000_040, 0).Add(time.Second) // just after a whole minute
	s, _ := newStore(t, clk, time.Minute)
	ctx := context.Background()
	sp := spec(FixedCompletion, 6000, time.Minute)
	admit := func(n int64) (Charge, Decision) {
		t.Helper()
		c := Charge{Rule: "REQUEST_WEIGHT", Key: "ip", Spec: sp, Weight: n}
		d, err := s.Admit(ctx, "", []Charge{c})
		if err != nil || !d.OK {
			t.Fatalf("admit %d: %+v %v", n, d, err)
		}
		return c, d
	}
	q, dq := admit(10)
	if err := s.Release(ctx, "", []Charge{q}, dq.Token); err != nil {
		t.Fatal(err)
	}
	admit(100) // P, on its way
	x, dx := admit(2)
	if len(dx.Marks) != 1 || dx.Marks[0] == "" {
		t.Fatalf("a fixed completion admission has no mark: %q", dx.Marks)
	}
	clk.add(20 * time.Millisecond)
	r := Read{Seen: clk.t, Mark: dx.Marks[0], Weight: x.Weight}
	if extra, err := s.ReconcileAt(ctx, "", x, 1512, r); err != nil || extra != 1500 {
		t.Fatalf("X's report added %d units, want the 1500 from elsewhere (%v)", extra, err)
	}
	// Taken in once: the same report again adds nothing.
	if extra, err := s.ReconcileAt(ctx, "", x, 1512, r); err != nil || extra != 0 {
		t.Fatalf("the same report again added %d units (%v)", extra, err)
	}
	// The server has 6000 − 1612 = 4388 left: the window admits that many
	// and not one more.
	admit(4388)
	c := Charge{Rule: "REQUEST_WEIGHT", Key: "ip", Spec: sp, Weight: 1}
	if d, err := s.Admit(ctx, "", []Charge{c}); err != nil || d.OK {
		t.Fatalf("the window admitted beyond what the server left: %+v %v", d, err)
	}
}

// TestReconcileMarkHostile: a mark or weight that is not what Admit
// returned (malformed, oversized, negative, beyond MaxN) is not sent: the
// report is taken in as one without a mark (against the window's count
// now), never with an arithmetic of garbage; a count beyond int64's range
// of the server's header is clamped to N.
func TestReconcileMarkHostile(t *testing.T) {
	clk := newClock()
	clk.t = time.Unix(1_700_000_040, 0).Add(time.Second)
	s, _ := newStore(t, clk, time.Minute)
	ctx := context.Background()
	sp := spec(FixedCompletion, 6000, time.Minute)
	c := Charge{Rule: "w", Key: "ip", Spec: sp, Weight: 2}
	d, err := s.Admit(ctx, "", []Charge{c})
	if err != nil || !d.OK || len(d.Marks) != 1 {
		t.Fatal(d, err)
	}
	reads := []Read{
		{Seen: clk.t, Mark: "x:y", Weight: 2},
		{Seen: clk.t, Mark: "1:", Weight: 2},
		{Seen: clk.t, Mark: "99999999999999999999:0", Weight: 2},
		{Seen: clk.t, Mark: "1:2:3", Weight: 2},
		{Seen: clk.t, Mark: "-1:0", Weight: 2},
		{Seen: clk.t, Mark: d.Marks[0], Weight: -1},
		{Seen: clk.t, Mark: d.Marks[0], Weight: MaxN + 1},
	}
	for i, r := range reads {
		// Without a mark the window counts at least the report: 100 + i
		// against its count now (2 + what earlier reports added).
		used := int64(100 + i)
		if _, err := s.ReconcileAt(ctx, "", c, used, r); err != nil {
			t.Fatalf("read %+v: %v", r, err)
		}
	}
	// 106 counted: 5894 left, not one more.
	c.Weight = 5894
	if d, err := s.Admit(ctx, "", []Charge{c}); err != nil || !d.OK {
		t.Fatalf("the hostile reads counted more than the largest report: %+v %v", d, err)
	}
	c.Weight = 1
	if d, err := s.Admit(ctx, "", []Charge{c}); err != nil || d.OK {
		t.Fatalf("the hostile reads counted less than the largest report: %+v %v", d, err)
	}
	// A count far beyond the limit fills the window and no more.
	if extra, err := s.ReconcileAt(ctx, "", c, math.MaxInt64, Read{Seen: clk.t, Mark: d.Marks[0], Weight: 2}); err != nil || extra < 0 || extra > 6000 {
		t.Fatalf("a count of MaxInt64 added %d units (%v)", extra, err)
	}
}

// TestReleaseAfterLostHashHolds: a limiter's hash deleted while calls are
// in flight, then a release before any admission: the release must not
// remake the hash bare (counting only what it touched); the limiter is held
// full, and the next admission is refused as lost.
func TestReleaseAfterLostHashHolds(t *testing.T) {
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	ctx := context.Background()
	c := []Charge{{Rule: "r", Key: "k", Spec: spec(Completion, 2, time.Second), Weight: 1}}
	a, _ := s.Admit(ctx, "", c)
	b, _ := s.Admit(ctx, "", c)
	if !a.OK || !b.OK {
		t.Fatal(a, b)
	}
	rdb.Del(ctx, s.Keys("", c[0])[0])
	clk.add(10 * time.Millisecond)
	if err := s.Release(ctx, "", c, a.Token); err != nil {
		t.Fatal(err)
	}
	d, err := s.Admit(ctx, "", c)
	if err != nil || d.OK || !d.Lost {
		t.Fatalf("after a lost hash and a release: %+v %v; want refused as lost (b is in flight, a ended 0 s ago: the window is full)", d, err)
	}
	if err := s.Release(ctx, "", c, b.Token); err != nil {
		t.Fatal(err)
	}
}

// TestReconcileMarkLatestBound: two heavy calls of the fleet in flight
// together, A (30) and B (30), reach the server in that order after 20
// units from elsewhere; B's answer (80) lands first. Alone it bounds the
// units from elsewhere by 80 − 30 = 50 (A, counted before B, taken for
// foreign): the window counts 60 + 40 (full). A's answer (50) shows A was
// counted before 80, so the bound at 80 is 80 − 60 = 20: the window gives
// 20 back (the reply is −20) and admits 20 more in the same window, not
// one more. Keeping the highest bound of every report (50) held those 20
// units for the rest of the window.
func TestReconcileMarkLatestBound(t *testing.T) {
	clk := newClock()
	clk.t = time.Unix(1_700_000_040, 0).Add(time.Second) // just after a whole minute
	s, _ := newStore(t, clk, time.Minute)
	ctx := context.Background()
	sp := spec(FixedCompletion, 100, time.Minute)
	admit := func(n int64) (Charge, Decision, bool) {
		t.Helper()
		c := Charge{Rule: "REQUEST_WEIGHT", Key: "ip", Spec: sp, Weight: n}
		d, err := s.Admit(ctx, "", []Charge{c})
		if err != nil {
			t.Fatalf("admit %d: %v", n, err)
		}
		return c, d, d.OK
	}
	a, da, ok1 := admit(30)
	b, db, ok2 := admit(30)
	if !ok1 || !ok2 {
		t.Fatal("A and B not admitted")
	}
	clk.add(20 * time.Millisecond)
	rb := Read{Seen: clk.t, Mark: db.Marks[0], Weight: b.Weight}
	if extra, err := s.ReconcileAt(ctx, "", b, 80, rb); err != nil || extra != 40 {
		t.Fatalf("B's report added %d units, want 40 (at most 50 from elsewhere, capped at N) (%v)", extra, err)
	}
	ra := Read{Seen: clk.t, Mark: da.Marks[0], Weight: a.Weight}
	if extra, err := s.ReconcileAt(ctx, "", a, 50, ra); err != nil || extra != -20 {
		t.Fatalf("A's report changed the count by %d units, want −20 (20 from elsewhere) (%v)", extra, err)
	}
	if _, _, ok := admit(20); !ok {
		t.Fatal("20 units refused with 60 own and 20 from elsewhere of 100")
	}
	if _, _, ok := admit(1); ok {
		t.Fatal("admitted beyond what the server left")
	}
	// A report of A or B again without its mark (the pool sends a second
	// report so) never gives back; one with its mark would count the call
	// twice, which is why the pool sends a mark once.
	if extra, err := s.ReconcileAt(ctx, "", a, 80, Read{Seen: clk.t}); err != nil || extra != 0 {
		t.Fatalf("a report without a mark changed the count by %d (%v)", extra, err)
	}
	// Elsewhere spends 10 more: the next call's count shows it.
	clk.add(time.Minute)
	c, dc, ok := admit(5)
	if !ok {
		t.Fatal("the next window refused 5")
	}
	if extra, err := s.ReconcileAt(ctx, "", c, 15, Read{Seen: clk.t, Mark: dc.Marks[0], Weight: 5}); err != nil || extra != 10 {
		t.Fatalf("the next window's first report added %d, want 10 (the earlier window's reports forgotten) (%v)", extra, err)
	}
}
