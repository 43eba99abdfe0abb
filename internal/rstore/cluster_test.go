package rstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/redistest"
)

// TestCluster: on a 3-master cluster, every key of one scope hashes to one
// slot (so a Binance order's three rules are one EVALSHA), scopes spread
// over the nodes, and a node restarted mid-run comes back empty: its
// scopes are found lost and held full, the others' served as before.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs()})
	defer rdb.Close()
	s, err := New(rdb, "cl", Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nodes := map[string]bool{}
	// Hostile scopes too: empty ("{}" would be no hash tag), braces,
	// percent signs, binary, the longest.
	scopes := []string{"", "{", "}", "{}", "%", "%7B", "a}b{c", "\x00\xff:", strings.Repeat("}", MaxNameLen)}
	for i := range 30 {
		scopes = append(scopes, fmt.Sprint("binance:acct", i))
	}
	for _, scope := range scopes {
		cs := binanceOrder()
		slots := map[int64]bool{}
		for _, c := range cs {
			for _, k := range s.Keys(scope, c) {
				slots[rdb.ClusterKeySlot(ctx, k).Val()] = true
			}
		}
		if len(slots) != 1 {
			t.Fatalf("scope %q: keys on slots %v", scope, slots)
		}
		d, err := s.Admit(ctx, scope, cs)
		if err != nil || !d.OK {
			t.Fatalf("scope %q: %+v %v", scope, d, err)
		}
		// a settlement touches the same keys (one slot): refund one charge,
		// debit another, the third plain
		actual := []int64{0, cs[1].Weight + 1, cs[2].Weight}
		if err := s.Settle(ctx, scope, cs, d.Token, actual); err != nil {
			t.Fatalf("scope %q: settle: %v", scope, err)
		}
		k := s.Keys(scope, cs[0])[0]
		err = rdb.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
			if m.Exists(ctx, k).Val() == 1 {
				nodes[m.Options().Addr] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(nodes) < 2 {
		t.Errorf("30 scopes all on %v: want them spread over the masters", nodes)
	}
	// Which scopes live on node 0, the one restarted.
	onNode0 := map[string]bool{}
	for i := range 30 {
		scope := fmt.Sprint("binance:acct", i)
		m, err := rdb.MasterForKey(ctx, s.EpochKey(scope))
		if err != nil {
			t.Fatal(err)
		}
		onNode0[scope] = m.Options().Addr == cl.Node(0).Addr()
	}
	if err := cl.Restart(0); err != nil {
		t.Fatal(err)
	}
	// The scopes of node 0 lost everything: this process, which saw them,
	// finds it and holds them full; the others go on.
	deadline := time.Now().Add(10 * time.Second)
	held := 0
	for i := range 30 {
		scope := fmt.Sprint("binance:acct", i)
		for {
			d, err := s.Admit(ctx, scope, binanceOrder())
			if err == nil && d.OK == !onNode0[scope] && d.Lost == onNode0[scope] {
				if onNode0[scope] {
					held++
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("scope %q (on the restarted node: %v) after a node restart: %+v %v", scope, onNode0[scope], d, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if held == 0 {
		t.Error("no scope on the restarted node")
	}
}
