package win_test

import (
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/win"
)

// A limit set to 0 (no refill) and back keeps what was admitted: the
// buckets and GCRA count the calls of before, as on the base commit. With
// the debt cap of issue 18 taken at "one Per's refill" of a limit of 0,
// the token bucket forgot its debt: SetLimit(0) then SetLimit(10) gave a
// full bucket at once, 10 more calls in the same instant.
func TestSetLimitZeroKeepsTheDebt(t *testing.T) {
	l := win.Limit{N: 10, Per: time.Second}
	for name, mk := range map[string]func() win.Policy{
		"token bucket":       func() win.Policy { return win.NewTokenBucket(l, 0) },
		"token bucket burst": func() win.Policy { return win.NewTokenBucket(l, 10) },
		"leaky bucket":       func() win.Policy { return win.NewLeakyBucket(l, 0) },
		"gcra":               func() win.Policy { return win.NewGCRA(l, 0) },
		"pacer":              func() win.Policy { return win.NewPacer(l) },
	} {
		t.Run(name, func(t *testing.T) {
			p := mk()
			for p.Capacity() > 0 {
				if _, ok := p.Admit(at(0), 1); !ok {
					break
				}
			}
			p.SetLimit(at(0), win.Limit{N: 0, Per: time.Second})
			p.SetLimit(at(0), l)
			if _, ok := p.Admit(at(0), 1); ok {
				t.Fatal("a limit of 0 and back forgot the calls admitted: admitted at once")
			}
			if _, ok := p.Admit(at(1100*time.Millisecond), 1); !ok {
				t.Fatal("refused a Per later")
			}
		})
	}
}
