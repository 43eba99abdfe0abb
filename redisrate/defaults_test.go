package redisrate_test

import (
	"testing"
	"time"

	"github.com/ratesem/ratesem/internal/engine"
)

// TestDocumentedDefaults: the defaults and bounds the docs of WithTimeout,
// WithPrefix and Shared state in words are the engine's.
func TestDocumentedDefaults(t *testing.T) {
	if engine.DefaultRedisTimeout != time.Second {
		t.Errorf("default timeout %v; WithTimeout's doc says one second", engine.DefaultRedisTimeout)
	}
	if engine.DefaultPrefix != "ratesem:sem" {
		t.Errorf("default prefix %q; WithPrefix's doc says \"ratesem:sem\"", engine.DefaultPrefix)
	}
	if engine.MaxRedisCharges != 64 {
		t.Errorf("at most %d charges per call; Shared's doc says 64", engine.MaxRedisCharges)
	}
}
