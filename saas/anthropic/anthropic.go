// Package anthropic is the preset of the Anthropic API's rate limits
// (https://docs.anthropic.com/en/api/rate-limits) for package clientpool:
// Table returns, for each model, the three limits the API enforces, each a
// token bucket, with each request's input and output tokens estimated before
// it is sent and settled to its reply's usage after.
//
//	pool, err := clientpool.New(anthropic.Table(anthropic.WithModel("claude-sonnet-4-5", 50, 30_000, 8_000)))
//	client := &http.Client{Transport: httpclient.NewPool(pool)}
//
// Settling reads the reply's usage from its body as the caller reads it:
// read (or decode) each reply's body before closing it. A reply closed
// unread keeps its estimate and is reported as a ratesem.Unsettled event.
//
// What the page says, and how the preset follows it:
//
//   - Each model class has requests per minute (RPM), input tokens per
//     minute (ITPM) and output tokens per minute (OTPM), measured with the
//     token bucket algorithm: capacity is replenished continuously up to
//     the limit. Each is a rule here, window.NewTokenBucket over a minute.
//   - A request is charged 1 request, its estimated input tokens (the
//     prompt's characters over 4, rounded up: Estimator) and max_tokens of
//     output; the reply's usage settles both (Rule.Settle; WithoutSettling
//     keeps the estimates): input to usage.input_tokens plus
//     cache_creation_input_tokens (tokens written to the prompt cache count
//     against the input limit, those read from it do not), output to
//     usage.output_tokens, so a call that wrote 50 of its 4096 max_tokens
//     gives the rest back at once.
//   - Every reply carries anthropic-ratelimit-{requests,input-tokens,
//     output-tokens}-{limit,remaining,reset} (resets in RFC 3339, when the
//     bucket is full again): each rule learns its limit and what remains
//     from them (Rule.Learn). A limit given as 0 is learned from the first
//     reply, one call at a time until then.
//   - A 429 carries retry-after (seconds): it pauses the model's rules.
//
// Requests for a model the Table was not given count against three
// catch-all rules keyed by model (RuleRequestsOther, ...), whose limits are
// learned from the first reply.
package anthropic

import (
	"net/http"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/saas/internal/req"
	"github.com/ratesem/ratesem/window"
)

// DocsURL is the Anthropic page every rule's Source points to.
const DocsURL = "https://docs.anthropic.com/en/api/rate-limits"

// HeaderPrefix starts every rate-limit header: HeaderPrefix + "requests-limit",
// "input-tokens-remaining", "output-tokens-reset" and so on.
const HeaderPrefix = "anthropic-ratelimit-"

// The kinds of limit, as they appear in the header names and rule names.
const (
	Requests     = "requests"
	InputTokens  = "input-tokens"
	OutputTokens = "output-tokens"
)

// The catch-all rules of models not given with WithModel.
const (
	RuleRequestsOther = Requests + " other"
	RuleInputOther    = InputTokens + " other"
	RuleOutputOther   = OutputTokens + " other"
)

// Rule returns the name of one of a model's rules: kind is Requests,
// InputTokens or OutputTokens ("output-tokens claude-sonnet-4-5").
func Rule(kind, model string) string { return kind + " " + model }

// Estimator returns the input tokens, ≥ 0, a request is charged before it is
// sent: the characters (Unicode code points) of its system prompt and
// messages over 4, rounded up. Its output is charged max_tokens. A body past
// 32 MiB is charged math.MaxInt64 (the pool refuses it as too heavy).
func Estimator(body []byte) int64 {
	r := req.Parse(body)
	if r.TooLarge {
		return 1<<63 - 1
	}
	return (r.Chars + 3) / 4
}

// Option configures Table.
type Option func(*config)

type config struct {
	models    []model
	noSettle  bool
	perMinute time.Duration
}

type model struct {
	name            string
	rpm, itpm, otpm int64
}

// WithModel adds a model's limits per minute: rpm requests, itpm input
// tokens, otpm output tokens (the console's limits page); 0 means learned
// from the first reply. Negative values count as 0.
func WithModel(name string, rpm, itpm, otpm int64) Option {
	return func(c *config) {
		c.models = append(c.models, model{name, max(rpm, 0), max(itpm, 0), max(otpm, 0)})
	}
}

// WithoutSettling keeps each call's estimates instead of settling them to
// its usage (for comparison).
func WithoutSettling() Option { return func(c *config) { c.noSettle = true } }

// WithScale divides every limit's minute by f, for a test server on a
// scaled clock (saastest's Scale); f ≤ 0, NaN or infinite keeps 1.
func WithScale(f float64) Option {
	return func(c *config) { c.perMinute = req.Scaled(time.Minute, f) }
}

// Table returns the rules of the models given (WithModel) and the
// catch-all rules, set up by opts.
func Table(opts ...Option) clientpool.Table {
	c := config{perMinute: time.Minute}
	for _, o := range opts {
		o(&c)
	}
	known := map[string]bool{}
	for _, m := range c.models {
		known[m.name] = true
	}
	var t clientpool.Table
	add := func(suffix string, lim [3]int64, key func(*http.Request) (string, bool)) {
		kinds := [3]string{Requests, InputTokens, OutputTokens}
		weights := [3]func(*http.Request) int64{
			func(*http.Request) int64 { return 1 },
			func(r *http.Request) int64 { b, _, _ := req.Of(r); return Estimator(b) },
			func(r *http.Request) int64 { _, _, q := req.Of(r); return max(q.MaxTokens, 0) },
		}
		// Tokens written to the prompt cache count against the input
		// limit too; those read from it do not (DocsURL).
		usage := [3][]string{nil, {"input_tokens", "cache_creation_input_tokens"}, {"output_tokens"}}
		for i, kind := range kinds {
			name := kind + " " + suffix
			r := clientpool.Rule{
				Name:            name,
				Limit:           window.Limit{N: lim[i], Per: c.perMinute},
				Window:          func(l window.Limit) window.Policy { return window.NewTokenBucket(l, 0) },
				Key:             key,
				Weight:          weights[i],
				Learn:           req.LearnBucket(HeaderPrefix+kind+"-limit", HeaderPrefix+kind+"-remaining"),
				PauseOnThrottle: true,
				Source:          DocsURL,
			}
			if u := usage[i]; u != nil && !c.noSettle {
				r.Settle = func(_ http.Header, body []byte) (int64, bool) { return req.Usage(body, u[0], u[1:]...) }
			}
			t.Rules = append(t.Rules, r)
			t.Default = append(t.Default, clientpool.Cost{Rule: name})
		}
	}
	for _, m := range c.models {
		name := m.name
		add(name, [3]int64{m.rpm, m.itpm, m.otpm}, func(r *http.Request) (string, bool) {
			_, _, q := req.Of(r)
			return "", q.Model == name
		})
	}
	add("other", [3]int64{}, func(r *http.Request) (string, bool) {
		_, _, q := req.Of(r)
		return q.Model, !known[q.Model]
	})
	return t
}
