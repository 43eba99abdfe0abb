package benchmarks

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// startRedis returns the address of the Redis server the Redis benchmarks
// use, and whether the benchmark owns it (may reset and read its
// statistics). With REDIS_ADDR set it returns that address, not owned.
// Otherwise it starts a redis-server child process on a free loopback port,
// with no persistence, stopped when b ends; it skips b when there is no
// redis-server on PATH. (The benchmarks start their own server instead of
// using redistest, so that they do not depend on a package
// that may be removed.)
func startRedis(b testing.TB) (addr string, owned bool) {
	b.Helper()
	if a := os.Getenv("REDIS_ADDR"); a != "" {
		return a, false
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		b.Skip("no redis-server on PATH (apt-get install redis-server) and no REDIS_ADDR")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", b.TempDir(), "--logfile", "")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c.Ping(context.Background()).Err() == nil {
			return addr, true
		}
		if time.Now().After(deadline) {
			b.Fatalf("redis-server on %s: no answer to PING in 10 s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
