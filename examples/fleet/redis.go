package main

import (
	"strings"

	"github.com/ratesem/ratesem/redistest"
)

// startRedis starts the Redis the workers share: one redis-server (no
// persistence, on a free loopback port), or with cluster a Redis Cluster of
// three masters on three free loopback ports, joined by redis-cli --cluster
// create. It returns the address the workers dial (comma-separated seed
// nodes for a cluster) and a function that stops every server and removes
// its files. The servers die with this process on Linux.
func startRedis(cluster bool) (addr string, stop func(), err error) {
	if !cluster {
		s, err := redistest.Launch()
		if err != nil {
			return "", nil, err
		}
		return s.Addr(), s.Stop, nil
	}
	c, err := redistest.LaunchCluster()
	if err != nil {
		return "", nil, err
	}
	return strings.Join(c.Addrs(), ","), c.Stop, nil
}
