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
// and you hold on to its permit, so always close it. One exception: a
// request whose context ends before its response (a cancel, a deadline,
// http.Client.Timeout), or that fails by a timeout below the Transport (a
// base's own per-attempt context, http.Transport.ResponseHeaderTimeout),
// may still be on its way to the server, which would count it after its
// release. Its weight is released on a timer (RoundTrip returns at once)
// after twice the longest time to a response among the Transport's last 64
// requests to its host, counted from RoundTrip's end: 1 s before any such
// response, 10 s at most.
//
// When the server answers 429 Too Many Requests or 418 I'm a Teapot (used by
// some exchanges, e.g. Binance, for an IP ban), the transport pauses the
// limiter before the request's permit is released, so no new request starts
// until the server is ready again: for the Retry-After, capped by
// [WithMaxRetryAfter] and lengthened by a little jitter so that clients
// throttled together do not all resume at one instant; without a usable
// Retry-After, for an exponential backoff with jitter that grows while the
// throttles go on and starts again after a success, never above the cap. An
// API that signals a throttle in the body (OKX's code 50011 with HTTP 200)
// plugs in a [WithThrottledBody] hook; the transport never reads a
// body itself: the hook sees the first 512 bytes as the caller reads
// them, so RoundTrip returns as soon as the headers arrive, even from a
// server that then stalls. The response itself is returned unchanged:
// status codes are not errors.
//
// By default a request is sent once: a throttled response is returned to
// the caller, and only the requests after it wait for the pause. Give
// [WithMaxRetries](n), n > 0, to have RoundTrip send a throttled
// request again, up to n more times: only when the headers show the
// throttle (not a throttle only the body shows) and the body can be
// replayed (no body, or Request.GetBody). Each retry waits out the pause
// the throttle caused, then acquires the request's weight again, so it
// counts against the limit like any other request; the caller sees only
// the last response. Retries are bounded by a retry budget in the shape of
// gRPC's retryThrottling ([WithRetryBudget]; on with WithMaxRetries, 10
// tokens and a ratio of 0.1 by default): a throttle spends a token, a
// success (below 400) earns a tenth of one back, and a retry is sent
// only while more than half the tokens are left, so a server that
// throttles every request sees at most 4 retries from a Transport in all
// (per rule and key of the charges for [NewPool]), however many goroutines
// share it. The budget is in the Transport's memory, in process and over
// Redis alike: each replica of a fleet keeps its own.
//
// Every constructor takes functional options (WithBase, WithMaxRetries,
// WithObserver, ...), as every package of ratesem does. A Transport is safe
// for concurrent use by multiple goroutines, as an http.RoundTripper must
// be, and cannot be reconfigured once built.
//
// Wrapping a client, where sem is any [Limiter] (for example a
// *semaphore.RateSemaphore from github.com/ratesem/ratesem/semaphore):
//
//	client := &http.Client{
//		Transport: httpclient.New(sem), // http.DefaultTransport; httpclient.WithBase for another
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
//	})
package httpclient
