package remote

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rspec"
	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/window"
)

// engineOn returns an Engine over a Store of its own client of the server
// at addr (a process of a fleet).
func engineOn(t *testing.T, addr string, cfg Config) *Engine {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	st, err := rstore.New(c, "rtest", rstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = st
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func completion(n int64, per time.Duration, w int64) []rspec.Charge {
	return []rspec.Charge{{Rule: "c", Key: "k", Spec: &rspec.Spec{Kind: rspec.Completion, Limit: window.Limit{N: n, Per: per}}, Weight: w}}
}

// admitAll takes calls of cs from e until one is refused and returns them.
func admitAll(t *testing.T, e *Engine, cs []rspec.Charge) []*Call {
	t.Helper()
	var out []*Call
	for range 100 {
		o, err := e.Decide(context.Background(), "s", cs)
		if err != nil {
			t.Fatal(err)
		}
		if o.Call == nil {
			return out
		}
		out = append(out, o.Call)
	}
	t.Fatal("never refused")
	return nil
}

// blockEngine returns an Engine over f handing out blocks of k calls held
// for a minute, closed when the test ends.
func blockEngine(t *testing.T, f *fakeStore, k int64) *Engine {
	t.Helper()
	e, err := New(Config{Store: f, Blocks: k, BlockHold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// gate returns a store hook whose first call closes in and waits until the
// test closes out; later calls pass at once.
func gate() (hook func(context.Context) error, in, out chan struct{}) {
	in, out = make(chan struct{}), make(chan struct{})
	var once sync.Once
	return func(context.Context) error {
		once.Do(func() { close(in); <-out })
		return nil
	}, in, out
}

// blockCall decides one call of cs on e and fails the test unless it was
// taken from a block.
func blockCall(t *testing.T, e *Engine, cs []rspec.Charge) Outcome {
	t.Helper()
	o, err := e.Decide(context.Background(), "s", cs)
	if err != nil || o.Call == nil || o.Call.blk == nil {
		t.Fatalf("%+v %v: want a call of a block", o, err)
	}
	return o
}

const blockHold = 50 * time.Millisecond

// A block's calls are taken with no round trip; the block goes back to
// Redis at the end of its hold once its calls have ended, settled to the
// units they used: another process can then take the rest of the limit.
// While a call taken from it is in flight past the hold, the block still
// counts whole in Redis.
func TestBlockReturn(t *testing.T) {
	srv := redistest.Start(t)
	a := engineOn(t, srv.Addr(), Config{Blocks: 8, BlockHold: blockHold})
	b := engineOn(t, srv.Addr(), Config{})
	cs := completion(10, time.Minute, 1)
	o1, err := a.Decide(context.Background(), "s", cs)
	if err != nil || o1.Call == nil {
		t.Fatalf("first: %+v %v", o1, err)
	}
	o2, err := a.Decide(context.Background(), "s", cs)
	if err != nil || o2.Call == nil {
		t.Fatalf("second: %+v %v", o2, err)
	}
	if n := a.Stats().RedisAdmits; n != 1 {
		t.Fatalf("%d admission round trips for 2 calls of one block, want 1", n)
	}
	if st := a.Stats(); st.InFlight != 2 || st.Admitted != 2 {
		t.Fatalf("stats %+v: want 2 in flight, 2 admitted", st)
	}
	// The block holds 8 of 10: the other process gets 2.
	if got := admitAll(t, b, cs); len(got) != 2 {
		t.Fatalf("other process: %d calls beside a block of 8, want 2", len(got))
	}
	o1.Call.Release()
	time.Sleep(3 * blockHold) // past the hold, one call still in flight
	if o, err := b.Decide(context.Background(), "s", cs); err != nil || o.Call != nil {
		t.Fatalf("a call of the block in flight past the hold: the other process got %+v %v; want refused", o, err)
	}
	o2.Call.Release()
	deadline := time.Now().Add(2 * time.Second)
	var got []*Call
	for len(got) < 6 && time.Now().Before(deadline) {
		got = append(got, admitAll(t, b, cs)...)
		time.Sleep(5 * time.Millisecond)
	}
	// 10 − 2 (b's) − 2 (the block's used calls, ended within the minute).
	if len(got) != 6 {
		t.Fatalf("after the block went back: %d calls, want 6", len(got))
	}
	if more := admitAll(t, b, cs); len(more) != 0 {
		t.Fatalf("%d calls beyond the limit", len(more))
	}
	if st := a.Stats(); st.InFlight != 0 || st.ReleasesFailed+st.ReleasesDropped+st.ReleasesLost != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A call of a block settled to less gives its units back with the block;
// a block none of whose calls were used is refunded whole; Close gives the
// idle blocks back.
func TestBlockSettleAndClose(t *testing.T) {
	srv := redistest.Start(t)
	a := engineOn(t, srv.Addr(), Config{Blocks: 4, BlockHold: time.Minute})
	b := engineOn(t, srv.Addr(), Config{})
	cs := completion(10, time.Minute, 2) // a block of 4 calls of 2: 8 units
	o1, _ := a.Decide(context.Background(), "s", cs)
	o2, _ := a.Decide(context.Background(), "s", cs)
	if o1.Call == nil || o2.Call == nil {
		t.Fatal("refused")
	}
	o1.Call.ReleaseSettled([]int64{0})
	o2.Call.ReleaseSettled([]int64{1})
	// The hold is a minute: the block still counts 8 units.
	if got := admitAll(t, b, completion(10, time.Minute, 1)); len(got) != 2 {
		t.Fatalf("beside the block: %d units, want 2", len(got))
	}
	_ = a.Close() // the block goes back: 0 + 1 units used
	deadline := time.Now().Add(2 * time.Second)
	var got []*Call
	for len(got) < 7 && time.Now().Before(deadline) {
		got = append(got, admitAll(t, b, completion(10, time.Minute, 1))...)
		time.Sleep(5 * time.Millisecond)
	}
	if len(got) != 7 {
		t.Fatalf("after Close: %d units, want 7 (10 − 2 − 1 settled)", len(got))
	}
}

// Near the limit, a block that does not fit is refused and the calls are
// admitted one by one at once, as long as one fits.
func TestBlockNearLimit(t *testing.T) {
	srv := redistest.Start(t)
	a := engineOn(t, srv.Addr(), Config{Blocks: 64, BlockHold: blockHold})
	b := engineOn(t, srv.Addr(), Config{})
	// 7 of 10 in flight elsewhere: a block (of 64, clamped to the
	// capacity, 10) cannot fit.
	cs3 := completion(10, time.Minute, 1)
	for range 7 {
		if o, _ := b.Decide(context.Background(), "s", cs3); o.Call == nil {
			t.Fatal("refused")
		}
	}
	start := time.Now()
	got := admitAll(t, a, cs3)
	if len(got) != 3 {
		t.Fatalf("near the limit: %d calls, want the 3 that fit", len(got))
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("near the limit the calls took %v", d)
	}
	for _, c := range got {
		if c.blk != nil {
			t.Fatal("a call from a block that cannot fit")
		}
	}
	// One refused block, then one round trip per call while it cools.
	if n := a.Stats().RedisAdmits; n > 1+4 {
		t.Fatalf("%d admission round trips for 4 decisions", n)
	}
}

// Signatures that count starts (a sliding log, GCRA), alone or beside a
// completion window, never take a block; a completion window does.
func TestBlockBypass(t *testing.T) {
	srv := redistest.Start(t)
	a := engineOn(t, srv.Addr(), Config{Blocks: 8, BlockHold: time.Minute})
	comp := completion(1000, time.Minute, 1)[0]
	log := rspec.Charge{Rule: "l", Key: "k", Spec: &rspec.Spec{Kind: rspec.SlidingLog, Limit: window.Limit{N: 1000, Per: time.Minute}}, Weight: 1}
	gcra := rspec.Charge{Rule: "g", Key: "k", Spec: &rspec.Spec{Kind: rspec.GCRA, Limit: window.Limit{N: 1000, Per: time.Minute}, Burst: 1000}, Weight: 1}
	for _, cs := range [][]rspec.Charge{{log}, {gcra}, {comp, log}, {gcra, comp}} {
		before := a.Stats().RedisAdmits
		for i := range 3 {
			o, err := a.Decide(context.Background(), "s", cs)
			if err != nil || o.Call == nil {
				t.Fatalf("%v: %+v %v", cs, o, err)
			}
			if o.Call.blk != nil {
				t.Fatalf("%v: call %d from a block", cs, i)
			}
			o.Call.Release()
		}
		if n := a.Stats().RedisAdmits - before; n != 3 {
			t.Fatalf("%v: %d round trips for 3 calls, want 3", cs, n)
		}
	}
	a.mu.Lock()
	n := len(a.blocks)
	a.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d signatures with blocks", n)
	}
	o, _ := a.Decide(context.Background(), "s", []rspec.Charge{comp})
	if o.Call == nil || o.Call.blk == nil {
		t.Fatal("a completion window took no block")
	}
	o.Call.Release()
}

// New refuses a block of 1 call, a negative one, and a block without a
// hold.
func TestBlockConfig(t *testing.T) {
	st := &fakeStore{}
	for _, c := range []Config{{Blocks: 1, BlockHold: time.Second}, {Blocks: -2, BlockHold: time.Second}, {Blocks: 2}} {
		c.Store = st
		if e, err := New(c); err == nil {
			_ = e.Close()
			t.Errorf("New(Blocks %d, BlockHold %v) accepted", c.Blocks, c.BlockHold)
		}
	}
}

// While Redis is taken as unreachable no block is used, even one with
// room: calls go to the fallback; a block is never asked of the fallback.
func TestBlockDown(t *testing.T) {
	srv := redistest.Start(t)
	fb := &localFallback{}
	a := engineOn(t, srv.Addr(), Config{Blocks: 8, BlockHold: time.Minute, Fallback: fb, Timeout: 200 * time.Millisecond})
	cs := completion(100, time.Minute, 1)
	o, err := a.Decide(context.Background(), "s", cs)
	if err != nil || o.Call == nil || o.Call.blk == nil {
		t.Fatalf("first: %+v %v; want a call of a block", o, err)
	}
	o.Call.Release()
	srv.Stop()
	// Another signature: its block's round trip fails, and the call goes
	// to the fallback, not the block.
	o, err = a.Decide(context.Background(), "s", completion(100, time.Minute, 2))
	if err != nil || o.Call == nil || !o.Local || o.Call.blk != nil {
		t.Fatalf("Redis down: %+v %v; want a call of the fallback", o, err)
	}
	o.Call.Release()
	// The first signature's block still has room: it is not used.
	o, err = a.Decide(context.Background(), "s", cs)
	if err != nil || o.Call == nil || !o.Local || o.Call.blk != nil {
		t.Fatalf("Redis down, a block with room: %+v %v; want a call of the fallback", o, err)
	}
	o.Call.Release()

	// Without a fallback: ErrUnavailable, not a call of the block. (In a
	// scope of its own: a's prober, carrying its fallback's calls into
	// the restarted Redis, notes the loss of scope "s" there, which holds
	// its limiters full for a Per.)
	srv.Start()
	n := engineOn(t, srv.Addr(), Config{Blocks: 8, BlockHold: time.Minute, Timeout: 200 * time.Millisecond})
	o, err = n.Decide(context.Background(), "n", cs)
	if err != nil || o.Call == nil || o.Call.blk == nil {
		t.Fatalf("first: %+v %v; want a call of a block", o, err)
	}
	defer o.Call.Release()
	srv.Stop()
	if _, err := n.Decide(context.Background(), "n", completion(100, time.Minute, 2)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Redis down: %v; want ErrUnavailable", err)
	}
	if o, err := n.Decide(context.Background(), "n", cs); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Redis down, a block with room: %+v %v; want ErrUnavailable", o, err)
	}
}

// A call of a block settled to more than its weight: the block is settled
// to the sum, a debit counted from the block's return on.
func TestBlockSettleDebit(t *testing.T) {
	srv := redistest.Start(t)
	a := engineOn(t, srv.Addr(), Config{Blocks: 4, BlockHold: blockHold})
	b := engineOn(t, srv.Addr(), Config{})
	cs := completion(10, time.Minute, 1)
	o, _ := a.Decide(context.Background(), "s", cs)
	if o.Call == nil || o.Call.blk == nil {
		t.Fatal("no call of a block")
	}
	o.Call.ReleaseSettled([]int64{6})
	time.Sleep(3 * blockHold)
	deadline := time.Now().Add(2 * time.Second)
	var got []*Call
	for len(got) < 4 && time.Now().Before(deadline) {
		got = append(got, admitAll(t, b, cs)...)
		time.Sleep(5 * time.Millisecond)
	}
	if more := admitAll(t, b, cs); len(got)+len(more) != 4 {
		t.Fatalf("after a block settled to 6: %d units, want 4", len(got)+len(more))
	}
}

// Callers of a signature whose block is being fetched wait for it (ctx
// respected) and then take from it: one admission for them all.
func TestBlockFetchShared(t *testing.T) {
	f := newFake()
	var in, out chan struct{}
	f.admitHook, in, out = gate()
	e := blockEngine(t, f, 8)
	cs := completion(100, time.Minute, 1)
	first := make(chan Outcome, 1)
	go func() {
		o, _ := e.Decide(context.Background(), "s", cs)
		first <- o
	}()
	<-in // the block's admission is under way
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := e.Decide(ctx, "s", cs); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a caller waiting for the fetch, its ctx done: %v", err)
	}
	second := make(chan Outcome, 1)
	go func() {
		o, _ := e.Decide(context.Background(), "s", cs)
		second <- o
	}()
	time.Sleep(10 * time.Millisecond)
	close(out)
	for _, ch := range []chan Outcome{first, second} {
		o := <-ch
		if o.Call == nil || o.Call.blk == nil {
			t.Fatalf("%+v: want a call of the block", o)
		}
		o.Call.Release()
	}
	f.mu.Lock()
	n := f.admits
	f.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d admissions, want 1 (the block)", n)
	}
}

// A caller finding its signature's block past its hold (before the hold's
// timer fired) fetches the next block into the signature the others see:
// the caller after it takes from that block, no third admission.
func TestBlockExpiredRefetchShared(t *testing.T) {
	f := newFake()
	e := blockEngine(t, f, 4)
	cs := completion(100, time.Minute, 1)
	var calls []*Call
	decide := func() {
		t.Helper()
		o := blockCall(t, e, cs)
		calls = append(calls, o.Call)
	}
	decide()
	e.mu.Lock()
	for _, s := range e.blocks {
		s.cur.end = time.Now().Add(-time.Millisecond) // the hold ended; its timer has not fired
	}
	e.mu.Unlock()
	decide() // a new block
	decide() // from that block
	for _, c := range calls {
		c.Release()
	}
	f.mu.Lock()
	n := f.admits
	f.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d admissions for 3 calls (a block, its hold ended, the next block), want 2", n)
	}
}

// Under a fixed completion window, a call taken from a block carries a
// mark of the window it was taken in: a server's count read from its
// response is taken in (a count with a mark of an earlier window is
// dropped), as for a call admitted one by one.
func TestBlockMarkCurrentWindow(t *testing.T) {
	srv := redistest.Start(t)
	const per = 300 * time.Millisecond
	a := engineOn(t, srv.Addr(), Config{Blocks: 4, BlockHold: 10 * time.Second})
	c := rspec.Charge{Rule: "f", Key: "k", Spec: &rspec.Spec{Kind: rspec.FixedCompletion, Limit: window.Limit{N: 20, Per: per}}, Weight: 1}
	cs := []rspec.Charge{c}
	o, err := a.Decide(context.Background(), "s", cs)
	if err != nil || o.Call == nil || o.Call.blk == nil {
		t.Fatalf("%+v %v: want a call of a block", o, err)
	}
	defer o.Call.Release()
	// Into the next window, on Redis's clock.
	at, seen := o.Call.Admitted()
	next := at.Truncate(per).Add(per)
	time.Sleep(next.Sub(at) - time.Since(seen) + 30*time.Millisecond)
	o, err = a.Decide(context.Background(), "s", cs)
	if err != nil || o.Call == nil {
		t.Fatalf("%+v %v", o, err)
	}
	defer o.Call.Release()
	at, seen = o.Call.Admitted()
	got := make(chan int64, 1)
	a.ReconcileAtThen("s", c, 20, rspec.Read{Seen: at.Add(time.Since(seen)), Mark: o.Call.Mark(0), Weight: 1}, func(added int64, err error) {
		if err != nil {
			t.Error(err)
		}
		got <- added
	})
	select {
	case n := <-got:
		if n <= 0 {
			t.Fatalf("a full window reported by a call of the block taken in the next window: %d units taken in, want > 0", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("then not called")
	}
}

// errAfterFirst is a context whose Err is nil once, then Canceled: a
// caller's ctx that ends after Decide began.
type errAfterFirst struct {
	context.Context
	n  int
	mu sync.Mutex
}

func (c *errAfterFirst) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n++; c.n > 1 {
		return context.Canceled
	}
	return nil
}

// A caller whose ctx ended once Decide began takes no call of a live
// block (as Decide without blocks returns ctx.Err()): no trace, the block
// keeps the call for others.
func TestBlockCtxDoneNoTake(t *testing.T) {
	f := newFake()
	e := blockEngine(t, f, 4)
	cs := completion(100, time.Minute, 1)
	o := blockCall(t, e, cs)
	defer o.Call.Release()
	if o, err := e.Decide(&errAfterFirst{Context: context.Background()}, "s", cs); !errors.Is(err, context.Canceled) || o.Call != nil {
		if o.Call != nil {
			o.Call.Release()
		}
		t.Fatalf("ctx ended after Decide began: %+v %v; want context.Canceled", o, err)
	}
	if st := e.Stats(); st.Admitted != 1 || st.InFlight != 1 {
		t.Fatalf("stats %+v: want 1 admitted, 1 in flight", st)
	}
	e.mu.Lock()
	used := o.Call.blk.used
	e.mu.Unlock()
	if used != 1 {
		t.Fatalf("the block handed out %d calls, want 1", used)
	}
}

// A loss of Redis's state that this process learns of (an admission of
// the scope reports it) stops the scope's blocks: Redis no longer counts
// them, and holds the limiters full for a Per, which the calls of the
// lost block must not bypass.
func TestBlockStateLost(t *testing.T) {
	srv := redistest.Start(t)
	a := engineOn(t, srv.Addr(), Config{Blocks: 4, BlockHold: 10 * time.Second})
	cs := completion(10, 5*time.Second, 1)
	o, err := a.Decide(context.Background(), "s", cs)
	if err != nil || o.Call == nil || o.Call.blk == nil {
		t.Fatalf("%+v %v: want a call of a block", o, err)
	}
	o.Call.Release()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	log := []rspec.Charge{{Rule: "l", Key: "k", Spec: &rspec.Spec{Kind: rspec.SlidingLog, Limit: window.Limit{N: 100, Per: time.Minute}}, Weight: 1}}
	o, err = a.Decide(context.Background(), "s", log)
	if err != nil {
		t.Fatal(err)
	}
	if o.Call != nil {
		o.Call.Release()
	}
	if n := a.Stats().StateLost; n == 0 {
		t.Skip("the loss was not reported to this process")
	}
	o, err = a.Decide(context.Background(), "s", cs)
	if err != nil {
		t.Fatal(err)
	}
	if o.Call != nil {
		o.Call.Release()
		t.Fatalf("after a loss of Redis's state: a call (of a block: %v) while Redis holds the limiter full", o.Call.blk != nil)
	}
}

// Calls of a block settled to huge weights settle the block to a huge
// weight (saturated), never to a sum wrapped below zero (a refund).
func TestBlockSettleSaturates(t *testing.T) {
	f := newFake()
	e := blockEngine(t, f, 4)
	cs := completion(100, time.Minute, 1)
	for range 2 {
		o := blockCall(t, e, cs)
		o.Call.ReleaseSettled([]int64{math.MaxInt64})
	}
	_ = e.Close() // the block goes back
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.settles) != 1 || f.settles[0][0] < rspec.MaxN {
		t.Fatalf("settlements %v: want one, of at least MaxN", f.settles)
	}
}

// The end of a block's last call, which gives the block back, is sent
// (OnSent) once the block's return has been sent to Redis, not at once:
// the engine waits for its own releases to reach Redis before it takes a
// refusal for the answer (TryAcquire).
func TestBlockOnSentAfterReturn(t *testing.T) {
	f := newFake()
	var in, out chan struct{}
	f.releaseHook, in, out = gate()
	e := blockEngine(t, f, 2)
	cs := completion(100, time.Minute, 1)
	var calls []*Call
	for range 2 { // the block's 2 calls: it hands out no more
		o := blockCall(t, e, cs)
		calls = append(calls, o.Call)
	}
	first, last := make(chan struct{}), make(chan struct{})
	calls[0].OnSent(func() { close(first) })
	calls[1].OnSent(func() { close(last) })
	calls[0].Release()
	<-first // nothing of Redis's changes at this end
	calls[1].Release()
	<-in // the block's return is on its way
	select {
	case <-last:
		t.Fatal("the last call's end reported sent before the block's return was")
	case <-time.After(50 * time.Millisecond):
	}
	close(out)
	select {
	case <-last:
	case <-time.After(5 * time.Second):
		t.Fatal("the last call's end never reported sent")
	}
}

// A block admitted as Close is called (after the admission's own check
// of Close) is cancelled in Redis, not left there until its lease.
func TestBlockCloseDuringFetch(t *testing.T) {
	f := newFake()
	e := blockEngine(t, f, 4)
	testAfterFetch = func() {
		go e.Close()
		for !e.Closed() {
			time.Sleep(time.Millisecond)
		}
	}
	defer func() { testAfterFetch = nil }()
	if _, err := e.Decide(context.Background(), "s", completion(100, time.Minute, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Close during the fetch: %v; want ErrClosed", err)
	}
	_ = e.Close() // waits for the round trips
	if n := f.inFlight(); n != 0 {
		t.Fatalf("%d admissions left in Redis after Close (a block admitted as Close came)", n)
	}
}
