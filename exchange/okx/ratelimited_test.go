package okx_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/okx"
)

func TestIsRateLimited(t *testing.T) {
	big := `{"code":"0","msg":"","data":[` + strings.Repeat(`{"instId":"BTC-USDT","fundingRate":"0.0001"},`, 200) + `{}]}`
	require.Greater(t, len(big), 2*okx.PeekSize)
	cases := []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		{"429", http.StatusTooManyRequests, `{"code":"50011","msg":"Too Many Requests","data":[]}`, true},
		{"429 whatever the body", http.StatusTooManyRequests, `not json`, true},
		{"200 with 50011", http.StatusOK, `{"code":"50011","msg":"Rate limit reached. Please refer to API documentation and throttle requests accordingly.","data":[]}`, true},
		{"200 with 50011 as a number", http.StatusOK, `{"code":50011,"msg":"","data":[]}`, true},
		{"200 with 50011 after another member", http.StatusOK, `{"msg":"Too Many Requests","code":"50011"}`, true},
		{"200 with 50061", http.StatusOK, `{"code":"50061","msg":"Sub-account rate limit exceeded","data":[]}`, true},
		{"normal 200", http.StatusOK, `{"code":"0","msg":"","data":[{"instId":"BTC-USDT"}]}`, false},
		{"normal 200 larger than the peek", http.StatusOK, big, false},
		{"200 with another error code", http.StatusOK, `{"code":"51000","msg":"Parameter instId error","data":[]}`, false},
		{"200 not JSON", http.StatusOK, `<html>50011</html>`, false},
		{"200 JSON array", http.StatusOK, `[{"code":"50011"}]`, false},
		{"200 empty", http.StatusOK, ``, false},
		{"code in a nested object only", http.StatusOK, `{"data":{"code":"50011"},"code":"0"}`, false},
		{"400 with 50011", http.StatusBadRequest, `{"code":"50011"}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, okx.IsRateLimited(c.status, http.Header{}, []byte(c.body)))
			assert.Equal(t, c.want, okx.IsRateLimitedBody(c.status, []byte(c.body)))
		})
	}
}

// At the headers (body nil) only a 429 is known to be throttled; a 200 is
// decided as its body is read.
func TestIsRateLimitedHeadersOnly(t *testing.T) {
	assert.True(t, okx.IsRateLimited(http.StatusTooManyRequests, nil, nil))
	assert.False(t, okx.IsRateLimited(http.StatusOK, nil, nil))
	assert.False(t, okx.IsRateLimited(http.StatusOK, http.Header{"X-Code": {"50011"}}, []byte{}))
}

// A body cut short after the code still says it.
func TestIsRateLimitedBodyPrefix(t *testing.T) {
	assert.True(t, okx.IsRateLimitedBody(http.StatusOK, []byte(`{"code":"50011","msg":"Rate li`)))
	assert.False(t, okx.IsRateLimitedBody(http.StatusOK, []byte(`{"code":"0","data":[{"in`)))
	assert.False(t, okx.IsRateLimitedBody(http.StatusOK, []byte(`{"data":[{"in`)))
}

// Only the first PeekSize bytes are looked at: a code beyond them is not
// seen, and a huge body costs no more than its first PeekSize bytes.
func TestIsRateLimitedBodyLooksAtPeekSizeOnly(t *testing.T) {
	pad := `{"pad":"` + strings.Repeat("x", okx.PeekSize) + `","code":"50011"}`
	assert.False(t, okx.IsRateLimitedBody(http.StatusOK, []byte(pad)))
	deep := []byte(`{"data":` + strings.Repeat("[", 1<<20))
	allocs := testing.AllocsPerRun(5, func() { okx.IsRateLimitedBody(http.StatusOK, deep) })
	assert.Less(t, allocs, 200.0, "allocations for a 1 MB body of [[[[")
}

// A 50061 throttle is about the sub-account: only its charge is paused.
func TestThrottleTargetsSubAccount(t *testing.T) {
	table := okx.Table()
	cs := []clientpool.Charge{{Rule: okx.RulePlaceOrder, Key: "k|BTC-USDT", Weight: 1}, {Rule: okx.RuleSubAccountOrders, Key: "k", Weight: 1}}
	got := table.ThrottleTargets(clientpool.Throttle{Status: 200, Body: []byte(`{"code":"50061","msg":"Sub-account rate limit exceeded"}`)}, cs)
	if len(got) != 1 || got[0].Rule != okx.RuleSubAccountOrders {
		t.Fatalf("targets %v, want the sub-account charge", got)
	}
	if got := table.ThrottleTargets(clientpool.Throttle{Status: 429, Body: []byte(`{"code":"50011"}`)}, cs); got != nil {
		t.Fatalf("a 50011 throttle picked %v; want nil (the marked per-instrument rules)", got)
	}
}
