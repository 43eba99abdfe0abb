package httpclient

// The unexported limits and hooks, under the names the tests of package
// httpclient_test use.
const (
	PeekSize             = peekSize
	MaxReplayBody        = maxReplayBody
	DefaultMaxRetryAfter = defaultMaxRetryAfter
	MaxSettleBody        = keepMax
)

var DefaultThrottledBody = defaultThrottledBody

type (
	ThrottleHandler  = throttleHandler
	ResponseObserver = responseObserver
)
