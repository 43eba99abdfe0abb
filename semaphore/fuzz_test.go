package semaphore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// FuzzSemaphore drives a RateSemaphore over every policy with fuzzer-chosen
// TryAcquire, Acquire (with a short deadline), Release, SetLimit, PauseFor
// and time steps, taking arbitrary int64 weights, limits and delays
// (negative and huge included), on virtual time. It asserts: no panic (the
// fuzzer never releases more than it holds, a documented caller bug),
// negative weights refused with ratesem.ErrNegativeWeight, InFlight equal to the
// units held, and, between two SetLimit calls, the policy's bound over the
// recorded starts.
func FuzzSemaphore(f *testing.F) {
	op := func(kind byte, v int64) []byte {
		return binary.LittleEndian.AppendUint64([]byte{kind}, uint64(v))
	}
	cat := func(bs ...[]byte) (out []byte) {
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	for i := range len(policyCases) {
		f.Add(uint8(i), int64(10), int64(time.Second), cat(op(0, 1), op(0, -1), op(0, math.MaxInt64), op(2, 1), op(5, int64(time.Second))))
		f.Add(uint8(i), int64(3), int64(time.Minute), cat(op(4, math.MaxInt64), op(0, 1), op(3, math.MaxInt64), op(1, 2), op(2, 0)))
	}
	f.Fuzz(func(t *testing.T, idx uint8, n, per int64, ops []byte) {
		pc := policyCases[int(idx)%len(policyCases)]
		nonNeg := func(v int64) int64 {
			if v < 0 {
				return -(v + 1)
			}
			return v
		}
		l := window.Limit{N: nonNeg(n) % (1 << 16), Per: time.Duration(nonNeg(per) % int64(24*time.Hour))}
		synctest.Test(t, func(t *testing.T) {
			s := semaphore.NewWithPolicy(pc.make(l))
			var held []int64
			var starts []time.Time
			var weights []int64
			var maxW int64
			check := func() {
				if l.N == 0 || l.Per == 0 {
					return
				}
				bound, span := pc.bound(l, max(maxW, 1))
				for i := range starts {
					var sum int64
					for j := i; j < len(starts) && starts[j].Sub(starts[i]) < span; j++ {
						sum += weights[j]
					}
					if sum > bound {
						t.Fatalf("%s %v: %d units in a window of %v, bound %d", pc.name, l, sum, span, bound)
					}
				}
			}
			admitted := func(w int64) {
				held = append(held, w)
				if w > 0 {
					starts, weights = append(starts, time.Now()), append(weights, w)
					maxW = max(maxW, w)
				}
			}
			for len(ops) > 0 {
				kind := ops[0] % 6
				ops = ops[1:]
				var v int64
				if len(ops) >= 8 {
					v = int64(binary.LittleEndian.Uint64(ops))
					ops = ops[8:]
				}
				w := v
				if w > 0 && w&1 == 0 {
					w = 1 + w%4
				}
				switch kind {
				case 0:
					ok := s.TryAcquire(w)
					if ok && w < 0 {
						t.Fatalf("TryAcquire(%d) admitted", w)
					}
					if ok {
						admitted(w)
					}
				case 1:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(nonNeg(v)%int64(time.Minute)))
					err := s.Acquire(ctx, w)
					cancel()
					switch {
					case w < 0 && !errors.Is(err, ratesem.ErrNegativeWeight):
						t.Fatalf("Acquire(%d) = %v, want ratesem.ErrNegativeWeight", w, err)
					case err == nil:
						admitted(w)
					}
				case 2:
					if k := len(held); k > 0 {
						i := int(nonNeg(v) % int64(k))
						s.Release(held[i])
						held = append(held[:i], held[i+1:]...)
					}
				case 3:
					s.PauseFor(time.Duration(v))
					if v > int64(time.Minute) || v < 0 {
						s.Pause(time.Time{}) // changes nothing
					}
				case 4:
					check()
					nl := window.Limit{N: nonNeg(v) % (1 << 16), Per: l.Per}
					if v&1 == 1 {
						nl.Per = time.Duration(nonNeg(v>>1) % int64(24*time.Hour))
					}
					if _, isLog := s.Limit(), pc.name == "sliding-log"; isLog {
						nl.Per = l.Per // its bound's margin is fixed; keep Per
					}
					if err := s.SetLimit(nl.N, nl.Per); err != nil {
						t.Fatal(err)
					}
					if err := s.SetLimit(-1, nl.Per); err == nil {
						t.Fatal("SetLimit(-1) accepted")
					}
					l, starts, weights, maxW = nl, starts[:0], weights[:0], 0
				case 5:
					time.Sleep(time.Duration(nonNeg(v) % int64(2*time.Hour)))
				}
				var sum int64
				for _, h := range held {
					sum += h
				}
				if st := s.Stats(); st.InFlight != sum {
					t.Fatalf("InFlight = %d, holding %d", st.InFlight, sum)
				}
			}
			check()
			for _, h := range held {
				s.Release(h)
			}
		})
	})
}
