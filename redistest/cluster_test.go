package redistest

import (
	"context"
	"fmt"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// TestCluster3: three masters cover the slots; keys on every node can be
// written and read, before and after a node restarts.
func TestCluster3(t *testing.T) {
	c := StartCluster(t)
	ctx := context.Background()
	rdb := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs()})
	defer rdb.Close()
	masters := map[string]bool{}
	keys := []string{}
	for i := 0; len(masters) < 3 && i < 1000; i++ {
		k := fmt.Sprint("k", i)
		slot := rdb.ClusterKeySlot(ctx, k).Val()
		for _, s := range rdb.ClusterSlots(ctx).Val() {
			if slot >= int64(s.Start) && slot <= int64(s.End) && !masters[s.Nodes[0].Addr] {
				masters[s.Nodes[0].Addr] = true
				keys = append(keys, k)
			}
		}
	}
	if len(masters) != 3 {
		t.Fatalf("masters serving slots: %v, want 3", masters)
	}
	check := func(when string) {
		for _, k := range keys {
			if err := rdb.Set(ctx, k, when, 0).Err(); err != nil {
				t.Fatalf("%s: SET %s: %v", when, k, err)
			}
			if v := rdb.Get(ctx, k).Val(); v != when {
				t.Fatalf("%s: GET %s = %q", when, k, v)
			}
		}
	}
	check("before")
	if err := c.Restart(1); err != nil {
		t.Fatal(err)
	}
	for range 50 { // the client learns the node is back
		if rdb.Set(ctx, keys[0], "x", 0).Err() == nil && rdb.Set(ctx, keys[1], "x", 0).Err() == nil && rdb.Set(ctx, keys[2], "x", 0).Err() == nil {
			break
		}
	}
	check("after")
}
