package saastest

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/memnet"
)

// AnthropicDocs is the page the Anthropic server's model is read from.
const AnthropicDocs = "https://docs.anthropic.com/en/api/rate-limits"

// AnthropicLimit is the rate limit of one Anthropic model class: requests,
// input tokens and output tokens per minute. A zero field takes the
// default (50 RPM, 30000 ITPM, 8000 OTPM); a negative one makes
// NewAnthropic panic.
type AnthropicLimit struct {
	RPM, ITPM, OTPM int64
}

// AnthropicConfig configures NewAnthropic. The zero value is a server at
// real speed whose every model has 50 RPM, 30000 input and 8000 output
// tokens per minute, settling each call's tokens when it ends.
type AnthropicConfig struct {
	// Models gives the limit per model (the server's model class is the
	// model name); others get Default.
	Models map[string]AnthropicLimit
	// Default is the limit of a model not in Models (zero fields: 50 RPM,
	// 30000 ITPM, 8000 OTPM).
	Default AnthropicLimit
	// MaxTokens is the largest max_tokens accepted; above it the answer
	// is 400. 0 means 64000.
	MaxTokens int64
	// Seed seeds the output lengths (usage.output_tokens).
	Seed uint64
	// DisableSettle keeps the arrival charges (input estimate, max_tokens)
	// instead of settling them to the usage when the reply is written.
	DisableSettle bool
	// Scale divides every window (a minute lasts time.Minute/Scale). 0
	// means 1; it must be positive and finite.
	Scale float64
	// Latency, Clock, InMemory and MaxBodyBytes work as in OpenAIConfig.
	Latency      func() time.Duration
	Clock        ratesem.Clock
	InMemory     bool
	MaxBodyBytes int64
	// Quantized enforces each per-minute limit over a 60th of the minute
	// as well, as the page warns the API may ("a rate of 60 requests per
	// minute (RPM) may be enforced as 1 request per second"): see
	// NewAnthropic.
	Quantized bool
}

// AnthropicServer is an in-process server of Anthropic's Messages endpoint
// that enforces requests, input-token and output-token limits per model as
// token buckets (see NewAnthropic). Its methods are safe for concurrent
// use, also while requests are served.
type AnthropicServer struct {
	base
	cfg     AnthropicConfig
	def     AnthropicLimit
	buckets map[string][3]*bucket // requests, input, output
	j       journal
	// The quanta (Quantized), as buckets: charged at arrival, never
	// settled, journaled apart.
	quanta map[string][3]*bucket
	qj     journal
	id     int64
}

// NewAnthropic starts a server for POST /v1/messages; the caller must
// Close it. It panics on an invalid config.
//
// The model (from AnthropicDocs: "token bucket algorithm", capacity
// "continuously replenished up to your maximum limit"): each model has three
// buckets, requests (capacity RPM), input tokens (ITPM) and output tokens
// (OTPM), full at the model's first request and refilled continuously at
// their limit per minute (divided by Scale). A request is charged at
// arrival 1 request, ceil(chars/4) input tokens (chars = the characters of
// system and of every message content; text blocks count their text) and
// max_tokens output tokens (the page: "OTPM rate limits are estimated
// based on max_tokens at the beginning of each request and adjusted at the
// end of the request to reflect the actual number of output tokens used"),
// and accepted iff every bucket holds its charge
// (checked in that order); otherwise it is answered 429 with
// {"type":"error","error":{"type":"rate_limit_error",...}} and retry-after
// (whole seconds until the refusing bucket holds the charge, at least 1),
// and charges nothing.
//
// The reply's usage.input_tokens is the true input count (the estimate
// ±10%, drawn from the text) and usage.output_tokens is drawn in [1,
// max_tokens] from Seed and the request body. When the reply is written
// the input bucket is settled to input_tokens and the output bucket to
// output_tokens (refund if less, never above the capacity; debit if more,
// possibly into debt), unless DisableSettle is set.
//
// With Quantized, each bucket has a quantum (AnthropicDocs: "You may hit
// rate limits over shorter time intervals. For instance, a rate of 60
// requests per minute (RPM) may be enforced as 1 request per second"): a
// bucket of capacity max(1, ⌊limit/60⌋), full at the model's first request,
// refilled at the limit per minute (divided by Scale), so a limit under 60
// per minute is 1 per 60/limit seconds. A request the minute's buckets
// accept is refused 429 (Entry.Limit LimitRequestsQuantum, then
// LimitInputTokensQuantum, LimitOutputTokensQuantum) unless each quantum
// holds min(charge, its capacity): a charge above a quantum needs a full
// one and empties it (never refused for good). The quanta keep the
// arrival charge: settling does not touch them. Violations checks them
// too.
//
// Every judged response carries anthropic-ratelimit-{requests,
// input-tokens,output-tokens,tokens}-{limit,remaining,reset}; tokens-* is
// whichever of input and output has the smaller remaining share of its
// limit. Resets are RFC 3339 instants (UTC, rounded up to the millisecond)
// at which the bucket is full again. Malformed requests (bad JSON, no
// model, no messages, max_tokens absent, < 1 or above MaxTokens, a body
// over MaxBodyBytes) are answered 400 invalid_request_error, other methods
// 405, other paths 404, none charged.
func NewAnthropic(cfg AnthropicConfig) *AnthropicServer {
	s := &AnthropicServer{
		base:    newBase(cfg.Clock, cfg.Scale, cfg.Latency, cfg.MaxBodyBytes, "NewAnthropic"),
		cfg:     cfg,
		def:     anthropicDefault(cfg.Default, AnthropicLimit{RPM: 50, ITPM: 30000, OTPM: 8000}),
		buckets: make(map[string][3]*bucket),
		quanta:  make(map[string][3]*bucket),
	}
	for _, l := range cfg.Models {
		anthropicDefault(l, s.def)
	}
	s.cfg.Models = maps.Clone(cfg.Models) // the caller may change theirs
	if s.cfg.MaxTokens == 0 {
		s.cfg.MaxTokens = 64000
	}
	if s.cfg.MaxTokens < 0 {
		panic("saastest: NewAnthropic: negative MaxTokens")
	}
	s.net = memnet.New("anthropic.saastest.invalid", http.HandlerFunc(s.serveHTTP), cfg.InMemory)
	return s
}

func anthropicDefault(l, def AnthropicLimit) AnthropicLimit {
	if l.RPM < 0 || l.ITPM < 0 || l.OTPM < 0 {
		panic(fmt.Sprintf("saastest: NewAnthropic: negative limit %+v", l))
	}
	if l.RPM == 0 {
		l.RPM = def.RPM
	}
	if l.ITPM == 0 {
		l.ITPM = def.ITPM
	}
	if l.OTPM == 0 {
		l.OTPM = def.OTPM
	}
	return l
}

// Limit returns the limit the server applies to model.
func (s *AnthropicServer) Limit(model string) AnthropicLimit {
	if l, ok := s.cfg.Models[model]; ok {
		return anthropicDefault(l, s.def)
	}
	return s.def
}

func (s *AnthropicServer) newBuckets(model string, at time.Time) [3]*bucket {
	l := s.Limit(model)
	per := s.scaled(time.Minute)
	return [3]*bucket{newBucket(l.RPM, per, at), newBucket(l.ITPM, per, at), newBucket(l.OTPM, per, at)}
}

func (s *AnthropicServer) newQuanta(model string, at time.Time) [3]*bucket {
	l := s.Limit(model)
	per := s.scaled(time.Minute)
	return [3]*bucket{newQuantum(l.RPM, per, at), newQuantum(l.ITPM, per, at), newQuantum(l.OTPM, per, at)}
}

// Violations replays the log (charges at arrival, settlements at the
// reply, in the server's order) through fresh buckets and returns the
// accepted requests that found a bucket without their charge. It is empty
// unless the server's bookkeeping is wrong.
func (s *AnthropicServer) Violations() []Entry {
	s.mu.Lock()
	log, evs, qevs := slices.Clone(s.log), slices.Clone(s.j.events), slices.Clone(s.qj.events)
	s.mu.Unlock()
	return append(replay(log, evs, s.newBuckets), replay(log, qevs, s.newQuanta)...)
}

// Lowest returns the lowest level each bucket of any model reached after a
// charge or settlement, by limit name (LimitRequests, LimitInputTokens,
// LimitOutputTokens, and with Quantized their quanta's); negative means
// debt.
func (s *AnthropicServer) Lowest() map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := lowest(s.buckets, LimitRequests, LimitInputTokens, LimitOutputTokens)
	maps.Copy(out, lowest(s.quanta, LimitRequestsQuantum, LimitInputTokensQuantum, LimitOutputTokensQuantum))
	return out
}

// Throughput returns the requests, input tokens and output tokens per
// minute (a minute divided by Scale) of the accepted requests that arrived
// in [from, to), as the buckets counted them: the usage for a settled
// request, the arrival charges otherwise (not yet answered, or
// DisableSettle). It returns zeros if to is not after from.
func (s *AnthropicServer) Throughput(from, to time.Time) (requests, input, output float64) {
	if !to.After(from) {
		return 0, 0, 0
	}
	var r, in, out int64
	for _, e := range s.Log() {
		if e.Accepted() && !e.At.Before(from) && e.At.Before(to) {
			r++
			if e.Settled {
				in, out = in+e.TrueTokens, out+e.TrueOutputTokens
			} else {
				in, out = in+e.Tokens, out+e.OutputTokens
			}
		}
	}
	m := float64(to.Sub(from)) / float64(s.scaled(time.Minute))
	return float64(r) / m, float64(in) / m, float64(out) / m
}

func anthropicErr(typ, msg string) map[string]any {
	return map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}}
}

func (s *AnthropicServer) headers(now time.Time, model string, b [3]*bucket) map[string]string {
	l := s.Limit(model)
	h := map[string]string{}
	set := func(name string, limit int64, bk *bucket) {
		p := "anthropic-ratelimit-" + name + "-"
		h[p+"limit"] = strconv.FormatInt(limit, 10)
		h[p+"remaining"] = strconv.FormatInt(bk.remaining(), 10)
		h[p+"reset"] = now.Add(ceilTo(bk.until(int64(bk.cap)), time.Millisecond)).UTC().Format(time.RFC3339Nano)
	}
	set("requests", l.RPM, b[0])
	set("input-tokens", l.ITPM, b[1])
	set("output-tokens", l.OTPM, b[2])
	if b[2].level/b[2].cap < b[1].level/b[1].cap {
		set("tokens", l.OTPM, b[2])
	} else {
		set("tokens", l.ITPM, b[1])
	}
	return h
}

func (s *AnthropicServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	e := Entry{At: s.now(), Method: r.Method, Path: r.URL.Path, Limit: LimitInvalid}
	s.mu.Unlock()
	invalid := func(status int, msg string) {
		e.Status = status
		s.mu.Lock()
		s.record(e)
		s.mu.Unlock()
		typ := "invalid_request_error"
		if status == http.StatusNotFound {
			typ = "not_found_error"
		}
		writeJSON(w, status, nil, anthropicErr(typ, msg))
	}
	if r.URL.Path != "/v1/messages" {
		invalid(http.StatusNotFound, "unknown path "+r.URL.Path)
		return
	}
	if r.Method != http.MethodPost {
		invalid(http.StatusMethodNotAllowed, "method "+r.Method+" not allowed")
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		invalid(http.StatusBadRequest, err.Error())
		return
	}
	var in struct {
		Model     string          `json:"model"`
		MaxTokens *int64          `json:"max_tokens"`
		System    json.RawMessage `json:"system"`
		Messages  []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		invalid(http.StatusBadRequest, "malformed JSON body: "+err.Error())
		return
	}
	switch {
	case in.Model == "":
		invalid(http.StatusBadRequest, "model: field required")
		return
	case len(in.Messages) == 0:
		invalid(http.StatusBadRequest, "messages: at least one message is required")
		return
	case in.MaxTokens == nil:
		invalid(http.StatusBadRequest, "max_tokens: field required")
		return
	case *in.MaxTokens < 1 || *in.MaxTokens > s.cfg.MaxTokens:
		invalid(http.StatusBadRequest, fmt.Sprintf("max_tokens: must be in [1, %d], got %d", s.cfg.MaxTokens, *in.MaxTokens))
		return
	}
	text, err := textOf(in.System)
	if err != nil {
		invalid(http.StatusBadRequest, "system: "+err.Error())
		return
	}
	all := []byte(text)
	for _, m := range in.Messages {
		t, err := textOf(m.Content)
		if err != nil {
			invalid(http.StatusBadRequest, "messages: "+err.Error())
			return
		}
		all = append(all, t...)
	}
	est := estimate(runes(string(all)))
	maxTokens := *in.MaxTokens

	s.mu.Lock()
	now := s.now()
	e.At, e.Key, e.Requests, e.Tokens, e.OutputTokens = now, in.Model, 1, est, maxTokens
	b, ok := s.buckets[in.Model]
	if !ok {
		b = s.newBuckets(in.Model, now)
		s.buckets[in.Model] = b
	}
	charges := [3]int64{1, est, maxTokens}
	for _, bk := range b {
		bk.advance(now)
	}
	type check struct {
		b      *bucket
		charge int64
		name   string
	}
	var checks []check
	for i, name := range []string{LimitRequests, LimitInputTokens, LimitOutputTokens} {
		checks = append(checks, check{b[i], charges[i], name})
	}
	var qb [3]*bucket
	var qcharges [3]int64
	if s.cfg.Quantized {
		qb, ok = s.quanta[in.Model]
		if !ok {
			qb = s.newQuanta(in.Model, now)
			s.quanta[in.Model] = qb
		}
		for i, name := range []string{LimitRequestsQuantum, LimitInputTokensQuantum, LimitOutputTokensQuantum} {
			qb[i].advance(now)
			qcharges[i] = quantumCharge(qb[i], charges[i])
			checks = append(checks, check{qb[i], qcharges[i], name})
		}
	}
	for _, c := range checks {
		if !c.b.has(c.charge) || float64(c.charge) > c.b.cap {
			name := c.name
			e.Limit = name
			retry := c.b.until(c.charge)
			e.Status = http.StatusTooManyRequests
			s.record(e)
			h := s.headers(now, in.Model, b)
			s.mu.Unlock()
			h["retry-after"] = strconv.FormatInt(ceilSeconds(retry), 10)
			s.wait(r.Context())
			writeJSON(w, http.StatusTooManyRequests, h, anthropicErr("rate_limit_error", fmt.Sprintf(
				"This request would exceed the rate limit for your organization of %s per minute for %s. Retry after %d s.",
				name, in.Model, ceilSeconds(retry))))
			return
		}
	}
	for i, c := range charges {
		b[i].add(-float64(c))
	}
	e.Limit, e.Status = "", http.StatusOK
	idx := s.record(e)
	s.j.add(llmEvent{at: now, entry: idx, charges: charges})
	if s.cfg.Quantized {
		for i, c := range qcharges {
			qb[i].add(-float64(c))
		}
		s.qj.add(llmEvent{at: now, entry: idx, charges: qcharges})
	}
	s.id++
	id := s.id
	s.mu.Unlock()

	s.wait(r.Context())

	trueIn := trueCount(est, all)
	trueOut := outputCount(s.cfg.Seed, body, maxTokens)
	s.mu.Lock()
	done := s.now()
	for _, bk := range b {
		bk.advance(done)
	}
	le := &s.log[idx]
	le.Done, le.TrueTokens, le.TrueOutputTokens = done, trueIn, trueOut
	if !s.cfg.DisableSettle {
		b[1].add(float64(est - trueIn))
		b[2].add(float64(maxTokens - trueOut))
		le.Settled = true
		s.j.add(llmEvent{at: done, entry: idx, settle: true, charges: [3]int64{0, trueIn - est, trueOut - maxTokens}})
	}
	h := s.headers(done, in.Model, b)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, h, map[string]any{
		"id": fmt.Sprintf("msg_%d", id), "type": "message", "role": "assistant", "model": in.Model,
		"content":     []any{map[string]string{"type": "text", "text": "ok"}},
		"stop_reason": "end_turn",
		"usage":       map[string]int64{"input_tokens": trueIn, "output_tokens": trueOut},
	})
}
