package binance_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/binance"
	"github.com/ratesem/ratesem/httpclient"
)

// An http.Client whose requests wait for every Binance limit they fall under,
// and whose responses' usage headers keep the pool in step with the server.
// The server here stands in for https://api.binance.com.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(binance.HeaderUsedWeight1m, "25")
		io.WriteString(w, `{"lastUpdateId":1027024,"bids":[],"asks":[]}`)
	}))
	defer srv.Close()

	pool, err := clientpool.New(binance.Spot())
	if err != nil {
		panic(err)
	}
	// nil: a 429 or 418 pauses REQUEST_WEIGHT for its Retry-After.
	client := &http.Client{Transport: httpclient.NewPool(pool)}

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v3/depth?symbol=BTCUSDT&limit=500", nil)
	charges, _ := pool.Classify(req)
	fmt.Println(charges)

	resp, err := client.Do(req)
	if err != nil {
		panic(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Status)
	// Output:
	// [REQUEST_WEIGHT[]×25 RAW_REQUESTS[]×1]
	// 200 OK
}

// The same limits used directly, against a server scaled 20 times faster:
// classify a request, acquire its charges, release them when the call ends.
func Example_classifyAndAcquire() {
	pool, err := clientpool.New(binance.Spot(binance.WithTimeScale(20))) // a minute lasts 3 s
	if err != nil {
		panic(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "https://api.binance.com/api/v3/order?symbol=LTCBTC&side=BUY&type=MARKET&quantity=1", nil)
	req.Header.Set(binance.HeaderAPIKey, "my-api-key")
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
	l, _ := pool.Limit(binance.RuleRequestWeight)
	fmt.Println(charges, l)
	// Output:
	// [REQUEST_WEIGHT[]×1 RAW_REQUESTS[]×1 ORDERS_10S[my-api-key]×1 ORDERS_1D[my-api-key]×1] 6000/3s
}
