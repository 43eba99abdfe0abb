package exchangetest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/ratesem/ratesem/exchange/exchangetest"
)

func TestMaxInWindow(t *testing.T) {
	t0 := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	const ms = time.Millisecond
	a := func(d time.Duration, ip, inst string, status int) exchangetest.Arrival {
		return exchangetest.Arrival{At: at(d), IP: ip, InstID: inst, Status: status}
	}
	kA := exchangetest.Key{IP: "1.1.1.1", InstID: "BTC-USDT-SWAP"}
	kB := exchangetest.Key{IP: "1.1.1.1", InstID: "ETH-USDT-SWAP"}
	kC := exchangetest.Key{IP: "2.2.2.2", InstID: "BTC-USDT-SWAP"}

	tests := []struct {
		name     string
		arrivals []exchangetest.Arrival
		window   time.Duration
		accepted bool
		want     map[exchangetest.Key]int
	}{
		{
			name:   "empty",
			window: time.Second,
			want:   map[exchangetest.Key]int{},
		},
		{
			name:     "single",
			arrivals: []exchangetest.Arrival{a(0, "1.1.1.1", "BTC-USDT-SWAP", 200)},
			window:   time.Second,
			want:     map[exchangetest.Key]int{kA: 1},
		},
		{
			name: "boundary exactly at t-window is outside (t-window, t]",
			arrivals: []exchangetest.Arrival{
				a(0, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(1000*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(2000*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
			},
			window: time.Second,
			want:   map[exchangetest.Key]int{kA: 1},
		},
		{
			name: "one nanosecond inside the window counts",
			arrivals: []exchangetest.Arrival{
				a(0, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(time.Second-1, "1.1.1.1", "BTC-USDT-SWAP", 200),
			},
			window: time.Second,
			want:   map[exchangetest.Key]int{kA: 2},
		},
		{
			name: "equal timestamps all count",
			arrivals: []exchangetest.Arrival{
				a(5*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(5*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(5*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(0, "1.1.1.1", "BTC-USDT-SWAP", 200),
			},
			window: 5 * ms,
			want:   map[exchangetest.Key]int{kA: 3},
		},
		{
			name: "equal timestamps at the end of a run are counted",
			arrivals: []exchangetest.Arrival{
				a(0, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(9*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(9*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
			},
			window: 10 * ms,
			want:   map[exchangetest.Key]int{kA: 3},
		},
		{
			name: "unsorted input, sliding maximum in the middle",
			arrivals: []exchangetest.Arrival{
				a(2500*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(0, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(1900*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(100*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(2000*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(2100*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(5000*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
			},
			window: 2 * time.Second,
			// (0.1, 2.1]: 1.9, 2.0, 2.1 -> 3; (0.5, 2.5]: 1.9, 2.0, 2.1, 2.5 -> 4;
			// (-0.1, 1.9] holds 0, 0.1, 1.9 -> 3.
			want: map[exchangetest.Key]int{kA: 4},
		},
		{
			name: "several keys are independent",
			arrivals: []exchangetest.Arrival{
				a(0, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(1*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(1*ms, "1.1.1.1", "ETH-USDT-SWAP", 200),
				a(2*ms, "2.2.2.2", "BTC-USDT-SWAP", 200),
				a(3*ms, "2.2.2.2", "BTC-USDT-SWAP", 200),
				a(4*ms, "2.2.2.2", "BTC-USDT-SWAP", 200),
			},
			window: time.Second,
			want:   map[exchangetest.Key]int{kA: 2, kB: 1, kC: 3},
		},
		{
			name: "accepted=false counts every arrival",
			arrivals: []exchangetest.Arrival{
				a(0, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(1*ms, "1.1.1.1", "BTC-USDT-SWAP", 429),
				a(2*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(3*ms, "1.1.1.1", "ETH-USDT-SWAP", 429),
			},
			window:   time.Second,
			accepted: false,
			want:     map[exchangetest.Key]int{kA: 3, kB: 1},
		},
		{
			name: "accepted=true counts only 200 and omits keys without any",
			arrivals: []exchangetest.Arrival{
				a(0, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(1*ms, "1.1.1.1", "BTC-USDT-SWAP", 429),
				a(2*ms, "1.1.1.1", "BTC-USDT-SWAP", 200),
				a(3*ms, "1.1.1.1", "ETH-USDT-SWAP", 429),
				a(4*ms, "2.2.2.2", "BTC-USDT-SWAP", 400),
			},
			window:   time.Second,
			accepted: true,
			want:     map[exchangetest.Key]int{kA: 2},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]exchangetest.Arrival(nil), tc.arrivals...)
			got := exchangetest.MaxInWindow(tc.arrivals, tc.window, tc.accepted)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, in, tc.arrivals, "input must not be modified")
		})
	}
}

func TestMaxInWindowPanicsOnNonPositiveWindow(t *testing.T) {
	assert.Panics(t, func() { exchangetest.MaxInWindow(nil, 0, false) })
	assert.Panics(t, func() { exchangetest.MaxInWindow(nil, -time.Second, true) })
}

// TestMaxInWindowMatchesBruteForce compares MaxInWindow with a quadratic
// definition-level computation on pseudo-random logs.
func TestMaxInWindowMatchesBruteForce(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	const window = 10 * time.Millisecond
	keys := []string{"A", "B", "C"}
	seed := uint32(12345)
	next := func(n uint32) uint32 { // xorshift, deterministic
		seed ^= seed << 13
		seed ^= seed >> 17
		seed ^= seed << 5
		return seed % n
	}
	for round := 0; round < 50; round++ {
		var arr []exchangetest.Arrival
		for i := 0; i < 60; i++ {
			status := 200
			if next(3) == 0 {
				status = 429
			}
			arr = append(arr, exchangetest.Arrival{
				At:     t0.Add(time.Duration(next(40)) * time.Millisecond / 2),
				IP:     "127.0.0.1",
				InstID: keys[next(uint32(len(keys)))],
				Status: status,
			})
		}
		for _, accepted := range []bool{false, true} {
			want := map[exchangetest.Key]int{}
			for _, end := range arr {
				n := 0
				for _, x := range arr {
					if x.Key() != end.Key() || (accepted && !x.Accepted()) {
						continue
					}
					if x.At.After(end.At.Add(-window)) && !x.At.After(end.At) {
						n++
					}
				}
				if n > want[end.Key()] {
					want[end.Key()] = n
				}
			}
			assert.Equal(t, want, exchangetest.MaxInWindow(arr, window, accepted), "round %d accepted=%v", round, accepted)
		}
	}
}
