package okx

import (
	"net/http"

	"github.com/ratesem/ratesem/internal/peek"
)

// Error codes with which OKX says a client called too fast
// (https://www.okx.com/docs-v5/en/#error-code-rest-api-public).
const (
	// codeRateLimited is "Rate limit reached" (with HTTP 200) or "Too Many
	// Requests" (with HTTP 429): a per-endpoint rule was exceeded.
	codeRateLimited = "50011"
	// codeSubAccountRateLimited is returned when the sub-account limit of
	// new and amended orders (RuleSubAccountOrders) is exceeded
	// (https://www.okx.com/docs-v5/en/#overview-rate-limits-sub-account-rate-limit).
	codeSubAccountRateLimited = "50061"
)

// peekSize is the most of a response body that isRateLimitedBody looks at:
// OKX puts the code first, so the code of any response is within it. It is
// the prefix an httpclient.Transport hands its WithThrottledBody hook.
const peekSize = peek.Max // 512

// IsRateLimited reports whether OKX rejected a request for its rate: status
// 429, or status 200 whose body starts with a JSON object whose "code" (a
// string or a number) is 50011 ("Rate limit reached"; OKX also answers it
// with 429) or 50061 (the sub-account limit of new and amended orders,
// RuleSubAccountOrders). h is not used. body is the start of the response
// body as far as it was seen (nil when only the headers are there); only its
// first 512 bytes are looked at, so the cost is bounded whatever the body's
// size or nesting. It reads no response body, never blocks and is safe for
// concurrent use. It has the signature httpclient.WithThrottledBody takes, so
// httpclient.NewPool(pool, httpclient.WithThrottledBody(okx.IsRateLimited))
// pauses on both: a 429 as soon as its headers arrive, a 200 with the code as
// the caller reads its body. Without a header at hand, pass nil.
func IsRateLimited(status int, _ http.Header, body []byte) bool {
	return isRateLimitedBody(status, body)
}

// isRateLimitedBody is IsRateLimited without the header.
func isRateLimitedBody(status int, body []byte) bool {
	if status == http.StatusTooManyRequests {
		return true
	}
	if status != http.StatusOK {
		return false
	}
	switch peek.Code(body[:min(len(body), peekSize)]) {
	case codeRateLimited, codeSubAccountRateLimited:
		return true
	}
	return false
}
