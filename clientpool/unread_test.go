package clientpool

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// unreadTable: "req" does not settle, "tok" settles from the body.
func unreadTable() Table {
	return Table{Rules: []Rule{
		{Name: "req", Limit: window.Limit{N: 5, Per: time.Hour}},
		{Name: "tok", Limit: window.Limit{N: 100, Per: time.Hour},
			Settle: func(http.Header, []byte) (int64, bool) { return 0, false }},
	}}
}

// BodyUnread reports the charges under a settling rule that nothing
// settled, to the observer as Unsettled events, in process and over Redis
// alike; a settled charge, a rule without Settle and a released ticket
// report nothing.
func TestBodyUnread(t *testing.T) {
	for _, mode := range []string{"in process", "redis"} {
		t.Run(mode, func(t *testing.T) {
			var mu sync.Mutex
			var events []ratesem.Event
			opts := []Option{WithObserver(func(e ratesem.Event) {
				if e.Kind == ratesem.Unsettled {
					mu.Lock()
					events = append(events, e)
					mu.Unlock()
				}
			})}
			if mode == "redis" {
				c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
				t.Cleanup(func() { c.Close() })
				opts = append(opts, sharedOpt(c, "unread"))
			}
			p, err := New(unreadTable(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			ctx := context.Background()

			tk, err := p.Acquire(ctx, Charge{Rule: "req", Weight: 1}, Charge{Rule: "tok", Key: "m", Weight: 60})
			if err != nil {
				t.Fatal(err)
			}
			if n := tk.BodyUnread(); n != 1 {
				t.Fatalf("BodyUnread = %d, want 1 (tok)", n)
			}
			tk.Release()
			if n := tk.BodyUnread(); n != 0 {
				t.Fatalf("after Release: BodyUnread = %d, want 0", n)
			}
			if len(events) != 1 || events[0].Rule != "tok" || events[0].Key != "m" || events[0].Weight != 60 {
				t.Fatalf("events %+v; want one Unsettled of tok[m], weight 60", events)
			}

			tk, err = p.Acquire(ctx, Charge{Rule: "tok", Key: "m", Weight: 5})
			if err != nil {
				t.Fatal(err)
			}
			if err := tk.Settle("tok", 3); err != nil {
				t.Fatal(err)
			}
			if n := tk.BodyUnread(); n != 0 || len(events) != 1 {
				t.Fatalf("settled: BodyUnread = %d, events %d; want 0, 1", n, len(events))
			}
			tk.Release()
		})
	}
}
