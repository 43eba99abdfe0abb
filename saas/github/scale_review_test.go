package github_test

import (
	"testing"
	"time"

	"github.com/ratesem/ratesem/saas/github"
)

// WithScale below 1 slows the windows down; an absurd one (1e-9: an hour
// becomes 114 years, past time.Duration's 292-year range for the CPU
// unit's budget) saturates instead of wrapping to a window of 1 µs, and
// the CPU unit is never shorter than 1 ms (CPUUnit) for a scale ≤ 1.
func TestWithScaleAbsurdlySlow(t *testing.T) {
	for _, f := range []float64{1e-3, 1e-9, 1e-15, 1e-300} {
		tab := github.Table(github.WithScale(f))
		for _, r := range tab.Rules {
			if r.Name == github.RuleConcurrent {
				continue // not scaled: a gate of calls in flight
			}
			if r.Limit.Per < time.Minute {
				t.Errorf("scale %g: rule %q: Per %v: want ≥ 1 minute (slowed down, not wrapped)", f, r.Name, r.Limit.Per)
			}
			if r.TimeUnit != 0 && r.TimeUnit < github.CPUUnit {
				t.Errorf("scale %g: rule %q: TimeUnit %v: want ≥ %v", f, r.Name, r.TimeUnit, github.CPUUnit)
			}
		}
	}
}
