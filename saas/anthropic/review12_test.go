package anthropic_test

import (
	"net/http"
	"testing"

	"github.com/ratesem/ratesem/saas/anthropic"
)

// Anthropic's input-tokens limit counts the tokens written to the prompt
// cache (usage.cache_creation_input_tokens) as well as usage.input_tokens
// (docs.anthropic.com rate limits, "cache-aware ITPM": only cache reads are
// left out, for most models). The preset settles the input rule to
// input_tokens alone, refunding the cache writes: after a call that wrote
// 5000 tokens to the cache the client counts 10 where the server counts
// 5010, and the next calls overrun the bucket.
func TestReview12SettleCountsCacheWrites(t *testing.T) {
	tab := anthropic.Table(anthropic.WithModel("m", 50, 30000, 8000))
	body := []byte(`{"usage":{"input_tokens":10,"cache_creation_input_tokens":5000,"cache_read_input_tokens":0,"output_tokens":5}}`)
	for _, r := range tab.Rules {
		if r.Name != anthropic.Rule(anthropic.InputTokens, "m") {
			continue
		}
		got, ok := r.Settle(http.Header{}, body)
		if !ok || got < 5010 {
			t.Errorf("input tokens settled to %d (%v), want ≥ 5010 (input_tokens + cache_creation_input_tokens)", got, ok)
		}
		return
	}
	t.Fatal("no input-tokens rule")
}
