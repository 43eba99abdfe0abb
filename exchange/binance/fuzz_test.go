package binance_test

import (
	"net/http"
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
