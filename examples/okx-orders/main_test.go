package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/ratesem/ratesem/exchange/exchangetest"
	"github.com/ratesem/ratesem/exchange/okx"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// runInBubble runs the example's core on cfg against the embedded server,
// in memory, inside a testing/synctest bubble: virtual time makes the 2 s
// windows instant and the run deterministic up to goroutine scheduling.
func runInBubble(t *testing.T, cfg config) summary {
	t.Helper()
	cfg.inMemory = true
	var s summary
	synctest.Test(t, func(t *testing.T) {
		var err error
		if s, err = run(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
	})
	if s.Server == nil {
		t.Fatal("no server report")
	}
	return s
}

// TestBurst runs the default burst (3830 orders in 3110 requests over 20
// instruments) and checks what the example claims: no rejections, every
// rule respected in the server's own log, the sub-account rule binding and
// used to at least 90% of its limit, BTC-USDT's own limit reached too, and
// the run within 90% of the ideal time.
func TestBurst(t *testing.T) {
	cfg := defaults()
	s := runInBubble(t, cfg)
	srv := s.Server

	if s.Requests != 3110 || s.Orders != 3830 {
		t.Fatalf("requests %d, orders %d; want 3110, 3830", s.Requests, s.Orders)
	}
	if s.Rejected != 0 || s.Failed != 0 || s.Pauses != 0 {
		t.Errorf("client: rejected %d, failed %d, paused %d; want 0, 0, 0", s.Rejected, s.Failed, s.Pauses)
	}
	if st := srv.Stats; st.RateLimited != 0 || st.Accepted != s.Requests || st.Requests != s.Requests {
		t.Errorf("server: %d requests, %d accepted, %d rate-limited (%v); want %d, %d, 0",
			st.Requests, st.Accepted, st.RateLimited, st.LimitedBy, s.Requests, s.Requests)
	}
	if len(srv.Violations) != 0 {
		t.Errorf("server log shows rules broken: %v", srv.Violations)
	}

	// The plan: 3830 orders need 4 windows of the sub-account's 1000;
	// BTC-USDT's 180 single orders need 3 of its 60. The sub-account binds.
	var binding []string
	for _, c := range s.Binding {
		binding = append(binding, c.Rule+"["+c.Key+"]")
	}
	want := []string{"sub-account-orders[demo-api-key]"}
	if s.Windows != 4 || !slices.Equal(binding, want) {
		t.Errorf("binding %v, %d windows; want %v, 4 windows", binding, s.Windows, want)
	}

	// Budget: the binding rule's peak ≥ 90% of its limit (the server's
	// rule bounds it by 100%); BTC-USDT's lead burst and its share of the
	// round-robin reach its own limit, 60, in the first window.
	sub, ok := srv.Use(okx.RuleSubAccountOrders)
	if !ok || sub.Units != 3830 || 10*sub.Peak < 9*sub.Limit {
		t.Errorf("sub-account: %+v; want 3830 units, peak ≥ 90%% of %d", sub, sub.Limit)
	}
	place, ok := srv.Use(okx.RulePlaceOrder)
	if !ok || place.Key.InstID != "BTC-USDT" || place.Units != 180 || 10*place.Peak < 9*place.Limit {
		t.Errorf("place-order: %+v; want BTC-USDT, 180 units, peak ≥ 90%% of %d", place, place.Limit)
	}
	var perWindow int64
	for _, n := range srv.PerWindow {
		perWindow += n
	}
	if perWindow != 3830 {
		t.Errorf("orders per window %v add up to %d; want 3830", srv.PerWindow, perWindow)
	}

	// Time: never faster than the rule allows, within 90% of the ideal.
	if s.Elapsed < 3*okx.Per {
		t.Errorf("elapsed %v < 3 × %v: the sub-account rule cannot have held", s.Elapsed, okx.Per)
	}
	if eff := s.Ideal.Seconds() / s.Elapsed.Seconds(); eff < 0.9 {
		t.Errorf("elapsed %v, ideal %v: efficiency %.1f%% < 90%%", s.Elapsed, s.Ideal, 100*eff)
	}

	var out bytes.Buffer
	printSummary(&out, s)
	for _, want := range []string{"0 of 3110 requests rate-limited", "sub-account-orders", "BTC-USDT", "violations: none"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	t.Logf("\n%s", out.String())
}

// TestClientAboveServerIsRejected is the control: a client that believes
// either rule is looser than OKX's is rejected by that rule, so both rules
// matter for this burst, and the server and TestBurst can fail. The
// per-instrument rule is tested on the default burst (BTC-USDT's first
// window holds its 30 lead orders and about 40 of the round-robin, more than
// 60); the sub-account rule, which 20 × 60 single orders break at once, on
// the burst cut to 60 single orders per instrument, to keep the test short
// under -race.
func TestClientAboveServerIsRejected(t *testing.T) {
	for _, tc := range []struct {
		rule, server string
		n            int64
		orders       int
	}{
		{okx.RulePlaceOrder, "POST " + orderPath, 120, 150},
		{okx.RuleSubAccountOrders, exchangetest.OKXSubAccountRule, 1200, 60},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			cfg := defaults()
			cfg.orders = tc.orders
			cfg.clientLimits = map[string]int64{tc.rule: tc.n}
			s := runInBubble(t, cfg)
			if got := s.Server.Stats.LimitedBy[tc.server]; got == 0 || s.Rejected == 0 {
				t.Fatalf("client %s at %d: server rejected %v, client saw %d; want rejections by %q",
					tc.rule, tc.n, s.Server.Stats.LimitedBy, s.Rejected, tc.server)
			}
			if s.Pauses == 0 {
				t.Errorf("no limiter paused after %d rejections", s.Rejected)
			}
			t.Logf("client %s at %d: %d of %d rejected, by rule %v", tc.rule, tc.n, s.Rejected, s.Requests, s.Server.Stats.LimitedBy)
		})
	}
}

func TestJobs(t *testing.T) {
	cfg := defaults()
	jobs := cfg.jobs()
	if len(jobs) != cfg.totalRequests() {
		t.Fatalf("%d jobs; want %d", len(jobs), cfg.totalRequests())
	}
	orders := map[string]int{}
	batches := map[string]int{}
	for i, j := range jobs {
		if i < cfg.lead && (j.inst != "BTC-USDT" || j.batch) {
			t.Fatalf("job %d is %+v; want the lead's single orders on BTC-USDT first", i, j)
		}
		if j.batch {
			batches[j.inst]++
			orders[j.inst] += j.n
		} else {
			orders[j.inst]++
		}
	}
	if len(orders) != cfg.instruments {
		t.Fatalf("%d instruments; want %d", len(orders), cfg.instruments)
	}
	for inst, n := range orders {
		want := cfg.orders + cfg.batches*cfg.batchSize
		if inst == "BTC-USDT" {
			want += cfg.lead
		}
		if n != want || batches[inst] != cfg.batches {
			t.Errorf("%s: %d orders in %d batches; want %d in %d", inst, n, batches[inst], want, cfg.batches)
		}
	}
	// The round-robin: the first request after the lead goes to each
	// instrument in turn.
	for i, inst := range allInstruments[:cfg.instruments] {
		if j := jobs[cfg.lead+i]; j.inst != inst {
			t.Errorf("round 0, request %d: %s; want %s", i, j.inst, inst)
		}
	}
}

func TestCheck(t *testing.T) {
	for _, bad := range []func(*config){
		func(c *config) { c.instruments = 0 },
		func(c *config) { c.instruments = len(allInstruments) + 1 },
		func(c *config) { c.lead, c.orders, c.batches = 0, 0, 0 },
		func(c *config) { c.batchSize = 21 },
		func(c *config) { c.workers = 0 },
		func(c *config) { c.clientLimits = map[string]int64{"no-such-rule": 1} },
	} {
		c := defaults()
		bad(&c)
		if err := c.check(); err == nil {
			t.Errorf("check(%+v) = nil; want an error", c)
		}
	}
	if err := defaults().check(); err != nil {
		t.Errorf("check(defaults()) = %v", err)
	}
}

func TestParseRange(t *testing.T) {
	lo, hi, err := parseRange("10ms-30ms")
	if err != nil || lo != 10*time.Millisecond || hi != 30*time.Millisecond {
		t.Errorf("parseRange(10ms-30ms) = %v, %v, %v", lo, hi, err)
	}
	for _, in := range []string{"", "30ms-10ms", "-5ms", "x"} {
		if _, _, err := parseRange(in); err == nil {
			t.Errorf("parseRange(%q): want an error", in)
		}
	}
}
