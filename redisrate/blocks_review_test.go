package redisrate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratesem/ratesem/redisrate"
)

// A pause of this process holds the calls of a live block: TryAcquire
// refuses, Acquire waits for the pause's end, as without blocks.
func TestBlocksPauseHolds(t *testing.T) {
	c := client(t)
	s, err := redisrate.NewSemaphore(c, "blocks-pause", 100, time.Minute, redisrate.WithBlocks(16, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Acquire(context.Background(), 1); err != nil { // takes a block of 16
		t.Fatal(err)
	}
	s.Release(1)
	s.PauseFor(300 * time.Millisecond)
	if s.TryAcquire(1) {
		t.Fatal("TryAcquire during a pause, a block live: admitted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Acquire(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire during a pause, a block live: %v", err)
	}
	start := time.Now()
	if err := s.Acquire(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	s.Release(1)
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("Acquire after %v of a pause of 300ms", d)
	}
}

// SetLimit gives this process's blocks of the limit back: calls under the
// new limit do not wait for a block of the old one, unused, to end its
// hold.
func TestBlocksSetLimitReturns(t *testing.T) {
	c := client(t)
	s, err := redisrate.NewSemaphore(c, "blocks-setlimit", 10, time.Minute, redisrate.WithBlocks(8, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Acquire(context.Background(), 1); err != nil { // takes a block of 8
		t.Fatal(err)
	}
	s.Release(1)
	if err := s.SetLimit(4, time.Minute); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for i := range 3 { // 4 − the 1 that ended within the minute
		if err := s.Acquire(ctx, 1); err != nil {
			t.Fatalf("call %d under the new limit of 4, 1 ended: %v", i, err)
		}
	}
}
