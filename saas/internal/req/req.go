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
	"runtime"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
	"weak"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/internal/peek"
	"github.com/ratesem/ratesem/window"
)

// MaxBody is the most bytes of a request body read to estimate it: 32 MiB,
// beyond the largest prompt an LLM API takes, and as much as
// httpclient.Transport buffers of a body without GetBody. A longer body is
// estimated as unbounded (Request.TooLarge).
const MaxBody = peek.MaxReplay

// Body returns a copy of req's body read through req.GetBody, so that
// req.Body is left for the transport; nil and false when req has a body but
// no GetBody (a body that can only be read once: httpclient.Transport gives
// every request it classifies a GetBody, see peek.MaxReplay), or
// GetBody or reading fails. A body of more than MaxBody bytes returns its
// first MaxBody+1 bytes.
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
	lr := io.LimitReader(rc, MaxBody+1)
	var b []byte
	n := req.ContentLength
	if l, ok := rc.(interface{ Len() int }); ok && n <= 0 {
		n = int64(l.Len()) // httpclient's replayed body of unknown length
	}
	if n > 0 && n <= MaxBody {
		// One buffer of the size announced (+1 to read io.EOF into), not
		// io.ReadAll's growing ones: 30 MiB for a 30 MiB body, not 72.
		b = make([]byte, 0, n+1)
		for {
			var m int
			m, err = lr.Read(b[len(b):cap(b)])
			if m < 0 || m > cap(b)-len(b) {
				return nil, false // a broken reader
			}
			b = b[:len(b)+m]
			if err != nil {
				break
			}
			if len(b) == cap(b) {
				b = append(b, 0)[:len(b)] // longer than announced
			}
		}
		if err == io.EOF {
			err = nil
		}
	} else {
		b, err = io.ReadAll(lr)
	}
	if err != nil {
		return nil, false
	}
	return b, true
}

// parsed is what Of keeps of one request.
type parsed struct {
	body []byte
	ok   bool
	req  Request
}

// cache maps a request (weakly: the entry goes when the request is
// collected) to its body and parse, so that the several rules classifying
// one request read and parse its body once.
var cache sync.Map // weak.Pointer[http.Request] → *parsed

// Of returns req's body (as Body) and its parse (Parse; Request{Unread:
// true} when Body returns false), reading and parsing the body once per
// request however many rules ask: the result is kept while req lives (a
// request's body does not change while it is classified). It is safe for
// concurrent use.
func Of(r *http.Request) ([]byte, bool, Request) {
	wp := weak.Make(r)
	if v, ok := cache.Load(wp); ok {
		p := v.(*parsed)
		return p.body, p.ok, p.req
	}
	b, ok := Body(r)
	p := &parsed{body: b, ok: ok, req: Request{Unread: true}}
	if ok {
		p.req = Parse(b)
	}
	if _, loaded := cache.LoadOrStore(wp, p); !loaded {
		runtime.AddCleanup(r, func(wp weak.Pointer[http.Request]) { cache.Delete(wp) }, wp)
	}
	return p.body, p.ok, p.req
}

// UnboundedRule returns the rule a preset charges only a request whose
// body bounds no charge (Request.Unbounded), math.MaxInt64 units against a
// fixed limit of 1 per minute: the pool refuses such a request at once
// with an error matching ratesem.ErrWeightTooLarge that names the rule,
// whatever its other rules have learned, rather than send it under a
// charge below the server's. Other requests do not fall under it (its Key
// says false).
func UnboundedRule(name, source string) clientpool.Rule {
	return clientpool.Rule{
		Name:  name,
		Limit: window.Limit{N: 1, Per: time.Minute},
		Key: func(r *http.Request) (string, bool) {
			_, _, q := Of(r)
			return "", q.Unbounded()
		},
		Weight: func(*http.Request) int64 { return math.MaxInt64 },
		Source: source,
	}
}

// Request is what an estimate needs of an LLM request body.
type Request struct {
	Model string
	// Chars is the number of characters (runes) of the prompt: every
	// message's text and name, the system prompt, an embedding's input.
	Chars int64
	// Messages is the number of entries of "messages", Names the number
	// of them with a "name" (each costs tokens of framing: the presets
	// add them).
	Messages, Names int64
	// MaxTokens is max_tokens, or max_completion_tokens; 0 when absent,
	// negative, or not a number.
	MaxTokens int64
	// TooLarge reports a body past MaxBody: its estimate is unbounded.
	TooLarge bool
	// Unread reports a body that could not be read (no GetBody, or
	// GetBody or its read failed): its estimate is unbounded. Every
	// other field is zero.
	Unread bool
}

// Unbounded reports whether r's body says nothing a charge can be bounded
// by (TooLarge or Unread): an estimate charges it math.MaxInt64.
func (r Request) Unbounded() bool { return r.TooLarge || r.Unread }

// Parse reads body as an OpenAI or Anthropic request (chat completions,
// messages, embeddings). Keys match exactly, as the APIs read them
// ("MODEL" is not "model"; encoding/json's struct matching would fold
// case); of a repeated key the last counts. It never fails: what it cannot
// read counts as absent (a body that is not a JSON object gets Chars of
// its raw length, on the safe side).
func Parse(body []byte) Request {
	if len(body) > MaxBody {
		return Request{TooLarge: true}
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(body, &in); err != nil {
		return Request{Chars: int64(utf8.RuneCount(body))}
	}
	var r Request
	json.Unmarshal(in["model"], &r.Model)
	var msgs []map[string]json.RawMessage
	json.Unmarshal(in["messages"], &msgs)
	for _, m := range msgs {
		r.Chars += text(m["content"])
		if name, ok := m["name"]; ok {
			r.Chars += text(name)
			r.Names++
		}
	}
	r.Messages = int64(len(msgs))
	r.Chars += text(in["system"]) + text(in["input"]) + text(in["prompt"])
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if v, ok := integer(in[k]); ok && v > r.MaxTokens {
			r.MaxTokens = v
		}
	}
	return r
}

// integer reads a JSON integer; false for anything else (a string, a
// fraction, an exponent, a number beyond int64).
func integer(raw json.RawMessage) (int64, bool) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] == '"' {
		return 0, false
	}
	n, err := json.Number(t).Int64()
	return n, err == nil
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
		var part map[string]json.RawMessage
		if json.Unmarshal(p, &s) == nil {
			n += int64(utf8.RuneCountInString(s))
		} else if json.Unmarshal(p, &part) == nil && json.Unmarshal(part["text"], &s) == nil {
			n += int64(utf8.RuneCountInString(s))
		}
	}
	return n
}

// Usage reads a reply's "usage" object (keys matched exactly): the integer
// field first, required, plus the optional fields more (absent counts 0),
// summed, saturating at 2^62. It returns false when the body has no usage
// object with first, or a field present is not a non-negative integer.
// body may be the whole reply or only its end (a reply longer than what
// the transport keeps): then the last "usage" key of the text is read.
func Usage(body []byte, first string, more ...string) (int64, bool) {
	var top map[string]json.RawMessage
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &top) == nil {
		if json.Unmarshal(top["usage"], &obj) != nil {
			return 0, false
		}
	} else if obj = lastUsage(body); obj == nil {
		return 0, false
	}
	n, ok := integer(obj[first])
	if !ok || n < 0 {
		return 0, false
	}
	sum := min(n, 1<<62)
	for _, k := range more {
		raw, present := obj[k]
		if !present {
			continue
		}
		v, ok := integer(raw)
		if !ok || v < 0 {
			return 0, false
		}
		sum += min(v, 1<<62-sum) // ≤ 2^62: no wrap
	}
	return sum, true
}

// lastUsage decodes the object after the last `"usage":` of a truncated
// reply (its end): nil when there is none or it does not decode. A quote
// inside a JSON string is escaped, so `"usage"` followed by a colon is a
// key.
func lastUsage(body []byte) map[string]json.RawMessage {
	for end := len(body); end > 0; {
		i := bytes.LastIndex(body[:end], []byte(`"usage"`))
		if i < 0 {
			return nil
		}
		rest := bytes.TrimLeft(body[i+len(`"usage"`):], " \t\r\n")
		if len(rest) > 0 && rest[0] == ':' {
			var obj map[string]json.RawMessage
			if json.NewDecoder(bytes.NewReader(rest[1:])).Decode(&obj) == nil {
				return obj
			}
			return nil
		}
		end = i
	}
	return nil
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
// is not a finite number > 0, at least a microsecond, and at most the
// longest Duration (in whole µs) for an f so small that d/f overflows.
func Scaled(d time.Duration, f float64) time.Duration {
	if !(f > 0) || math.IsInf(f, 0) {
		return d
	}
	if q := float64(d) / f; q >= math.MaxInt64 {
		return time.Duration(math.MaxInt64).Truncate(time.Microsecond)
	}
	return max(time.Duration(float64(d)/f), time.Microsecond).Round(time.Microsecond)
}
