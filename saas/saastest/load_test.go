package saastest_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/saas/saastest"
)

// A greedy client (no limiter) on 16 goroutines against each LLM server
// with latency, on virtual time: the servers refuse what does not fit, the
// log replays without violation, and what was admitted per minute stays
// within the limits (plus one bucket's capacity of burst and the debits).
func TestLLMServersUnderGreedyLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lat := func() time.Duration { return 20 * time.Millisecond }
		oa := saastest.NewOpenAI(saastest.OpenAIConfig{Default: saastest.OpenAILimit{RPM: 120, TPM: 6000}, Scale: 60, Latency: lat, InMemory: true, Seed: 7})
		defer oa.Close()
		an := saastest.NewAnthropic(saastest.AnthropicConfig{Default: saastest.AnthropicLimit{RPM: 120, ITPM: 4000, OTPM: 2000}, Scale: 60, Latency: lat, InMemory: true, Seed: 7})
		defer an.Close()
		start := time.Now()
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 1))
				for time.Since(start) < 5*time.Second {
					n, mt := 1+rng.IntN(800), 1+rng.IntN(200)
					body := chat("m", mt, fmt.Sprintf("%0*d", n, rng.IntN(1e6)))
					do(t, oa.Client(), "POST", oa.URL()+"/v1/chat/completions", body)
					do(t, an.Client(), "POST", an.URL()+"/v1/messages", body)
					time.Sleep(3 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		end := time.Now()
		for name, v := range map[string][]saastest.Entry{"openai": oa.Violations(), "anthropic": an.Violations()} {
			if len(v) != 0 {
				t.Errorf("%s: %d violations, first %+v", name, len(v), v[0])
			}
		}
		ost, ast := oa.Stats(), an.Stats()
		if ost.Accepted == 0 || ost.Rejected[saastest.LimitTokens] == 0 || ast.Accepted == 0 {
			t.Fatalf("stats openai %+v anthropic %+v: want both accepted and refused", ost, ast)
		}
		// 5 s at Scale 60 = 5 minutes; a full bucket adds a fifth.
		req, tok := oa.Throughput(start, end)
		if req > 120*12/10 || tok > 6000*12/10 {
			t.Errorf("openai throughput %.0f req/min, %.0f tokens/min; limits 120, 6000", req, tok)
		}
		_, in, out := an.Throughput(start, end)
		if in > 4000*12/10+400 || out > 2000*12/10+200 {
			t.Errorf("anthropic throughput %.0f in, %.0f out per min; limits 4000, 2000", in, out)
		}
		t.Logf("openai %+v: %.0f req/min %.0f tok/min, lowest %v", ost, req, tok, oa.Lowest())
		t.Logf("anthropic %+v: %.0f in/min %.0f out/min, lowest %v", ast, in, out, an.Lowest())
	})
}

func TestOpenAIScaleDividesTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c, url := newOpenAI(t, saastest.OpenAIConfig{Default: saastest.OpenAILimit{RPM: 3, TPM: 1e6}, Scale: 60})
		for range 3 {
			do(t, c, "POST", url, chat("m", 1, "x"))
		}
		r := do(t, c, "POST", url, chat("m", 1, "x"))
		// One request per 20 s / 60 = 333.33… ms, rounded up.
		if r.status != 429 || r.num(t, "retry-after-ms") != 334 || r.header.Get("x-ratelimit-reset-requests") != "1s" {
			t.Fatalf("%d retry-after-ms %s reset %s", r.status, r.header.Get("retry-after-ms"), r.header.Get("x-ratelimit-reset-requests"))
		}
		time.Sleep(334 * time.Millisecond)
		if r := do(t, c, "POST", url, chat("m", 1, "x")); r.status != 200 {
			t.Fatalf("after retry-after-ms: %d", r.status)
		}
	})
}

func TestConfigPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"openai scale": func() { saastest.NewOpenAI(saastest.OpenAIConfig{Scale: -1}) },
		"openai limit": func() {
			saastest.NewOpenAI(saastest.OpenAIConfig{Models: map[string]saastest.OpenAILimit{"m": {RPM: -1}}})
		},
		"anthropic limit":   func() { saastest.NewAnthropic(saastest.AnthropicConfig{Default: saastest.AnthropicLimit{OTPM: -1}}) },
		"github status":     func() { saastest.NewGitHub(saastest.GitHubConfig{RejectStatus: 500}) },
		"github negative":   func() { saastest.NewGitHub(saastest.GitHubConfig{PointsPerMinute: -5}) },
		"github scale inf":  func() { saastest.NewGitHub(saastest.GitHubConfig{Scale: math.Inf(1)}) },
		"anthropic NaN":     func() { saastest.NewAnthropic(saastest.AnthropicConfig{Scale: math.NaN()}) },
		"body cap negative": func() { saastest.NewGitHub(saastest.GitHubConfig{MaxBodyBytes: -1}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// A greedy crawler (no limiter) on 40 goroutines against the GitHub server
// with latency and small secondary limits, on virtual time: every
// secondary limit is hit and none is exceeded at the server.
func TestGitHubUnderGreedyLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := saastest.NewGitHub(saastest.GitHubConfig{Scale: 60, Limit: 1e6, InMemory: true,
			MaxInFlight: 20, PointsPerMinute: 50, CreatesPerMinute: 10, CreatesPerHour: 30,
			Latency: func() time.Duration { return 200 * time.Millisecond }})
		defer s.Close()
		start := time.Now()
		var wg sync.WaitGroup
		for g := range 40 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 2))
				for time.Since(start) < 5*time.Second {
					m := []string{"GET", "GET", "POST", "PUT", "PATCH", "DELETE"}[rng.IntN(6)]
					do(t, s.Client(), m, fmt.Sprintf("%s/repos/o/r/issues/%d", s.URL(), rng.IntN(50)), "", tok, "t")
					time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
				}
			})
		}
		wg.Wait()
		if v := s.Violations(); len(v) != 0 {
			t.Errorf("%d violations, first %+v", len(v), v[0])
		}
		st := s.Stats()
		for _, l := range []string{saastest.LimitConcurrency, saastest.LimitPoints, saastest.LimitCreatesMinute, saastest.LimitCreatesHour} {
			if st.Rejected[l] == 0 {
				t.Errorf("limit %s never hit: %+v", l, st)
			}
		}
		cm, ch := s.PeakCreates()
		if p, f := s.PeakPoints(), s.PeakInFlight(); p > 50 || f > 20 || cm > 10 || ch > 30 {
			t.Errorf("peaks: points %d, in flight %d, creates %d/min %d/h", p, f, cm, ch)
		}
		t.Logf("%+v; peaks: points %d, in flight %d, creates %d/min %d/h", st, s.PeakPoints(), s.PeakInFlight(), cm, ch)
	})
}
