package clientpool_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redistest"
)

// TestAdaptiveLearnQuotaRemainingAboveLimit: a reply that says more
// remains in the server's window than the limit it names (remaining 100
// of 20) is taken at the limit, in process as over Redis: a report only
// tightens, and the budget of a window never exceeds its N (over Redis
// the first window of a key counts the reporting call too: 19).
func TestAdaptiveLearnQuotaRemainingAboveLimit(t *testing.T) {
	per := 2 * time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaAdaptRule(per)}}
	scenario := func(p *clientpool.Pool, remaining string) int64 {
		a := clientpool.Charge{Rule: "api", Key: "a", Weight: 1}
		tk := acquire(t, p, a)
		tk.ObserveHeaders(http.Header{"X-Limit": {"20"}, "X-Remaining": {remaining}, "X-Reset-Ms": {"1000"}})
		tk.Release()
		time.Sleep(50 * time.Millisecond) // over Redis the release lands in the background
		return int64(holdN(t, p, a, 200))
	}
	c := newClient(t, redistest.Start(t).Addr())
	for _, mode := range []string{"in process", "over Redis"} {
		var got []int64
		for _, remaining := range []string{"20", "100"} {
			var p *clientpool.Pool
			if mode == "in process" {
				local, err := clientpool.New(table)
				if err != nil {
					t.Fatal(err)
				}
				defer local.Close()
				p = local
			} else {
				p = newRedisPool(t, table, c, "above"+remaining)
			}
			got = append(got, scenario(p, remaining))
		}
		if got[1] != got[0] || got[0] > 20 || got[0] < 19 {
			t.Errorf("%s: admitted %d after 20 remaining of 20, %d after 100 remaining of 20: want the same, at most 20", mode, got[0], got[1])
		}
	}
}
