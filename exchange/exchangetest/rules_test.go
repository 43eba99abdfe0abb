package exchangetest_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem/exchange/exchangetest"
)

func accepted(at time.Time, charges ...exchangetest.Charge) exchangetest.Entry {
	return exchangetest.Entry{At: at, Outcome: exchangetest.OutcomeAccepted, Status: 200, Charges: charges}
}

func charge(rule, ip string, units int64) exchangetest.Charge {
	return exchangetest.Charge{Key: exchangetest.RuleKey{Rule: rule, IP: ip}, Units: units}
}

func TestRuleKeyAndOutcomeStrings(t *testing.T) {
	assert.Equal(t, "GET /api/v5/public/funding-rate ip=127.0.0.1 instId=BTC-USDT-SWAP",
		exchangetest.RuleKey{Rule: "GET /api/v5/public/funding-rate", IP: "127.0.0.1", InstID: "BTC-USDT-SWAP"}.String())
	assert.Equal(t, "sub apiKey=k instType=SPOT", exchangetest.RuleKey{Rule: "sub", APIKey: "k", InstType: "SPOT"}.String())
	assert.Equal(t, "invalid", exchangetest.OutcomeInvalid.String())
	assert.Equal(t, "accepted", exchangetest.OutcomeAccepted.String())
	assert.Equal(t, "rate-limited", exchangetest.OutcomeRateLimited.String())
	assert.Equal(t, "banned", exchangetest.OutcomeBanned.String())
	assert.Equal(t, "Outcome(9)", exchangetest.Outcome(9).String())
}

func TestPeakUsageSliding(t *testing.T) {
	t0 := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	const ms = time.Millisecond
	rules := []exchangetest.Rule{{Name: "r", Limit: 10, Per: 2 * time.Second, Window: 2 * time.Second}}
	k := exchangetest.RuleKey{Rule: "r", IP: "a"}
	tests := []struct {
		name string
		log  []exchangetest.Entry
		want int64
	}{
		{"weights add up", []exchangetest.Entry{
			accepted(t0, charge("r", "a", 3)), accepted(t0.Add(ms), charge("r", "a", 4)),
		}, 7},
		{"exactly one window apart is outside", []exchangetest.Entry{
			accepted(t0, charge("r", "a", 5)), accepted(t0.Add(2*time.Second), charge("r", "a", 5)),
		}, 5},
		{"one nanosecond inside counts", []exchangetest.Entry{
			accepted(t0, charge("r", "a", 5)), accepted(t0.Add(2*time.Second-1), charge("r", "a", 5)),
		}, 10},
		{"equal instants all count, unsorted input", []exchangetest.Entry{
			accepted(t0.Add(3*time.Second), charge("r", "a", 1)),
			accepted(t0.Add(time.Second), charge("r", "a", 2)),
			accepted(t0.Add(time.Second), charge("r", "a", 2)),
			accepted(t0, charge("r", "a", 1)),
		}, 5},
		{"rejected and invalid entries and unknown rules are ignored", []exchangetest.Entry{
			accepted(t0, charge("r", "a", 1), charge("other", "a", 100)),
			{At: t0, Outcome: exchangetest.OutcomeRateLimited, Charges: []exchangetest.Charge{charge("r", "a", 50)}},
			{At: t0, Outcome: exchangetest.OutcomeBanned, Charges: []exchangetest.Charge{charge("r", "a", 50)}},
			{At: t0, Outcome: exchangetest.OutcomeInvalid, Charges: []exchangetest.Charge{charge("r", "a", 50)}},
		}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.log)
			got := exchangetest.PeakUsage(tc.log, rules)
			assert.Equal(t, map[exchangetest.RuleKey]int64{k: tc.want}, got)
			assert.Equal(t, in, tc.log, "input must not be modified")
		})
	}
}

func TestPeakUsageFixed(t *testing.T) {
	const w = 3 * time.Second
	rules := []exchangetest.Rule{{Name: "f", Limit: 10, Per: time.Minute, Window: w, Fixed: true}}
	k := exchangetest.RuleKey{Rule: "f", IP: "a"}
	b := time.Unix(1_700_000_001, 0) // a multiple of 3 s since the epoch
	require.Zero(t, b.UnixNano()%int64(w))

	// Both sides of a boundary: 2N within 1 ns, but N per aligned window.
	log := []exchangetest.Entry{
		accepted(b.Add(-1), charge("f", "a", 6)),
		accepted(b, charge("f", "a", 6)),
		accepted(b.Add(w-1), charge("f", "a", 2)),
		accepted(b.Add(w), charge("f", "a", 1)),
	}
	assert.Equal(t, map[exchangetest.RuleKey]int64{k: 8}, exchangetest.PeakUsage(log, rules))

	// Before the epoch, windows are still [k·w, (k+1)·w) with k = floor:
	// −w+1 and −1 share window −1, −w−1 is in window −2, 0 in window 0.
	e := time.Unix(0, 0)
	log = []exchangetest.Entry{
		accepted(e.Add(-1), charge("f", "a", 4)),
		accepted(e.Add(-w+1), charge("f", "a", 4)),
		accepted(e.Add(-w-1), charge("f", "a", 4)),
		accepted(e, charge("f", "a", 1)),
	}
	assert.Equal(t, map[exchangetest.RuleKey]int64{k: 8}, exchangetest.PeakUsage(log, rules))
}

// TestPeakUsageMatchesBruteForce compares PeakUsage with definition-level
// quadratic computations on pseudo-random logs.
func TestPeakUsageMatchesBruteForce(t *testing.T) {
	const w = 10 * time.Millisecond
	rules := []exchangetest.Rule{
		{Name: "s", Limit: 1, Per: w, Window: w},
		{Name: "f", Limit: 1, Per: w, Window: w, Fixed: true},
	}
	t0 := time.Unix(1_700_000_000, 0)
	r := rand.New(rand.NewPCG(1, 2))
	ips := []string{"a", "b"}
	for round := range 200 {
		var log []exchangetest.Entry
		for range 40 {
			e := exchangetest.Entry{
				At:      t0.Add(time.Duration(r.IntN(60)) * time.Millisecond / 2),
				Outcome: exchangetest.Outcome(r.IntN(3)),
			}
			ip := ips[r.IntN(2)]
			e.Charges = []exchangetest.Charge{charge("s", ip, int64(1+r.IntN(5))), charge("f", ip, int64(1+r.IntN(5)))}
			log = append(log, e)
		}
		want := map[exchangetest.RuleKey]int64{}
		for _, end := range log { // sliding: windows ending at each arrival
			for _, c := range end.Charges {
				if c.Key.Rule != "s" {
					continue
				}
				var sum int64
				for _, x := range log {
					if x.Outcome != exchangetest.OutcomeAccepted || !x.At.After(end.At.Add(-w)) || x.At.After(end.At) {
						continue
					}
					for _, xc := range x.Charges {
						if xc.Key == c.Key {
							sum += xc.Units
						}
					}
				}
				want[c.Key] = max(want[c.Key], sum)
			}
		}
		for _, x := range log { // fixed: sum per aligned window
			if x.Outcome != exchangetest.OutcomeAccepted {
				continue
			}
			for _, c := range x.Charges {
				if c.Key.Rule != "f" {
					continue
				}
				start := x.At.Truncate(w) // Truncate rounds toward the zero time, a multiple of w away from the epoch here
				var sum int64
				for _, y := range log {
					if y.Outcome == exchangetest.OutcomeAccepted && !y.At.Before(start) && y.At.Before(start.Add(w)) {
						for _, yc := range y.Charges {
							if yc.Key == c.Key {
								sum += yc.Units
							}
						}
					}
				}
				want[c.Key] = max(want[c.Key], sum)
			}
		}
		got := exchangetest.PeakUsage(log, rules)
		require.Equal(t, want, got, "round %d", round)
	}
}

func TestViolationsAndSummarize(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	rules := []exchangetest.Rule{
		{Name: "a", Limit: 2, Per: time.Second, Window: time.Second},
		{Name: "b", Limit: 5, Per: time.Second, Window: time.Second, Fixed: true},
	}
	log := []exchangetest.Entry{
		accepted(t0, charge("a", "2.2.2.2", 2), charge("b", "x", 5)),
		accepted(t0.Add(time.Millisecond), charge("a", "2.2.2.2", 1)),
		accepted(t0, charge("a", "1.1.1.1", 3)),
		{At: t0, Outcome: exchangetest.OutcomeRateLimited, Rule: "a", Status: 429, Charges: []exchangetest.Charge{charge("a", "1.1.1.1", 9)}},
		{At: t0, Outcome: exchangetest.OutcomeRateLimited, Rule: "b", Status: 200, Code: "50011"},
		{At: t0, Outcome: exchangetest.OutcomeBanned, Status: 418},
		{At: t0, Outcome: exchangetest.OutcomeInvalid, Status: 400},
	}
	v := exchangetest.Violations(log, rules)
	require.Len(t, v, 2)
	assert.Equal(t, exchangetest.RuleKey{Rule: "a", IP: "1.1.1.1"}, v[0].Key, "sorted by rule, then key")
	assert.Equal(t, int64(3), v[0].Peak)
	assert.Equal(t, int64(2), v[0].Limit)
	assert.Equal(t, exchangetest.RuleKey{Rule: "a", IP: "2.2.2.2"}, v[1].Key)
	assert.Equal(t, "a ip=2.2.2.2: 3 units in one sliding window of 1s, limit 2", v[1].String())
	assert.Empty(t, exchangetest.Violations(log[:1], rules))

	assert.Equal(t, exchangetest.Stats{
		Requests: 7, Accepted: 3, RateLimited: 2, Banned: 1, Invalid: 1, Status429: 1, Status418: 1,
		LimitedBy: map[string]int{"a": 1, "b": 1},
	}, exchangetest.Summarize(log))
	assert.Equal(t, exchangetest.Stats{LimitedBy: map[string]int{}}, exchangetest.Summarize(nil))
}
