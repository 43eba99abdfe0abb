package okx

// The unexported constants and the body check, under the names the tests
// of package okx_test use.
const (
	PeekSize         = peekSize
	DocsURL          = docsURL
	LimitInstruments = limitInstruments
)

var IsRateLimitedBody = isRateLimitedBody
