package okx_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/okx"
	"github.com/ratesem/ratesem/httpclient"
)

// An http.Client whose requests wait for every OKX limit they fall under.
// The server here stands in for https://www.okx.com.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"code":"0","msg":"","data":[]}`)
	}))
	defer srv.Close()

	pool, err := clientpool.New(okx.Table())
	if err != nil {
		panic(err)
	}
	// okx.IsRateLimited: a 429, or code 50011 with HTTP 200, pauses the
	// instrument's rule.
	client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithThrottledBody(okx.IsRateLimited))}

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v5/trade/batch-orders",
		bytes.NewReader([]byte(`[{"instId":"BTC-USDT","side":"buy"},{"instId":"ETH-USDT","side":"buy"}]`)))
	req.Header.Set(okx.HeaderAPIKey, "my-api-key")
	charges, _ := pool.Classify(req)
	fmt.Println(charges)

	resp, err := client.Do(req)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close() // releases the charges: the 2 s window starts now
	fmt.Println(resp.Status, string(body))
	// Output:
	// [batch-orders[my-api-key|BTC-USDT]×1 batch-orders[my-api-key|ETH-USDT]×1 sub-account-orders[my-api-key]×2]
	// 200 OK {"code":"0","msg":"","data":[]}
}

// The same limits used directly, without an http.Client: classify a request,
// acquire its charges, and release them when the call is over.
func Example_classifyAndAcquire() {
	pool, err := clientpool.New(okx.Table(okx.WithTimeScale(20))) // 2 s windows last 100 ms
	if err != nil {
		panic(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://www.okx.com/api/v5/public/funding-rate-history?instId=BTC-USDT-SWAP", nil)
	charges, err := pool.Classify(req)
	if err != nil {
		panic(err)
	}
	ticket, err := pool.Acquire(req.Context(), charges...)
	if err != nil {
		panic(err)
	}
	// ... send req and read the response ...
	ticket.Release()
	l, _ := pool.Limit(okx.RuleFundingRateHistory)
	fmt.Println(charges, l)
	// Output:
	// [funding-rate-history[BTC-USDT-SWAP]×1] 10/100ms
}
