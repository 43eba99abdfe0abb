package httpclient

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"
)

// nopLimiter admits everything and counts the units in flight.
type nopLimiter struct{ held int64 }

func (l *nopLimiter) Acquire(context.Context, int64) error { return nil }
func (l *nopLimiter) Release(n int64)                      { l.held -= n }
func (l *nopLimiter) PauseFor(time.Duration)               {}

// stream is a reply body of size bytes (byte i is i*7 mod 251, so that any
// shift shows), read in chunks of the sizes given in turn.
type stream struct {
	size, off int
	sizes     []int
	i         int
}

func (s *stream) Read(p []byte) (int, error) {
	if s.off >= s.size {
		return 0, io.EOF
	}
	n := min(len(p), s.sizes[s.i%len(s.sizes)], s.size-s.off)
	s.i++
	for j := range n {
		p[j] = byte((s.off + j) * 7 % 251)
	}
	s.off += n
	return n, nil
}

func (s *stream) Close() error { return nil }

// tail returns the last n bytes of a stream of size bytes.
func tail(size, n int) []byte {
	n = min(n, size)
	out := make([]byte, n)
	for j := range out {
		out[j] = byte((size - n + j) * 7 % 251)
	}
	return out
}

// The kept body never grows past keepMax (1 MiB), whatever the reads' sizes,
// and the settlement sees exactly the body's last keepMax bytes (1 MiB). On
// 3c9e6ad the buffer reached twice the bound (2 MiB, 2.25 MiB of capacity)
// before it slid.
func TestKeptBodyStaysWithinKeepMax(t *testing.T) {
	const bound = keepMax
	for _, tc := range []struct {
		size  int
		sizes []int
		buf   int
	}{
		{3 << 20, []int{32 << 10}, 32 << 10},                  // a streamed 3 MiB reply
		{3 << 20, []int{4096, 1, 65536, 333}, 1 << 20},        // ragged reads
		{3<<20 + 5, []int{bound + 3}, bound + 3},              // reads larger than the bound
		{bound - 1, []int{100}, 100},                          // shorter than the bound
		{bound, []int{bound}, bound},                          // exactly the bound
		{bound + 1, []int{bound, 1}, bound},                   // one byte past it
		{10, []int{3}, 3},                                     // tiny
		{5 << 20, []int{bound - 1, 2, bound + 10}, 2 * bound}, // around the ring's edge
	} {
		t.Run(fmt.Sprintf("%d/%v", tc.size, tc.sizes), func(t *testing.T) {
			l := &nopLimiter{held: 1}
			var got []byte
			settled := 0
			rc := wrapBody(&stream{size: tc.size, sizes: tc.sizes}, l, 1, nil, func(b []byte, _ bool) {
				settled++
				got = bytes.Clone(b)
			})
			b := rc.(*body)
			buf := make([]byte, tc.buf)
			peak := 0
			for {
				_, err := rc.Read(buf)
				peak = max(peak, cap(b.keep))
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if peak > bound {
				t.Fatalf("the kept body reached a capacity of %d bytes; keepMax is %d", peak, bound)
			}
			if settled != 1 || l.held != 0 {
				t.Fatalf("settled %d times, %d units held", settled, l.held)
			}
			if want := tail(tc.size, bound); !bytes.Equal(got, want) {
				t.Fatalf("settled on %d bytes, not the body's last %d", len(got), len(want))
			}
		})
	}
}

// 50 streamed replies of 3 MiB in flight (read to their last byte, not yet
// to io.EOF) hold at most keepMax (1 MiB) each, plus a little: measured with
// runtime.MemStats. On 3c9e6ad they held 113 MiB (2.25 MiB each).
func TestKeptBodiesInFlightMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 50 MiB")
	}
	const calls, size = 50, 3 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	bodies := make([]io.ReadCloser, calls)
	buf := make([]byte, 32<<10)
	for i := range bodies {
		bodies[i] = wrapBody(&stream{size: size, sizes: []int{32 << 10}}, &nopLimiter{held: 1}, 1, nil, func([]byte, bool) {})
		for read := 0; read < size; {
			n, err := bodies[i].Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			read += n
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d replies of %d MiB in flight hold %.1f MiB (%.2f MiB each); keepMax %d MiB",
		calls, size>>20, float64(held)/(1<<20), float64(held)/(1<<20)/calls, keepMax>>20)
	if limit := int64(calls)*keepMax + 1<<20; held > limit {
		t.Fatalf("%d bytes held by %d replies in flight: want at most %d", held, calls, limit)
	}
	for _, b := range bodies {
		b.Close()
	}
	runtime.KeepAlive(bodies)
}
