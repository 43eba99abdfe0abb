package req

import "testing"

// Usage's overflow guard checks sum and n against 2^62 before adding them:
// two fields of 2^62 each sum to 2^63, which wraps to math.MinInt64 and is
// returned as ok.
func TestReview12UsageSumWraps(t *testing.T) {
	body := []byte(`{"usage":{"a":4611686018427387904,"b":4611686018427387904}}`)
	if n, ok := Usage(body, "a", "b"); ok && n < 0 {
		t.Errorf("Usage = %d, true: wrapped", n)
	}
}

// encoding/json matches keys case-insensitively, the API does not: a body
// with "model" and a later "MODEL" (or "Max_Tokens") is classified and
// estimated by the key the server ignores, so the call is charged under
// another model's rules, or for fewer tokens than the server charges.
func TestReview12ParseExactKeys(t *testing.T) {
	r := Parse([]byte(`{"model":"gpt-4o","max_tokens":4000,"MODEL":"other","Max_Tokens":1}`))
	if r.Model != "gpt-4o" {
		t.Errorf("Model = %q, want gpt-4o (the key the server reads)", r.Model)
	}
	if r.MaxTokens != 4000 {
		t.Errorf("MaxTokens = %d, want 4000", r.MaxTokens)
	}
}

// The same for a reply: a later "Usage" object overrides "usage", so a
// reply can settle a call that cost 5000 tokens to 0 (a full refund).
func TestReview12UsageExactKey(t *testing.T) {
	if n, ok := Usage([]byte(`{"usage":{"total_tokens":5000},"Usage":{"total_tokens":0}}`), "total_tokens"); !ok || n != 5000 {
		t.Errorf("Usage = %d, %v, want 5000 (the \"usage\" object)", n, ok)
	}
}
