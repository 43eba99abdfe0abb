package saastest_test

import (
	"strings"
	"testing"
	"testing/synctest"

	"github.com/ratesem/ratesem/saas/saastest"
)

// Issue 18: the OpenAI server charges a chat request at arrival the larger
// of max_tokens and its prompt's estimate, which counts the framing tokens
// of its messages (OpenAICookbook): 4 per message, 1 more per name, 3 for
// the reply. A prompt of many short messages costs its framing too.
func TestReview18OpenAIArrivalChargeCountsFraming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, url := newOpenAI(t, saastest.OpenAIConfig{Default: saastest.OpenAILimit{RPM: 1000, TPM: 1e6}, DisableSettle: true})
		for _, tc := range []struct {
			body string
			want int64
		}{
			// 2+3+2 = 7 chars (the name counts) → 2, + 3·4 + 1 + 3 = 18
			{`{"model":"m","max_tokens":1,"messages":[{"role":"system","content":"ab"},{"role":"user","name":"bob","content":"cd"},{"role":"user","content":""}]}`, 18},
			// the same with max_tokens 100: the larger, not the sum
			{`{"model":"m","max_tokens":100,"messages":[{"role":"system","content":"ab"},{"role":"user","name":"bob","content":"cd"},{"role":"user","content":""}]}`, 100},
			// 60 000 chars → 15 000 + 4 + 3 = 15 007 < max_tokens 16 000
			{`{"model":"m","max_tokens":16000,"messages":[{"role":"user","content":"` + strings.Repeat("a", 60000) + `"}]}`, 16000},
			// 40 one-character messages → 10 + 160 + 3
			{`{"model":"m","max_tokens":1,"messages":[` + strings.Repeat(`{"role":"user","content":"x"},`, 39) + `{"role":"user","content":"x"}]}`, 173},
		} {
			before := len(s.Log())
			if r := do(t, c, "POST", url, tc.body); r.status != 200 {
				t.Fatalf("%d %s", r.status, r.raw)
			}
			if got := s.Log()[before].Tokens; got != tc.want {
				t.Errorf("charged %d at arrival, want %d: %.80s", got, tc.want, tc.body)
			}
		}
	})
}
