package openai_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/saas/internal/req"
	"github.com/ratesem/ratesem/saas/openai"
	"github.com/ratesem/ratesem/window"
)

// RuleQuantum names the quantum rule of each per-minute rule as before it
// took a rule name ("requests quantum m", "tokens quantum other"), and
// nothing for any other name.
func TestRuleQuantum(t *testing.T) {
	for in, want := range map[string]string{
		openai.RuleRequests("gpt-4o-mini"): "requests quantum gpt-4o-mini",
		openai.RuleTokens("gpt-4o-mini"):   "tokens quantum gpt-4o-mini",
		openai.RuleTokens("a b"):           "tokens quantum a b",
		openai.RuleRequests(""):            "requests quantum ",
		openai.RuleRequestsOther:           "requests quantum other",
		openai.RuleTokensOther:             "tokens quantum other",
		openai.RuleUnreadBody:              "",
		"":                                 "",
		"requests":                         "",
		"tokens quantum m":                 "tokens quantum quantum m",
	} {
		if got := openai.RuleQuantum(in); got != want {
			t.Errorf("RuleQuantum(%q) = %q, want %q", in, got, want)
		}
	}
	names := map[string]bool{}
	for _, r := range openai.Table(openai.WithModel("m", 60, 6000)).Rules {
		names[r.Name] = true
	}
	for _, n := range []string{"requests quantum m", "tokens quantum m", "requests quantum other", "tokens quantum other"} {
		if !names[n] {
			t.Errorf("no rule %q in %v", n, names)
		}
	}
}

// The quanta's figures (req.Quantum, which Table uses): the guide's
// example (60,000 a minute as 1,000 a second), limits under 60 a minute
// (1 per 60/n s), rounding on the safe side, absurd and invalid inputs, and a scaled minute (WithScale).
func TestQuantumFigures(t *testing.T) {
	const m = time.Minute
	for _, c := range []struct {
		n    int64
		per  time.Duration
		want window.Limit
	}{
		{60000, m, window.Limit{N: 1000, Per: time.Second}},
		{600, m, window.Limit{N: 10, Per: time.Second}},
		{500, m, window.Limit{N: 8, Per: 960 * time.Millisecond}},
		{200000, m, window.Limit{N: 3333, Per: 999_900_000}},
		{60, m, window.Limit{N: 1, Per: time.Second}},
		{59, m, window.Limit{N: 1, Per: 1_016_949_153}}, // 60 s / 59, rounded up
		{30, m, window.Limit{N: 1, Per: 2 * time.Second}},
		{1, m, window.Limit{N: 1, Per: m}},
		{600, time.Second, window.Limit{N: 10, Per: 16_666_667}}, // WithScale(60): a minute lasts 1 s
		{math.MaxInt64, m, window.Limit{N: math.MaxInt64 / 60, Per: time.Second}},
		{0, m, window.Limit{}},
		{-5, m, window.Limit{}},
		{600, 0, window.Limit{}},
		{600, -time.Second, window.Limit{}},
	} {
		if got := req.Quantum(c.n, c.per); got != c.want {
			t.Errorf("Quantum(%d, %v) = %+v, want %+v", c.n, c.per, got, c.want)
		}
	}
}

// For any n and per, Quantum's bucket is never faster than n per per, never
// holds more than max(1, ⌊n/60⌋), and is within a nanosecond of that rate
// (exact in 128-bit arithmetic: q·per ≤ n·Per < q·per + n).
func TestQuantumNeverFaster(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 4))
	for i := range 20000 {
		n := rng.Int64N(1 << uint(1+rng.IntN(62)))
		per := time.Duration(1 + rng.Int64N(int64(time.Hour)))
		if i%4 == 0 {
			per = time.Minute
		}
		l := req.Quantum(n, per)
		if n <= 0 {
			if l != (window.Limit{}) {
				t.Fatalf("Quantum(%d, %v) = %+v, want zero", n, per, l)
			}
			continue
		}
		if l.N < 1 || l.N != max(1, n/60) || l.Per <= 0 || l.Per > per {
			t.Fatalf("Quantum(%d, %v) = %+v", n, per, l)
		}
		qp := new(big.Int).Mul(big.NewInt(l.N), big.NewInt(int64(per)))
		nP := new(big.Int).Mul(big.NewInt(n), big.NewInt(int64(l.Per)))
		if qp.Cmp(nP) > 0 || new(big.Int).Add(qp, big.NewInt(n)).Cmp(nP) <= 0 {
			t.Fatalf("Quantum(%d, %v) = %+v: rate not the largest at most n per per", n, per, l)
		}
	}
}

func ruleOf(t *testing.T, tab clientpool.Table, name string) clientpool.Rule {
	t.Helper()
	for _, r := range tab.Rules {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no rule %q", name)
	return clientpool.Rule{}
}

func hasRule(tab clientpool.Table, name string) bool {
	for _, r := range tab.Rules {
		if r.Name == name {
			return true
		}
	}
	return false
}

// The rule table: each model and the catch-all have their two quantum
// rules, token buckets of the quanta (req.Quantum) of the minute's limits
// (scaled with WithScale), learned, not settled, from the guide, charged by default;
// WithoutQuantum leaves them out; hostile limits (0, negative, 1, huge)
// give valid rules.
func TestQuantumRules(t *testing.T) {
	// Margin 0: the rules' limits are the quanta themselves (the margin's
	// pad: TestQuantumMargin).
	tab := openai.Table(openai.WithModel("m", 600, 60000), openai.WithModel("zero", 0, -4), openai.WithModel("one", 1, 1),
		openai.WithModel("huge", math.MaxInt64, math.MaxInt64), openai.WithOtherModels(30, 100), openai.WithQuantumMargin(0))
	for _, c := range []struct {
		rule string
		want window.Limit
	}{
		{openai.RuleQuantum(openai.RuleRequests("m")), window.Limit{N: 10, Per: time.Second}},
		{openai.RuleQuantum(openai.RuleTokens("m")), window.Limit{N: 1000, Per: time.Second}},
		{openai.RuleQuantum(openai.RuleRequests("zero")), window.Limit{N: 0, Per: time.Minute}}, // learned
		{openai.RuleQuantum(openai.RuleTokens("zero")), window.Limit{N: 0, Per: time.Minute}},
		{openai.RuleQuantum(openai.RuleRequests("one")), window.Limit{N: 1, Per: time.Minute}},
		{openai.RuleQuantum(openai.RuleTokens("huge")), window.Limit{N: math.MaxInt64 / 60, Per: time.Second}},
		{openai.RuleQuantum(openai.RuleRequestsOther), window.Limit{N: 1, Per: 2 * time.Second}},
		{openai.RuleQuantum(openai.RuleTokensOther), window.Limit{N: 1, Per: 600 * time.Millisecond}},
	} {
		r := ruleOf(t, tab, c.rule)
		if r.Limit != c.want || r.Learn == nil || r.Settle != nil || r.Source != openai.DocsURL || !r.PauseOnThrottle || r.Window == nil {
			t.Errorf("%s: Limit %+v (want %+v), Learn %v, Settle %v, Source %q", c.rule, r.Limit, c.want, r.Learn != nil, r.Settle != nil, r.Source)
		}
		if c.want.N > 0 {
			p := r.Window(c.want)
			if got := p.Capacity(); got != c.want.N {
				t.Errorf("%s: window capacity %d, want %d (the quantum)", c.rule, got, c.want.N)
			}
		}
	}
	if _, err := clientpool.New(tab); err != nil {
		t.Fatalf("the table with hostile limits: %v", err)
	}
	scaled := openai.Table(openai.WithModel("m", 600, 60000), openai.WithScale(60), openai.WithQuantumMargin(-time.Second))
	if got := ruleOf(t, scaled, openai.RuleQuantum(openai.RuleRequests("m"))).Limit; got != (window.Limit{N: 10, Per: 16_666_667}) {
		t.Errorf("WithScale(60): requests quantum %+v, want 10 per 1/60 s", got)
	}
	if got := ruleOf(t, scaled, openai.RuleQuantum(openai.RuleTokens("m"))).Limit; got != req.Quantum(60000, time.Second) {
		t.Errorf("WithScale(60): tokens quantum %+v", got)
	}
	without := openai.Table(openai.WithModel("m", 600, 60000), openai.WithoutQuantum())
	for _, name := range []string{openai.RuleQuantum(openai.RuleRequests("m")), openai.RuleQuantum(openai.RuleTokens("m")), openai.RuleQuantum(openai.RuleRequestsOther), openai.RuleQuantum(openai.RuleTokensOther)} {
		if hasRule(without, name) {
			t.Errorf("WithoutQuantum: rule %q present", name)
		}
	}
	if !hasRule(without, openai.RuleRequests("m")) || !hasRule(without, openai.RuleTokens("m")) {
		t.Errorf("WithoutQuantum dropped the minute's rules")
	}
	pool, err := clientpool.New(tab)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cs, err := pool.Classify(chatReq(t, "m", 100))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, c := range cs {
		got[c.Rule] = c.Weight
	}
	if len(cs) != 4 || got[openai.RuleQuantum(openai.RuleRequests("m"))] != 1 || got[openai.RuleQuantum(openai.RuleTokens("m"))] != 100 || got[openai.RuleTokens("m")] != 100 {
		t.Errorf("charges %v; want 1 request and 100 tokens per minute and per quantum", cs)
	}
}

func chatReq(t *testing.T, model string, maxTokens int) *http.Request {
	t.Helper()
	r, err := http.NewRequest("POST", "http://api.test/v1/chat/completions", strings.NewReader(
		`{"model":"`+model+`","max_tokens":`+itoa(maxTokens)+`,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func itoa(n int) string { return big.NewInt(int64(n)).String() }

// The quantum rules learn the quantum of the limit a reply names, and
// nothing of what remains (the headers' is the minute's); hostile headers
// teach nothing; a scaled minute scales the quantum.
func TestQuantumLearn(t *testing.T) {
	for _, scale := range []float64{1, 60} {
		per := time.Duration(float64(time.Minute) / scale)
		tab := openai.Table(openai.WithModel("m", 0, 0), openai.WithScale(scale), openai.WithQuantumMargin(0))
		for _, c := range []struct{ rule, header string }{
			{openai.RuleQuantum(openai.RuleRequests("m")), openai.HeaderLimitRequests},
			{openai.RuleQuantum(openai.RuleTokens("m")), openai.HeaderLimitTokens},
			{openai.RuleQuantum(openai.RuleRequestsOther), openai.HeaderLimitRequests},
		} {
			learn := ruleOf(t, tab, c.rule).Learn
			first := c.rule == openai.RuleQuantum(openai.RuleTokens("m")) // padded: its first report empties it
			for _, v := range []string{"6000", "1", "59", "999999999999999999"} {
				want := map[string]window.Limit{
					"6000": req.Quantum(6000, per), "1": req.Quantum(1, per), "59": req.Quantum(59, per),
					"999999999999999999": req.Quantum(999999999999999999, per),
				}[v]
				h := http.Header{}
				h.Set(c.header, v)
				h.Set(openai.HeaderRemainingRequests, "3")
				h.Set(openai.HeaderRemainingTokens, "3")
				in, ok := learn(h, time.Now())
				wantRem := int64(-1)
				if first {
					wantRem, first = 0, false
				}
				if !ok || in.Limit != want || in.Remaining != wantRem || !in.Reset.IsZero() {
					t.Errorf("scale %v %s %s=%s: %+v %v, want %+v, remaining %d", scale, c.rule, c.header, v, in, ok, want, wantRem)
				}
			}
			for _, v := range []string{"", "0", "-60", "6e4", " 60", "1234567890123456789", "60.5"} {
				h := http.Header{}
				h.Set(c.header, v)
				if in, ok := learn(h, time.Now()); ok {
					t.Errorf("%s %s=%q: learned %+v", c.rule, c.header, v, in)
				}
			}
		}
	}
}

// A call estimated above the tokens quantum q is charged q under it (it
// waits for a full quantum and empties it, never refused as too heavy),
// and its whole estimate under the minute's rule; q follows the tpm given,
// then the limit the last reply named.
func TestQuantumCapsHeavyCalls(t *testing.T) {
	tab := openai.Table(openai.WithModel("m", 600, 60000), openai.WithQuantumMargin(0))
	tq, tm := ruleOf(t, tab, openai.RuleQuantum(openai.RuleTokens("m"))), ruleOf(t, tab, openai.RuleTokens("m"))
	r := chatReq(t, "m", 5000)
	if got := tq.Weight(r); got != 1000 {
		t.Errorf("quantum weight %d, want 1000 (the quantum of 60000 TPM)", got)
	}
	if got := tm.Weight(chatReq(t, "m", 5000)); got != 5000 {
		t.Errorf("minute weight %d, want 5000", got)
	}
	if got := tq.Weight(chatReq(t, "m", 400)); got != 400 {
		t.Errorf("light call: quantum weight %d, want 400", got)
	}
	h := http.Header{}
	h.Set(openai.HeaderLimitTokens, "6000")
	if _, ok := tq.Learn(h, time.Now()); !ok {
		t.Fatal("not learned")
	}
	if got := tq.Weight(chatReq(t, "m", 5000)); got != 100 {
		t.Errorf("after a reply named 6000 TPM: quantum weight %d, want 100", got)
	}
	// Through a pool: the heavy call is admitted at once on a full quantum.
	pool, err := clientpool.New(openai.Table(openai.WithModel("m", 600, 60000), openai.WithQuantumMargin(0)))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cs, err := pool.Classify(chatReq(t, "m", 50000))
	if err != nil {
		t.Fatal(err)
	}
	tk, _, err := pool.TryAcquire(cs...)
	if err != nil || tk == nil {
		t.Fatalf("heavy call on a full quantum: %v %v", tk, err)
	}
	tk.Release()
	cs, _ = pool.Classify(chatReq(t, "m", 1))
	if tk, wait, _ := pool.TryAcquire(cs...); tk != nil || wait <= 0 {
		t.Errorf("a call right after a heavy one: admitted %v, wait %v; want it to wait for the quantum", tk != nil, wait)
	}
}

// In process and over Redis alike, a burst is cut at the quantum: 600
// RPM admit 10 requests at once, not 600; without the quantum rules all
// 600 go at once.
func TestQuantumBurstBothModes(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { c.Close() })
	for _, mode := range []string{"in process", "redis", "without quantum"} {
		opts := []openai.Option{openai.WithModel("m", 600, 1e6), openai.WithOtherModels(1, 1)}
		var popts []clientpool.Option
		switch mode {
		case "redis":
			popts = append(popts, redisrate.Shared(c, "q"))
		case "without quantum":
			opts = append(opts, openai.WithoutQuantum())
		}
		pool, err := clientpool.New(openai.Table(opts...), popts...)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		admitted := 0
		for range 600 {
			cs, err := pool.Classify(chatReq(t, "m", 10))
			if err != nil {
				t.Fatal(err)
			}
			tk, _, err := pool.TryAcquire(cs...)
			if err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
			if tk == nil {
				break
			}
			tk.Release()
			admitted++
		}
		pool.Close()
		want := 10
		if mode == "without quantum" {
			want = 600
		}
		if admitted != want {
			t.Errorf("%s: %d admitted at once, want %d", mode, admitted, want)
		}
	}
}

// Learned limits (WithModel 0, 0), in process and over Redis alike: the
// first call goes alone; its reply names 600 RPM and 60000 TPM, and the
// quantum rules learn 10 requests and 1000 tokens (+ the margin's pad) per
// second. The tokens quantum cannot know what the first call left of the
// server's: its first report empties it (in Redis mode in the background,
// as every learned remaining). A call classified before the limit was
// known carries no pad: it is charged as heavier than any limit, so it
// goes alone once the limit is known. Once the quanta have refilled, a
// burst is cut at the requests quantum, 10.
func TestQuantumLearnedBothModes(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { c.Close() })
	burst := func(pool *clientpool.Pool, maxTokens int) int {
		admitted := 0
		for range 100 {
			cs, _ := pool.Classify(chatReq(t, "m", maxTokens))
			tk, _, err := pool.TryAcquire(cs...)
			if err != nil {
				t.Fatal(err)
			}
			if tk == nil {
				break
			}
			tk.Release()
			admitted++
		}
		return admitted
	}
	for _, mode := range []string{"in process", "redis"} {
		var popts []clientpool.Option
		if mode == "redis" {
			popts = append(popts, redisrate.Shared(c, "learn"))
		}
		pool, err := clientpool.New(openai.Table(openai.WithModel("m", 0, 0), openai.WithOtherModels(1, 1)), popts...)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		cs, _ := pool.Classify(chatReq(t, "m", 10))
		tk, _, err := pool.TryAcquire(cs...)
		if err != nil || tk == nil {
			t.Fatalf("%s: first call: %v %v", mode, tk, err)
		}
		h := http.Header{}
		h.Set(openai.HeaderLimitRequests, "600")
		h.Set(openai.HeaderRemainingRequests, "599")
		h.Set(openai.HeaderLimitTokens, "60000")
		h.Set(openai.HeaderRemainingTokens, "59990")
		tk.ObserveHeaders(h)
		tk.Release()
		for rule, want := range map[string]window.Limit{
			openai.RuleQuantum(openai.RuleRequests("m")): {N: 10, Per: time.Second},
			openai.RuleQuantum(openai.RuleTokens("m")):   {N: 1020, Per: 1020 * time.Millisecond}, // pad 20 = 60000 × 20 ms / 1 min
		} {
			if got, _ := pool.Limit(rule); got != want {
				t.Errorf("%s: %s learned %+v, want %+v", mode, rule, got, want)
			}
		}
		if mode == "redis" {
			// The report reaches Redis in the background (one round
			// trip); 50 ms refill 50 tokens, less than a call of 900.
			time.Sleep(50 * time.Millisecond)
		}
		if n := burst(pool, 900); n != 0 {
			t.Errorf("%s: %d calls of 900 tokens admitted at once after learning, want 0", mode, n)
		}
		// Both quanta refill: the tokens quantum from one Per below empty
		// at most (the first call, classified before the limit was known,
		// was charged as heavier than any limit: see below).
		time.Sleep(2100 * time.Millisecond)
		if n := burst(pool, 10); n != 10 {
			t.Errorf("%s: %d admitted at once after a refill, want 10", mode, n)
		}
		pool.Close()
	}
}

// The margin (WithQuantumMargin, default 20 ms): the
// requests quantum counts starts over Per + margin; the tokens quantum is
// padded by the refill of the margin, ⌈tpm·m/min⌉ tokens, on its burst and
// on every call's charge (heavy calls: the quantum plus the pad), at the
// same rate. A hostile margin (negative: 0; beyond the minute: the
// minute) gives valid rules.
func TestQuantumMargin(t *testing.T) {
	tab := openai.Table(openai.WithModel("m", 600, 60000))
	if got := ruleOf(t, tab, openai.RuleQuantum(openai.RuleTokens("m"))).Limit; got != (window.Limit{N: 1020, Per: 1020 * time.Millisecond}) {
		t.Errorf("tokens quantum %+v, want 1020 per 1.02 s (1000 + a pad of 20)", got)
	}
	tq := ruleOf(t, tab, openai.RuleQuantum(openai.RuleTokens("m")))
	for maxTokens, want := range map[int]int64{5000: 1020, 400: 420, 1: 20 + 7 + 1} {
		if got := tq.Weight(chatReq(t, "m", maxTokens)); got != want {
			t.Errorf("max_tokens %d: tokens quantum weight %d, want %d", maxTokens, got, want)
		}
	}
	if got := ruleOf(t, tab, openai.RuleQuantum(openai.RuleRequests("m"))); got.Limit != (window.Limit{N: 10, Per: time.Second}) {
		t.Errorf("requests quantum %+v", got.Limit)
	} else if p, ok := got.Window(got.Limit).(interface{ Margin() time.Duration }); !ok || p.Margin() != req.DefaultQuantumMargin {
		t.Errorf("requests quantum window: not a start window with the margin")
	}
	for _, d := range []time.Duration{-time.Hour, time.Hour, math.MaxInt64} {
		if _, err := clientpool.New(openai.Table(openai.WithModel("m", 600, 60000), openai.WithModel("h", math.MaxInt64, math.MaxInt64),
			openai.WithQuantumMargin(d))); err != nil {
			t.Errorf("margin %v: %v", d, err)
		}
	}
}

// A call classified before the tokens quantum knew its limit carries no
// pad: it is charged as heavier than any limit (so it goes alone, charged
// the capacity, once the limit is known), while a call classified after
// carries min(charge, q) + pad.
func TestQuantumStaleCallsGoAlone(t *testing.T) {
	pool, err := clientpool.New(openai.Table(openai.WithModel("m", 0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	weightOf := func(cs []clientpool.Charge) int64 {
		for _, c := range cs {
			if c.Rule == openai.RuleQuantum(openai.RuleTokens("m")) {
				return c.Weight
			}
		}
		t.Fatal("no tokens quantum charge")
		return 0
	}
	first, _ := pool.Classify(chatReq(t, "m", 10))
	stale, _ := pool.Classify(chatReq(t, "m", 10))
	if w := weightOf(stale); w < 1<<40 {
		t.Errorf("a call classified before the limit is known: tokens quantum weight %d, want ≥ 2^40", w)
	}
	tk, _, err := pool.TryAcquire(first...)
	if err != nil || tk == nil {
		t.Fatalf("first call: %v %v", tk, err)
	}
	h := http.Header{}
	h.Set(openai.HeaderLimitRequests, "600")
	h.Set(openai.HeaderLimitTokens, "60000")
	tk.ObserveHeaders(h)
	tk.Release()
	if tk, wait, err := pool.TryAcquire(stale...); tk != nil || err != nil || wait <= 0 {
		t.Errorf("the stale call right after learning: admitted %v, wait %v, err %v; want a wait for a full quantum", tk != nil, wait, err)
	}
	fresh, _ := pool.Classify(chatReq(t, "m", 10))
	if w := weightOf(fresh); w != 10+20 {
		t.Errorf("a call classified after: tokens quantum weight %d, want 10 (max_tokens) + a pad of 20", w)
	}
}
