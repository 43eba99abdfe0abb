package rstore

import (
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/window"
)

// hashTag returns what Redis Cluster hashes of key: the part between the
// first '{' and the next '}' when not empty, else the whole key.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// FuzzKeys: the keys of any (scope, rule, key) share one non-empty hash
// tag that depends on the scope alone, and two different (rule, key) pairs
// of a scope, or two scopes, never share a key; the scope's epoch key has
// the scope's tag and is no limiter's key.
func FuzzKeys(f *testing.F) {
	f.Add("", "r", "k", "", "r", "k2")
	f.Add("a}b{c", "a:b", "c", "a}b{c", "a", "b:c")
	f.Add("%", "r", "k", "", "r", "k")
	f.Add("%7B", "x", "", "{", "x", "")
	f.Add("s", "r:f", "", "s", "r", "f")
	f.Add("s", "~e", "", "s", "", "~e")
	s, err := New(goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}), "p", Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s1, r1, k1, s2, r2, k2 string) {
		a := s.Keys(s1, Charge{Rule: r1, Key: k1})
		b := s.Keys(s2, Charge{Rule: r2, Key: k2})
		for _, ks := range [][3]string{a, b} {
			tag := hashTag(ks[0])
			if tag == ks[0] || tag == "" {
				t.Fatalf("key %q has no hash tag", ks[0])
			}
			for _, k := range ks {
				if hashTag(k) != tag {
					t.Fatalf("keys %q on different tags", ks)
				}
			}
		}
		if (hashTag(a[0]) == hashTag(b[0])) != (s1 == s2) {
			t.Fatalf("scopes %q and %q: tags %q and %q", s1, s2, hashTag(a[0]), hashTag(b[0]))
		}
		// The scope's epoch key: the scope's tag, and no limiter's key.
		for _, sc := range []string{s1, s2} {
			ek := s.EpochKey(sc)
			if hashTag(ek) != hashTag(s.Keys(sc, Charge{})[0]) {
				t.Fatalf("scope %q: epoch key %q not on its tag", sc, ek)
			}
			for _, x := range append(a[:], b[:]...) {
				if x == ek {
					t.Fatalf("epoch key %q of scope %q is a limiter's key", ek, sc)
				}
			}
		}
		same := s1 == s2 && r1 == r2 && k1 == k2
		for _, x := range a {
			for _, y := range b {
				if x == y && !same {
					t.Fatalf("%q/%q/%q and %q/%q/%q share key %q", s1, r1, k1, s2, r2, k2, x)
				}
			}
		}
	})
}

// FuzzSpec: Check never panics; a Spec it accepts has every bound the
// scripts rely on, a positive TTL, a Capacity in [0, N or burst], and a
// stored form that parses back to it.
func FuzzSpec(f *testing.F) {
	f.Add(uint8(1), int64(5), int64(1000), int64(0), int64(0), 0, int64(0))
	f.Add(uint8(2), int64(6000), int64(60_000_000), int64(0), int64(0), 0, int64(0))
	f.Add(uint8(9), int64(1<<40), int64(1), int64(0), int64(0), 0, int64(3))
	f.Add(uint8(7), int64(-1), int64(-5), int64(-1), int64(-1), -1, int64(-1))
	f.Add(uint8(8), int64(1<<62), int64(1<<62), int64(1<<62), int64(1<<62), 1<<30, int64(1<<62))
	f.Add(uint8(6), int64(10), int64(999), int64(0), int64(0), 1000, int64(0))
	f.Add(uint8(3), int64(3), int64(0), int64(0), int64(1), 0, int64(0))
	f.Fuzz(func(t *testing.T, kind uint8, n, perNs, burst, marginNs int64, blocks int, conc int64) {
		s := Spec{Kind: Kind(kind), Limit: window.Limit{N: n, Per: time.Duration(perNs)}, Burst: burst,
			Margin: time.Duration(marginNs), Blocks: blocks, Concurrency: conc}
		_ = s.String()
		if s.Check() != nil {
			return
		}
		if n < 0 || n > MaxN || perNs < 0 || time.Duration(perNs) > MaxPer || perNs%1000 != 0 || conc < 0 || conc > MaxN {
			t.Fatalf("accepted %v", s)
		}
		if c := s.Capacity(); c < 0 || c > max(n, burst) {
			t.Fatalf("%v: capacity %d", s, c)
		}
		if ttl := s.TTL(MaxPer); ttl <= 0 {
			t.Fatalf("%v: TTL %d ms", s, ttl)
		}
		w := s.Wire()
		back, ok := rspec.ParseWire(w)
		if !ok || back.Wire() != w {
			t.Fatalf("%v: stored as %q, parsed back as %v", s, w, back)
		}
	})
}
