package anthropic_test

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/saas/anthropic"
	"github.com/ratesem/ratesem/saas/internal/req"
	"github.com/ratesem/ratesem/saas/saastest"
	"github.com/ratesem/ratesem/window"
)

// Against a server that quantizes (saastest.AnthropicConfig.Quantized),
// on virtual time: the batch of TestBatchAgainstServer through the preset,
// limits learned, has no request rejected and still uses at least 90% of
// the output limit; through the preset without its quantum rules
// (WithoutQuantum, the preset before issue 21) the server rejects some.
func TestBatchAgainstQuantizedServer(t *testing.T) {
	limits := saastest.AnthropicLimit{RPM: 1000, ITPM: 40000, OTPM: 8000}
	for _, noQuantum := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			opts := []anthropic.Option{anthropic.WithModel(model, 0, 0, 0)}
			if noQuantum {
				opts = append(opts, anthropic.WithoutQuantum())
			}
			srv, pool := fanOut(t, limits, true, opts, jsonBody)
			defer srv.Close()
			st := srv.Stats()
			if noQuantum {
				t.Logf("without quantum: rejected %v", st.Rejected)
				if len(st.Rejected) == 0 {
					t.Fatal("without the quantum rules: no request rejected by the quantizing server")
				}
				return
			}
			if len(st.Rejected) != 0 {
				t.Fatalf("rejected %v", st.Rejected)
			}
			if v := srv.Violations(); len(v) != 0 {
				t.Fatalf("%d violations", len(v))
			}
			// The quanta learned are those of the limits given (with the
			// margin's pad on the tokens quanta).
			given := anthropic.Table(anthropic.WithModel(model, limits.RPM, limits.ITPM, limits.OTPM))
			for _, kind := range []string{anthropic.Requests, anthropic.InputTokens, anthropic.OutputTokens} {
				name := anthropic.RuleQuantum(kind, model)
				for _, r := range given.Rules {
					if l, _ := pool.Limit(name); r.Name == name && l != r.Limit {
						t.Errorf("%s learned %v, want %v", name, l, r.Limit)
					}
				}
			}
			log := srv.Log()
			first, last := log[0].At, log[len(log)-1].At
			span := last.Sub(first)
			_, _, o := srv.Throughput(first.Add(span/5), last.Add(-span/5))
			t.Logf("%.1f%% of OTPM over %v", 100*o/float64(limits.OTPM), span)
			if o < 0.9*float64(limits.OTPM) {
				t.Errorf("output limit used %.1f%%, want ≥ 90%%", 100*o/float64(limits.OTPM))
			}
		})
	}
}

// The rule table: each model's three limits and the catch-all's have their
// quantum rules, token buckets of the quantum of the limit (req.Quantum,
// scaled with WithScale; hostile limits give valid rules), learned, not
// settled;
// WithoutQuantum leaves them out. The quanta's figures follow the page's
// example (60 RPM as 1 per second) and its tiers.
func TestQuantumRules(t *testing.T) {
	for n, want := range map[int64]window.Limit{
		60: {N: 1, Per: time.Second}, 50: {N: 1, Per: 1200 * time.Millisecond}, 4000: {N: 66, Per: 990 * time.Millisecond},
		8000: {N: 133, Per: 997_500_000}, 1: {N: 1, Per: time.Minute}, 0: {}, -1: {},
		math.MaxInt64: {N: math.MaxInt64 / 60, Per: time.Second},
	} {
		if got := req.Quantum(n, time.Minute); got != want {
			t.Errorf("Quantum(%d) = %+v, want %+v", n, got, want)
		}
	}
	tab := anthropic.Table(anthropic.WithModel("m", 60, 30000, 8000), anthropic.WithModel("h", math.MaxInt64, 1, 0), anthropic.WithScale(60),
		anthropic.WithQuantumMargin(0)) // the pad: below

	byName := map[string]clientpool.Rule{}
	for _, r := range tab.Rules {
		byName[r.Name] = r
	}
	sec := time.Second // the scaled minute
	for name, want := range map[string]window.Limit{
		anthropic.RuleQuantum(anthropic.Requests, "m"):         req.Quantum(60, sec),
		anthropic.RuleQuantum(anthropic.InputTokens, "m"):      req.Quantum(30000, sec),
		anthropic.RuleQuantum(anthropic.OutputTokens, "m"):     req.Quantum(8000, sec),
		anthropic.RuleQuantum(anthropic.Requests, "h"):         req.Quantum(math.MaxInt64, sec),
		anthropic.RuleQuantum(anthropic.InputTokens, "h"):      {N: 1, Per: sec},
		anthropic.RuleQuantum(anthropic.OutputTokens, "h"):     {Per: sec}, // learned
		anthropic.RuleQuantum(anthropic.Requests, "other"):     {Per: sec},
		anthropic.RuleQuantum(anthropic.OutputTokens, "other"): {Per: sec},
	} {
		r, ok := byName[name]
		if !ok || r.Limit != want || r.Learn == nil || r.Settle != nil || r.Source != anthropic.DocsURL {
			t.Errorf("%s: present %v, Limit %+v (want %+v), Learn %v, Settle %v", name, ok, r.Limit, want, r.Learn != nil, r.Settle != nil)
		}
	}
	if _, err := clientpool.New(tab); err != nil {
		t.Fatal(err)
	}
	// Learned from the limit header, not what remains.
	h := http.Header{}
	h.Set(anthropic.HeaderPrefix+"output-tokens-limit", "8000")
	h.Set(anthropic.HeaderPrefix+"output-tokens-remaining", "10")
	in, ok := byName[anthropic.RuleQuantum(anthropic.OutputTokens, "h")].Learn(h, time.Now())
	if !ok || in.Limit != req.Quantum(8000, sec) || in.Remaining != 0 {
		t.Errorf("learned %+v %v; want the quantum, and (its first report) emptied", in, ok)
	}
	if in, _ := byName[anthropic.RuleQuantum(anthropic.OutputTokens, "h")].Learn(h, time.Now()); in.Remaining != -1 {
		t.Errorf("second report %+v: want nothing learned of what remains", in)
	}
	// A max_tokens above the output quantum is charged the quantum under it.
	r, _ := http.NewRequest("POST", "http://api.test/v1/messages",
		strings.NewReader(`{"model":"m","max_tokens":4096,"messages":[{"role":"user","content":"hi"}]}`))
	if got := byName[anthropic.RuleQuantum(anthropic.OutputTokens, "m")].Weight(r); got != 133 {
		t.Errorf("output quantum weight %d, want 133", got)
	}
	// With the default margin (20 ms), at real speed: 8000 OTPM pads the
	// output quantum by ⌈8000 × 20 ms / 1 min⌉ = 3 tokens, burst and charge.
	padded := anthropic.Table(anthropic.WithModel("m", 60, 30000, 8000))
	for _, pr := range padded.Rules {
		if pr.Name == anthropic.RuleQuantum(anthropic.OutputTokens, "m") {
			if pr.Limit != (window.Limit{N: 136, Per: 1020 * time.Millisecond}) {
				t.Errorf("padded output quantum %+v, want 136 per 1.02 s", pr.Limit)
			}
			r, _ := http.NewRequest("POST", "http://api.test/v1/messages",
				strings.NewReader(`{"model":"m","max_tokens":4096,"messages":[{"role":"user","content":"hi"}]}`))
			if got := pr.Weight(r); got != 136 {
				t.Errorf("padded output quantum weight %d, want 136", got)
			}
		}
		if pr.Name == anthropic.RuleQuantum(anthropic.Requests, "m") && pr.Limit != (window.Limit{N: 1, Per: time.Second}) {
			t.Errorf("requests quantum %+v: a start window needs no pad", pr.Limit)
		}
	}
	without := anthropic.Table(anthropic.WithModel("m", 60, 30000, 8000), anthropic.WithoutQuantum())
	for _, r := range without.Rules {
		if strings.Contains(r.Name, " quantum ") {
			t.Errorf("WithoutQuantum: rule %q", r.Name)
		}
	}
}
