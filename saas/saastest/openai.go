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

// OpenAIDocs is the page the OpenAI server's model is read from.
const OpenAIDocs = "https://platform.openai.com/docs/guides/rate-limits"

// OpenAICookbook is the page the OpenAI server's framing tokens of a chat
// request are read from ("How to count tokens with tiktoken").
const OpenAICookbook = "https://cookbook.openai.com/examples/how_to_count_tokens_with_tiktoken"

// OpenAIQuantumURL is where the OpenAI guide's words on quantized limits
// (OpenAIDocs: "Rate limits can be quantized, meaning they are enforced
// over shorter periods of time (e.g. 60,000 requests/minute may be
// enforced as 1,000 requests/second)") were read, quoted in full.
const OpenAIQuantumURL = "https://community.openai.com/t/rate-limit-even-though-limit-not-breached/611241/6"

// OpenAILimit is the rate limit of one OpenAI model: requests per minute
// and tokens per minute. A zero field takes the default (500 RPM, 200000
// TPM); a negative one makes NewOpenAI panic.
type OpenAILimit struct {
	RPM, TPM int64
}

// OpenAIConfig configures NewOpenAI. The zero value is a server at real
// speed whose every model has 500 RPM and 200000 TPM, settling each call's
// tokens when it ends.
type OpenAIConfig struct {
	// Models gives the limit of each model; others get Default.
	Models map[string]OpenAILimit
	// Default is the limit of a model not in Models (zero fields: 500
	// RPM, 200000 TPM).
	Default OpenAILimit
	// MaxTokens is the largest max_tokens (or max_completion_tokens) a
	// chat request may ask for; above it the answer is 400. 0 means
	// 128000.
	MaxTokens int64
	// Seed seeds the completion lengths (usage.completion_tokens).
	Seed uint64
	// DisableSettle turns settling off: a call keeps its arrival charge
	// instead of being settled to usage.total_tokens when its reply is
	// written. Settling (the default) is the model this server assumes.
	DisableSettle bool
	// Scale divides every window: at Scale 60 a minute lasts 1 s on the
	// server's clock. 0 means 1; it must be positive and finite.
	Scale float64
	// Latency, if not nil, is called once per request after the decision
	// and the reply waits that long on the server's clock (returning
	// early if the client goes away). It must be safe for concurrent use.
	Latency func() time.Duration
	// Clock is the server's clock (arrival times, refills, latency); nil
	// means the real clock, which testing/synctest makes virtual.
	Clock ratesem.Clock
	// InMemory serves over in-memory pipes instead of TCP, so the server
	// works inside a testing/synctest bubble (create it there and reach it
	// only through Client).
	InMemory bool
	// MaxBodyBytes caps the request body read; 0 means
	// DefaultMaxBodyBytes. A longer body is answered 400, uncounted.
	MaxBodyBytes int64
	// Quantized enforces each per-minute limit over a 60th of the minute
	// as well, as the guide warns the API may (OpenAIQuantumURL: 60,000
	// requests/minute as 1,000 requests/second): see NewOpenAI.
	Quantized bool
}

// OpenAIServer is an in-process server of OpenAI's chat completions and
// embeddings endpoints that enforces per-model requests-per-minute and
// tokens-per-minute limits as token buckets (see NewOpenAI). Its methods
// are safe for concurrent use, also while requests are served.
type OpenAIServer struct {
	base
	cfg     OpenAIConfig
	def     OpenAILimit
	buckets map[string][3]*bucket // requests, tokens, nil
	j       journal
	// The quanta (Quantized): requests, tokens, nil; charged at arrival,
	// never settled, journaled apart.
	quanta map[string][3]*bucket
	qj     journal
	id     int64
}

// NewOpenAI starts a server for POST /v1/chat/completions and POST
// /v1/embeddings; the caller must Close it. It panics on an invalid config.
//
// The model (from OpenAIDocs): each model has two token buckets, requests
// (capacity RPM) and tokens (capacity TPM), full at the model's first
// request and refilled continuously at their limit per minute (divided by
// Scale). A request arriving at t is charged 1 request and, in tokens,
// max(max_tokens, estimate) for a chat completion (the guide: "Your rate
// limit is calculated as the maximum of max_tokens and the estimated
// number of tokens based on the character count of your request"), or
// the estimate of its input for embeddings. The estimate is ceil(chars/4),
// chars = the characters of every message content and name (of every
// input for embeddings), plus, for a chat completion, the framing tokens
// OpenAI's cookbook counts (OpenAICookbook): 4 per message (3 of framing
// and its role), 1 more per message with a name, and 3 priming the reply.
// Where the guide leaves open what "the character count of your request"
// covers, the server takes this, the stricter reading: a prompt of many
// short messages costs its framing too. It is accepted iff both buckets hold their
// charge; otherwise it is answered 429 with OpenAI's error body (type
// "requests" or "tokens", requests checked first), retry-after-ms (time
// until the bucket holds the charge, rounded up to the millisecond) and
// retry-after (the same in whole seconds, at least 1), and charges nothing.
// A charge above the capacity is always refused (OpenAI's "request too
// large").
//
// The reply reports usage: prompt_tokens is the server's true count, the
// estimate plus a jitter of at most ±10% drawn from the content
// (the same text always counts the same); completion_tokens is drawn in
// [1, max_tokens] from Seed and the request body (embeddings: 0). When the
// reply is written (after Latency) the tokens bucket is settled: the
// arrival charge is replaced by total_tokens, a refund if less (never above
// the capacity), a debit if more (the level may go below zero: debt).
// DisableSettle keeps the arrival charge instead.
//
// With Quantized, each model has two more token buckets, its quanta:
// capacity max(1, ⌊RPM/60⌋) requests and max(1, ⌊TPM/60⌋) tokens, full at
// the model's first request and refilled continuously at RPM and TPM per
// minute (divided by Scale): the same rates, a 60th of the burst, so
// 60,000 requests per minute are 1,000 per second, and a limit under 60
// per minute is 1 request per 60/RPM seconds. A request that passed the
// minute's buckets is refused 429 (Entry.Limit LimitRequestsQuantum, then
// LimitTokensQuantum; the body's type "requests" or "tokens", as the real
// API's) unless the requests quantum holds 1 and the tokens quantum holds
// min(charge, its capacity): a charge above the tokens quantum needs a
// full one and empties it (the guide warns that contexts too long "can
// lead to rate limit errors" when sent in bursts; this server does not
// refuse for good a request the minute's bucket takes). The quanta keep
// the arrival charge: settling does not touch them. Violations checks
// them too.
//
// Every judged response carries x-ratelimit-{limit,remaining,reset}-
// {requests,tokens}; the resets are Go durations rounded up to the
// millisecond ("1s", "6m0s", "12ms"): the time until the bucket is full.
// Malformed requests (bad JSON, no model or messages, max_tokens absent,
// < 1 or above MaxTokens, a body over MaxBodyBytes, empty input) are
// answered 400 with type "invalid_request_error", other methods 405,
// other paths 404; none is charged.
func NewOpenAI(cfg OpenAIConfig) *OpenAIServer {
	s := &OpenAIServer{
		base:    newBase(cfg.Clock, cfg.Scale, cfg.Latency, cfg.MaxBodyBytes, "NewOpenAI"),
		cfg:     cfg,
		def:     openaiDefault(cfg.Default, OpenAILimit{RPM: 500, TPM: 200000}),
		buckets: make(map[string][3]*bucket),
		quanta:  make(map[string][3]*bucket),
	}
	for m, l := range cfg.Models {
		if l.RPM < 0 || l.TPM < 0 {
			panic(fmt.Sprintf("saastest: NewOpenAI: model %q: negative limit %+v", m, l))
		}
	}
	s.cfg.Models = maps.Clone(cfg.Models) // the caller may change theirs
	if s.cfg.MaxTokens == 0 {
		s.cfg.MaxTokens = 128000
	}
	if s.cfg.MaxTokens < 0 {
		panic("saastest: NewOpenAI: negative MaxTokens")
	}
	s.net = memnet.New("openai.saastest.invalid", http.HandlerFunc(s.serveHTTP), cfg.InMemory)
	return s
}

func openaiDefault(l, def OpenAILimit) OpenAILimit {
	if l.RPM < 0 || l.TPM < 0 {
		panic(fmt.Sprintf("saastest: NewOpenAI: negative default limit %+v", l))
	}
	if l.RPM == 0 {
		l.RPM = def.RPM
	}
	if l.TPM == 0 {
		l.TPM = def.TPM
	}
	return l
}

// Limit returns the limit the server applies to model.
func (s *OpenAIServer) Limit(model string) OpenAILimit {
	if l, ok := s.cfg.Models[model]; ok {
		return openaiDefault(l, s.def)
	}
	return s.def
}

func (s *OpenAIServer) bucketsOf(model string, at time.Time) [3]*bucket {
	b, ok := s.buckets[model]
	if !ok {
		b = s.newBuckets(model, at)
		s.buckets[model] = b
	}
	return b
}

func (s *OpenAIServer) newBuckets(model string, at time.Time) [3]*bucket {
	l := s.Limit(model)
	per := s.scaled(time.Minute)
	return [3]*bucket{newBucket(l.RPM, per, at), newBucket(l.TPM, per, at), nil}
}

// quantaOf returns model's quanta, made full at at on first use.
func (s *OpenAIServer) quantaOf(model string, at time.Time) [3]*bucket {
	b, ok := s.quanta[model]
	if !ok {
		b = s.newQuanta(model, at)
		s.quanta[model] = b
	}
	return b
}

func (s *OpenAIServer) newQuanta(model string, at time.Time) [3]*bucket {
	l := s.Limit(model)
	per := s.scaled(time.Minute)
	return [3]*bucket{newQuantum(l.RPM, per, at), newQuantum(l.TPM, per, at), nil}
}

// Violations replays the log (charges at arrival, settlements at the
// reply, in the server's order) through fresh buckets and returns the
// accepted requests that found a bucket without their charge. It is empty
// unless the server's bookkeeping is wrong.
func (s *OpenAIServer) Violations() []Entry {
	s.mu.Lock()
	log, evs, qevs := slices.Clone(s.log), slices.Clone(s.j.events), slices.Clone(s.qj.events)
	s.mu.Unlock()
	return append(replay(log, evs, s.newBuckets), replay(log, qevs, s.newQuanta)...)
}

// Lowest returns the lowest level each bucket of any model reached after a
// charge or settlement, by limit name (LimitRequests, LimitTokens, and
// with Quantized LimitRequestsQuantum, LimitTokensQuantum); negative means
// debt. Models not yet used are absent from the minimum.
func (s *OpenAIServer) Lowest() map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := lowest(s.buckets, LimitRequests, LimitTokens, "")
	maps.Copy(out, lowest(s.quanta, LimitRequestsQuantum, LimitTokensQuantum, ""))
	return out
}

// Throughput returns the requests and tokens per minute (a minute divided
// by Scale) of the accepted requests that arrived in [from, to), as the
// tokens bucket counted them: usage.total_tokens for a settled request,
// the arrival charge otherwise (not yet answered, or DisableSettle). It
// returns zeros if to is not after from.
func (s *OpenAIServer) Throughput(from, to time.Time) (requests, tokens float64) {
	if !to.After(from) {
		return 0, 0
	}
	var r, t int64
	for _, e := range s.Log() {
		if e.Accepted() && !e.At.Before(from) && e.At.Before(to) {
			r++
			if e.Settled {
				t += e.TrueTokens
			} else {
				t += e.Tokens
			}
		}
	}
	minutes := float64(to.Sub(from)) / float64(s.scaled(time.Minute))
	return float64(r) / minutes, float64(t) / minutes
}

type openaiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func openaiErr(msg, typ, code string) openaiError {
	var e openaiError
	e.Error.Message, e.Error.Type = msg, typ
	if code != "" {
		e.Error.Code = &code
	}
	return e
}

// openaiReq is a request after validation.
type openaiReq struct {
	chat      bool
	model     string
	text      []byte // all content, for the true count
	chars     int64
	framing   int64 // the framing tokens of a chat request (OpenAICookbook)
	maxTokens int64
	inputs    int
}

func (s *OpenAIServer) parse(path string, body []byte) (openaiReq, string) {
	var q openaiReq
	if path == "/v1/chat/completions" {
		var in struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
				Name    *string         `json:"name"`
			} `json:"messages"`
			MaxTokens           *int64 `json:"max_tokens"`
			MaxCompletionTokens *int64 `json:"max_completion_tokens"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return q, "malformed JSON body: " + err.Error()
		}
		if len(in.Messages) == 0 {
			return q, "'messages' must be a non-empty array"
		}
		for _, m := range in.Messages {
			t, err := textOf(m.Content)
			if err != nil {
				return q, err.Error()
			}
			q.text = append(q.text, t...)
			q.chars += runes(t)
			q.framing += 4 // 3 of framing, 1 for the role
			if m.Name != nil {
				q.text = append(q.text, *m.Name...)
				q.chars += runes(*m.Name)
				q.framing++
			}
		}
		q.framing += 3 // the reply's priming
		mt := in.MaxCompletionTokens
		if mt == nil {
			mt = in.MaxTokens
		}
		if mt == nil {
			return q, "max_tokens (or max_completion_tokens) is required by this server"
		}
		if *mt < 1 || *mt > s.cfg.MaxTokens {
			return q, fmt.Sprintf("max_tokens must be in [1, %d], got %d", s.cfg.MaxTokens, *mt)
		}
		q.chat, q.model, q.maxTokens = true, in.Model, *mt
	} else {
		var in struct {
			Model string          `json:"model"`
			Input json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return q, "malformed JSON body: " + err.Error()
		}
		var one string
		var many []string
		if json.Unmarshal(in.Input, &one) == nil {
			many = []string{one}
		} else if err := json.Unmarshal(in.Input, &many); err != nil || len(many) == 0 {
			return q, "'input' must be a string or a non-empty array of strings"
		}
		for _, t := range many {
			if t == "" {
				return q, "'input' must not contain an empty string"
			}
			q.text = append(q.text, t...)
			q.chars += runes(t)
		}
		q.model, q.inputs = in.Model, len(many)
	}
	if q.model == "" {
		return q, "'model' is required"
	}
	return q, ""
}

func (s *OpenAIServer) headers(model string, b [3]*bucket) map[string]string {
	l := s.Limit(model)
	reset := func(bk *bucket) string { return ceilTo(bk.until(int64(bk.cap)), time.Millisecond).String() }
	return map[string]string{
		"x-ratelimit-limit-requests":     strconv.FormatInt(l.RPM, 10),
		"x-ratelimit-limit-tokens":       strconv.FormatInt(l.TPM, 10),
		"x-ratelimit-remaining-requests": strconv.FormatInt(b[0].remaining(), 10),
		"x-ratelimit-remaining-tokens":   strconv.FormatInt(b[1].remaining(), 10),
		"x-ratelimit-reset-requests":     reset(b[0]),
		"x-ratelimit-reset-tokens":       reset(b[1]),
	}
}

func (s *OpenAIServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	at := s.now()
	s.mu.Unlock()
	e := Entry{At: at, Method: r.Method, Path: r.URL.Path, Limit: LimitInvalid}
	invalid := func(status int, msg string) {
		e.Status = status
		s.mu.Lock()
		s.record(e)
		s.mu.Unlock()
		writeJSON(w, status, nil, openaiErr(msg, "invalid_request_error", ""))
	}
	if r.URL.Path != "/v1/chat/completions" && r.URL.Path != "/v1/embeddings" {
		invalid(http.StatusNotFound, "unknown URL "+r.URL.Path)
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
	q, msg := s.parse(r.URL.Path, body)
	if msg != "" {
		invalid(http.StatusBadRequest, msg)
		return
	}
	est := estimate(q.chars) + q.framing
	charge := est
	if q.chat {
		charge = max(q.maxTokens, est)
	}

	s.mu.Lock()
	now := s.now()
	e.At, e.Key, e.Requests, e.Tokens = now, q.model, 1, charge
	b := s.bucketsOf(q.model, now)
	b[0].advance(now)
	b[1].advance(now)
	var qb [3]*bucket
	var qcharge int64
	if s.cfg.Quantized {
		qb = s.quantaOf(q.model, now)
		qb[0].advance(now)
		qb[1].advance(now)
		qcharge = quantumCharge(qb[1], charge)
	}
	var limit string
	var retry time.Duration
	switch {
	case !b[0].has(1):
		limit, retry = LimitRequests, b[0].until(1)
	case !b[1].has(charge) || float64(charge) > b[1].cap:
		limit, retry = LimitTokens, b[1].until(charge)
	case s.cfg.Quantized && !qb[0].has(1):
		limit, retry = LimitRequestsQuantum, qb[0].until(1)
	case s.cfg.Quantized && !qb[1].has(qcharge):
		limit, retry = LimitTokensQuantum, qb[1].until(qcharge)
	}
	if limit != "" {
		e.Limit, e.Status = limit, http.StatusTooManyRequests
		s.record(e)
		h := s.headers(q.model, b)
		s.mu.Unlock()
		retry = ceilTo(retry, time.Millisecond)
		h["retry-after-ms"] = strconv.FormatInt(int64(retry/time.Millisecond), 10)
		h["retry-after"] = strconv.FormatInt(ceilSeconds(retry), 10)
		l := s.Limit(q.model)
		n, name, asked, typ := l.RPM, "requests per min (RPM)", int64(1), LimitRequests
		if limit == LimitTokens || limit == LimitTokensQuantum {
			n, name, asked, typ = l.TPM, "tokens per min (TPM)", charge, LimitTokens
		}
		s.wait(r.Context())
		writeJSON(w, http.StatusTooManyRequests, h, openaiErr(fmt.Sprintf(
			"Rate limit reached for %s on %s: Limit %d, Requested %d. Please try again in %v.",
			q.model, name, n, asked, retry),
			typ, "rate_limit_exceeded"))
		return
	}
	b[0].add(-1)
	b[1].add(-float64(charge))
	e.Limit, e.Status = "", http.StatusOK
	idx := s.record(e)
	s.j.add(llmEvent{at: now, entry: idx, charges: [3]int64{1, charge, 0}})
	if s.cfg.Quantized {
		qb[0].add(-1)
		qb[1].add(-float64(qcharge))
		s.qj.add(llmEvent{at: now, entry: idx, charges: [3]int64{1, qcharge, 0}})
	}
	s.id++
	id := s.id
	s.mu.Unlock()

	s.wait(r.Context())

	prompt := trueCount(est, q.text)
	var completion int64
	if q.chat {
		completion = outputCount(s.cfg.Seed, body, q.maxTokens)
	}
	total := prompt + completion
	s.mu.Lock()
	done := s.now()
	b[0].advance(done)
	b[1].advance(done)
	le := &s.log[idx]
	le.Done, le.TrueTokens = done, total
	if !s.cfg.DisableSettle {
		b[1].add(float64(charge - total))
		le.Settled = true
		s.j.add(llmEvent{at: done, entry: idx, settle: true, charges: [3]int64{0, total - charge, 0}})
	}
	h := s.headers(q.model, b)
	s.mu.Unlock()

	usage := map[string]int64{"prompt_tokens": prompt, "total_tokens": total}
	if q.chat {
		usage["completion_tokens"] = completion
		writeJSON(w, http.StatusOK, h, map[string]any{
			"id": fmt.Sprintf("chatcmpl-%d", id), "object": "chat.completion", "created": now.Unix(), "model": q.model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "length",
				"message": map[string]string{"role": "assistant", "content": "ok"}}},
			"usage": usage,
		})
		return
	}
	data := make([]any, q.inputs)
	for i := range data {
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": []float64{0.1, -0.2, 0.3}}
	}
	writeJSON(w, http.StatusOK, h, map[string]any{"object": "list", "data": data, "model": q.model, "usage": usage})
}
