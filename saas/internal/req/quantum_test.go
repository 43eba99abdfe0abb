package req

import (
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"
)

// The quantum rules' guarantee, simulated: a client admitting calls as
// soon as the rule's window allows (random weights, some above the
// quantum), whose calls reach the server after a one-way latency drawn in
// [d, d + margin] (so they may arrive closer together, and out of order),
// never finds the server's quantum — a token bucket of capacity
// max(1, ⌊n/60⌋) refilled at n per per, charged min(charge, capacity) —
// short, for either kind. With the margin at 0 and the same jitter the
// padded kind is refused (so the simulation can fail).
func TestQuantumRuleHoldsUnderJitter(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 21))
	failedWithoutMargin := false
	for iter := range 400 {
		n := []int64{30, 60, 500, 6000, 200000, 1_000_000}[iter%6]
		per := []time.Duration{time.Minute, time.Second}[iter%2]
		margin := []time.Duration{20 * time.Millisecond, time.Millisecond, 5 * time.Millisecond}[iter%3]
		kind := []QuantumKind{QuantumStarts, QuantumPadded}[(iter/6)%2]
		tokens := kind == QuantumPadded || iter%5 == 0 // requests otherwise: weight 1
		q := max(1, n/60)
		for _, m := range []time.Duration{margin, 0} {
			if m == 0 && kind != QuantumPadded {
				continue
			}
			charge := func(i int) int64 {
				if !tokens {
					return 1
				}
				if i%7 == 0 {
					return q + 1 + int64(i%3)*q // heavy
				}
				return 1 + int64(i*7919)%max(1, q/2)
			}
			hdr := "x-limit"
			i := 0
			rule := QuantumRule("q", kind, n, per, m, nil, func(*http.Request) int64 { c := charge(i); return c }, true, hdr, "")
			lim := rule.Limit
			pol := rule.Window(lim)
			t0 := time.Unix(1e9, 0)
			now := t0
			type arrival struct {
				at time.Time
				c  int64
			}
			var arr []arrival
			for i = 0; i < 300; i++ {
				w := rule.Weight(nil)
				for {
					at, ok := pol.Admit(now, w)
					if ok {
						break
					}
					if at.IsZero() {
						t.Fatalf("n %d kind %v: weight %d never admitted (capacity %d)", n, kind, w, pol.Capacity())
					}
					now = at
				}
				d := time.Duration(rng.Int64N(int64(m) + 1))
				if m == 0 {
					d = time.Duration(rng.Int64N(int64(margin) + 1)) // jitter the client did not plan for
				}
				arr = append(arr, arrival{now.Add(d), min(charge(i), q)})
				if rng.IntN(4) == 0 {
					now = now.Add(time.Duration(rng.Int64N(int64(per / 30))))
				}
			}
			slices.SortStableFunc(arr, func(a, b arrival) int { return a.at.Compare(b.at) })
			level, last := float64(q), arr[0].at
			rate := float64(n) / float64(per)
			short := false
			for _, a := range arr {
				level = math.Min(float64(q), level+rate*float64(a.at.Sub(last)))
				last = a.at
				if level+1e-6 < float64(a.c) {
					short = true
					break
				}
				level -= float64(a.c)
			}
			if m > 0 && short {
				t.Fatalf("n %d per %v margin %v kind %v: the server's quantum was short", n, per, m, kind)
			}
			if m == 0 && short {
				failedWithoutMargin = true
			}
		}
	}
	if !failedWithoutMargin {
		t.Errorf("without the margin the jitter never ran the server short: the test cannot fail")
	}
}

// Quantum and the padded limits on hostile numbers: never faster than n
// per per, the pad at least the margin's refill, no overflow, the learned
// limit of a header the same as the configured one.
func TestQuantumRuleLimits(t *testing.T) {
	for _, n := range []int64{1, 59, 60, 61, 500, 200000, 1 << 40, 1 << 62, math.MaxInt64} {
		for _, m := range []time.Duration{0, time.Nanosecond, 20 * time.Millisecond, time.Hour} {
			r := QuantumRule("q", QuantumPadded, n, time.Minute, m, nil, func(*http.Request) int64 { return 1 }, true, "x", "")
			l := r.Limit
			if l.N < max(1, n/60) || l.Per <= 0 {
				t.Fatalf("n %d m %v: %+v", n, m, l)
			}
			// rate l.N/l.Per ≤ n/min, in floats with a relative slack
			if float64(l.N)/float64(l.Per) > float64(n)/float64(time.Minute)*(1+1e-9) {
				t.Errorf("n %d m %v: %+v faster than n per minute", n, m, l)
			}
			h := http.Header{}
			h.Set("x", strconv.FormatInt(n, 10))
			if n < 1e18 {
				if in, ok := r.Learn(h, time.Time{}); !ok || in.Limit != l {
					t.Errorf("n %d m %v: learned %+v, configured %+v", n, m, in.Limit, l)
				}
			}
		}
	}
}
