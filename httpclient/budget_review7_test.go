package httpclient_test

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/httpclient"
)

// A Rule's Usage that panics (it reads every response's headers, a
// throttled one's too) must not keep the throttle out of the retry budget:
// the throttle takes its token from the key's budget all the same.
func TestRetryBudgetSpentWhenUsagePanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tab := keyedTable(false)
		tab.Rules[0].Usage = func(http.Header) (int64, bool) { panic("usage") }
		srv := &budgetServer{}
		tr := httpclient.NewPool(mustPool(t, tab), httpclient.WithBase(srv), httpclient.WithMaxRetries(3),
			httpclient.WithMaxRetryAfter(time.Millisecond))
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/o?instId=k", nil)
		mustPanic(t, "RoundTrip with a panicking Usage", func() { tr.RoundTrip(req) })
		if keys, _, _ := httpclient.BudgetKeys(tr); keys != 1 {
			t.Errorf("%d key budgets after a throttle whose Usage panicked, want 1 (the key's, spent)", keys)
		}
	})
}
