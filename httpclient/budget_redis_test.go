package httpclient_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
)

// The retry budget is the same over a Pool shared through Redis
// (redisrate.Shared): it lives in each Transport's memory, per (rule,
// key). Two replicas, each a Transport over its own Pool on one Redis,
// send to a server that throttles every request: each replica sends at
// 4 retries on the failing key (one request at a time, or from 16
// goroutines), so the fleet sends 2 × 4; another key keeps its own budget.
func TestRetryBudgetOverRedis(t *testing.T) {
	rs := redistest.Start(t)
	srv := &budgetServer{}
	var trs []*httpclient.Transport
	for range 2 {
		rc := goredis.NewClient(&goredis.Options{Addr: rs.Addr()})
		p, err := clientpool.New(keyedTable(false), redisrate.Shared(rc, "budget-test"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			p.Close()
			rc.Close()
		})
		trs = append(trs, httpclient.NewPool(p, httpclient.WithBase(srv), httpclient.WithMaxRetries(10),
			httpclient.WithMaxRetryAfter(time.Millisecond)))
	}
	const n = 40
	sendAll(t, trs[0], n, 1, instURL("bad"))
	if got := srv.perKey["bad"] - n; got != 4 {
		t.Errorf("replica 0, one request at a time: %d retries on the failing key, want 4", got)
	}
	sendAll(t, trs[1], n, 16, instURL("bad"))
	if got := srv.perKey["bad"] - 2*n; got != 8 {
		t.Errorf("two replicas: %d retries on the failing key, want 8 (4 each: the second has its own budget)", got)
	}
	sendAll(t, trs[0], 10, 1, instURL("good"))
	if got := srv.perKey["good"] - 10; got != 4 {
		t.Errorf("another key got %d retries, want its own 4", got)
	}
	for i, tr := range trs {
		keys, _, _ := httpclient.BudgetKeys(tr)
		t.Logf("replica %d keeps %d key budgets", i, keys)
	}
}
