package saastest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/saas/saastest"
)

func newAnthropic(t *testing.T, cfg saastest.AnthropicConfig) (*saastest.AnthropicServer, *http.Client, string) {
	cfg.InMemory = true
	s := saastest.NewAnthropic(cfg)
	t.Cleanup(s.Close)
	return s, s.Client(), s.URL() + "/v1/messages"
}

func resetIn(t *testing.T, r reply, k string) time.Duration {
	t.Helper()
	at, err := time.Parse(time.RFC3339, r.header.Get(k))
	if err != nil {
		t.Fatalf("%s = %q: %v", k, r.header.Get(k), err)
	}
	return at.Sub(time.Now())
}

func TestAnthropicRequestsRejectedExactlyAtTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, url := newAnthropic(t, saastest.AnthropicConfig{Default: saastest.AnthropicLimit{RPM: 2, ITPM: 1e6, OTPM: 1e6}})
		for range 2 {
			if r := do(t, c, "POST", url, chat("claude", 10, "hi")); r.status != 200 {
				t.Fatalf("%d %s", r.status, r.raw)
			}
		}
		r := do(t, c, "POST", url, chat("claude", 10, "hi"))
		if r.status != 429 || r.str("type") != "error" || r.str("error", "type") != "rate_limit_error" {
			t.Fatalf("3rd: %d %s", r.status, r.raw)
		}
		if got := r.num(t, "retry-after"); got != 30 {
			t.Errorf("retry-after = %d, want 30 (60 s / 2)", got)
		}
		if got := resetIn(t, r, "anthropic-ratelimit-requests-reset"); got != time.Minute {
			t.Errorf("requests-reset in %v, want 1m", got)
		}
		if r.num(t, "anthropic-ratelimit-requests-remaining") != 0 || r.num(t, "anthropic-ratelimit-requests-limit") != 2 {
			t.Errorf("requests remaining/limit = %s/%s", r.header.Get("anthropic-ratelimit-requests-remaining"), r.header.Get("anthropic-ratelimit-requests-limit"))
		}
		time.Sleep(30*time.Second - time.Millisecond)
		if r := do(t, c, "POST", url, chat("claude", 10, "hi")); r.status != 429 {
			t.Fatalf("before the refill: %d", r.status)
		}
		time.Sleep(time.Millisecond)
		if r := do(t, c, "POST", url, chat("claude", 10, "hi")); r.status != 200 {
			t.Fatalf("after the refill: %d %s", r.status, r.raw)
		}
		if st := s.Stats(); st.Accepted != 3 || st.Rejected[saastest.LimitRequests] != 2 {
			t.Errorf("Stats = %+v", st)
		}
		if v := s.Violations(); len(v) != 0 {
			t.Errorf("%d violations, first %+v", len(v), v[0])
		}
	})
}

func TestAnthropicOutputChargedAsMaxTokensAndSettled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, url := newAnthropic(t, saastest.AnthropicConfig{Default: saastest.AnthropicLimit{RPM: 100, ITPM: 1e6, OTPM: 1000}})
		// Settled: the output bucket keeps only usage.output_tokens.
		used := int64(0)
		for i := range 5 {
			r := do(t, c, "POST", url, chat("claude", 600, fmt.Sprint("q", i)))
			if r.status != 200 {
				t.Fatalf("call %d: %d %s (used %d)", i, r.status, r.raw, used)
			}
			out := r.field(t, "usage", "output_tokens")
			if out < 1 || out > 600 {
				t.Fatalf("output_tokens %d not in [1, 600]", out)
			}
			used += out
			if got := r.num(t, "anthropic-ratelimit-output-tokens-remaining"); got != 1000-used {
				t.Fatalf("call %d: output remaining %d, want %d", i, got, 1000-used)
			}
			if used > 400 {
				// Now max_tokens 600 does not fit: refused by output tokens.
				r := do(t, c, "POST", url, chat("claude", 600, "again"))
				if r.status != 429 || !strings.Contains(r.str("error", "message"), saastest.LimitOutputTokens) {
					t.Fatalf("over output: %d %s", r.status, r.raw)
				}
				if got, want := resetIn(t, r, "anthropic-ratelimit-output-tokens-reset"), time.Duration(used)*60*time.Millisecond; got != want {
					t.Errorf("output reset in %v, want %v", got, want)
				}
				if v := s.Violations(); len(v) != 0 {
					t.Errorf("%d violations, first %+v", len(v), v[0])
				}
				return
			}
		}
		t.Fatalf("5 calls used only %d output tokens", used)
	})
}

func TestAnthropicInputEstimatedThenSettled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const itpm = 1000
		s, c, url := newAnthropic(t, saastest.AnthropicConfig{Default: saastest.AnthropicLimit{RPM: 100, ITPM: itpm, OTPM: 1e6}})
		// system 40 chars + content 160 chars → estimate 50.
		body := func(i int) string {
			b, _ := json.Marshal(map[string]any{"model": "claude", "max_tokens": 5, "system": strings.Repeat("s", 40),
				"messages": []any{map[string]any{"role": "user", "content": []any{map[string]string{"type": "text", "text": fmt.Sprintf("%0160d", i)}}}}})
			return string(b)
		}
		used := int64(0)
		for i := range 8 {
			r := do(t, c, "POST", url, body(i))
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.raw)
			}
			in := r.field(t, "usage", "input_tokens")
			if in < 45 || in > 55 {
				t.Fatalf("input_tokens %d, want 50 ± 5", in)
			}
			used += in
			if got := r.num(t, "anthropic-ratelimit-input-tokens-remaining"); got != itpm-used {
				t.Fatalf("input remaining %d, want %d", got, itpm-used)
			}
		}
		for _, e := range s.Log() {
			if e.Tokens != 50 || e.OutputTokens != 5 || !e.Settled {
				t.Fatalf("entry %+v: want input charge 50, output 5, settled", e)
			}
		}
		// tokens-* follows the bucket with the smaller share left: input.
		r := do(t, c, "POST", url, body(99))
		if r.header.Get("anthropic-ratelimit-tokens-limit") != "1000" {
			t.Errorf("tokens-limit = %s, want the input limit 1000", r.header.Get("anthropic-ratelimit-tokens-limit"))
		}
	})
}

func TestAnthropicHostileRequestsAre400AndUncounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, url := newAnthropic(t, saastest.AnthropicConfig{})
		cases := map[string]string{
			"empty body":          "",
			"malformed JSON":      `{"model":"c","max_tokens":`,
			"max_tokens absent":   `{"model":"c","messages":[{"role":"user","content":"hi"}]}`,
			"max_tokens negative": chat("c", -1, "hi"),
			"max_tokens huge":     chat("c", 1<<40, "hi"),
			"max_tokens overflow": `{"model":"c","max_tokens":99999999999999999999,"messages":[{"role":"user","content":"hi"}]}`,
			"no messages":         `{"model":"c","max_tokens":5}`,
			"bad system":          `{"model":"c","max_tokens":5,"system":{"a":1},"messages":[{"role":"user","content":"hi"}]}`,
			"10 MB body":          chat("c", 5, strings.Repeat("x", 10<<20)),
		}
		for name, body := range cases {
			r := do(t, c, "POST", url, body)
			if r.status != 400 || r.str("error", "type") != "invalid_request_error" {
				t.Errorf("%s: %d %.200s, want 400", name, r.status, r.raw)
			}
		}
		if st := s.Stats(); st.Accepted != 0 || st.Rejected[saastest.LimitInvalid] != len(cases) {
			t.Errorf("Stats = %+v", st)
		}
		r := do(t, c, "POST", url, chat("c", 5, "hi"))
		if r.status != 200 || r.num(t, "anthropic-ratelimit-requests-remaining") != 49 {
			t.Errorf("first valid call: %d, requests remaining %s, want 49", r.status, r.header.Get("anthropic-ratelimit-requests-remaining"))
		}
	})
}
