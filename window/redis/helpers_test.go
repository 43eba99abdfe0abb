package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/window/redis/redistest"
)

// newClient returns a go-redis client of its own (its own connection pool)
// for addr, closed when the test ends.
func newClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sharedAddr is one redis-server for the tests that do not stop it.
func sharedAddr(t testing.TB) string {
	t.Helper()
	return redistest.Start(t)
}

// uniqueName returns a limiter name unique to this run, so tests can share
// a server (even one given by REDIS_ADDR).
func uniqueName(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "-" + hex.EncodeToString(b[:])
}

// manual is a settable clock for WithClock.
type manual struct{ t time.Time }

func (m *manual) now() time.Time { return m.t }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
