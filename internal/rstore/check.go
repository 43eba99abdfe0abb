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
	type answer struct {
		policy    string
		policyErr error
		stored    [][]any
		err       error // no answer
	}
	ch := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
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
		_, _ = pipe.Exec(ctx)
		var a answer
		if err := ping.Err(); err != nil {
			a.err = err
		}
		for _, g := range gets {
			if err := g.Err(); err != nil && (!isReplyError(err) || errors.Is(err, context.DeadlineExceeded)) && a.err == nil {
				a.err = err // the limiter's node did not answer
			}
			a.stored = append(a.stored, g.Val())
		}
		if cfg != nil {
			if err := cfg.Err(); err != nil {
				a.policyErr = err
			} else {
				a.policy = cfg.Val()["maxmemory-policy"]
			}
		}
		ch <- a
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	var a answer
	select {
	case a = <-ch:
	case <-t.C:
		return fmt.Errorf("%w: %s gave no answer within %v", ratesem.ErrUnavailable, where(c), timeout)
	}
	if a.err != nil {
		if errors.Is(a.err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: %s gave no answer within %v", ratesem.ErrUnavailable, where(c), timeout)
		}
		return fmt.Errorf("%w: %s: %w", ratesem.ErrUnavailable, where(c), a.err)
	}
	for i, v := range a.stored {
		if len(v) != 2 {
			continue
		}
		stored, _ := v[0].(string)
		setLimit, _ := v[1].(string)
		if stored != "" && stored != cs[i].Spec.Wire() && setLimit != "1" {
			return mismatchOf(cs[i], stored)
		}
	}
	if p := a.policy; a.policyErr == nil && p != "" && !strings.EqualFold(p, "noeviction") {
		return fmt.Errorf("%w: its maxmemory-policy is %s", ratesem.ErrEviction, p)
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
