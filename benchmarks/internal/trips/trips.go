// Package trips counts a go-redis client's round trips, for the benchmarks
// and cmd/fleetbench.
package trips

import (
	"context"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// Counter is a go-redis hook (client.AddHook) that counts round trips (N:
// every command sent alone, and every pipeline or transaction as one,
// however many commands it holds) and the commands they carried (Cmds).
// Its zero value counts from zero; it is safe for concurrent use.
type Counter struct{ N, Cmds atomic.Int64 }

// DialHook implements goredis.Hook: dials are not counted.
func (t *Counter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessHook implements goredis.Hook: a command sent alone is one round
// trip of one command.
func (t *Counter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		t.N.Add(1)
		t.Cmds.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements goredis.Hook: a pipeline is one round trip
// of its commands.
func (t *Counter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		t.N.Add(1)
		t.Cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
