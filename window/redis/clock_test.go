package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// argvRecorder is a go-redis hook that records, for every script run, the
// script's first argument: the caller's instant, or "" to read the
// server's clock.
type argvRecorder struct {
	mu    sync.Mutex
	nows  []string
	calls int
}

func (h *argvRecorder) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *argvRecorder) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (h *argvRecorder) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		args := cmd.Args()
		if name := strings.ToLower(cmd.Name()); name == "evalsha" || name == "eval" {
			numkeys, _ := strconv.Atoi(fmt.Sprint(args[2]))
			h.mu.Lock()
			h.calls++
			h.nows = append(h.nows, fmt.Sprint(args[3+numkeys]))
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

// TestOnlyTheServerClock: without WithClock nothing the caller's clock says
// reaches a script (every script run gets "" as its instant, so it reads
// TIME), and the instant of each decision lies between two readings of the
// server's TIME. Replicas with skewed clocks therefore cannot move a
// decision: their clocks are not part of it. An aligned window's retry
// instant falls on a boundary of the server's clock.
func TestOnlyTheServerClock(t *testing.T) {
	addr := sharedAddr(t)
	ctx := ctxT(t)
	rec := &argvRecorder{}
	c := newClient(t, addr)
	c.AddHook(rec)
	other := newClient(t, addr)
	serverTime := func() time.Time {
		tm, err := other.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.Truncate(time.Microsecond)
	}
	for name, w := range allKinds(t, c) {
		before := serverTime()
		d, err := w.Admit(ctx, 2)
		after := serverTime()
		if err != nil || !d.OK {
			t.Fatalf("%s: %+v, %v", name, d, err)
		}
		if d.At.Before(before) || d.At.After(after) {
			t.Fatalf("%s: decided at %v, outside the server's TIME readings [%v, %v]", name, d.At, before, after)
		}
		r, err := w.Admit(ctx, 1)
		if err != nil || r.OK {
			t.Fatalf("%s: %+v, %v", name, r, err)
		}
		if err := w.Extend(ctx, d.Token, time.Minute); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := w.Release(ctx, d.Token); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := w.Cancel(ctx, d.Token); err != nil && name != "Completion" {
			t.Fatalf("%s: %v", name, err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.calls < 6*4 {
		t.Fatalf("recorded %d script runs, want at least 24", rec.calls)
	}
	for i, now := range rec.nows {
		if now != "" {
			t.Fatalf("script run %d was given the instant %q: the caller's clock reached a script", i, now)
		}
	}

	// Two replicas, one window of an hour aligned to the Unix epoch: the
	// second is told to wait until the next full hour of the server's clock.
	name := uniqueName(t)
	l := Limit{N: 1, Per: time.Hour}
	a, err := NewFixedWindow(newClient(t, addr), name, l)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewFixedWindow(newClient(t, addr), name, l)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := a.Admit(ctx, 1); err != nil || !d.OK {
		t.Fatalf("%+v, %v", d, err)
	}
	d, err := b.Admit(ctx, 1)
	if err != nil || d.OK {
		t.Fatalf("%+v, %v", d, err)
	}
	if next := d.At.Add(d.Wait); next.UnixMicro()%time.Hour.Microseconds() != 0 || d.Wait > time.Hour {
		t.Fatalf("retry at %v (in %v): not the next full hour of the server's clock", next, d.Wait)
	}
}

// TestClockNeverGoesBack: an instant earlier than the latest one a limiter
// has seen (a failover to a server whose clock is behind, or a test clock
// set back) is taken as that latest one.
func TestClockNeverGoesBack(t *testing.T) {
	c := newClient(t, sharedAddr(t))
	ctx := ctxT(t)
	clk := &manual{t: time.UnixMicro(1_800_000_000_000_000)}
	t0 := clk.t
	for name, w := range allKinds(t, c, WithClock(clk.now)) {
		clk.t = t0
		if _, err := w.Admit(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.t = t0.Add(-time.Hour)
		d, err := w.Admit(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.At.Equal(t0) {
			t.Fatalf("%s: decided at t0%+v after seeing t0", name, d.At.Sub(t0))
		}
	}
}
