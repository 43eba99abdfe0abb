package engine

import (
	"strings"
	"testing"

	"github.com/ratesem/ratesem/internal/rstore"
)

// FuzzRedisKey: the Redis name of any key fits Redis's bound, and two
// distinct keys never share a name (a key cannot pose as another's hash).
func FuzzRedisKey(f *testing.F) {
	long := strings.Repeat("k", rstore.MaxNameLen+1)
	f.Add("", "a")
	f.Add("{", "}")
	f.Add(long, redisKey(long))
	f.Add(strings.Repeat("x", rstore.MaxNameLen), strings.Repeat("x", rstore.MaxNameLen+1))
	f.Add(hashedKey, hashedKey+"0")
	f.Fuzz(func(t *testing.T, a, b string) {
		ra, rb := redisKey(a), redisKey(b)
		if len(ra) > rstore.MaxNameLen || len(rb) > rstore.MaxNameLen {
			t.Fatalf("redisKey(%q) = %q: longer than %d bytes", a, ra, rstore.MaxNameLen)
		}
		if a != b && ra == rb {
			t.Fatalf("keys %q and %q share the Redis name %q", a, b, ra)
		}
		if len(a) <= rstore.MaxNameLen && !strings.HasPrefix(a, hashedKey) && ra != a {
			t.Fatalf("redisKey(%q) = %q: a short key is kept as it is", a, ra)
		}
	})
}
