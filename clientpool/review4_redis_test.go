package clientpool_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/redistest"
)

// A usage report read after the call's Release is still that call's, in
// Redis as in process: its units and the calls that had ended by its
// admission are what the server surely counted, not every call of the
// fleet then in flight. N = 100: A and B (10 each) in flight, A ends, and
// its reply says 60 (50 from elsewhere, and A). The window then counts 70
// (20 own, 50 from elsewhere), as in process, and a call of 31 waits; on
// the base commit the report went without its mark (the call was
// forgotten at Release) and took B, still on its way, as counted: 60, and
// the 31 started.
func TestReview4RedisReportAfterRelease(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	const per = int64(time.Minute)
	for try := 0; ; try++ {
		from := time.Now().UnixNano() / per
		prefix := "after" + string(rune('a'+try))
		p := newRedisPool(t, clientpool.Table{Rules: []clientpool.Rule{fixedUsageRule(100)}}, c, prefix)
		a := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 10})
		b := acquire(t, p, clientpool.Charge{Rule: "ip", Weight: 10})
		a.Release()
		a.ObserveHeaders(used(60))
		// The report reaches Redis in the background: wait for its trace.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for {
			keys, err := c.Keys(ctx, prefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, k := range keys {
				if n, _ := c.HExists(ctx, k, "T").Result(); n {
					found = true
				}
			}
			if found {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("the report never reached Redis")
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
		tk, err := p.Acquire(ctx, clientpool.Charge{Rule: "ip", Weight: 31})
		cancel()
		b.Release()
		if time.Now().UnixNano()/per != from && try == 0 {
			if err == nil {
				tk.Release()
			}
			continue // the window moved: the try proves nothing
		}
		if err == nil {
			tk.Release()
			t.Fatal("a call of 31 started with 20 own and 50 from elsewhere of 100")
		}
		return
	}
}
