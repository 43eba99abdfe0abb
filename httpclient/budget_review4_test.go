package httpclient_test

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/window"
)

// Two (rule, key) pairs whose rule and key, joined, spell the same bytes
// (rule "a" key "b\x00c", rule "a\x00b" key "c": a rule name may hold any
// byte, a key is often the caller's) keep a budget each: a merged budget
// would let one pair's successes pay for the other's retries.
func TestRetryBudgetRuleKeyFraming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := window.Limit{N: 1 << 30, Per: time.Second}
		tab := clientpool.Table{
			Rules: []clientpool.Rule{{Name: "a", Limit: lim}, {Name: "a\x00b", Limit: lim}},
			Endpoints: []clientpool.Endpoint{
				{Path: "/one", Charges: func(*http.Request) ([]clientpool.Charge, error) {
					return []clientpool.Charge{{Rule: "a", Key: "b\x00c", Weight: 1}}, nil
				}},
				{Path: "/two", Charges: func(*http.Request) ([]clientpool.Charge, error) {
					return []clientpool.Charge{{Rule: "a\x00b", Key: "c", Weight: 1}}, nil
				}},
			},
		}
		srv := &budgetServer{}
		tr := httpclient.NewPool(mustPool(t, tab), httpclient.WithBase(srv), httpclient.WithMaxRetries(10),
			httpclient.WithMaxRetryAfter(time.Millisecond))
		sendAll(t, tr, 20, 1, func(int) string { return "http://api.test/one" })
		before := srv.sends.Load()
		sendAll(t, tr, 20, 1, func(int) string { return "http://api.test/two" })
		if got := srv.sends.Load() - before - 20; got != 4 {
			t.Errorf("rule %q key %q got %d retries after rule %q key %q spent theirs, want its own 4", "a\x00b", "c", got, "a", "b\x00c")
		}
		if keys, _, _ := httpclient.BudgetKeys(tr); keys != 2 {
			t.Errorf("%d key budgets, want 2", keys)
		}
	})
}
