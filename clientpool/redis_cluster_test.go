package clientpool_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/window/redis/redistest"
)

// startCluster3 starts a Redis Cluster of three masters on loopback
// (three redis-server processes with cluster-enabled, joined by
// redis-cli --cluster create) and returns a client of it, closed at the
// end. It skips like redistest.StartServer when redis-server is missing,
// and when redis-cli is.
func startCluster3(t *testing.T) *goredis.ClusterClient {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("no redis-cli on PATH; install it with `apt-get install redis-tools`")
	}
	var addrs []string
	for range 3 {
		s := redistest.StartServerArgs(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
		addrs = append(addrs, s.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v: %s", err, out)
	}
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := 0
		for _, a := range addrs {
			n := goredis.NewClient(&goredis.Options{Addr: a})
			info, err := n.ClusterInfo(context.Background()).Result()
			n.Close()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				ok++
			}
		}
		if ok == len(addrs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("redistest: the three-master cluster is not ok within 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.ReloadState(context.Background())
	return c
}
