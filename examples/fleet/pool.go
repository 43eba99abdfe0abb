package main

import (
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/binance"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/window"
)

// scope is the hash tag every key of the run shares: one account behind one
// IP, so on a cluster all of its rules live in one slot.
const scope = "binance:spot:acct-1"

// newPool returns the worker's pool over the Binance preset (scaled) and a
// function that closes what it opened.
//
// With cfg.Local every process has a pool of its own in memory with 1/K of
// each limit (the static split of a limit between bots, as Hummingbot
// does): the comparison without Redis. Otherwise every process keeps the
// rules in one Redis (redisrate.Shared), under one scope.
func newPool(cfg workerConfig) (*clientpool.Pool, func(), error) {
	table := binance.Spot(binance.WithTimeScale(cfg.Scale))
	if cfg.NoUsage {
		for i := range table.Rules {
			table.Rules[i].Usage = nil
		}
	}
	if cfg.Local {
		for i, r := range table.Rules {
			table.Rules[i].Limit = window.Limit{N: max(r.Limit.N/int64(cfg.Procs), 1), Per: r.Limit.Per}
		}
		p, err := clientpool.New(table)
		return p, func() {}, err
	}
	var rdb goredis.UniversalClient
	if cfg.Cluster {
		rdb = goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(cfg.Redis, ",")})
	} else {
		rdb = goredis.NewClient(&goredis.Options{Addr: cfg.Redis})
	}
	table.Scope = scope
	opts := []clientpool.Option{redisrate.Shared(rdb, cfg.Prefix)}
	if cfg.Lease > 0 {
		opts = append(opts, redisrate.WithLease(cfg.Lease))
	}
	p, err := clientpool.New(table, opts...)
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return p, func() { p.Close(); rdb.Close() }, nil
}
