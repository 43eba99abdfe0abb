package clientpool_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParseRateLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		h      http.Header
		prefix string
		policy string
		want   clientpool.RateLimitInfo
		bad    bool
	}{
		{"x-ratelimit", hdr("X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "40", "X-RateLimit-Reset", "30"), "X-RateLimit-", "",
			clientpool.RateLimitInfo{Limit: 100, Remaining: 40, Reset: 30 * time.Second}, false},
		{"absent", hdr(), "X-RateLimit-", "", clientpool.RateLimitInfo{}, false},
		{"garbage", hdr("X-RateLimit-Limit", "lots", "X-RateLimit-Remaining", "4"), "X-RateLimit-", "", clientpool.RateLimitInfo{}, true},
		{"negative", hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "-1"), "X-RateLimit-", "", clientpool.RateLimitInfo{}, true},
		{"remaining above limit", hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "11"), "X-RateLimit-", "", clientpool.RateLimitInfo{}, true},
		{"draft list", hdr("RateLimit-Limit", "100, 100;w=60", "RateLimit-Remaining", "99", "RateLimit-Reset", "50"), "RateLimit-", "",
			clientpool.RateLimitInfo{Limit: 100, Remaining: 99, Reset: 50 * time.Second}, false},
		{"structured", hdr("RateLimit", `"default";r=50;t=30`, "RateLimit-Policy", `"burst";q=10;w=1, "default";q=100;w=60`), "RateLimit-", "",
			clientpool.RateLimitInfo{Limit: 100, Remaining: 50, Reset: 30 * time.Second}, false},
		{"structured named", hdr("RateLimit", `"a";r=1, "b";r=7`, "RateLimit-Policy", `"a";q=5, "b";q=9`), "RateLimit-", "b",
			clientpool.RateLimitInfo{Limit: 9, Remaining: 7}, false},
		{"structured unknown policy", hdr("RateLimit", `"a";r=1`, "RateLimit-Policy", `"b";q=5`), "RateLimit-", "", clientpool.RateLimitInfo{}, true},
		{"structured bad param", hdr("RateLimit", `"a";r`, "RateLimit-Policy", `"a";q=5`), "RateLimit-", "", clientpool.RateLimitInfo{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := clientpool.ParseRateLimit(tc.h, tc.prefix, tc.policy)
			if tc.bad {
				if !errors.Is(err, clientpool.ErrMalformedHeader) {
					t.Fatalf("ParseRateLimit = %+v, %v; want ErrMalformedHeader", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseRateLimit = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if used, ok := clientpool.XRateLimitUsage(hdr("X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "40")); !ok || used != 60 {
		t.Fatalf("XRateLimitUsage = %d, %v", used, ok)
	}
	if used, ok := clientpool.IETFRateLimitUsage("")(hdr("RateLimit", `"d";r=3`, "RateLimit-Policy", `"d";q=5`)); !ok || used != 2 {
		t.Fatalf("IETFRateLimitUsage = %d, %v", used, ok)
	}
	u := clientpool.BinanceUsage("X-MBX-USED-WEIGHT-1M")
	if used, ok := u(hdr("X-Mbx-Used-Weight-1m", "1234")); !ok || used != 1234 {
		t.Fatalf("BinanceUsage = %d, %v", used, ok)
	}
	for _, v := range []string{"", "x", "-3"} {
		if _, ok := u(hdr("X-MBX-USED-WEIGHT-1M", v)); ok {
			t.Fatalf("BinanceUsage(%q) read as a count", v)
		}
	}
}

// A usage header that reports more than the local count shrinks the local
// budget; one that reports less never loosens it.
func TestTicketObserveHeadersShrinksNeverLoosens(t *testing.T) {
	rule := clientpool.Rule{
		Name: "ip", Limit: window.Limit{N: 10, Per: time.Minute}, Window: func(l window.Limit) window.Policy { return window.NewFixedWindow(l) },
		Usage: clientpool.BinanceUsage("X-MBX-USED-WEIGHT-1M"),
	}
	p := newPool(t, []clientpool.Rule{rule})
	tk := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 2})
	tk.Release()
	tk.ObserveHeaders(hdr("X-MBX-USED-WEIGHT-1M", "1")) // less than local: nothing
	if got := p.Snapshot()[0].Used; got != 2 {
		t.Fatalf("Used = %d after a lower server count, want 2", got)
	}
	tk.ObserveHeaders(hdr("X-MBX-USED-WEIGHT-1M", "9")) // another client spent 7
	if got := p.Snapshot()[0].Used; got != 9 {
		t.Fatalf("Used = %d after the server counted 9, want 9", got)
	}
	if tk, err := p.Acquire(canceledAfter(t), clientpool.Charge{Rule: "ip", Weight: 2}); err == nil {
		tk.Release()
		t.Fatal("admitted 2 with 9 of 10 used")
	}
}

func TestClassify(t *testing.T) {
	table := clientpool.Table{
		Rules: []clientpool.Rule{
			ruleN("ip", 100, time.Second),
			{Name: "inst", Limit: window.Limit{N: 10, Per: time.Second}, Key: func(r *http.Request) (string, bool) {
				id := r.URL.Query().Get("instId")
				return id, id != ""
			}},
		},
		Endpoints: []clientpool.Endpoint{
			{Method: "GET", Path: "/books", Costs: []clientpool.Cost{{Rule: "ip", Units: 2}, {Rule: "inst"}}},
			{Path: "/any-method", Costs: []clientpool.Cost{{Rule: "ip", Weight: func(*http.Request) int64 { return 7 }}}},
		},
		Default: []clientpool.Cost{{Rule: "ip", Units: 1}},
	}
	p, err := clientpool.New(table)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, url string
		want        []clientpool.Charge
	}{
		{"GET", "/books?instId=BTC", []clientpool.Charge{{Rule: "ip", Weight: 2}, {Rule: "inst", Key: "BTC", Weight: 1}}},
		{"GET", "/books", []clientpool.Charge{{Rule: "ip", Weight: 2}}}, // inst's Key does not apply
		{"POST", "/any-method", []clientpool.Charge{{Rule: "ip", Weight: 7}}},
		{"GET", "/elsewhere", []clientpool.Charge{{Rule: "ip", Weight: 1}}},
		{"POST", "/books", []clientpool.Charge{{Rule: "ip", Weight: 1}}}, // method differs: default
	} {
		got, err := p.Classify(httptest.NewRequest(tc.method, tc.url, nil))
		if err != nil || len(got) != len(tc.want) {
			t.Fatalf("Classify(%s %s) = %v, %v; want %v", tc.method, tc.url, got, err, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("Classify(%s %s) = %v; want %v", tc.method, tc.url, got, tc.want)
			}
		}
	}
}

// Ticket.ObserveHeaders compares the server's count with the window's count
// when the call was admitted, so calls still on their way are not mistaken
// for room: A and B are admitted; A's response says 5 (a foreign 4 plus A;
// B has not arrived yet), so the window must count 4 + A + B = 6; B's
// response then says 6, nothing new.
func TestTicketObserveHeadersInFlight(t *testing.T) {
	rule := clientpool.Rule{
		Name: "ip", Limit: window.Limit{N: 10, Per: time.Minute},
		Window: func(l window.Limit) window.Policy { return window.NewFixedCompletion(l) },
		Usage:  clientpool.BinanceUsage("X-MBX-USED-WEIGHT-1M"),
	}
	p := newPool(t, []clientpool.Rule{rule})
	a := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 1})
	b := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 1})
	a.ObserveHeaders(hdr("X-MBX-USED-WEIGHT-1M", "5"))
	if got := p.Snapshot()[0].Used; got != 6 {
		t.Fatalf("Used = %d after A's response said 5, want 6 (4 foreign + A + B)", got)
	}
	b.ObserveHeaders(hdr("X-MBX-USED-WEIGHT-1M", "6"))
	if got := p.Snapshot()[0].Used; got != 6 {
		t.Fatalf("Used = %d after B's response said 6, want 6: counted twice", got)
	}
	a.Release()
	b.Release()
}
