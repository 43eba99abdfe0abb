package clientpool_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// Two limits on one call, as OKX counts an order: 60 per 2 s per
// instrument and 1000 per 2 s for the sub-account. The observer logs every
// event through log/slog.
func ExampleWithObserver() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // keep the output deterministic
			}
			return a
		},
	}))
	observe := func(e ratesem.Event) {
		attrs := []any{"rule", e.Rule, "key", e.Key, "weight", e.Weight, "wait", e.Wait}
		if e.Source != "" {
			attrs = append(attrs, "source", e.Source)
		}
		logger.Info(e.Kind.String(), attrs...)
	}
	pool, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{
		{Name: "order", Limit: window.Limit{N: 60, Per: 2 * time.Second}, PauseOnThrottle: true},
		{Name: "sub-account", Limit: window.Limit{N: 1000, Per: 2 * time.Second}},
	}}, clientpool.WithObserver(observe))
	if err != nil {
		fmt.Println(err)
		return
	}
	charges := []clientpool.Charge{
		{Rule: "order", Key: "uid-1/BTC-USDT", Weight: 1},
		{Rule: "sub-account", Key: "uid-1", Weight: 1},
	}
	ticket, err := pool.Acquire(context.Background(), charges...)
	if err != nil {
		fmt.Println(err)
		return
	}
	// ... send the order; the server answers 429 with Retry-After: 1 ...
	pool.Throttled(clientpool.Throttle{Status: http.StatusTooManyRequests, RetryAfter: time.Second}, ticket.Charges())
	ticket.Release()
	// Output:
	// level=INFO msg=admitted rule=order key=uid-1/BTC-USDT weight=1 wait=0s
	// level=INFO msg=admitted rule=sub-account key=uid-1 weight=1 wait=0s
	// level=INFO msg=throttled rule=order key=uid-1/BTC-USDT weight=1 wait=0s source=retry-after
	// level=INFO msg=throttled rule=sub-account key=uid-1 weight=1 wait=0s source=retry-after
	// level=INFO msg=paused rule=order key=uid-1/BTC-USDT weight=0 wait=0s source=retry-after
}
