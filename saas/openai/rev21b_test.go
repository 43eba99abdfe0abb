package openai_test

import (
	"errors"
	"math"
	"testing"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/saas/openai"
)

// A model the Table was not given, under catch-all limits given with
// WithOtherModels: a call heavier than the tokens quantum (TPM/60) but
// well within TPM is one the API takes; it must not be refused for good.
func TestRev21bCatchAllHeavyCallGivenLimits(t *testing.T) {
	pool, err := clientpool.New(openai.Table(openai.WithOtherModels(500, 60000)))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cs, err := pool.Classify(chatReq(t, "unlisted", 5000))
	if err != nil {
		t.Fatal(err)
	}
	tk, _, err := pool.TryAcquire(cs...)
	if errors.Is(err, ratesem.ErrWeightTooLarge) {
		t.Fatalf("a 5000-token call under 60000 TPM refused as too heavy: %v", err)
	}
	if tk != nil {
		tk.Release()
	}
}

func TestRev21bAbsurdLimits(t *testing.T) {
	for _, n := range []int64{1, 59, 60, 61, math.MaxInt64} {
		pool, err := clientpool.New(openai.Table(openai.WithModel("m", n, n), openai.WithOtherModels(n, n)))
		if err != nil {
			t.Errorf("n=%d: %v", n, err)
			continue
		}
		for _, model := range []string{"m", "x"} {
			cs, err := pool.Classify(chatReq(t, model, 1))
			if err != nil {
				t.Fatal(err)
			}
			tk, _, err := pool.TryAcquire(cs...)
			if err != nil || tk == nil {
				t.Errorf("n=%d %s: first call %v %v", n, model, tk, err)
			} else {
				tk.Release()
			}
		}
		pool.Close()
	}
	for _, s := range []float64{1e-300, 1e-9, 1e9, 1e300} {
		pool, err := clientpool.New(openai.Table(openai.WithModel("m", 59, 1000), openai.WithScale(s)))
		if err != nil {
			t.Errorf("scale %g: %v", s, err)
			continue
		}
		cs, _ := pool.Classify(chatReq(t, "m", 1))
		tk, _, err := pool.TryAcquire(cs...)
		if err != nil || tk == nil {
			t.Errorf("scale %g: first call %v %v", s, tk, err)
		} else {
			tk.Release()
		}
		pool.Close()
	}
}

// WithScale below 1 slows the clock: a minute scaled by f is longer, never
// shorter, however small f is (a float beyond int64 saturates, it does not
// wrap to a microsecond).
func TestRev21bTinyScaleSlows(t *testing.T) {
	for _, f := range []float64{0.5, 1e-6, 1e-9, 1e-12, 1e-300} {
		tab := openai.Table(openai.WithModel("m", 60, 6000), openai.WithScale(f))
		one := openai.Table(openai.WithModel("m", 60, 6000))
		for _, name := range []string{openai.RuleRequests("m"), openai.RuleQuantum(openai.RuleRequests("m")), openai.RuleQuantum(openai.RuleTokens("m"))} {
			if per, was := ruleOf(t, tab, name).Limit.Per, ruleOf(t, one, name).Limit.Per; per < was {
				t.Errorf("scale %g: %s per %v, shorter than unscaled %v", f, name, per, was)
			}
		}
	}
}

// Absurd margins and minutes do not panic or wrap: the padded quantum of a
// saturated minute with a margin as long stays a positive period.
func TestRev21bHugeMarginHugeMinute(t *testing.T) {
	for _, n := range []int64{1, 59, 61, 6000, math.MaxInt64} {
		for _, f := range []float64{1, 1e-12} {
			tab := openai.Table(openai.WithModel("m", n, n), openai.WithScale(f), openai.WithQuantumMargin(math.MaxInt64))
			l := ruleOf(t, tab, openai.RuleQuantum(openai.RuleTokens("m"))).Limit
			if l.N <= 0 || l.Per <= 0 {
				t.Errorf("n %d scale %g: tokens quantum %+v", n, f, l)
			}
		}
	}
}
