package redis

import (
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// TestLuaArithmeticIsExact checks the scripts' integer helpers on the
// server, where numbers are doubles: muldiv (floor(a·b/c) and a·b mod c)
// and ceilwait (ceil((x·y − z)/d)) against math/big, for operands up to
// 2^53 whose products reach 2^106, where plain double arithmetic would be
// off.
func TestLuaArithmeticIsExact(t *testing.T) {
	c := newClient(t, sharedAddr(t))
	ctx := ctxT(t)
	probe := goredis.NewScript(prelude + `
local a, b, c, z = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local q, r = muldiv(a, b, c)
return {num(q), num(r), num(ceilwait(a, b, z, c)), num(fdiv(a, c))}
`)
	r := rand.New(rand.NewPCG(1, 2))
	draw := func() int64 {
		bits := 1 + r.IntN(53)
		v := r.Int64N(int64(1)<<bits) + 1
		return min(v, 1<<53-1)
	}
	max53 := big.NewInt(1 << 53)
	for i := range 3000 {
		a, b, d := draw(), draw(), draw()
		if i%3 == 0 {
			b = int64(1)<<53 - 1 - r.Int64N(1000) // the top of the range
		}
		// z ≤ a·b and below 2^53, for ceilwait
		ab := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
		z := r.Int64N(1 << 53)
		if ab.Cmp(big.NewInt(z)) < 0 {
			z = ab.Int64()
		}
		got, err := probe.Run(ctx, c, nil, a, b, d, z).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		q, m := new(big.Int).QuoRem(ab, big.NewInt(d), new(big.Int))
		if q.Cmp(max53) > 0 {
			q = max53 // muldiv saturates
		}
		cw := new(big.Int).Sub(ab, big.NewInt(z))
		cw.Add(cw, big.NewInt(d-1)).Quo(cw, big.NewInt(d))
		if cw.Cmp(max53) > 0 {
			cw = max53
		}
		want := []string{q.String(), m.String(), cw.String(), strconv.FormatInt(a/d, 10)}
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("a=%d b=%d c=%d z=%d: got %v, want %v", a, b, d, z, got, want)
			}
		}
	}
}
