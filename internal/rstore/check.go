package rstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
)

// check asks c, in one pipelined round trip on a goroutine of its own and
// waiting at most timeout, what can be known before the first call: that
// Redis answers (an error matching ratesem.ErrUnavailable if it does not:
// no answer within timeout, or a connection error), that every limiter of
// cs in scope under prefix stores no limit other than its charge's Spec
// unless SetLimit wrote it (then it is adopted: no error; a
// *rspec.MismatchError, matching ratesem.ErrLimitMismatch, otherwise), and,
// when eviction is set, that the server's maxmemory-policy is noeviction
// (an error matching ratesem.ErrEviction naming the policy; not checked
// when the server forbids CONFIG). It returns the first of these failures
// in that order, or nil. The messages begin with the sentinel's and do not
// say how to go on: the caller adds that.
func check(c goredis.UniversalClient, timeout time.Duration, prefix, scope string, cs []Charge, eviction bool) error {
	s, err := New(c, prefix, Options{})
	if err != nil {
		return err
	}
	keys := make([]string, len(cs))
	for i := range cs {
		if cs[i].Spec == nil {
			return fmt.Errorf("ratesem: charge %q has no Spec", clip(cs[i].Rule))
		}
		keys[i] = s.Keys(scope, cs[i])[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	pipe := c.Pipeline()
	ping := pipe.Ping(ctx)
	var cfg *goredis.MapStringStringCmd
	if eviction {
		cfg = pipe.ConfigGet(ctx, "maxmemory-policy")
	}
	gets := make([]*goredis.SliceCmd, len(keys))
	for i, k := range keys {
		gets[i] = pipe.HMGet(ctx, k, "s", "S")
	}
	// The commands are read once done is closed: after Exec wrote them.
	done := make(chan struct{})
	go func() {
		defer cancel()
		_, _ = pipe.Exec(ctx)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		return fmt.Errorf("%w: %s gave no answer within %v", ratesem.ErrUnavailable, where(c), timeout)
	}
	err = ping.Err()
	for _, g := range gets {
		if e := g.Err(); e != nil && (!isReplyError(e) || errors.Is(e, context.DeadlineExceeded)) && err == nil {
			err = e // the limiter's node did not answer
		}
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: %s gave no answer within %v", ratesem.ErrUnavailable, where(c), timeout)
		}
		return fmt.Errorf("%w: %s: %w", ratesem.ErrUnavailable, where(c), err)
	}
	for i, g := range gets {
		v := g.Val()
		if len(v) != 2 {
			continue
		}
		stored, _ := v[0].(string)
		setLimit, _ := v[1].(string)
		if stored != "" && stored != cs[i].Spec.Wire() && setLimit != "1" {
			return mismatchOf(cs[i], stored)
		}
	}
	if cfg != nil && cfg.Err() == nil {
		if p := cfg.Val()["maxmemory-policy"]; p != "" && !strings.EqualFold(p, "noeviction") {
			return fmt.Errorf("%w: its maxmemory-policy is %s", ratesem.ErrEviction, p)
		}
	}
	return nil
}

// where names the server of c for an error message.
func where(c goredis.UniversalClient) string {
	switch c := c.(type) {
	case *goredis.Client:
		return "Redis at " + c.Options().Addr
	case *goredis.ClusterClient:
		return "Redis Cluster at " + strings.Join(c.Options().Addrs, ",")
	}
	return "Redis"
}
