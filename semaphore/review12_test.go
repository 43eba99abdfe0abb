package semaphore

import (
	"context"
	"testing"
	"time"

	"github.com/ratesem/ratesem/redistest"
)

// Begin(0) over Redis holds nothing, so End(0, actual) finds no held call
// and releases 0: the debit of a call estimated at 0 that cost 9 never
// reaches Redis, where in process (TestReview12BeginZeroDebitsInProcess)
// it is counted. The processes sharing the limit then count 9 units less
// than the server.
func TestReview12RedisBeginZeroDebit(t *testing.T) {
	c := newClient(t, redistest.Start(t).Addr())
	name := uniqueName(t)
	s := newRedisSem(t, c, name, 10, time.Minute)
	call, err := s.Begin(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	call.End(9)
	s.Close() // sends the queued settlement, if any
	other := newRedisSem(t, c, name, 10, time.Minute)
	if other.TryAcquire(2) {
		t.Fatal("after a call estimated at 0 settled to 9 of 10: 2 units admitted, want at most 1")
	}
}

// The same in process: the debit counts.
func TestReview12BeginZeroDebitsInProcess(t *testing.T) {
	s := New(10, time.Minute)
	call, err := s.Begin(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	call.End(9)
	if s.TryAcquire(2) {
		t.Fatal("2 admitted after a debit of 9 of 10")
	}
}
