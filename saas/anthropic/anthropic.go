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
//     output (the page: "OTPM rate limits are estimated based on max_tokens
//     at the beginning of each request and adjusted at the end of the
//     request to reflect the actual number of output tokens used"); the
//     reply's usage settles both (Rule.Settle; WithoutSettling
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
//   - The page warns that limits hold over shorter intervals too: "You may
//     hit rate limits over shorter time intervals. For instance, a rate of
//     60 requests per minute (RPM) may be enforced as 1 request per
//     second. Short bursts of requests at a high volume can surpass the
//     rate limit and result in rate limit errors." A minute's bucket alone
//     bursts a whole minute's budget at once; so each of a model's limits
//     has a quantum rule too (RuleQuantum): the same rate, a 60th of the
//     burst (see Table). WithoutQuantum leaves them out.
//
// Requests for a model the Table was not given count against three
// catch-all rules keyed by model (RuleRequestsOther, ...), whose limits are
// learned from the first reply (in Redis mode by the fleet together), or
// given with WithOtherModels.
//
// The estimates and the rules' keys read the request body through
// Request.GetBody. http.NewRequest sets it for a bytes, strings or
// bytes.Buffer body, and httpclient.NewPool sets it, on the clone it sends,
// for any other body (an io.MultiReader, a pipe from a json.Encoder, an
// io.NopCloser): the body is read once, up to the Transport's bound (32
// MiB), and the same bytes are sent. A request whose body cannot be read
// (classified by Pool.Classify or Pool.Acquire directly without GetBody,
// or GetBody or the read failed), or is past 32 MiB (more than the API
// takes: it answers a Messages request over 32 MB 413 request_too_large,
// https://docs.anthropic.com/en/api/errors), bounds no charge: it is
// charged math.MaxInt64 under
// RuleUnreadBody, so the pool refuses it at once
// (ratesem.ErrWeightTooLarge, naming that rule) instead of sending it under
// a charge below the server's. Nothing is read past 32 MiB: a body that
// never ends is refused after that much.
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

// RuleUnreadBody is the rule that refuses a request whose body cannot be
// read, or is past 32 MiB (see the package doc): such a request is charged
// math.MaxInt64 under it, against a limit of 1 per minute, and under no
// other rule it could fit.
const RuleUnreadBody = "unreadable body (no GetBody, a failed read, or over 32 MiB)"

// Rule returns the name of one of a model's rules: kind is Requests,
// InputTokens or OutputTokens ("output-tokens claude-sonnet-4-5").
func Rule(kind, model string) string { return kind + " " + model }

// RuleQuantum returns the name of the quantum rule of one of a model's
// limits (kind as for Rule): "requests quantum claude-sonnet-4-5". The
// catch-all rules' quanta are RuleQuantum(kind, "other").
func RuleQuantum(kind, model string) string { return kind + " quantum " + model }

// Estimator returns the input tokens, ≥ 0, a request is charged before it is
// sent: the characters (Unicode code points) of its system prompt and
// messages over 4, rounded up. Its output is charged max_tokens. A body past
// 32 MiB is charged math.MaxInt64 (the pool refuses it as too heavy).
func Estimator(body []byte) int64 { return parsedEstimate(req.Parse(body)) }

// parsedEstimate is Estimator of a parsed body.
func parsedEstimate(r req.Request) int64 {
	if r.Unbounded() {
		return 1<<63 - 1
	}
	return (r.Chars + 3) / 4
}

// Option configures Table.
type Option func(*config)

type config struct {
	models    []model
	other     model // the catch-all rules' limits (WithOtherModels)
	noSettle  bool
	noQuantum bool
	margin    time.Duration // the quantum rules' (WithQuantumMargin)
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

// WithOtherModels gives the catch-all rules (RuleRequestsOther,
// RuleInputOther, RuleOutputOther) their limits per minute, for each model
// the Table was not given: rpm requests, itpm input tokens, otpm output
// tokens; 0 (the default) means learned from the first reply (in Redis
// mode, redisrate.Shared, by the fleet together: one call at a time per
// model until a reply says). Negative values count as 0.
func WithOtherModels(rpm, itpm, otpm int64) Option {
	return func(c *config) { c.other = model{"", max(rpm, 0), max(itpm, 0), max(otpm, 0)} }
}

// WithoutSettling keeps each call's estimates instead of settling them to
// its usage (for comparison).
func WithoutSettling() Option { return func(c *config) { c.noSettle = true } }

// WithQuantumMargin sets the margin of the quantum rules, the spread of
// one-way latency (jitter) between this client and the API they absorb:
// while it is at most d, the server's quantum is never short of a call's
// charge (see Table). The default is 20 ms. It costs the requests quantum
// d/(Per + d) of its rate and each tokens quantum ⌈limit·d/min⌉ tokens per
// call. d is real
// time: WithScale does not scale it. d < 0 counts as 0, d above the minute
// as the minute.
func WithQuantumMargin(d time.Duration) Option { return func(c *config) { c.margin = max(d, 0) } }

// WithoutQuantum leaves out the quantum rules (RuleQuantum): each model is
// then limited by its minute's buckets alone, which burst a minute's budget
// at once — the preset before it followed the page's shorter intervals, for
// comparison.
func WithoutQuantum() Option { return func(c *config) { c.noQuantum = true } }

// WithScale divides every limit's minute by f, for a test server on a
// scaled clock (saastest's Scale); f ≤ 0, NaN or infinite keeps 1.
func WithScale(f float64) Option {
	return func(c *config) { c.perMinute = req.Scaled(time.Minute, f) }
}

// Table returns the rules of the models given (WithModel) and the
// catch-all rules, set up by opts.
//
// The quantum of n units per minute (or per scaled minute: WithScale) is
// the limit that enforces them over a 60th of it, as the page warns ("a
// rate of 60 requests per minute (RPM) may be enforced as 1 request per
// second"): q = max(1, ⌊n/60⌋) units per q/n of the minute, rounded up to
// the nanosecond, a token bucket of capacity q refilled at (at most) n per
// minute. So 50 RPM (a tier-1 limit) are 1 request per 1.2 s, 4,000 RPM 66
// per 990 ms, 8,000 OTPM 133 tokens per 997.5 ms. Rounding is on the safe
// side (q down, the period up). A limit n ≤ 0 leaves the quantum unknown
// (learned); no overflow for any n.
//
// Unless WithoutQuantum, each of a model's three rules has a quantum rule
// (RuleQuantum) enforcing the quantum of its limit, charged what the
// minute's rule is charged at the start, learned from the same limit
// header (the quantum of the count it names; not what remains, the
// minute's), and not settled (the page does not say the shorter interval
// is adjusted at the end: keeping the start's charge is the safe side).
// The server's quantum
// is taken to be a token bucket (the page's algorithm) of a 60th of the
// limit refilled at the limit per minute (saastest's
// AnthropicConfig.Quantized); the rules keep it from being short while
// latency jitter is at most the margin (WithQuantumMargin): the requests
// quantum is a start window with margin, a model's tokens quanta token
// buckets padded by the margin's refill (burst and charge; their first
// learned report empties them), the catch-all's start windows with margin,
// as in package openai (see its Table). A
// call whose tokens exceed a tokens quantum q is charged q under it: it
// waits for a full quantum and empties it, never refused for good (the
// strict reading, no call above a 60th of the ITPM or of max_tokens above
// a 60th of the OTPM, would refuse calls the API takes). So a model makes
// at most about 60 calls a minute whose max_tokens reach its OTPM/60, however
// few tokens they write: the price of not bursting. (The cap follows the
// limit given, then the last reply this process read; under the catch-all
// rules, keyed by model, a heavier call is left to the pool's learned-limit
// rule: admitted alone, charged the key's limit, a ratesem.Distrusted
// event.)
func Table(opts ...Option) clientpool.Table {
	c := config{perMinute: time.Minute, margin: req.DefaultQuantumMargin}
	for _, o := range opts {
		o(&c)
	}
	known := map[string]bool{}
	for _, m := range c.models {
		known[m.name] = true
	}
	var t clientpool.Table
	t.Rules = append(t.Rules, req.UnboundedRule(RuleUnreadBody, DocsURL))
	t.Default = append(t.Default, clientpool.Cost{Rule: RuleUnreadBody})
	add := func(suffix string, lim [3]int64, capped bool, key func(*http.Request) (string, bool)) {
		kinds := [3]string{Requests, InputTokens, OutputTokens}
		weights := [3]func(*http.Request) int64{
			func(*http.Request) int64 { return 1 },
			func(r *http.Request) int64 { _, _, q := req.Of(r); return unbounded(q, parsedEstimate(q)) },
			func(r *http.Request) int64 { _, _, q := req.Of(r); return unbounded(q, max(q.MaxTokens, 0)) },
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
		if c.noQuantum {
			return
		}
		for i, kind := range kinds {
			name := RuleQuantum(kind, suffix)
			qk := req.QuantumStarts // requests, and the catch-all's tokens (keyed by model)
			if capped && i > 0 {
				qk = req.QuantumPadded
			}
			t.Rules = append(t.Rules, req.QuantumRule(name, qk, lim[i], c.perMinute, c.margin, key, weights[i], capped && i > 0,
				HeaderPrefix+kind+"-limit", DocsURL))
			t.Default = append(t.Default, clientpool.Cost{Rule: name})
		}
	}
	for _, m := range c.models {
		name := m.name
		add(name, [3]int64{m.rpm, m.itpm, m.otpm}, true, func(r *http.Request) (string, bool) {
			_, _, q := req.Of(r)
			return "", q.Model == name
		})
	}
	add("other", [3]int64{c.other.rpm, c.other.itpm, c.other.otpm}, false, func(r *http.Request) (string, bool) {
		_, _, q := req.Of(r)
		return q.Model, !known[q.Model]
	})
	return t
}

// unbounded returns n, or math.MaxInt64 for a request whose body bounds no
// charge (RuleUnreadBody refuses it).
func unbounded(q req.Request, n int64) int64 {
	if q.Unbounded() {
		return 1<<63 - 1
	}
	return n
}
