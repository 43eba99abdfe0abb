package saastest_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/saas/saastest"
)

func newOpenAI(t *testing.T, cfg saastest.OpenAIConfig) (*saastest.OpenAIServer, *http.Client, string) {
	cfg.InMemory = true
	s := saastest.NewOpenAI(cfg)
	t.Cleanup(s.Close)
	return s, s.Client(), s.URL() + "/v1/chat/completions"
}

func TestOpenAIRequestsRejectedExactlyAtTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, url := newOpenAI(t, saastest.OpenAIConfig{Default: saastest.OpenAILimit{RPM: 3, TPM: 1e6}})
		for i := range 3 {
			if r := do(t, c, "POST", url, chat("m", 10, "hi")); r.status != 200 {
				t.Fatalf("request %d: status %d %s", i, r.status, r.raw)
			}
		}
		r := do(t, c, "POST", url, chat("m", 10, "hi"))
		if r.status != 429 || r.str("error", "type") != "requests" || r.str("error", "code") != "rate_limit_exceeded" {
			t.Fatalf("4th: %d %s, want 429 type requests", r.status, r.raw)
		}
		// One request refills in 60 s / 3 = 20 s.
		if got := r.num(t, "retry-after-ms"); got != 20000 {
			t.Errorf("retry-after-ms = %d, want 20000", got)
		}
		if got := r.num(t, "retry-after"); got != 20 {
			t.Errorf("retry-after = %d, want 20", got)
		}
		if got := r.header.Get("x-ratelimit-reset-requests"); got != "1m0s" {
			t.Errorf("x-ratelimit-reset-requests = %q, want 1m0s (3 requests at 20 s each)", got)
		}
		time.Sleep(20*time.Second - time.Millisecond)
		if r := do(t, c, "POST", url, chat("m", 10, "hi")); r.status != 429 {
			t.Fatalf("1 ms before the refill: %d, want 429", r.status)
		}
		time.Sleep(time.Millisecond)
		if r := do(t, c, "POST", url, chat("m", 10, "hi")); r.status != 200 {
			t.Fatalf("after the refill: %d %s", r.status, r.raw)
		}
		st := s.Stats()
		if st.Accepted != 4 || st.Rejected[saastest.LimitRequests] != 2 {
			t.Errorf("Stats = %+v, want 4 accepted, 2 rejected by requests", st)
		}
		if v := s.Violations(); len(v) != 0 {
			t.Errorf("%d violations, first %+v", len(v), v[0])
		}
	})
}

func TestOpenAITokensChargedAtArrivalAsMaxOfMaxTokensAndEstimate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Settling off: every call keeps its arrival charge.
		s, c, url := newOpenAI(t, saastest.OpenAIConfig{Default: saastest.OpenAILimit{RPM: 1000, TPM: 1000}, DisableSettle: true})
		// 40 chars, one message → estimate 10 + 7 framing < max_tokens 400:
		// charge 400.
		for i := range 2 {
			r := do(t, c, "POST", url, chat("m", 400, strings.Repeat("a", 40)))
			if r.status != 200 {
				t.Fatalf("call %d: %d %s", i, r.status, r.raw)
			}
			if got, want := r.num(t, "x-ratelimit-remaining-tokens"), int64(1000-400*(i+1)); got != want {
				t.Errorf("call %d: remaining-tokens = %d, want %d", i, got, want)
			}
		}
		// 200 tokens left: 773 chars → estimate 194 + 7 framing (4 for the
		// message, 3 for the reply) = 201 > max_tokens 1: refused by tokens.
		r := do(t, c, "POST", url, chat("m", 1, strings.Repeat("a", 773)))
		if r.status != 429 || r.str("error", "type") != "tokens" {
			t.Fatalf("over the tokens: %d %s", r.status, r.raw)
		}
		// One token refills in 60 ms; 1 is missing.
		if got := r.num(t, "retry-after-ms"); got != 60 {
			t.Errorf("retry-after-ms = %d, want 60", got)
		}
		if got := r.num(t, "retry-after"); got != 1 {
			t.Errorf("retry-after = %d, want 1 (whole seconds, rounded up)", got)
		}
		// 772 chars → estimate 193 + 7 = exactly 200: fits (rejection cost nothing).
		if r := do(t, c, "POST", url, chat("m", 1, strings.Repeat("a", 772))); r.status != 200 {
			t.Fatalf("exactly the rest: %d %s", r.status, r.raw)
		}
		// Reset: 1000 tokens used, refilling at 1000/min: full in 1m0s.
		r = do(t, c, "POST", url, chat("m", 1, "x"))
		if r.status != 429 || r.header.Get("x-ratelimit-reset-tokens") != "1m0s" {
			t.Errorf("empty bucket: %d reset-tokens %q, want 429 and 1m0s", r.status, r.header.Get("x-ratelimit-reset-tokens"))
		}
		if d, err := time.ParseDuration(r.header.Get("x-ratelimit-reset-requests")); err != nil || d != 3*60*time.Millisecond {
			t.Errorf("reset-requests = %q (%v), want 180ms (3 requests at 60 ms)", r.header.Get("x-ratelimit-reset-requests"), err)
		}
		if v := s.Violations(); len(v) != 0 {
			t.Errorf("%d violations, first %+v", len(v), v[0])
		}
	})
}

func TestOpenAISettlementRefundsAndDebits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tpm = 100000
		s, c, url := newOpenAI(t, saastest.OpenAIConfig{Default: saastest.OpenAILimit{RPM: 1000, TPM: tpm}})
		used := int64(0)
		var refund, debit bool
		for i := 0; i < 200 && !(refund && debit); i++ {
			// 132 chars → estimate 33 + 7 framing = 40 = charge with
			// max_tokens 1; the true prompt is in [36, 44] and completion
			// 1: total in [37, 45].
			content := fmt.Sprintf("%0132d", i)
			r := do(t, c, "POST", url, chat("m", 1, content))
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.raw)
			}
			p, ct, tot := r.field(t, "usage", "prompt_tokens"), r.field(t, "usage", "completion_tokens"), r.field(t, "usage", "total_tokens")
			if p < 36 || p > 44 || ct != 1 || tot != p+ct {
				t.Fatalf("usage %d+%d=%d, want prompt in [36,44], completion 1", p, ct, tot)
			}
			refund = refund || tot < 40
			debit = debit || tot > 40
			used += tot
			if got := r.num(t, "x-ratelimit-remaining-tokens"); got != tpm-used {
				t.Fatalf("after %d calls: remaining-tokens %d, want %d (settled to total_tokens)", i+1, got, tpm-used)
			}
		}
		if !refund || !debit {
			t.Fatalf("saw refund %v, debit %v; want both", refund, debit)
		}
		for _, e := range s.Log() {
			if !e.Settled || e.Tokens != 40 {
				t.Fatalf("entry %+v: want settled, charged 40", e)
			}
		}
	})
}

func TestOpenAIDebtDrivesTheBucketNegative(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, url := newOpenAI(t, saastest.OpenAIConfig{Default: saastest.OpenAILimit{RPM: 1000, TPM: 40}})
		for i := 0; ; i++ {
			// Charge 40 = all; settle beyond 40 → debt.
			r := do(t, c, "POST", url, chat("m", 1, fmt.Sprintf("%0132d", i)))
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.raw)
			}
			tot := r.field(t, "usage", "total_tokens")
			if tot > 40 {
				if got := s.Lowest()[saastest.LimitTokens]; got != float64(40-tot) {
					t.Fatalf("Lowest tokens = %v, want %d (debt)", got, 40-tot)
				}
				if r.num(t, "x-ratelimit-remaining-tokens") != 0 {
					t.Fatalf("remaining in debt = %s, want 0", r.header.Get("x-ratelimit-remaining-tokens"))
				}
				return
			}
			time.Sleep(time.Minute) // refill fully
			if i > 100 {
				t.Fatal("no debit in 100 calls")
			}
		}
	})
}

func TestOpenAIEmbeddings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, _ := newOpenAI(t, saastest.OpenAIConfig{Default: saastest.OpenAILimit{RPM: 10, TPM: 100}})
		url := s.URL() + "/v1/embeddings"
		r := do(t, c, "POST", url, `{"model":"e","input":["abcd","abcde"]}`) // ceil(4/4)+... = ceil(9/4) = 3
		if r.status != 200 || r.field(t, "usage", "prompt_tokens") != 3 || r.field(t, "usage", "total_tokens") != 3 {
			t.Fatalf("%d %s", r.status, r.raw)
		}
		if s.Log()[0].Tokens != 3 {
			t.Errorf("charged %d, want 3", s.Log()[0].Tokens)
		}
		if r := do(t, c, "POST", url, `{"model":"e","input":"`+strings.Repeat("z", 4*98)+`"}`); r.status != 429 {
			t.Fatalf("98 tokens, 97 left: %d, want 429", r.status)
		}
		if r := do(t, c, "POST", url, `{"model":"e","input":"`+strings.Repeat("z", 4*97)+`"}`); r.status != 200 {
			t.Fatalf("97 tokens, 97 left: %d %s, want 200", r.status, r.raw)
		}
	})
}

func TestOpenAIHostileRequestsAre400AndUncounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, url := newOpenAI(t, saastest.OpenAIConfig{})
		huge := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("a", 10<<20) + `"}]}`
		cases := map[string]string{
			"empty body":          "",
			"malformed JSON":      `{"model":`,
			"not an object":       `[1,2]`,
			"max_tokens absent":   `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			"max_tokens negative": chat("m", -5, "hi"),
			"max_tokens zero":     chat("m", 0, "hi"),
			"max_tokens huge":     `{"model":"m","max_tokens":1e30,"messages":[{"role":"user","content":"hi"}]}`,
			"max_tokens int64max": `{"model":"m","max_tokens":9223372036854775807,"messages":[{"role":"user","content":"hi"}]}`,
			"max_tokens string":   `{"model":"m","max_tokens":"10","messages":[{"role":"user","content":"hi"}]}`,
			"no messages":         `{"model":"m","max_tokens":5,"messages":[]}`,
			"no model":            chat("", 5, "hi"),
			"content a number":    `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":7}]}`,
			"10 MB body":          huge,
		}
		for name, body := range cases {
			r := do(t, c, "POST", url, body)
			if r.status != 400 || r.str("error", "type") != "invalid_request_error" {
				t.Errorf("%s: %d %.200s, want 400 invalid_request_error", name, r.status, r.raw)
			}
		}
		for name, body := range map[string]string{"empty input": `{"model":"e","input":""}`, "no input": `{"model":"e"}`, "input list empty": `{"model":"e","input":[]}`} {
			if r := do(t, c, "POST", s.URL()+"/v1/embeddings", body); r.status != 400 {
				t.Errorf("%s: %d, want 400", name, r.status)
			}
		}
		if r := do(t, c, "GET", url, ""); r.status != 405 {
			t.Errorf("GET: %d, want 405", r.status)
		}
		if r := do(t, c, "POST", s.URL()+"/v1/other", "{}"); r.status != 404 {
			t.Errorf("other path: %d, want 404", r.status)
		}
		st := s.Stats()
		if st.Accepted != 0 || st.Rejected[saastest.LimitInvalid] != len(cases)+5 {
			t.Errorf("Stats = %+v", st)
		}
		// Nothing was charged: the first valid call sees full buckets.
		r := do(t, c, "POST", url, chat("m", 10, "hi"))
		if r.status != 200 || r.num(t, "x-ratelimit-remaining-requests") != 499 {
			t.Errorf("first valid call: %d remaining %s, want 499", r.status, r.header.Get("x-ratelimit-remaining-requests"))
		}
	})
}

func TestOpenAIThroughput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, url := newOpenAI(t, saastest.OpenAIConfig{Scale: 60})
		start := time.Now()
		var total int64
		for i := range 6 {
			r := do(t, c, "POST", url, chat("m", 50, fmt.Sprint("prompt ", i)))
			total += r.field(t, "usage", "total_tokens")
			time.Sleep(100 * time.Millisecond)
		}
		// 6 requests in 600 ms = 36 scaled seconds: 10 per scaled minute.
		req, tok := s.Throughput(start, start.Add(600*time.Millisecond))
		if req != 10 || tok != float64(total)*60/36 {
			t.Errorf("Throughput = %v, %v, want 10, %v", req, tok, float64(total)*60/36)
		}
		if req, tok := s.Throughput(start, start); req != 0 || tok != 0 {
			t.Errorf("empty span: %v, %v", req, tok)
		}
	})
}
