package semaphore_test

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// quiet drops go-redis's log lines (a dial refused, line after line, while
// the outage tests keep redis-server stopped).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	goredis.SetLogger(quiet{})
	goleak.VerifyTestMain(m)
}
