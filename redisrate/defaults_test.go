package redisrate_test

import (
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/engine"
)

// TestDocumentedDefaults: the default WithTimeout's doc states in words is
// the engine's.
func TestDocumentedDefaults(t *testing.T) {
	if engine.DefaultRedisTimeout != time.Second {
		t.Errorf("default timeout %v; WithTimeout's doc says one second", engine.DefaultRedisTimeout)
	}
}
