package okx

import (
	"net/http"

	"github.com/ratesem/ratesem/internal/peek"
)

// Error codes with which OKX says a client called too fast
// (https://www.okx.com/docs-v5/en/#error-code-rest-api-public).
const (
	// CodeRateLimited is "Rate limit reached" (with HTTP 200) or "Too Many
	// Requests" (with HTTP 429): a per-endpoint rule was exceeded.
	CodeRateLimited = "50011"
	// CodeSubAccountRateLimited is returned when the sub-account limit of
	// new and amended orders (RuleSubAccountOrders) is exceeded
	// (https://www.okx.com/docs-v5/en/#overview-rate-limits-sub-account-rate-limit).
	CodeSubAccountRateLimited = "50061"
)

// PeekSize is the most of a response body that IsRateLimitedBody looks at:
// OKX puts the code first, so the code of any response is within it. It
// equals httpclient.PeekSize, the prefix the Transport hands its hook.
const PeekSize = 512

// IsRateLimited reports whether OKX rejected a request for its rate: status
// 429, or status 200 whose body starts with a JSON object with code
// CodeRateLimited or CodeSubAccountRateLimited (OKX answers 50011 with either
// status). h is not used. body is the start of the response body as far as it
// was seen (nil when only the headers are there); only its first PeekSize bytes
// are looked at. It reads no response body, never blocks and is safe for
// concurrent use. It has the signature httpclient.WithThrottledBody takes, so
// httpclient.NewPool(pool, httpclient.WithThrottledBody(okx.IsRateLimited))
// pauses on both: a 429 as soon as its headers arrive, a 200 with the code as
// the caller reads its body.
func IsRateLimited(status int, _ http.Header, body []byte) bool {
	return IsRateLimitedBody(status, body)
}

// IsRateLimitedBody is IsRateLimited without the header: status 429, or
// status 200 with a body (or its first bytes) that is a JSON object whose
// "code" is CodeRateLimited or CodeSubAccountRateLimited, as a string or a
// number. Only the first PeekSize bytes of body are looked at, so its cost
// is bounded whatever the body's size or nesting.
func IsRateLimitedBody(status int, body []byte) bool {
	if status == http.StatusTooManyRequests {
		return true
	}
	if status != http.StatusOK {
		return false
	}
	switch peek.Code(body[:min(len(body), PeekSize)]) {
	case CodeRateLimited, CodeSubAccountRateLimited:
		return true
	}
	return false
}
