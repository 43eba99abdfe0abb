package rstore

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/window"
)

// TestAdmitLua: the exported script with AdmitCall's KEYS and ARGV decides
// as Admit does, on the same state.
func TestAdmitLua(t *testing.T) {
	clk := newClock()
	s, rdb := newStore(t, clk, time.Minute)
	ctx := context.Background()
	sc := goredis.NewScript(AdmitLua())
	cs := []Charge{{Rule: "r", Key: "k", Spec: &Spec{Kind: GCRA, Limit: window.Limit{N: 2, Per: time.Second}, Burst: 2}, Weight: 1}}
	keys, args, err := s.AdmitCall("x", cs, "0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{1, 1, 0} {
		v, err := sc.Run(ctx, rdb, keys, args...).Slice()
		if err != nil || len(v) < 6 || v[0] != want {
			t.Fatalf("call %d: %v %v, want ok=%d", i, v, err, want)
		}
	}
	if d, err := s.Admit(ctx, "x", cs); err != nil || d.OK || d.Wait != 500*time.Millisecond {
		t.Fatalf("Admit after the raw script filled the limiter: %+v %v", d, err)
	}
	if _, _, err := s.AdmitCall("x", nil, "0123456789abcdef"); err == nil {
		t.Fatal("AdmitCall with no charge: no error")
	}
}
