// Package openai is the preset of the OpenAI API's rate limits
// (https://platform.openai.com/docs/guides/rate-limits) for package
// clientpool: Table returns, for each model, a requests-per-minute and a
// tokens-per-minute rule, with each request's tokens estimated before it is
// sent and settled to its reply's usage after.
//
//	pool, err := clientpool.New(openai.Table(openai.WithModel("gpt-4o-mini", 500, 200_000)))
//	client := &http.Client{Transport: httpclient.NewPool(pool)}
//
// Settling reads the reply's usage from its body as the caller reads it:
// read (or decode) each reply's body before closing it. A reply closed
// unread keeps its estimate and is reported as a ratesem.Unsettled event.
//
// What the guide says, and how the preset follows it:
//
//   - Limits are per model, in requests per minute (RPM) and tokens per
//     minute (TPM), whichever is hit first. Each is a rule here, a token
//     bucket of the limit refilled continuously over a minute
//     (window.NewTokenBucket): the guide's reset headers say when the
//     bucket is full again, a continuous refill.
//   - A request counts against TPM at arrival as "the maximum of
//     max_tokens and the estimated number of tokens based on the character
//     count of your request" (the guide's error-mitigation section). The
//     preset charges the Estimator's figure, by default CharEstimator: the
//     larger of max_tokens and the prompt's characters over 4, rounded up,
//     plus each message's framing tokens — what the server charges, not
//     their sum, so a call the API accepts is never refused as too heavy.
//     When the reply comes, the call settles to its usage.total_tokens
//     (Rule.Settle), the count the server's headers follow; WithoutSettling
//     charges instead what the call can cost in all, the prompt's estimate
//     plus max_tokens, and keeps it.
//   - Every reply carries x-ratelimit-{limit,remaining,reset}-{requests,tokens}
//     (resets as Go durations, "6m0s"): each rule learns its limit and what
//     remains from them (Rule.Learn), so a model configured with 0 limits
//     learns them from its first reply, one call at a time until then, and
//     another client spending the same organisation's limit shrinks this
//     pool's budget.
//   - A 429 (with retry-after-ms or retry-after) pauses the rules of the
//     model.
//   - The guide warns that limits are quantized: "Rate limits can be
//     quantized, meaning they are enforced over shorter periods of time
//     (e.g. 60,000 requests/minute may be enforced as 1,000
//     requests/second). Sending short bursts of requests or contexts
//     (prompts+max_tokens) that are too long can lead to rate limit
//     errors, even when you are technically below the rate limit per
//     minute" (quoted in full by OpenAI's forum,
//     https://community.openai.com/t/rate-limit-even-though-limit-not-breached/611241/6).
//     A minute's bucket alone bursts a whole minute's budget at once,
//     which such a server refuses; so each model has two more rules,
//     RuleQuantum(RuleRequests(model)) and RuleQuantum(RuleTokens(model)),
//     the same rates over the shorter period (see Table): a 60th of the
//     burst, kept exact under latency jitter up to a margin
//     (WithQuantumMargin). WithoutQuantum leaves them out.
//
// Requests for a model the Table was not given count against two catch-all
// rules keyed by model, RuleRequestsOther and RuleTokensOther, whose limits
// are learned from the first reply (shared by every such model: give each
// model you use WithModel), or given with WithOtherModels. In Redis mode
// the fleet learns them together (clientpool.Rule.Learn).
//
// The Estimator and the rules' keys read the request body through
// Request.GetBody. http.NewRequest sets it for a bytes, strings or
// bytes.Buffer body, and httpclient.NewPool sets it, on the clone it sends,
// for any other body (an io.MultiReader, a pipe from a json.Encoder, an
// io.NopCloser): the body is read once, up to the Transport's bound (32
// MiB), and the same bytes are sent. A request whose body cannot be read
// (classified by Pool.Classify or Pool.Acquire directly without GetBody,
// or GetBody or the read failed), or is past 32 MiB, bounds no charge: it
// is charged math.MaxInt64 under RuleUnreadBody, so the pool refuses it at
// once (ratesem.ErrWeightTooLarge, naming that rule) instead of sending it
// under a charge below the server's. Nothing is read past 32 MiB: a body
// that never ends is refused after that much.
package openai

import (
	"net/http"
	"strings"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/internal/sat"
	"github.com/ratesem/ratesem/saas/internal/req"
	"github.com/ratesem/ratesem/window"
)

// DocsURL is the OpenAI guide every rule's Source points to.
const DocsURL = "https://platform.openai.com/docs/guides/rate-limits"

// The response headers the rules learn from.
const (
	HeaderLimitRequests     = "x-ratelimit-limit-requests"
	HeaderRemainingRequests = "x-ratelimit-remaining-requests"
	HeaderResetRequests     = "x-ratelimit-reset-requests"
	HeaderLimitTokens       = "x-ratelimit-limit-tokens"
	HeaderRemainingTokens   = "x-ratelimit-remaining-tokens"
	HeaderResetTokens       = "x-ratelimit-reset-tokens"
)

// The catch-all rules of models not given with WithModel.
const (
	RuleRequestsOther = "requests other"
	RuleTokensOther   = "tokens other"
)

// RuleUnreadBody is the rule that refuses a request whose body cannot be
// read, or is past 32 MiB (see the package doc): such a request is charged
// math.MaxInt64 under it, against a limit of 1 per minute, and under no
// other rule it could fit.
const RuleUnreadBody = "unreadable body (no GetBody, a failed read, or over 32 MiB)"

// RuleRequests and RuleTokens return the names of a model's two rules, as
// they appear in Charges, Events and Pool.SetLimit: "requests gpt-4o-mini",
// "tokens gpt-4o-mini".
func RuleRequests(model string) string { return "requests " + model }

// RuleTokens returns the name of a model's tokens-per-minute rule.
func RuleTokens(model string) string { return "tokens " + model }

// RuleQuantum returns the name of the quantum rule of a per-minute rule
// (see Table), the one that enforces its rate over the shorter period:
// RuleQuantum(RuleRequests("gpt-4o-mini")) is "requests quantum
// gpt-4o-mini", RuleQuantum(RuleTokensOther) "tokens quantum other". For
// a name that is not of a per-minute rule (RuleRequests, RuleTokens,
// RuleRequestsOther, RuleTokensOther) it returns "".
func RuleQuantum(rule string) string {
	for _, kind := range [...]string{"requests ", "tokens "} {
		if model, ok := strings.CutPrefix(rule, kind); ok {
			return kind + "quantum " + model
		}
	}
	return ""
}

// Estimator returns the tokens, ≥ 0, a request is charged before it is
// sent, from the request and its JSON body (nil for a request without a
// body). It is not called for a body that cannot be read or is past 32
// MiB: RuleUnreadBody refuses that request. It must be safe for concurrent
// use.
type Estimator func(req *http.Request, body []byte) int64

// The framing tokens of a chat request on top of its text (see
// CharEstimator).
const (
	tokensPerMessage = 4
	tokensPerName    = 1
	tokensPerReply   = 3
)

// CharEstimator is the default Estimator, OpenAI's charge at arrival: the
// larger of max_tokens (or max_completion_tokens) and the prompt's
// estimate. The estimate is the characters (Unicode code points) of the
// prompt — every message's content and name, an embedding's input — over
// 4, rounded up (the guide's rule of thumb: a token is about 4 characters
// of English), plus the framing tokens of a chat request, as OpenAI's
// cookbook counts them
// (https://cookbook.openai.com/examples/how_to_count_tokens_with_tiktoken):
// 4 for each message (3 tokens of framing plus its role, 1 token), 1 more
// for each message with a name, and 3 once per chat request, priming the reply.
// A body past 32 MiB is charged math.MaxInt64 (the
// pool refuses it as too heavy). It underestimates the prompt of code and
// of most non-English text: give an Estimator with a tokenizer for those,
// or rely on settling.
func CharEstimator(_ *http.Request, body []byte) int64 { return charParsed(req.Parse(body)) }

// charParsed is CharEstimator of a parsed body.
func charParsed(r req.Request) int64 {
	if r.Unbounded() {
		return 1<<63 - 1
	}
	return max(prompt(r), r.MaxTokens)
}

// prompt is CharEstimator's estimate of r's prompt, in tokens.
func prompt(r req.Request) int64 {
	p := (r.Chars+3)/4 + r.Messages*tokensPerMessage + r.Names*tokensPerName // ≤ 2^27 each: no wrap
	if r.Messages > 0 {
		p += tokensPerReply
	}
	return p
}

// wholeCall is the estimate WithoutSettling charges with CharEstimator:
// what the call can cost in all, the prompt's estimate plus max_tokens
// (saturating), since no reply corrects it.
func wholeCall(_ *http.Request, body []byte) int64 { return wholeParsed(req.Parse(body)) }

// wholeParsed is wholeCall of a parsed body.
func wholeParsed(r req.Request) int64 {
	if r.Unbounded() {
		return 1<<63 - 1
	}
	return sat.Add(prompt(r), r.MaxTokens) // a hostile max_tokens saturates
}

// Option configures Table.
type Option func(*config)

type config struct {
	models   []model
	other    model // the catch-all rules' limits (WithOtherModels)
	estimate Estimator
	custom   bool // estimate was given (WithEstimator)
	// parsed, when set, is estimate of the parse req.Of keeps (the
	// default estimators): the body is parsed once per request.
	parsed    func(req.Request) int64
	noSettle  bool
	noQuantum bool
	margin    time.Duration // the quantum rules' (WithQuantumMargin)
	perMinute time.Duration
}

type model struct {
	name     string
	rpm, tpm int64
}

// WithModel adds a model's limits: rpm requests and tpm tokens per minute
// (the organisation's limits page); 0 means learned from the first reply.
// Negative values count as 0.
func WithModel(name string, rpm, tpm int64) Option {
	return func(c *config) { c.models = append(c.models, model{name, max(rpm, 0), max(tpm, 0)}) }
}

// WithOtherModels gives the catch-all rules (RuleRequestsOther,
// RuleTokensOther) their limits, for each model the Table was not given:
// rpm requests and tpm tokens per minute; 0 (the default) means learned
// from the first reply (in Redis mode, redisrate.Shared, by the fleet
// together: one call at a time per model until a reply says). Negative
// values count as 0.
func WithOtherModels(rpm, tpm int64) Option {
	return func(c *config) { c.other = model{"", max(rpm, 0), max(tpm, 0)} }
}

// WithEstimator replaces CharEstimator; nil keeps it.
func WithEstimator(e Estimator) Option {
	return func(c *config) {
		if e != nil {
			c.estimate, c.custom, c.parsed = e, true, nil
		}
	}
}

// WithoutSettling keeps each call's estimate instead of settling it to its
// usage: what a limiter that cannot read replies does (for comparison).
// Since no reply corrects it, the default estimate is then what the call
// can cost in all, the prompt's estimate plus max_tokens, not the arrival
// charge CharEstimator gives (an Estimator given with WithEstimator is
// kept as it is). So a call whose sum is above the tokens limit is refused
// as too heavy even if the API would take it; with settling (the default)
// no call the API takes is.
func WithoutSettling() Option { return func(c *config) { c.noSettle = true } }

// WithoutQuantum leaves out the quantum rules (RuleQuantum of each
// per-minute rule, the catch-all ones too): each model is then limited by
// its minute's buckets alone, which burst a minute's budget at once — what
// the preset did before it followed the guide's quantized limits, for an
// organisation whose limits are known not to be quantized, and for
// comparison.
func WithoutQuantum() Option { return func(c *config) { c.noQuantum = true } }

// WithQuantumMargin sets the margin of the quantum rules, the spread of
// one-way latency (jitter) between this client and the API they absorb:
// while it is at most d, the server's quantum is never short of a call's
// charge (see Table). The default is 20 ms. It costs the requests quantum
// d/(Per + d) of its rate (2% for the default and a one-second quantum) and the
// tokens quantum ⌈tpm·d/min⌉ tokens per call (67 for 200,000 TPM at 20 ms:
// 5% of a 1,400-token call; lower d for very high TPMs). d is real time:
// WithScale does not scale it. d < 0 counts as 0 (a server whose arrivals
// keep the client's spacing exactly, as a test server on virtual time), d
// above the minute as the minute.
func WithQuantumMargin(d time.Duration) Option { return func(c *config) { c.margin = max(d, 0) } }

// WithScale divides every limit's minute by f, for a test server on a
// scaled clock (saastest's Scale); f ≤ 0, NaN or infinite keeps 1.
func WithScale(f float64) Option {
	return func(c *config) { c.perMinute = req.Scaled(time.Minute, f) }
}

// Table returns the rules of the models given (WithModel), the catch-all
// rules and RuleUnreadBody, set up by opts. Every request is charged under
// its model's rules: 1 request, and its estimated tokens, per minute and
// (unless WithoutQuantum) per quantum (RuleQuantum).
//
// The quantum of n units per minute (or per scaled minute: WithScale) is
// the limit that enforces them over the shorter period the guide
// documents (60,000 requests/minute as 1,000 requests/second): q =
// max(1, ⌊n/60⌋) units per q/n of the minute, rounded up to the
// nanosecond. Its rule is a token bucket of capacity q that refills at (at
// most) n per minute: the same rate as the minute's bucket, a 60th of its
// burst. So 60,000 per minute gives 1,000 per second; 500 per minute 8 per
// 960 ms; a limit under 60 per minute (the 1 per second the guide's
// example implies would exceed it) 1 per minute/n: 30 per minute is 1 per
// 2 s, 1 per minute 1 per minute. Rounding is on the safe side (q down,
// the period up): the rule never admits faster or in larger bursts than a
// server that enforces n/60 per 60th of the minute. A limit n ≤ 0 leaves
// the quantum unknown (learned). It does not overflow for any n; the
// engine caps a learned N at 2^40 keeping the period, a slower rate.
//
// The quantum rules enforce the quanta of rpm and tpm, learned like
// the minute's rules from x-ratelimit-limit-{requests,tokens} (the quantum
// of the limit the reply names; what remains is the minute's, so they do
// not learn it), and keep each call's arrival charge (they do not settle:
// a server's refund only makes them safer). The server's quantum is taken
// to be a token bucket of q = max(1, ⌊n/60⌋) refilled at n per minute
// (saastest's OpenAIConfig.Quantized), and the rules keep it from being
// short of any call's charge while one-way latency jitter is at most the
// margin m (WithQuantumMargin): the requests quantum is a start window with
// margin (window.NewSlidingLog: at most q requests start in any window of
// Per + m), the tokens quantum of a model a token bucket of the server's
// rate whose burst and every charge carry a pad of ⌈tpm·m/min⌉ tokens (the
// pad is what jitter can take from the server's refill between two
// arrivals; a start window would lose up to half the rate when calls are
// a large part of q, as a tier-1 TPM's are). Its first learned report
// empties it, since the server's quantum holds the first call's charge
// (in Redis mode, like every learned remaining, in the background: one
// round trip). Against a server that counts its quantum in windows
// instead (q per second on its clock, fixed or sliding), the requests
// quantum holds at any alignment, but a model's tokens quantum can start
// up to about 2q tokens in one second (a full bucket, then its refill:
// 1,900 for 60,000 TPM in calls of 100); WithoutQuantum and a
// clientpool.Rule of your own are the way for such a server. The
// catch-all tokens quantum, keyed by model, is a start window with
// margin. A call estimated at more tokens than the tokens quantum q is
// charged q under it: it waits for a full quantum and empties it. That is
// the safe reading of
// the guide: the strict one (no call above TPM/60 tokens, ever) would
// refuse, as too heavy, every prompt the API takes above a 60th of the
// TPM, while the guide says only that such contexts "can lead to rate
// limit errors" when sent in bursts; a heavy call alone in a full bucket
// is no burst. (A model's cap on the charge follows the tpm given or the
// last reply this process read; a catch-all rule, keyed by model, leaves a
// heavier call to the pool's learned-limit rule: it is admitted alone,
// charged the key's limit, and reported as a ratesem.Distrusted event.)
func Table(opts ...Option) clientpool.Table {
	c := config{estimate: CharEstimator, parsed: charParsed, perMinute: time.Minute, margin: req.DefaultQuantumMargin}
	for _, o := range opts {
		o(&c)
	}
	if c.noSettle && !c.custom {
		c.estimate, c.parsed = wholeCall, wholeParsed
	}
	known := map[string]bool{}
	for _, m := range c.models {
		known[m.name] = true
	}
	var t clientpool.Table
	t.Rules = append(t.Rules, req.UnboundedRule(RuleUnreadBody, DocsURL))
	t.Default = append(t.Default, clientpool.Cost{Rule: RuleUnreadBody})
	tokens := func(r *http.Request) int64 {
		b, _, q := req.Of(r)
		if q.Unbounded() {
			return 1<<63 - 1 // RuleUnreadBody refuses it
		}
		if c.parsed != nil {
			return max(c.parsed(q), 0)
		}
		return max(c.estimate(r, b), 0)
	}
	one := func(*http.Request) int64 { return 1 }
	add := func(names [4]string, rpm, tpm int64, capped bool, key func(*http.Request) (string, bool)) {
		t.Rules = append(t.Rules,
			rule(names[0], window.Limit{N: rpm, Per: c.perMinute}, key, one,
				req.LearnBucket(HeaderLimitRequests, HeaderRemainingRequests), nil),
			rule(names[1], window.Limit{N: tpm, Per: c.perMinute}, key, tokens,
				req.LearnBucket(HeaderLimitTokens, HeaderRemainingTokens), c.settle()))
		t.Default = append(t.Default, clientpool.Cost{Rule: names[0]}, clientpool.Cost{Rule: names[1]})
		if c.noQuantum {
			return
		}
		t.Rules = append(t.Rules,
			req.QuantumRule(names[2], req.QuantumStarts, rpm, c.perMinute, c.margin, key, one, false, HeaderLimitRequests, DocsURL),
			req.QuantumRule(names[3], tokensKind(capped), tpm, c.perMinute, c.margin, key, tokens, capped, HeaderLimitTokens, DocsURL))
		t.Default = append(t.Default, clientpool.Cost{Rule: names[2]}, clientpool.Cost{Rule: names[3]})
	}
	for _, m := range c.models {
		name := m.name
		add([4]string{RuleRequests(name), RuleTokens(name), RuleQuantum(RuleRequests(name)), RuleQuantum(RuleTokens(name))},
			m.rpm, m.tpm, true, func(r *http.Request) (string, bool) {
				return "", modelOf(r) == name
			})
	}
	add([4]string{RuleRequestsOther, RuleTokensOther, RuleQuantum(RuleRequestsOther), RuleQuantum(RuleTokensOther)},
		c.other.rpm, c.other.tpm, false, func(r *http.Request) (string, bool) {
			m := modelOf(r)
			return m, !known[m]
		})
	return t
}

// tokensKind is the window of a tokens quantum (see the Table doc): padded
// for a model's own rule, a start window for the catch-all, keyed by model,
// whose first reply per model cannot be told apart.
func tokensKind(model bool) req.QuantumKind {
	if model {
		return req.QuantumPadded
	}
	return req.QuantumStarts
}

func rule(name string, lim window.Limit, key func(*http.Request) (string, bool), weight func(*http.Request) int64,
	learn func(http.Header, time.Time) (clientpool.Learned, bool), settle func(http.Header, []byte) (int64, bool)) clientpool.Rule {
	return clientpool.Rule{
		Name:   name,
		Limit:  lim,
		Window: func(l window.Limit) window.Policy { return window.NewTokenBucket(l, 0) },
		Key:    key, Weight: weight, Learn: learn, Settle: settle,
		PauseOnThrottle: true,
		Source:          DocsURL,
	}
}

// settle returns the tokens rule's Settle: usage.total_tokens of the reply.
func (c *config) settle() func(http.Header, []byte) (int64, bool) {
	if c.noSettle {
		return nil
	}
	return func(_ http.Header, body []byte) (int64, bool) { return req.Usage(body, "total_tokens") }
}

// modelOf returns the model a request names in its body ("" when it cannot
// be read).
func modelOf(r *http.Request) string {
	_, _, q := req.Of(r)
	return q.Model
}
