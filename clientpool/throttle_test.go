package clientpool_test

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
)

// pausedFor returns how long (rule, key) is paused from now, 0 when not.
func pausedFor(t *testing.T, p *clientpool.Pool, rule, key string) time.Duration {
	t.Helper()
	for _, ks := range p.Snapshot() {
		if ks.Rule == rule && ks.Key == key && !ks.PausedUntil.IsZero() {
			return max(time.Until(ks.PausedUntil), 0)
		}
	}
	return 0
}

// A throttle without a usable Retry-After pauses a daily rule's key with
// capped exponential backoff, not for the rule's 24 h window: 100–200 ms,
// then doubling on each throttle in a row up to the cap; a throttle while
// paused adds nothing; a call that ends without a throttle resets it.
func TestThrottleBackoffWithoutRetryAfter(t *testing.T) {
	const maxPause = 10 * time.Second
	for _, retryAfter := range []time.Duration{0, -1, -time.Hour} {
		synctest.Test(t, func(t *testing.T) {
			day := ruleN("ORDERS_1D", 200_000, 24*time.Hour)
			day.PauseOnThrottle = true
			p := newPool(t, []clientpool.Rule{day}, clientpool.WithMaxPause(maxPause))
			c := clientpool.Charge{Rule: "ORDERS_1D", Key: "acct", Weight: 1}
			want := 200 * time.Millisecond
			for k := range 12 {
				tk := acquire(t, p, c) // waits out the previous pause
				p.Throttled(clientpool.Throttle{Status: http.StatusTooManyRequests, RetryAfter: retryAfter}, []clientpool.Charge{c})
				d := pausedFor(t, p, c.Rule, c.Key)
				if d > maxPause || d < min(want, maxPause)/2 || d > want {
					t.Fatalf("throttle %d in a row: paused %v, want in [%v, %v], never above %v", k, d, want/2, min(want, maxPause), maxPause)
				}
				// A second throttle of the same episode (a call admitted
				// before the pause) neither lengthens the pause nor the streak.
				p.Throttled(clientpool.Throttle{Status: http.StatusTooManyRequests, RetryAfter: retryAfter}, []clientpool.Charge{c})
				if d2 := pausedFor(t, p, c.Rule, c.Key); d2 != d {
					t.Fatalf("a throttle during the pause changed it from %v to %v", d, d2)
				}
				tk.Release() // throttled since admission: no reset
				want = min(2*want, maxPause)
			}
			// A call that goes through without a throttle resets the streak.
			acquire(t, p, c).Release()
			tk := acquire(t, p, c)
			p.Throttled(clientpool.Throttle{Status: http.StatusTooManyRequests, RetryAfter: retryAfter}, []clientpool.Charge{c})
			if d := pausedFor(t, p, c.Rule, c.Key); d < 100*time.Millisecond || d > 200*time.Millisecond {
				t.Fatalf("after a success the pause is %v, want the first step (100–200ms)", d)
			}
			tk.Release()
		})
	}
}

// A server-given Retry-After is obeyed, spread by a little jitter, and never
// beyond the cap.
func TestThrottleRetryAfterSpreadAndCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := ruleN("ip", 10, time.Minute)
		p := newPool(t, []clientpool.Rule{r}, clientpool.WithMaxPause(time.Minute))
		c := clientpool.Charge{Rule: "ip", Weight: 1}
		seen := map[time.Duration]bool{}
		for range 20 {
			p.Throttled(clientpool.Throttle{Status: http.StatusTooManyRequests, RetryAfter: 2 * time.Second}, []clientpool.Charge{c})
			d := pausedFor(t, p, "ip", "")
			if d < 2*time.Second || d > 2*time.Second+250*time.Millisecond {
				t.Fatalf("Retry-After 2s: paused %v, want in [2s, 2.25s]", d)
			}
			seen[d] = true
			time.Sleep(3 * time.Second)
		}
		if len(seen) < 2 {
			t.Fatalf("20 pauses for Retry-After 2s all ended at the same offset: no jitter")
		}
		for _, ra := range []time.Duration{time.Hour, 1<<63 - 1} {
			p.Throttled(clientpool.Throttle{Status: http.StatusTooManyRequests, RetryAfter: ra}, []clientpool.Charge{c})
			if d := pausedFor(t, p, "ip", ""); d > time.Minute || d < 54*time.Second {
				t.Fatalf("Retry-After %v under a cap of 1m: paused %v", ra, d)
			}
			time.Sleep(2 * time.Minute)
		}
	})
}

// The default cap is DefaultMaxPause (5 minutes).
func TestThrottleDefaultCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, []clientpool.Rule{ruleN("day", 10, 24*time.Hour)})
		c := clientpool.Charge{Rule: "day", Weight: 1}
		for range 40 {
			p.Throttled(clientpool.Throttle{Status: http.StatusTooManyRequests}, []clientpool.Charge{c})
			if d := pausedFor(t, p, "day", ""); d > clientpool.DefaultMaxPause {
				t.Fatalf("paused %v, above DefaultMaxPause", d)
			}
			time.Sleep(clientpool.DefaultMaxPause + time.Second)
		}
		p.Throttled(clientpool.Throttle{Status: http.StatusTooManyRequests, RetryAfter: 1 << 62}, []clientpool.Charge{c})
		if d := pausedFor(t, p, "day", ""); d > clientpool.DefaultMaxPause {
			t.Fatalf("paused %v, above DefaultMaxPause", d)
		}
	})
}

// Binance −1015 names both order counts; without Retry-After only the
// shortest window that can explain it (10 s) pauses, not the daily one.
// With a Retry-After both pause.
func TestThrottleShortestWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tenS, day := ruleN("ORDERS_10S", 100, 10*time.Second), ruleN("ORDERS_1D", 200_000, 24*time.Hour)
		weight := ruleN("REQUEST_WEIGHT", 6000, time.Minute)
		tb := clientpool.Table{
			Rules: []clientpool.Rule{weight, tenS, day},
			ThrottleTargets: func(th clientpool.Throttle, cs []clientpool.Charge) []clientpool.Charge {
				var out []clientpool.Charge
				for _, c := range cs {
					if c.Rule != "REQUEST_WEIGHT" {
						out = append(out, c)
					}
				}
				return out
			},
		}
		p, err := clientpool.New(tb)
		if err != nil {
			t.Fatal(err)
		}
		cs := []clientpool.Charge{{Rule: "REQUEST_WEIGHT", Weight: 1}, {Rule: "ORDERS_10S", Key: "a", Weight: 1}, {Rule: "ORDERS_1D", Key: "a", Weight: 1}}
		tk := acquire(t, p, cs...)
		p.Throttled(clientpool.Throttle{Status: 429, Body: []byte(`{"code":-1015}`)}, tk.Charges())
		tk.Release()
		if d := pausedFor(t, p, "ORDERS_10S", "a"); d <= 0 || d > 200*time.Millisecond {
			t.Fatalf("ORDERS_10S paused %v, want the first backoff step", d)
		}
		for _, c := range []clientpool.Charge{cs[0], cs[2]} {
			if d := pausedFor(t, p, c.Rule, c.Key); d != 0 {
				t.Fatalf("%s paused %v by a throttle without Retry-After", c.Rule, d)
			}
		}
		time.Sleep(time.Second)
		tk = acquire(t, p, cs...)
		p.Throttled(clientpool.Throttle{Status: 429, RetryAfter: 3 * time.Second}, tk.Charges())
		tk.Release()
		for _, r := range []string{"ORDERS_10S", "ORDERS_1D"} {
			if d := pausedFor(t, p, r, "a"); d < 3*time.Second {
				t.Fatalf("%s paused %v by a Retry-After of 3s", r, d)
			}
		}
	})
}
