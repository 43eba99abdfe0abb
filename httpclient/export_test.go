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

// BudgetKeys returns how many (rule, key) retry budgets t keeps (those
// below full), and the tokens of its own budget and of the overflow, in
// thousandths.
func BudgetKeys(t *Transport) (keys int, tokens, overflow int64) {
	if t.budget == nil {
		return -1, -1, -1
	}
	b := t.budget
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.keys), b.tokens, b.overflow
}

// SetBudgetMaxKeys sets how many (rule, key) budgets t may keep (1024 by
// default), before any request.
func SetBudgetMaxKeys(t *Transport, n int) {
	if t.budget != nil {
		t.budget.maxKeys = n
	}
}
