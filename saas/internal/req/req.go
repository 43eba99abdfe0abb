// Package req reads what the presets of package saas (openai, anthropic, github)
// need from a request and its reply: the request's JSON body without
// consuming it, the characters of its prompt and its max_tokens, and a
// reply's usage numbers.
package req

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// MaxBody is the most bytes of a request body read to estimate it: 32 MiB,
// beyond the largest prompt an LLM API takes. A longer body is estimated as
// unbounded (Request.TooLarge).
const MaxBody = 32 << 20

// Body returns a copy of req's body read through req.GetBody, so that
// req.Body is left for the transport; nil and false when req has a body but
// no GetBody (a body that can only be read once), or reading fails. A body
// of more than MaxBody bytes returns its first MaxBody+1 bytes.
func Body(req *http.Request) ([]byte, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, true
	}
	if req.GetBody == nil {
		return nil, false
	}
	rc, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, MaxBody+1))
	if err != nil {
		return nil, false
	}
	return b, true
}

// Request is what an estimate needs of an LLM request body.
type Request struct {
	Model string
	// Chars is the number of characters (runes) of the prompt: every
	// message's text, the system prompt, an embedding's input.
	Chars int64
	// MaxTokens is max_tokens, or max_completion_tokens; 0 when absent,
	// negative, or not a number.
	MaxTokens int64
	// TooLarge reports a body past MaxBody: its estimate is unbounded.
	TooLarge bool
}

// Parse reads body as an OpenAI or Anthropic request (chat completions,
// messages, embeddings). It never fails: what it cannot read counts as
// absent (a malformed body gets Chars of its raw length, on the safe side).
func Parse(body []byte) Request {
	if len(body) > MaxBody {
		return Request{TooLarge: true}
	}
	var in struct {
		Model               string          `json:"model"`
		Messages            []message       `json:"messages"`
		System              json.RawMessage `json:"system"`
		Input               json.RawMessage `json:"input"`
		MaxTokens           json.Number     `json:"max_tokens"`
		MaxCompletionTokens json.Number     `json:"max_completion_tokens"`
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&in); err != nil {
		return Request{Chars: int64(utf8.RuneCount(body))}
	}
	r := Request{Model: in.Model}
	for _, m := range in.Messages {
		r.Chars += text(m.Content)
	}
	r.Chars += text(in.System) + text(in.Input)
	for _, n := range []json.Number{in.MaxTokens, in.MaxCompletionTokens} {
		if v, err := n.Int64(); err == nil && v > r.MaxTokens {
			r.MaxTokens = v
		}
	}
	return r
}

type message struct {
	Content json.RawMessage `json:"content"`
}

// text counts the runes of a content value: a string, a list of strings
// (an embedding's input), or a list of parts with "text" fields.
func text(raw json.RawMessage) int64 {
	if len(raw) == 0 {
		return 0
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return int64(utf8.RuneCountInString(s))
	}
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return 0
	}
	var n int64
	for _, p := range parts {
		var part struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(p, &s) == nil {
			n += int64(utf8.RuneCountInString(s))
		} else if json.Unmarshal(p, &part) == nil {
			n += int64(utf8.RuneCountInString(part.Text))
		}
	}
	return n
}

// Usage reads the integer fields names of a reply's "usage" object (as
// "total_tokens", or "input_tokens"), summed; false when the body is not
// JSON with a usage object holding all of them as non-negative integers.
func Usage(body []byte, names ...string) (int64, bool) {
	var v struct {
		Usage map[string]json.RawMessage `json:"usage"`
	}
	if json.Unmarshal(body, &v) != nil || v.Usage == nil {
		return 0, false
	}
	var sum int64
	for _, name := range names {
		n, err := json.Number(bytes.TrimSpace(v.Usage[name])).Int64()
		if err != nil || n < 0 || sum > 1<<62 || n > 1<<62 {
			return 0, false
		}
		sum += n
	}
	return sum, true
}

// LearnBucket returns a clientpool.Rule.Learn function that reads a token
// bucket's limit and remaining headers (OpenAI's x-ratelimit-limit-tokens,
// Anthropic's anthropic-ratelimit-output-tokens-limit, ...). A bucket's
// reset header says when it is full again, not when a window ends, so it is
// not read. A limit that is absent, 0 or not a count says nothing; a
// remaining that is absent or not a count is left out (-1).
func LearnBucket(limit, remaining string) func(http.Header, time.Time) (clientpool.Learned, bool) {
	return func(h http.Header, _ time.Time) (clientpool.Learned, bool) {
		n, ok := Count(h.Get(limit))
		if !ok || n == 0 {
			return clientpool.Learned{}, false
		}
		r, ok := Count(h.Get(remaining))
		if !ok {
			r = -1
		}
		return clientpool.Learned{Limit: window.Limit{N: n}, Remaining: r}, true
	}
}

// Count reads a header's count: 1 to 18 ASCII decimal digits, nothing
// else (no sign, space or fraction); false otherwise.
func Count(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// Scaled returns d divided by f, for a preset's WithScale: d itself when f
// is not a finite number > 0, and at least a microsecond.
func Scaled(d time.Duration, f float64) time.Duration {
	if !(f > 0) || math.IsInf(f, 0) {
		return d
	}
	return max(time.Duration(float64(d)/f), time.Microsecond).Round(time.Microsecond)
}
