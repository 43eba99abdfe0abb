package semaphore

import (
	"context"
	"testing"
	"time"

	"github.com/ratesem/ratesem/redistest"
)

// Begin and End over Redis: a call settled below its estimate gives the
// difference back to every process sharing the limit, one settled above it
// takes more, once the settlement reaches Redis (in the background).
func TestRedisBeginEndSettles(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	name := uniqueName(t)
	s := newRedisSem(t, c, name, 10, time.Minute)
	other := newRedisSem(t, c, name, 10, time.Minute) // another process
	call, err := s.Begin(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	call.End(3)
	s.Close() // sends the queued settlement
	if !other.TryAcquire(7) || other.TryAcquire(1) {
		t.Fatal("after a settlement to 3 of 10: want exactly 7 free in the other process")
	}

	name = uniqueName(t)
	s2 := newRedisSem(t, c, name, 10, time.Minute)
	call, _ = s2.Begin(context.Background(), 2)
	call.End(9)
	s2.Close()
	s3 := newRedisSem(t, c, name, 10, time.Minute)
	if s3.TryAcquire(2) || !s3.TryAcquire(1) {
		t.Fatal("after a settlement to 9 of 10: want exactly 1 unit free")
	}
}
