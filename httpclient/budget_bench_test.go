package httpclient_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
)

// BenchmarkRetryBudgetCharges measures a NewPool RoundTrip answered 200 at
// once for a request of n distinct (rule, key) charges, with the retry
// budget on (WithMaxRetries) and off: the budget's cost per response is n
// hashes, a sort and one lock, beside the pool's own work for n charges.
func BenchmarkRetryBudgetCharges(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		charges := make([]clientpool.Charge, n)
		for i := range charges {
			charges[i] = clientpool.Charge{Rule: "inst", Key: fmt.Sprint("k", i), Weight: 1}
		}
		tab := keyedTable(false)
		tab.Endpoints = append(tab.Endpoints, clientpool.Endpoint{Path: "/many", Charges: func(*http.Request) ([]clientpool.Charge, error) {
			return charges, nil
		}})
		for _, c := range []struct {
			name string
			opt  httpclient.Option
		}{{"on", nil}, {"off", httpclient.WithRetryBudget(-1, 0)}} {
			b.Run(fmt.Sprintf("charges=%d/budget=%s", n, c.name), func(b *testing.B) {
				p, err := clientpool.New(tab)
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				srv := &budgetServer{throttle: func(int64, *http.Request) bool { return false }}
				tr := httpclient.NewPool(p, httpclient.WithBase(srv), httpclient.WithMaxRetries(1), c.opt)
				req, _ := http.NewRequest(http.MethodGet, "http://api.test/many", nil)
				for b.Loop() {
					resp, err := tr.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					resp.Body.Close()
				}
			})
		}
	}
}

// With no key below full, a success earns the overflow without hashing
// its charges: the overflow, spent while the keys were full, is earned
// back exactly, a tokenRatio per success.
func TestRetryBudgetEarnWithNoKeys(t *testing.T) {
	srv := &budgetServer{throttle: func(_ int64, req *http.Request) bool { return req.URL.Query().Get("ok") == "" }}
	tr := httpclient.NewPool(mustPool(t, keyedTable(false)), httpclient.WithBase(srv), httpclient.WithMaxRetries(1),
		httpclient.WithClock(instantClock{}), httpclient.WithMaxRetryAfter(1))
	httpclient.SetBudgetMaxKeys(tr, 1)
	sendAll(t, tr, 1, 1, instURL("a")) // a: 8 tokens (a throttle and its retry's)
	sendAll(t, tr, 1, 1, instURL("b")) // b, no room: the overflow at 8
	sendAll(t, tr, 20, 1, func(int) string { return "http://api.test/o?instId=a&ok=1" })
	if keys, _, overflow := httpclient.BudgetKeys(tr); keys != 0 || overflow != 8000 {
		t.Fatalf("%d keys, overflow %d; want 0 (a full again: dropped) and 8000", keys, overflow)
	}
	sendAll(t, tr, 13, 1, func(int) string { return "http://api.test/o?instId=b&ok=1" })
	if _, _, overflow := httpclient.BudgetKeys(tr); overflow != 9300 {
		t.Errorf("13 successes with no key below full: overflow %d, want 9300", overflow)
	}
}
