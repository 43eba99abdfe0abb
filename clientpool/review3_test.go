package clientpool

import (
	"context"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/redistest"
)

// BodyUnread reports each unsettled charge once: a second call (a body
// closed twice by a caller of the ticket's own, or two goroutines) returns
// the same count but emits no second Unsettled event, in process and over
// Redis alike, so that the events count the calls left unsettled.
func TestReview3BodyUnreadReportsOnce(t *testing.T) {
	for _, mode := range []string{"in process", "redis"} {
		t.Run(mode, func(t *testing.T) {
			var mu sync.Mutex
			events := 0
			opts := []Option{WithObserver(func(e ratesem.Event) {
				if e.Kind == ratesem.Unsettled {
					mu.Lock()
					events++
					mu.Unlock()
				}
			})}
			if mode == "redis" {
				c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
				t.Cleanup(func() { c.Close() })
				opts = append(opts, sharedOpt(c, "unread3"))
			}
			p, err := New(unreadTable(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			tk, err := p.Acquire(context.Background(), Charge{Rule: "req", Weight: 1}, Charge{Rule: "tok", Key: "m", Weight: 60})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					if n := tk.BodyUnread(); n != 1 {
						t.Errorf("BodyUnread = %d, want 1", n)
					}
				})
			}
			wg.Wait()
			tk.Release()
			mu.Lock()
			defer mu.Unlock()
			if events != 1 {
				t.Errorf("%d Unsettled events for one unsettled charge, want 1", events)
			}
		})
	}
}
