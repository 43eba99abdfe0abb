package main

import (
	"errors"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/exchange/binance"
	"github.com/ratesem/ratesem/window"
)

// newPool returns the worker's pool over the Binance preset (scaled) and a
// function that closes what it opened.
//
// With cfg.Local every process has a pool of its own in memory with 1/K of
// each limit (the static split of a limit between bots, as Hummingbot
// does): the comparison without Redis. Otherwise every process keeps the
// rules in one Redis (clientpool.WithRedis), under one scope.
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
	return nil, nil, errNoRedis
}

// haveRedisPool reports whether newPool can keep the rules in Redis: false
// until clientpool.WithRedis (branch h-pool) is merged and swapped in here.
const haveRedisPool = false

var errNoRedis = errors.New("clientpool over Redis (clientpool.WithRedis) is not available yet; run with -local")
