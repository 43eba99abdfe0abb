package ratesem_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/internal/sched"
)

func TestPriorityContext(t *testing.T) {
	ctx := context.Background()
	if got := sched.PriorityOf(ctx); got != ratesem.PriorityNormal {
		t.Errorf("PriorityOf(Background) = %v, want normal", got)
	}
	for _, tc := range []struct {
		in   ratesem.Priority
		want ratesem.Priority
	}{
		{ratesem.PriorityLow, ratesem.PriorityLow},
		{ratesem.PriorityNormal, ratesem.PriorityNormal},
		{ratesem.PriorityHigh, ratesem.PriorityHigh},
		{math.MaxInt8, ratesem.PriorityHigh},
		{math.MinInt8, ratesem.PriorityLow},
		{2, ratesem.PriorityHigh},
		{-2, ratesem.PriorityLow},
	} {
		got := sched.PriorityOf(ratesem.WithPriority(ctx, tc.in))
		if got != tc.want {
			t.Errorf("PriorityOf(WithPriority(%d)) = %d, want %d", tc.in, got, tc.want)
		}
	}
	// The innermost setting wins, and a budget leaves the priority alone.
	c := ratesem.WithPriority(ratesem.WithPriority(ctx, ratesem.PriorityLow), ratesem.PriorityHigh)
	c = ratesem.WithQueueWait(c, time.Second)
	if got := sched.PriorityOf(c); got != ratesem.PriorityHigh {
		t.Errorf("PriorityOf = %v, want high", got)
	}
}

func TestQueueWaitContext(t *testing.T) {
	ctx := context.Background()
	if got := sched.QueueWaitOf(ctx); got != 0 {
		t.Errorf("QueueWaitOf(Background) = %v, want 0", got)
	}
	for _, tc := range []struct{ in, want time.Duration }{
		{time.Second, time.Second},
		{1, 1},
		{0, 0},
		{-time.Second, 0},
		{math.MinInt64, 0},
		{math.MaxInt64, math.MaxInt64},
	} {
		if got := sched.QueueWaitOf(ratesem.WithQueueWait(ctx, tc.in)); got != tc.want {
			t.Errorf("QueueWaitOf(WithQueueWait(%v)) = %v, want %v", tc.in, got, tc.want)
		}
	}
	// A budget does not set a deadline.
	if _, ok := ratesem.WithQueueWait(ctx, time.Second).Deadline(); ok {
		t.Error("WithQueueWait set a deadline")
	}
}
