package saastest

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/memnet"
)

// Names of the limits, as Entry.Limit and Stats.Rejected report them.
const (
	LimitRequests      = "requests"           // OpenAI, Anthropic: requests per minute
	LimitTokens        = "tokens"             // OpenAI: tokens per minute
	LimitInputTokens   = "input_tokens"       // Anthropic: input tokens per minute
	LimitOutputTokens  = "output_tokens"      // Anthropic: output tokens per minute
	LimitPrimary       = "primary"            // GitHub: requests per window of the token's resource (core or search)
	LimitConcurrency   = "concurrency"        // GitHub secondary: requests in flight per token
	LimitPoints        = "points"             // GitHub secondary: points per minute per endpoint
	LimitCreatesMinute = "creates_per_minute" // GitHub secondary: content-creating requests per minute
	LimitCreatesHour   = "creates_per_hour"   // GitHub secondary: content-creating requests per hour
	LimitCPU           = "cpu_time"           // GitHub secondary: server time per minute (GitHubConfig.CPUTime)
	LimitGraphQLCPU    = "graphql_cpu_time"   // GitHub secondary: GraphQL's server time per minute (GitHubConfig.CPUTime)
	LimitInvalid       = "invalid"            // any server: a request answered 4xx before any limit was charged
)

// DefaultMaxBodyBytes is the most of a request body a server reads when
// its config's MaxBodyBytes is 0: 1 MiB. A longer body is answered 400
// without being read further, charged or counted.
const DefaultMaxBodyBytes = 1 << 20

// Entry is the record of one request a server received, in the order of the
// servers' decisions. Fields that do not apply to a server are zero.
type Entry struct {
	// At is the arrival time on the server's clock (its config's Clock), when
	// the limits were checked and charged.
	At time.Time
	// Done is when the reply of an accepted request was written (after
	// the latency); zero while it is in flight, and for refused requests.
	// Settlement, and the end of GitHub's "in flight", happen at Done.
	Done time.Time
	// Method and Path of the request (Path without the query).
	Method, Path string
	// Endpoint is GitHub's endpoint the points count per: the method and
	// the path template, e.g. "GET /repos/{owner}/{repo}/issues/{n}".
	Endpoint string
	// Key is what the limits are kept per: the model (OpenAI, Anthropic),
	// or the token (GitHub: the Authorization header, or "ip:" and the
	// client IP without one).
	Key string
	// Resource is GitHub's x-ratelimit-resource: "core" or "search".
	Resource string
	// Requests is the requests charged (1 if the request was judged).
	Requests int64
	// Tokens is the token charge at arrival: OpenAI's max(max_tokens,
	// ceil(chars/4) + framing) (embeddings: ceil(chars/4); see NewOpenAI);
	// Anthropic's input estimate ceil(chars/4).
	Tokens int64
	// OutputTokens is Anthropic's output charge at arrival: max_tokens.
	OutputTokens int64
	// Points is GitHub's secondary-limit points: 1 for GET, HEAD and
	// OPTIONS, 5 for POST, PATCH, PUT and DELETE.
	Points int64
	// Creates reports a GitHub content-creating request (POST or PUT).
	Creates bool
	// Reset is the end of GitHub's primary window the request was judged
	// in (its x-ratelimit-reset before rounding).
	Reset time.Time
	// Settled reports that the token charges were replaced by the true
	// counts below (only for accepted requests, when the reply was
	// written, and only if settling is on).
	Settled bool
	// TrueTokens is the true count the reply reported: OpenAI's
	// usage.total_tokens, Anthropic's usage.input_tokens. Set for every
	// answered accepted request, settled or not.
	TrueTokens int64
	// TrueOutputTokens is Anthropic's usage.output_tokens.
	TrueOutputTokens int64
	// Status is the HTTP status answered.
	Status int
	// Limit is the limit that rejected the request (one of the Limit*
	// names), or "" if it was accepted.
	Limit string
}

// Accepted reports whether the request was admitted (charged and answered
// 2xx).
func (e Entry) Accepted() bool { return e.Limit == "" }

// Stats counts a server's decisions.
type Stats struct {
	// Accepted is the number of requests admitted.
	Accepted int
	// Rejected counts the requests refused, by the limit that refused
	// them (LimitInvalid for malformed requests).
	Rejected map[string]int
}

// statsOf counts the accepted requests of log and the refusals per limit.
func statsOf(log []Entry) Stats {
	st := Stats{Rejected: make(map[string]int)}
	for _, e := range log {
		if e.Accepted() {
			st.Accepted++
		} else {
			st.Rejected[e.Limit]++
		}
	}
	return st
}

// base is what every server shares: the clock, the scale, the latency,
// the HTTP side and the log, guarded by mu.
type base struct {
	clock   ratesem.Clock // nil: real clock
	scale   float64
	latency func() time.Duration
	maxBody int64
	net     *memnet.Server

	mu  sync.Mutex
	log []Entry
}

// URL returns the server's base URL; append the API's path
// ("/v1/chat/completions", "/v1/messages", "/repos/...").
func (s *base) URL() string { return s.net.URL() }

// Client returns the HTTP client to reach the server (the only way with
// InMemory). It is the same client on every call.
func (s *base) Client() *http.Client { return s.net.ClientFrom("127.0.0.1") }

// Close shuts the server down, blocking until outstanding requests are
// answered. The log stays readable.
func (s *base) Close() { s.net.Close() }

// Log returns a copy of every request's Entry, in the order of decisions.
func (s *base) Log() []Entry { return s.logCopy() }

// Stats counts the decisions so far.
func (s *base) Stats() Stats { return statsOf(s.Log()) }

func newBase(clock ratesem.Clock, scale float64, latency func() time.Duration, maxBody int64, who string) base {
	if scale == 0 {
		scale = 1
	}
	if !(scale > 0) || math.IsInf(scale, 0) {
		panic(fmt.Sprintf("saastest: %s: Scale must be positive and finite, got %v", who, scale))
	}
	if maxBody == 0 {
		maxBody = DefaultMaxBodyBytes
	}
	if maxBody < 0 {
		panic(fmt.Sprintf("saastest: %s: MaxBodyBytes must not be negative, got %d", who, maxBody))
	}
	return base{clock: clock, scale: scale, latency: latency, maxBody: maxBody}
}

func (b *base) now() time.Time {
	if b.clock == nil {
		return time.Now()
	}
	return b.clock.Now()
}

// scaled returns d divided by the scale: a documented window on the
// server's clock.
func (b *base) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) / b.scale)
}

// wait sleeps for the configured latency on the server's clock, returning
// early if ctx ends.
func (b *base) wait(ctx context.Context) {
	if b.latency == nil {
		return
	}
	b.sleep(ctx, b.latency())
}

// sleep sleeps for d on the server's clock, returning early if ctx ends;
// d ≤ 0 returns at once.
func (b *base) sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	var ch <-chan time.Time
	if b.clock == nil {
		t := time.NewTimer(d)
		defer t.Stop()
		ch = t.C
	} else {
		ch = b.clock.After(d)
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// record appends e to the log under mu and returns its index.
func (b *base) record(e Entry) int {
	b.log = append(b.log, e)
	return len(b.log) - 1
}

func (b *base) logCopy() []Entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.log)
}

// readBody reads at most maxBody bytes of r's body; a longer body is an
// error (the rest is not read, and the connection is closed after the
// answer, as http.MaxBytesReader does).
func (b *base) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, b.maxBody))
	if err != nil {
		return nil, fmt.Errorf("request body unreadable or larger than %d bytes", b.maxBody)
	}
	return body, nil
}

// writeJSON answers status with header h and v as JSON.
func writeJSON(w http.ResponseWriter, status int, h map[string]string, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		panic(err) // only server-made values are written
	}
	for k, val := range h {
		w.Header().Set(k, val)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// bucket is a token bucket of capacity cap refilled continuously at rate
// units per nanosecond of the server's clock, full when first used. Its
// level may go below zero (debt) when a settlement debits more than was
// left; it never rises above cap.
type bucket struct {
	cap, rate float64
	level     float64
	last      time.Time
	low       float64 // lowest level seen after a charge or a settlement
}

// bucketEps absorbs float rounding in refills: a level within it of a
// charge has room for it.
const bucketEps = 1e-6

func newBucket(limit int64, per time.Duration, now time.Time) *bucket {
	c := float64(limit)
	return &bucket{cap: c, rate: c / float64(per), level: c, last: now, low: c}
}

// advance refills the bucket up to t.
func (b *bucket) advance(t time.Time) {
	if d := t.Sub(b.last); d > 0 {
		b.level = min(b.cap, b.level+b.rate*float64(d))
		b.last = t
	}
}

func (b *bucket) has(c int64) bool { return b.level+bucketEps >= float64(c) }

// add changes the level by d (negative: a charge or debit), never above
// cap, and notes the lowest level.
func (b *bucket) add(d float64) {
	b.level = min(b.cap, b.level+d)
	b.low = min(b.low, b.level)
}

// until returns how long until the bucket holds c (0 if it does; until
// full if c exceeds the capacity).
func (b *bucket) until(c int64) time.Duration {
	need := min(float64(c), b.cap) - b.level
	if need <= bucketEps {
		return 0
	}
	return time.Duration(math.Ceil(need / b.rate))
}

// remaining is the whole units left, 0 in debt.
func (b *bucket) remaining() int64 { return int64(math.Floor(max(0, b.level) + bucketEps)) }

// ceilTo rounds d up to a multiple of unit (d ≥ 0).
func ceilTo(d, unit time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + unit - 1) / unit * unit
}

// ceilSeconds is d in whole seconds rounded up, at least 1 (a retry-after).
func ceilSeconds(d time.Duration) int64 {
	return max(1, int64(ceilTo(d, time.Second)/time.Second))
}

// estimate is ceil(chars/4): the character heuristic both LLM servers
// charge at arrival.
func estimate(chars int64) int64 { return (chars + 3) / 4 }

// hash64 mixes seed and parts into a well-spread 64-bit value (FNV-1a,
// then a splitmix64 finaliser).
func hash64(seed uint64, parts ...[]byte) uint64 {
	h := fnv.New64a()
	var s [8]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	h.Write(s[:])
	for _, p := range parts {
		binary.LittleEndian.PutUint64(s[:], uint64(len(p)))
		h.Write(s[:])
		h.Write(p)
	}
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// trueCount is the server's "true" token count of content whose estimate
// is est: est + a jitter in [−est/10, +est/10] (integer division) drawn
// from the content alone, so the same text always counts the same.
func trueCount(est int64, content []byte) int64 {
	d := est / 10
	if d == 0 {
		return est
	}
	return est - d + int64(hash64(0x746f6b656e73, content)%uint64(2*d+1))
}

// outputCount is a pseudo-random count in [1, maxTokens] drawn from seed
// and the request body.
func outputCount(seed uint64, body []byte, maxTokens int64) int64 {
	return 1 + int64(hash64(seed, body)%uint64(maxTokens))
}

// peakPerWindow returns the most of units(e) any window (t−w, t] held,
// over the accepted entries of log whose key(e) is equal, and which key.
func peakPerWindow(log []Entry, w time.Duration, units func(Entry) int64, key func(Entry) string) int64 {
	type ev struct {
		at time.Time
		n  int64
	}
	by := map[string][]ev{}
	for _, e := range log {
		if n := units(e); e.Accepted() && n > 0 {
			by[key(e)] = append(by[key(e)], ev{e.At, n})
		}
	}
	var peak int64
	for _, evs := range by {
		slices.SortStableFunc(evs, func(a, b ev) int { return a.at.Compare(b.at) })
		var sum int64
		lo := 0
		for _, x := range evs {
			sum += x.n
			for !evs[lo].at.After(x.at.Add(-w)) {
				sum -= evs[lo].n
				lo++
			}
			peak = max(peak, sum)
		}
	}
	return peak
}
