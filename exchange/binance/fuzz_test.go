package binance_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/binance"
)

// FuzzThrottleTargets: whatever the body (any bytes, any size, any
// nesting), the Spot table's ThrottleTargets never panics, returns only
// charges it was given, and never the daily ORDERS_1D: at most the
// account's ORDERS_10S, and only for code -1015.
func FuzzThrottleTargets(f *testing.F) {
	for _, s := range []string{
		`{"code":-1015,"msg":"Too many new orders; current limit is 100 orders per 10 SECOND."}`,
		`{"code":-1015,"msg":"Too many new orders; current limit is 200000 orders per 1 DAY."}`,
		`{"code":"-1015"}`,
		`{"code":-1003,"msg":"Too much request weight used"}`,
		`{"code":-1015`,
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`,
		``,
	} {
		f.Add(http.StatusTooManyRequests, []byte(s))
	}
	table := binance.Spot()
	cs := []clientpool.Charge{{Rule: binance.RuleRequestWeight, Weight: 1}, {Rule: binance.RuleRawRequests, Weight: 1},
		{Rule: binance.RuleOrders10s, Key: "k", Weight: 1}, {Rule: binance.RuleOrders1d, Key: "k", Weight: 1}}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		got := table.ThrottleTargets(clientpool.Throttle{Status: status, Body: body}, cs)
		if len(got) > 1 {
			t.Fatalf("targets %v: more than ORDERS_10S", got)
		}
		if len(got) == 1 && (got[0].Rule != binance.RuleOrders10s || got[0].Key != "k") {
			t.Fatalf("targets %v, want only ORDERS_10S[k]", got)
		}
	})
}

// FuzzEndpointWeights: whatever the query string and form body (any bytes,
// any size), every endpoint of the Spot table classifies without a panic
// and costs between 1 and 250 REQUEST_WEIGHT (Binance's dearest request,
// GET /api/v3/depth with a limit over 1000), never 0: a request the
// preset cannot read is charged the most its endpoint can cost.
func FuzzEndpointWeights(f *testing.F) {
	for _, s := range []string{
		"", "symbol=BTCUSDT", `symbols=["A","B"]`, "symbols=[]", "symbols=%5B%5D", "symbols=[1,2]",
		"limit=5000", "limit=-1", "computeCommissionRates=TRUE", "orderId=1", "%zz", "symbols=" + symbols(60),
	} {
		f.Add(s, s)
	}
	table := binance.Spot()
	pool, err := clientpool.New(table)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, query, body string) {
		for _, e := range table.Endpoints {
			req, err := http.NewRequest(e.Method, base+e.Path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.URL.RawQuery = query
			cs, err := pool.Classify(req)
			if err != nil {
				t.Fatalf("%s %s?%q: %v", e.Method, e.Path, query, err)
			}
			for _, c := range cs {
				if c.Rule == binance.RuleRequestWeight && (c.Weight < 1 || c.Weight > 250) {
					t.Fatalf("%s %s?%q: REQUEST_WEIGHT %d, want 1 to 250", e.Method, e.Path, query, c.Weight)
				}
			}
		}
	})
}
