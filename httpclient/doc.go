// Package httpclient rate-limits outgoing HTTP requests with an
// [http.RoundTripper] that takes a limiter's permit before each request and
// gives it back when the exchange is over.
//
// [Transport] asks its [Selector] which [Limiter] governs a request and how
// many units (its weight) the request costs, acquires that weight on the
// request's context (so http.Client.Timeout and context deadlines count the
// time spent queueing), sends the request through the base transport, and
// releases the weight exactly once: when the response body is closed or read
// to io.EOF, or at once if there is no response. Hold on to a response body
// and you hold on to its permit, so always close it.
//
// When the server answers 429 Too Many Requests or 418 I'm a Teapot (used by
// some exchanges, e.g. Binance, for an IP ban) with a Retry-After header, the
// transport pauses the limiter for that long, capped by
// [Transport.MaxRetryAfter], so no new request starts until the server is
// ready again. The response itself is returned unchanged: status codes are not
// errors, and this package never retries a request. Retries, if wanted, belong
// in a client-level wrapper that can replay bodies through
// [http.Request.GetBody].
//
// A Transport is safe for concurrent use by multiple goroutines, as an
// http.RoundTripper must be.
//
// Wrapping a client, where sem is any [Limiter] (for example a
// *semaphore.RateSemaphore from github.com/ratesem/ratesem/semaphore):
//
//	client := &http.Client{
//		Transport: httpclient.New(sem, http.DefaultTransport),
//		Timeout:   10 * time.Second, // includes time spent waiting for sem
//	}
//	resp, err := client.Get("https://api.example.com/v5/market/tickers")
//	if err != nil {
//		return err
//	}
//	defer resp.Body.Close() // releases the permit
//
// To give requests different weights or limiters, use [NewSelect]:
//
//	tr := httpclient.NewSelect(func(req *http.Request) (httpclient.Limiter, int64) {
//		if strings.HasPrefix(req.URL.Path, "/api/v3/depth") {
//			return sem, 5 // this endpoint costs 5 units
//		}
//		return sem, 1
//	}, nil)
package httpclient
