package saastest

import "time"

// The limits a quantizing server (OpenAIConfig.Quantized,
// AnthropicConfig.Quantized) refuses for, as Entry.Limit and
// Stats.Rejected report them: the per-minute limits enforced over a 60th
// of the minute.
const (
	LimitRequestsQuantum     = "requests_quantum"      // OpenAI, Anthropic
	LimitTokensQuantum       = "tokens_quantum"        // OpenAI
	LimitInputTokensQuantum  = "input_tokens_quantum"  // Anthropic
	LimitOutputTokensQuantum = "output_tokens_quantum" // Anthropic
)

// newQuantum is the quantum of n per per: a bucket of max(1, ⌊n/60⌋),
// full at at, refilled at n per per.
func newQuantum(n int64, per time.Duration, at time.Time) *bucket {
	c := float64(max(1, n/60))
	return &bucket{cap: c, rate: float64(n) / float64(per), level: c, last: at, low: c}
}

// quantumCharge is what a charge takes of the quantum b: at most its
// capacity (a heavier call needs a full quantum and empties it).
func quantumCharge(b *bucket, charge int64) int64 { return min(charge, int64(b.cap)) }
