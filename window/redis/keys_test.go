package redis

import (
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/window/redis/redistest"
)

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), the checksum Redis
// Cluster hashes keys with.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slot computes a key's Redis Cluster slot as the cluster spec says: if the
// key has a '{' and a '}' after it with at least one byte between, only
// those bytes are hashed; otherwise the whole key.
func slot(key string) (s uint16, tag string) {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			tag = key[i+1 : i+1+j]
			return crc16([]byte(tag)) % 16384, tag
		}
	}
	return crc16([]byte(key)) % 16384, ""
}

func TestSlotMatchesTheSpec(t *testing.T) {
	if got := crc16([]byte("123456789")); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x want 0x31c3", got)
	}
	// Examples from the Redis Cluster specification: the bytes hashed.
	for _, c := range []struct{ key, hashed string }{
		{"{user1000}.following", "user1000"},
		{"foo{}{bar}", "foo{}{bar}"},
		{"foo{{bar}}zap", "{bar"},
		{"foo{bar}{zap}", "bar"},
		{"ratesem:{}}:completion:z", "ratesem:{}}:completion:z"},
	} {
		if got, _ := slot(c.key); got != crc16([]byte(c.hashed))%16384 {
			t.Errorf("slot(%q) = %d, want that of %q", c.key, got, c.hashed)
		}
	}
}

// hostileNames are names an attacker (or a careless caller) may choose.
var hostileNames = []string{
	"}", "{", "}{", "{}", "{{}}", "a{b}c", "}a", "a}", "%", "%7D", "%25", "%7B}",
	"\x00", "\x00}\xff{", "\xff\xfe", "line\nbreak", "ratesem:{x}:completion", " ",
	strings.Repeat("}", MaxNameLen/3), strings.Repeat("a", MaxNameLen),
}

// checkKeys checks that every key of w has the same non-empty hash tag and
// that it decodes back to name.
func checkKeys(t testing.TB, w *Window, name string) {
	t.Helper()
	keys := append(w.Keys(), w.PauseKey())
	s0, tag0 := slot(keys[0])
	if tag0 == "" {
		t.Fatalf("name %q: key %q has no hash tag", name, keys[0])
	}
	for _, k := range keys {
		if s, tag := slot(k); s != s0 || tag != tag0 {
			t.Fatalf("name %q: key %q in slot %d (tag %q), key %q in slot %d (tag %q)", name, keys[0], s0, tag0, k, s, tag)
		}
	}
	dec := strings.NewReplacer("%7B", "{", "%7D", "}", "%25", "%").Replace(tag0)
	if dec != name {
		t.Fatalf("name %q: tag %q decodes to %q", name, tag0, dec)
	}
}

// TestKeysOfHostileNames: whatever the name, all keys of a window share one
// non-empty hash tag (one cluster slot), the tag decodes back to the name
// (two names never share keys), and names too long or empty are errors.
// On the old code the name "}" gave keys "ratesem:{}}:…" with an empty tag.
func TestKeysOfHostileNames(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = c.Close() })
	l := Limit{N: 5, Per: time.Second}
	seen := map[string]string{}
	for _, name := range hostileNames {
		w, err := NewCompletion(c, name, l)
		if err != nil {
			t.Fatalf("NewCompletion(%q): %v", name, err)
		}
		checkKeys(t, w, name)
		if other, ok := seen[w.Keys()[0]]; ok {
			t.Fatalf("names %q and %q share key %q", name, other, w.Keys()[0])
		}
		seen[w.Keys()[0]] = name
		w2, err := NewSlidingLog(c, name, l, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkKeys(t, w2, name)
	}
	for _, name := range []string{"", strings.Repeat("a", MaxNameLen+1), strings.Repeat("}", MaxNameLen/3+1), strings.Repeat("x", 1<<20)} {
		if _, err := NewCompletion(c, name, l); err == nil {
			t.Fatalf("NewCompletion(name of %d bytes): no error", len(name))
		}
	}
}

// FuzzKeys: for any name a constructor accepts, the keys share one
// non-empty hash tag that decodes back to the name; it rejects only empty
// names and those over MaxNameLen once encoded.
func FuzzKeys(f *testing.F) {
	for _, n := range hostileNames {
		f.Add(n)
	}
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	f.Fuzz(func(t *testing.T, name string) {
		w, err := NewFixedWindow(c, name, Limit{N: 1, Per: time.Second})
		enc := len(name) + 2*(strings.Count(name, "{")+strings.Count(name, "}")+strings.Count(name, "%"))
		if name == "" || enc > MaxNameLen {
			if err == nil {
				t.Fatalf("name of %d bytes (%d encoded): no error", len(name), enc)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		checkKeys(t, w, name)
	})
}

// TestClusterHostileNames runs every script of every window, under hostile
// names, through a ClusterClient against a one-node Redis Cluster (the
// server checks that the keys of a script share a slot: CROSSSLOT
// otherwise).
func TestClusterHostileNames(t *testing.T) {
	addr := redistest.StartCluster(t)
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{addr}})
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t)
	l := Limit{N: 3, Per: time.Second}
	for _, name := range hostileNames {
		name := name + uniqueName(t)[len(t.Name()):] // fresh state, same hostile prefix
		mk := []func() (*Window, error){
			func() (*Window, error) { return NewCompletion(c, name, l) },
			func() (*Window, error) { return NewSlidingLog(c, name, l, time.Millisecond) },
			func() (*Window, error) { return NewGCRA(c, name, l, 0) },
			func() (*Window, error) { return NewTokenBucket(c, name, l, 0) },
			func() (*Window, error) { return NewFixedWindow(c, name, l) },
			func() (*Window, error) { return NewSlidingWindowCounter(c, name, l) },
		}
		for _, f := range mk {
			w, err := f()
			if _, terr := hashTag(name); terr != nil {
				continue // too long once the suffix is added
			}
			if err != nil {
				t.Fatalf("%q: %v", name, err)
			}
			what := kindNames[w.kind] + " " + name
			d, err := w.Admit(ctx, 1)
			if err != nil || !d.OK {
				t.Fatalf("%s: Admit: %+v, %v", what, d, err)
			}
			if _, err := w.PauseFor(ctx, time.Millisecond); err != nil {
				t.Fatalf("%s: PauseFor: %v", what, err)
			}
			time.Sleep(2 * time.Millisecond)
			d2, err := w.Admit(ctx, 1)
			if err != nil || !d2.OK {
				t.Fatalf("%s: second Admit: %+v, %v", what, d2, err)
			}
			if err := w.Cancel(ctx, d2.Token); err != nil {
				t.Fatalf("%s: Cancel: %v", what, err)
			}
			if err := w.Extend(ctx, d.Token, time.Second); err != nil {
				t.Fatalf("%s: Extend: %v", what, err)
			}
			if err := w.Release(ctx, d.Token); err != nil {
				t.Fatalf("%s: Release: %v", what, err)
			}
		}
	}
}
