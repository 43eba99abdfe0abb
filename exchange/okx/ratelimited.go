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

// PeekSize is the most IsRateLimited reads of a response body: OKX puts the
// code first, so the code of any response is within it.
const PeekSize = 512

// IsRateLimited reports whether OKX rejected a request for its rate: HTTP 429,
// or HTTP 200 whose JSON body has code CodeRateLimited or
// CodeSubAccountRateLimited (OKX answers 50011 with either status). It has
// the signature of httpclient.Transport's Throttled hook, so
// httpclient.NewPool(pool, nil, okx.IsRateLimited) pauses on both.
//
// For a 200 it reads at most PeekSize bytes of resp.Body and replaces
// resp.Body with a body that yields those bytes and then the rest, closing
// the original, so the caller still reads the whole body. It may be called
// more than once on the same response. A nil resp is not rate-limited.
func IsRateLimited(resp *http.Response) bool {
	if resp == nil {
		return false
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		return true
	}
	if resp.StatusCode != http.StatusOK || resp.Body == nil || resp.Body == http.NoBody {
		return false
	}
	buf := peek.Body(resp, PeekSize)
	return IsRateLimitedBody(resp.StatusCode, buf)
}

// IsRateLimitedBody is IsRateLimited for a status and a body (or its first
// bytes) already read: status 429, or status 200 with a JSON object whose
// "code" is CodeRateLimited or CodeSubAccountRateLimited, as a string or a
// number.
func IsRateLimitedBody(status int, body []byte) bool {
	if status == http.StatusTooManyRequests {
		return true
	}
	if status != http.StatusOK {
		return false
	}
	switch peek.Code(body) {
	case CodeRateLimited, CodeSubAccountRateLimited:
		return true
	}
	return false
}

// code returns the "code" member of the JSON object body starts with, read
// token by token so that a body cut short after it still yields it; "" when
// there is none.
