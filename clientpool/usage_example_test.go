package clientpool_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratesem/ratesem/clientpool"
)

// GitHub sends X-RateLimit-Reset as Unix epoch seconds, the IETF draft as
// seconds to wait; ParseRateLimitAt tells them apart by magnitude.
func ExampleParseRateLimitAt() {
	now := time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

	gh := http.Header{}
	gh.Set("X-RateLimit-Limit", "5000")
	gh.Set("X-RateLimit-Remaining", "4990")
	gh.Set("X-RateLimit-Reset", fmt.Sprint(now.Add(42*time.Minute).Unix()))
	i, err := clientpool.ParseRateLimitAt(gh, "X-RateLimit-", "", now)
	fmt.Println(i.Limit, i.Remaining, i.Used(), i.Reset, err)

	ietf := http.Header{}
	ietf.Add("RateLimit", `"default";r=50;t=30`)
	ietf.Add("RateLimit-Policy", `"burst";q=10;w=1`)
	ietf.Add("RateLimit-Policy", `"default";q=100;w=60`) // a second line
	i, err = clientpool.ParseRateLimitAt(ietf, "RateLimit-", "default", now)
	fmt.Println(i.Limit, i.Remaining, i.Used(), i.Reset, err)
	// Output:
	// 5000 4990 10 42m0s <nil>
	// 100 50 50 30s <nil>
}
