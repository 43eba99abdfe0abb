package openai_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

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

// The tokens quantum assumes the server's quantum is a token bucket (see
// Table). Against a server that counts a quantum in fixed windows (q
// tokens per second on its clock, at any alignment) it can put more than
// q into one window, and the requests quantum (a start window) cannot:
// this test measures both, on virtual time, to keep the Table's doc honest.
func TestRev21bQuantumAgainstFixedWindows(t *testing.T) {
	for _, lim := range [][2]int64{{600, 1e6}, {1e5, 60000}} {
		synctest.Test(t, func(t *testing.T) {
			pool, err := clientpool.New(openai.Table(openai.WithModel("m", lim[0], lim[1]), openai.WithQuantumMargin(0)))
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			start := time.Now()
			type call struct {
				at     time.Duration
				tokens int64
			}
			var calls []call
			for time.Since(start) < 5*time.Second {
				tk, err := pool.Acquire(context.Background(), mustClassify(t, pool, chatReq(t, "m", 100))...)
				if err != nil {
					t.Fatal(err)
				}
				calls = append(calls, call{time.Since(start), 100})
				tk.Release()
			}
			var worstTok, worstReq int64
			for i := range calls {
				var tok, n int64
				for j := i; j < len(calls) && calls[j].at-calls[i].at < time.Second; j++ {
					tok += calls[j].tokens
					n++
				}
				worstTok, worstReq = max(worstTok, tok), max(worstReq, n)
			}
			t.Logf("rpm %d tpm %d: worst second: %d tokens (quantum %d), %d requests (quantum %d)", lim[0], lim[1], worstTok, lim[1]/60, worstReq, lim[0]/60)
			if worstReq > lim[0]/60 {
				t.Errorf("%d requests in one second: the requests quantum (%d) must hold at any alignment", worstReq, lim[0]/60)
			}
		})
	}
}

func mustClassify(t *testing.T, p *clientpool.Pool, r *http.Request) []clientpool.Charge {
	t.Helper()
	cs, err := p.Classify(r)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
