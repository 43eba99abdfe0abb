package saastest_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/saas/saastest"
)

// Quantized, 600 RPM are enforced as 10 requests per second: a burst of 11
// at one instant has its 11th refused by the requests quantum (the minute's
// bucket has 589 left), retry-after-ms the 100 ms one request takes to
// refill; 100 ms later one more is accepted. The same burst without
// Quantized is accepted whole: the option is what refuses it.
func TestOpenAIQuantizedRequests(t *testing.T) {
	for _, quantized := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			s, c, url := newOpenAI(t, saastest.OpenAIConfig{Default: saastest.OpenAILimit{RPM: 600, TPM: 1e9}, Quantized: quantized})
			for i := range 10 {
				if r := do(t, c, "POST", url, chat("m", 10, "hi")); r.status != 200 {
					t.Fatalf("quantized %v: request %d: %d %s", quantized, i, r.status, r.raw)
				}
			}
			r := do(t, c, "POST", url, chat("m", 10, "hi"))
			if !quantized {
				if r.status != 200 {
					t.Fatalf("not quantized: 11th %d %s, want 200", r.status, r.raw)
				}
				return
			}
			if r.status != 429 || r.str("error", "type") != "requests" {
				t.Fatalf("11th: %d %s, want 429 type requests", r.status, r.raw)
			}
			if got := r.num(t, "retry-after-ms"); got != 100 {
				t.Errorf("retry-after-ms = %d, want 100", got)
			}
			if got := r.num(t, "x-ratelimit-remaining-requests"); got != 590 {
				t.Errorf("remaining-requests = %d, want 590 (the minute's bucket)", got)
			}
			time.Sleep(100*time.Millisecond - time.Microsecond)
			if r := do(t, c, "POST", url, chat("m", 10, "hi")); r.status != 429 {
				t.Fatalf("just before the refill: %d, want 429", r.status)
			}
			time.Sleep(time.Microsecond)
			if r := do(t, c, "POST", url, chat("m", 10, "hi")); r.status != 200 {
				t.Fatalf("after the refill: %d %s", r.status, r.raw)
			}
			st := s.Stats()
			if st.Accepted != 11 || st.Rejected[saastest.LimitRequestsQuantum] != 2 || st.Rejected[saastest.LimitRequests] != 0 {
				t.Errorf("Stats = %+v, want 11 accepted, 2 refused by the requests quantum", st)
			}
			if v := s.Violations(); len(v) != 0 {
				t.Errorf("%d violations, first %+v", len(v), v[0])
			}
			if low := s.Lowest()[saastest.LimitRequestsQuantum]; low < -1e-6 || low > 1e-6 {
				t.Errorf("lowest requests quantum %v, want 0", low)
			}
		})
	}
}

// A limit under 60 per minute is 1 request per 60/RPM s: at 30 RPM the
// second request at once is refused, accepted 2 s later.
func TestOpenAIQuantizedUnderSixtyPerMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, url := newOpenAI(t, saastest.OpenAIConfig{Default: saastest.OpenAILimit{RPM: 30, TPM: 1e9}, Quantized: true})
		if r := do(t, c, "POST", url, chat("m", 10, "hi")); r.status != 200 {
			t.Fatalf("first: %d %s", r.status, r.raw)
		}
		r := do(t, c, "POST", url, chat("m", 10, "hi"))
		if r.status != 429 || r.num(t, "retry-after-ms") != 2000 {
			t.Fatalf("second at once: %d retry-after-ms %s, want 429 after 2000", r.status, r.header.Get("retry-after-ms"))
		}
		time.Sleep(2 * time.Second)
		if r := do(t, c, "POST", url, chat("m", 10, "hi")); r.status != 200 {
			t.Fatalf("2 s later: %d %s", r.status, r.raw)
		}
		if st := s.Stats(); st.Rejected[saastest.LimitRequestsQuantum] != 1 {
			t.Errorf("Stats = %+v", st)
		}
	})
}

// The tokens quantum of 6000 TPM holds 100 tokens: a call charged 400
// (its max_tokens) is accepted by a full quantum and empties it (never
// refused for good); the next call, of 10, is refused by the tokens quantum
// until 10 tokens have refilled (100 ms); the quanta ignore settling.
func TestOpenAIQuantizedTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, url := newOpenAI(t, saastest.OpenAIConfig{Default: saastest.OpenAILimit{RPM: 1e6, TPM: 6000}, Quantized: true})
		if r := do(t, c, "POST", url, chat("m", 400, "hi")); r.status != 200 {
			t.Fatalf("heavy call on a full quantum: %d %s", r.status, r.raw)
		}
		r := do(t, c, "POST", url, chat("m", 10, "hi"))
		if r.status != 429 || r.str("error", "type") != "tokens" || r.num(t, "retry-after-ms") != 100 {
			t.Fatalf("next: %d %s retry-after-ms %s, want 429 type tokens after 100 ms", r.status, r.raw, r.header.Get("retry-after-ms"))
		}
		time.Sleep(100 * time.Millisecond)
		if r := do(t, c, "POST", url, chat("m", 10, "hi")); r.status != 200 {
			t.Fatalf("after 10 tokens refilled: %d %s", r.status, r.raw)
		}
		if st := s.Stats(); st.Rejected[saastest.LimitTokensQuantum] != 1 || st.Accepted != 2 {
			t.Errorf("Stats = %+v", st)
		}
		if v := s.Violations(); len(v) != 0 {
			t.Errorf("%d violations, first %+v", len(v), v[0])
		}
	})
}

// Quantized, Anthropic's 60 RPM are 1 request per second (the page's
// example): a second request at once is refused by the requests quantum,
// retry-after 1 s; without Quantized it is accepted. A call whose
// max_tokens exceed the output quantum (6000 OTPM: 100) is accepted on a
// full one and empties it: the next call waits for its own output tokens to
// refill.
func TestAnthropicQuantized(t *testing.T) {
	for _, quantized := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			s, c, url := newAnthropic(t, saastest.AnthropicConfig{Default: saastest.AnthropicLimit{RPM: 60, ITPM: 1e6, OTPM: 1e6}, Quantized: quantized})
			if r := do(t, c, "POST", url, chat("claude", 10, "hi")); r.status != 200 {
				t.Fatalf("first: %d %s", r.status, r.raw)
			}
			r := do(t, c, "POST", url, chat("claude", 10, "hi"))
			if !quantized {
				if r.status != 200 {
					t.Fatalf("not quantized: second %d %s", r.status, r.raw)
				}
				return
			}
			if r.status != 429 || r.str("error", "type") != "rate_limit_error" || r.num(t, "retry-after") != 1 {
				t.Fatalf("second at once: %d %s retry-after %s", r.status, r.raw, r.header.Get("retry-after"))
			}
			time.Sleep(time.Second)
			if r := do(t, c, "POST", url, chat("claude", 10, "hi")); r.status != 200 {
				t.Fatalf("1 s later: %d %s", r.status, r.raw)
			}
			if st := s.Stats(); st.Rejected[saastest.LimitRequestsQuantum] != 1 || st.Accepted != 2 {
				t.Errorf("Stats = %+v", st)
			}
			if v := s.Violations(); len(v) != 0 {
				t.Errorf("%d violations", len(v))
			}
		})
	}
	synctest.Test(t, func(t *testing.T) {
		s, c, url := newAnthropic(t, saastest.AnthropicConfig{Default: saastest.AnthropicLimit{RPM: 1e6, ITPM: 1e6, OTPM: 6000}, Quantized: true})
		if r := do(t, c, "POST", url, chat("claude", 1000, "hi")); r.status != 200 {
			t.Fatalf("heavy call on a full output quantum: %d %s", r.status, r.raw)
		}
		if r := do(t, c, "POST", url, chat("claude", 10, "hi")); r.status != 429 {
			t.Fatalf("next at once: %d, want 429", r.status)
		}
		time.Sleep(100 * time.Millisecond) // 10 output tokens refill
		if r := do(t, c, "POST", url, chat("claude", 10, "hi")); r.status != 200 {
			t.Fatalf("after 10 tokens refilled: %d %s", r.status, r.raw)
		}
		if st := s.Stats(); st.Rejected[saastest.LimitOutputTokensQuantum] != 1 {
			t.Errorf("Stats = %+v", st)
		}
		if v := s.Violations(); len(v) != 0 {
			t.Errorf("%d violations", len(v))
		}
	})
}
