package okx_test

import (
	"net/http"
	"testing"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/okx"
)

// FuzzIsRateLimitedBody: any status and body (any bytes, any size, any
// nesting) gives an answer without panic; the answer depends only on the
// first PeekSize bytes; a 429 is always rate-limited and a status other
// than 200 and 429 never; IsRateLimited agrees; the table's ThrottleTargets
// returns nothing or the sub-account charge it was given.
func FuzzIsRateLimitedBody(f *testing.F) {
	for _, s := range []string{
		`{"code":"50011","msg":"Rate limit reached. Please refer to API documentation and throttle requests accordingly.","data":[]}`,
		`{"code":50061,"msg":"Sub-account rate limit exceeded"}`,
		`{"msg":"x","code":"50011"}`,
		`{"code":"0","data":[{"instId":"BTC-USDT"}]}`,
		`{"data":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`,
		`{"code":"5001`,
		``,
	} {
		f.Add(http.StatusOK, []byte(s))
	}
	f.Add(http.StatusTooManyRequests, []byte(`not json`))
	table := okx.Table()
	cs := []clientpool.Charge{{Rule: okx.RulePlaceOrder, Key: "k|BTC-USDT", Weight: 1}, {Rule: okx.RuleSubAccountOrders, Key: "k", Weight: 1}}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		got := okx.IsRateLimitedBody(status, body)
		if len(body) > okx.PeekSize && okx.IsRateLimitedBody(status, body[:okx.PeekSize]) != got {
			t.Fatalf("the answer depends on bytes beyond PeekSize")
		}
		switch status {
		case http.StatusTooManyRequests:
			if !got {
				t.Fatal("a 429 is rate-limited")
			}
		case http.StatusOK:
		default:
			if got {
				t.Fatalf("status %d rate-limited", status)
			}
		}
		if okx.IsRateLimited(status, nil, body) != got {
			t.Fatal("IsRateLimited disagrees with IsRateLimitedBody")
		}
		ts := table.ThrottleTargets(clientpool.Throttle{Status: status, Body: body}, cs)
		if len(ts) > 1 || (len(ts) == 1 && ts[0].Rule != okx.RuleSubAccountOrders) {
			t.Fatalf("targets %v", ts)
		}
	})
}
