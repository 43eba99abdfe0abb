package rstore

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// vclock is a virtual clock the store reads instead of the server's TIME.
type vclock struct{ t time.Time }

func (c *vclock) now() time.Time      { return c.t }
func (c *vclock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *vclock               { return &vclock{t: time.UnixMicro(1_700_000_000_000_000)} }
func spec(k Kind, n int64, per time.Duration) *Spec {
	return &Spec{Kind: k, Limit: window.Limit{N: n, Per: per}}
}

func newStore(t *testing.T, clk *vclock, lease time.Duration) (*Store, *goredis.Client) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { c.Close() })
	o := Options{Lease: lease}
	if clk != nil {
		o.Now = clk.now
	}
	s, err := New(c, "rstest:"+t.Name(), o)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func TestSmokeCompletion(t *testing.T) {
	clk := newClock()
	s, _ := newStore(t, clk, time.Minute)
	ctx := context.Background()
	sp := spec(Completion, 2, time.Second)
	c := []Charge{{Rule: "r", Key: "k", Spec: sp, Weight: 1}}
	d1, err := s.Admit(ctx, "sc", c)
	if err != nil || !d1.OK || !d1.Leased {
		t.Fatalf("first: %+v %v", d1, err)
	}
	d2, _ := s.Admit(ctx, "sc", c)
	d3, err := s.Admit(ctx, "sc", c)
	if err != nil || !d2.OK || d3.OK || !d3.Release {
		t.Fatalf("second %+v third %+v %v", d2, d3, err)
	}
	clk.add(100 * time.Millisecond)
	if err := s.Release(ctx, "sc", c, d1.Token); err != nil {
		t.Fatal(err)
	}
	d4, _ := s.Admit(ctx, "sc", c)
	if d4.OK || d4.Release || d4.Wait != time.Second {
		t.Fatalf("after release: %+v, want a wait of 1s", d4)
	}
	clk.add(time.Second)
	d5, _ := s.Admit(ctx, "sc", c)
	if !d5.OK {
		t.Fatalf("a Per after the end: %+v", d5)
	}
	if err := s.Release(ctx, "sc", c, d1.Token); !errors.Is(err, ErrNotInFlight) {
		t.Fatalf("second release: %v", err)
	}
}
