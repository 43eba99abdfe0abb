package httpclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/window"
)

// TestPoolPriorityThroughTransport: the per-call settings travel in the
// request's context: an order cancel with PriorityHigh reaches the server
// before the backfill requests queued earlier under the shared IP weight,
// and a request with a short queue-wait budget fails with ErrQueueTimeout.
func TestPoolPriorityThroughTransport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pool, err := clientpool.New(clientpool.Table{
			Rules:   []clientpool.Rule{{Name: "ip", Limit: window.Limit{N: 1, Per: time.Second}}},
			Default: []clientpool.Cost{{Rule: "ip"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			order []string
		)
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			order = append(order, req.URL.Path)
			mu.Unlock()
			return reply(req, http.StatusOK, nil), nil
		})
		c := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(base))}
		do := func(ctx context.Context, path string) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://x"+path, nil)
			resp, err := c.Do(req)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		}
		var wg sync.WaitGroup
		for _, p := range []string{"/backfill/1", "/backfill/2", "/backfill/3"} {
			wg.Go(func() {
				if err := do(t.Context(), p); err != nil {
					t.Error(err)
				}
			})
			synctest.Wait()
		}
		wg.Go(func() {
			if err := do(ratesem.WithPriority(t.Context(), ratesem.PriorityHigh), "/cancel"); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait()
		err = do(ratesem.WithQueueWait(t.Context(), 100*time.Millisecond), "/impatient")
		if !errors.Is(err, ratesem.ErrQueueTimeout) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("impatient request: %v, want ErrQueueTimeout", err)
		}
		wg.Wait()
		want := []string{"/backfill/1", "/cancel", "/backfill/2", "/backfill/3"}
		if len(order) != len(want) {
			t.Fatalf("server saw %v, want %v", order, want)
		}
		for i := range want {
			if order[i] != want[i] {
				t.Fatalf("server saw %v, want %v", order, want)
			}
		}
	})
}
