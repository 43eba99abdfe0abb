package clientpool_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/exchange/binance"
	"github.com/ratesem/ratesem/exchange/exchangetest"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/redistest"
)

// Two clients, each with its own Pool of the Binance preset over one
// Redis (two replicas behind one IP and one API key), fan out klines and
// orders against the Binance test server, which enforces Binance's own
// rules with smaller limits: the server rejects nothing and sees no
// violation, and both clients got their share through.
func TestRedisBinanceEndToEnd(t *testing.T) {
	t.Parallel() // long runs on their own servers: overlap their waits
	t.Run("server", func(t *testing.T) { t.Parallel(); runBinanceEndToEnd(t, newClient(t, redistest.Start(t).Addr())) })
	t.Run("cluster", func(t *testing.T) { t.Parallel(); runBinanceEndToEnd(t, startCluster3(t)) })
}

func runBinanceEndToEnd(t *testing.T, rc goredis.UniversalClient) {
	const scale = 100 // a minute lasts 600 ms, 10 s last 100 ms
	limits := map[string]int64{
		exchangetest.BinanceRequestWeight: 60,
		exchangetest.BinanceOrders10s:     3,
	}
	srv := exchangetest.NewBinance(exchangetest.BinanceConfig{
		Scale: scale, Limits: limits, Latency: exchangetest.UniformLatency(time.Millisecond, 15*time.Millisecond),
	})
	defer srv.Close()
	table := binance.Spot(binance.WithTimeScale(scale))
	for i := range table.Rules {
		switch table.Rules[i].Name {
		case binance.RuleRequestWeight:
			table.Rules[i].Limit.N = limits[exchangetest.BinanceRequestWeight]
		case binance.RuleOrders10s:
			table.Rules[i].Limit.N = limits[exchangetest.BinanceOrders10s]
		}
	}
	table.Scope = "binance:127.0.0.1"
	var clients []*http.Client
	for range 2 {
		p := newRedisPool(t, table, rc, "e2e")
		clients = append(clients, &http.Client{Transport: httpclient.NewPool(p, httpclient.WithBase(srv.Client().Transport))})
	}
	const perClient, workers = 60, 6
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound, not a budget
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := map[int]int{}
	for ci, client := range clients {
		for w := range workers {
			wg.Go(func() {
				for i := w; i < perClient; i += workers {
					var req *http.Request
					if i%3 == 0 {
						req, _ = http.NewRequestWithContext(ctx, http.MethodPost,
							fmt.Sprintf("%s/api/v3/order?symbol=BTCUSDT&side=BUY&type=MARKET&newClientOrderId=c%d-%d", srv.URL(), ci, i), nil)
						req.Header.Set(binance.HeaderAPIKey, "shared-account")
					} else {
						req, _ = http.NewRequestWithContext(ctx, http.MethodGet,
							fmt.Sprintf("%s/api/v3/klines?symbol=BTCUSDT&interval=1m&startTime=%d", srv.URL(), 1_600_000_000_000+i*60_000), nil)
					}
					resp, err := client.Do(req)
					if err != nil {
						t.Errorf("client %d: %v", ci, err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Errorf("client %d: %s %s: status %d", ci, req.Method, req.URL.Path, resp.StatusCode)
					}
					mu.Lock()
					done[ci]++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	st := srv.Stats()
	t.Logf("server: %+v; per client: %v", st, done)
	if st.RateLimited != 0 || st.Banned != 0 || st.Invalid != 0 {
		t.Errorf("server rejected calls: %+v", st)
	}
	if v := srv.Violations(); len(v) != 0 {
		t.Errorf("server saw violations: %v", v)
	}
	if done[0] != perClient || done[1] != perClient {
		t.Errorf("calls done per client: %v, want %d each", done, perClient)
	}
}
