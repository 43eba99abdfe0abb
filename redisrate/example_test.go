package redisrate_test

import (
	"log"
	"net/http"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/binance"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/redisrate"
)

// Every replica of a Binance bot behind one egress IP and one API key
// builds the same Pool over one Redis: together they never exceed the IP's
// REQUEST_WEIGHT or the account's ORDERS limits. The Scope names what the
// replicas share (here the IP): on a Redis Cluster all of its keys live in
// one slot; bots behind other IPs use other scopes, on other slots.
func ExampleShared() {
	rdb := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"redis-1:6379", "redis-2:6379", "redis-3:6379"}})
	defer rdb.Close()

	table := binance.Spot()
	table.Scope = "binance:203.0.113.7"
	pool, err := clientpool.New(table, redisrate.Shared(rdb, "mybot"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	client := &http.Client{Transport: httpclient.NewPool(pool)}
	resp, err := client.Get("https://api.binance.com/api/v3/klines?symbol=BTCUSDT&interval=1m")
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
}

// Three replicas that call OKX's funding-rate history endpoint (10 requests
// per 2 s per IP and instrument) share the limit through one Redis: each
// runs this, and together they never exceed it. While Redis is unreachable
// each admits a third of the limit on its own.
func ExampleNewSemaphore() {
	rdb := goredis.NewClient(&goredis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	sem, err := redisrate.NewSemaphore(rdb, "okx:funding-rate-history:BTC-USDT", 10, 2*time.Second,
		redisrate.WithFallback(1.0/3))
	if err != nil {
		log.Fatal(err)
	}
	defer sem.Close()

	client := &http.Client{Transport: httpclient.New(sem)}
	resp, err := client.Get("https://www.okx.com/api/v5/public/funding-rate-history?instId=BTC-USDT-SWAP")
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close() // releases the permit
}
