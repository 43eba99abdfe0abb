package httpclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// A retried request's response names the caller's request, as on the
// first attempt: not the clone the retry sent (which would also keep a
// replayed body's buffer alive as long as the response).
func TestReview3RetriedResponseNamesCallersRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		body func() io.Reader
	}{
		{"no body", func() io.Reader { return nil }},
		{"GetBody", func() io.Reader { return strings.NewReader(`{"n":1}`) }},
		{"replayed", func() io.Reader { return io.NopCloser(strings.NewReader(`{"n":1}`)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.Body != nil {
					io.ReadAll(r.Body)
					r.Body.Close()
				}
				calls++
				status := http.StatusOK
				if calls == 1 {
					status = http.StatusTooManyRequests
				}
				return &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {"1"}}, Body: http.NoBody, Request: r}, nil
			})
			var seen []byte
			var serr error
			tr := httpclient.NewSelect(readBody(&fakeLimiter{}, &seen, &serr), httpclient.WithBase(base),
				httpclient.WithMaxRetries(1), httpclient.WithMaxRetryAfter(time.Millisecond))
			req := newRequest(t, "POST", "http://api.test/x", tc.body())
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if calls != 2 {
				t.Fatalf("base called %d times, want 2", calls)
			}
			if resp.Request != req {
				t.Errorf("the retried response's Request is %p, want the caller's %p", resp.Request, req)
			}
		})
	}
}

// panicBody panics on Read and counts its Closes.
type panicBody struct {
	mu     sync.Mutex
	closed int
}

func (*panicBody) Read([]byte) (int, error) { panic("panicBody.Read") }
func (b *panicBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed++
	return nil
}
func (b *panicBody) closes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// A caller's body without GetBody whose Read panics, read by the Selector
// through GetBody: the panic reaches the caller of RoundTrip (it is
// recoverable there, as a panic of the body in a direct read would be),
// not a goroutine of the Transport's where it would kill the process; the
// body is closed once and nothing stays held.
func TestReview3ReplayBodyPanicReachesCaller(t *testing.T) {
	body := &panicBody{}
	lim := &fakeLimiter{}
	var seen []byte
	var serr error
	tr := httpclient.NewSelect(readBody(lim, &seen, &serr), httpclient.WithBase(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		t.Error("sent")
		return nil, errors.New("sent")
	})))
	req := newRequest(t, "POST", "http://api.test/x", body)
	got := caught(func() { tr.RoundTrip(req) })
	if got == nil {
		t.Fatal("RoundTrip did not panic")
	}
	if !strings.Contains(strings.ReplaceAll(toString(got), "\n", " "), "panicBody.Read") {
		t.Errorf("panic value %v does not carry the body's", got)
	}
	if n := body.closes(); n != 1 {
		t.Errorf("the caller's body was closed %d times, want 1", n)
	}
	if held, _, _, _ := lim.state(); held != 0 {
		t.Errorf("%d units held after the panic", held)
	}
}

func toString(v any) string {
	if e, ok := v.(error); ok {
		return e.Error()
	}
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

// A Selector that panics (here a pool rule's Key, after it read the body)
// leaves the caller's body closed exactly once: the RoundTripper contract
// has RoundTrip close the body on every way out, and a body without
// GetBody has a read of it in flight that only Close ends.
func TestReview3SelectorPanicClosesBody(t *testing.T) {
	for _, replay := range []bool{false, true} {
		body := newRecordingBody(`{"n":1}`)
		var rbody io.Reader = body
		if !replay {
			rbody = strings.NewReader(`{"n":1}`)
		}
		table := clientpool.Table{
			Rules: []clientpool.Rule{{
				Name:  "r",
				Limit: window.Limit{N: 10, Per: time.Minute},
				Key: func(r *http.Request) (string, bool) {
					if rc, err := r.GetBody(); err == nil {
						io.ReadAll(rc)
					}
					panic("Key")
				},
			}},
			Default: []clientpool.Cost{{Rule: "r"}},
		}
		p, err := clientpool.New(table)
		if err != nil {
			t.Fatal(err)
		}
		tr := httpclient.NewPool(p, httpclient.WithBase(respond(200, nil, http.NoBody)))
		req := newRequest(t, "POST", "http://api.test/x", rbody)
		if replay {
			req.Body = body // no GetBody
			req.GetBody = nil
		} else {
			req.Body = body
		}
		if caught(func() { tr.RoundTrip(req) }) == nil {
			t.Fatal("no panic")
		}
		if n := body.closes(); n != 1 {
			t.Errorf("replay %v: the caller's body was closed %d times, want 1", replay, n)
		}
	}
}

// On every way out of RoundTrip the caller's body is closed exactly once:
// a Selector that reads the body and a limiter that refuses; a negative
// weight; a base that closes it; a 429 retried with the replayed body.
func TestReview3CallersBodyClosedOnce(t *testing.T) {
	closing := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		io.ReadAll(r.Body)
		r.Body.Close()
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	n := 0
	throttledOnce := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		io.ReadAll(r.Body)
		r.Body.Close()
		n++
		status := 200
		if n == 1 {
			status = 429
		}
		return &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {"1"}}, Body: http.NoBody, Request: r}, nil
	})
	refuse := &fakeLimiter{acquireErr: errors.New("no")}
	for _, tc := range []struct {
		name string
		lim  httpclient.Limiter
		w    int64
		base http.RoundTripper
	}{
		{"refused", refuse, 1, closing},
		{"negative weight", &fakeLimiter{}, -1, closing},
		{"sent", &fakeLimiter{}, 1, closing},
		{"retried", &fakeLimiter{}, 1, throttledOnce},
	} {
		body := newRecordingBody(strings.Repeat("x", 1000))
		sel := func(r *http.Request) (httpclient.Limiter, int64) {
			rc, err := r.GetBody()
			if err != nil {
				t.Fatalf("%s: GetBody: %v", tc.name, err)
			}
			io.ReadAll(rc)
			rc.Close()
			return tc.lim, tc.w
		}
		tr := httpclient.NewSelect(sel, httpclient.WithBase(tc.base), httpclient.WithMaxRetries(1), httpclient.WithMaxRetryAfter(time.Millisecond))
		resp, err := tr.RoundTrip(newRequest(t, "POST", "http://api.test/x", body))
		if err == nil {
			resp.Body.Close()
		}
		if c := body.closes(); c != 1 {
			t.Errorf("%s: the caller's body closed %d times, want 1", tc.name, c)
		}
	}
}

// Many goroutines of a Selector calling GetBody at once all get the
// whole body; the base gets it once.
func TestReview3ReplayConcurrentGetBody(t *testing.T) {
	payload := strings.Repeat("0123456789", 50000)
	var sent string
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		b, _ := io.ReadAll(r.Body)
		sent = string(b)
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	sel := func(r *http.Request) (httpclient.Limiter, int64) {
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				rc, err := r.GetBody()
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(rc)
				if string(b) != payload {
					t.Errorf("GetBody gave %d bytes, want %d", len(b), len(payload))
				}
			})
		}
		wg.Wait()
		return &fakeLimiter{}, 1
	}
	tr := httpclient.NewSelect(sel, httpclient.WithBase(base))
	resp, err := tr.RoundTrip(newRequest(t, "POST", "http://api.test/x", io.NopCloser(strings.NewReader(payload))))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if sent != payload {
		t.Errorf("base got %d bytes, want %d", len(sent), len(payload))
	}
}

// A body whose last Read returns data with io.EOF, or data with an error.
func TestReview3ReplayDataWithError(t *testing.T) {
	boom := errors.New("boom")
	for _, last := range []error{io.EOF, boom} {
		body := io.NopCloser(&dataErr{data: []byte("abc"), err: last})
		var seen []byte
		var serr error
		var sent []byte
		var baseErr error
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			sent, baseErr = io.ReadAll(r.Body)
			if baseErr != nil {
				return nil, baseErr
			}
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		})
		tr := httpclient.NewSelect(readBody(&fakeLimiter{}, &seen, &serr), httpclient.WithBase(base))
		resp, err := tr.RoundTrip(newRequest(t, "POST", "http://api.test/x", body))
		if err == nil {
			resp.Body.Close()
		}
		if string(sent) != "abc" {
			t.Errorf("last %v: base got %q, want abc", last, sent)
		}
		if last == io.EOF && (serr != nil || string(seen) != "abc" || err != nil) {
			t.Errorf("data with EOF: GetBody %q %v, RoundTrip %v", seen, serr, err)
		}
		if last == boom && (!errors.Is(serr, boom) || !errors.Is(err, boom)) {
			t.Errorf("data with an error: GetBody %v, RoundTrip %v", serr, err)
		}
	}
}

type dataErr struct {
	data []byte
	err  error
	done bool
}

func (d *dataErr) Read(p []byte) (int, error) {
	if d.done {
		return 0, d.err
	}
	d.done = true
	return copy(p, d.data), d.err
}

// A body without GetBody is buffered for GetBody in about its own size: a
// 30 MiB body allocates at most 33.75 MiB, whether its ContentLength is
// known or not (io.ReadAll's growing buffer allocated 71.7 MiB for it, and
// held up to twice the body at once); a ContentLength of 32 MiB on a body
// of 10 bytes allocates at most 4 MiB.
func TestReview3ReplayAllocatesContentLengthOnce(t *testing.T) {
	const size = 30 << 20
	payload := make([]byte, size)
	for _, tc := range []struct {
		name     string
		n        int
		cl       int64
		maxAlloc uint64
	}{
		{"known", size, size, size + size/8},
		{"unknown", size, 0, size + size/8},
		{"lying", 10, httpclient.MaxReplayBody, 4<<20 + 1<<16},
	} {
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		})
		sel := func(r *http.Request) (httpclient.Limiter, int64) {
			rc, err := r.GetBody()
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := io.Copy(io.Discard, rc); n != int64(tc.n) {
				t.Fatalf("%s: GetBody gave %d bytes, want %d", tc.name, n, tc.n)
			}
			return &fakeLimiter{}, 1
		}
		tr := httpclient.NewSelect(sel, httpclient.WithBase(base))
		req := newRequest(t, "POST", "http://api.test/x", io.NopCloser(bytesReader(payload[:tc.n])))
		req.ContentLength = tc.cl
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		runtime.ReadMemStats(&after)
		got := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %.1f MiB allocated", tc.name, float64(got)/(1<<20))
		if got > tc.maxAlloc {
			t.Errorf("%s ContentLength: a body of %d bytes allocated %.1f MiB to be replayed, want at most %.1f", tc.name, tc.n, float64(got)/(1<<20), float64(tc.maxAlloc)/(1<<20))
		}
	}
}

type byteReader struct {
	b []byte
}

func bytesReader(b []byte) *byteReader { return &byteReader{b} }

func (r *byteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// oneShot returns body in one Read together with io.EOF.
type oneShot struct {
	body string
	done bool
}

func (o *oneShot) Read(p []byte) (int, error) {
	if o.done {
		return 0, io.EOF
	}
	o.done = true
	return copy(p, o.body), io.EOF
}

// Unsettled events count exactly the calls whose body was closed before
// its end and left unsettled: a body read to EOF and closed twice, read
// past EOF, or whose last data came with io.EOF, reports none; one closed
// unread reports one, however often it is closed; 40 concurrent calls, 20
// of them closed unread, report 20. Afterwards nothing is held.
func TestReview3UnsettledCountsExactly(t *testing.T) {
	const usage = `{"id":"x","usage":{"total_tokens":20}}`
	for _, tc := range []struct {
		name   string
		body   func() io.Reader
		finish func(io.ReadCloser)
		want   uint64
	}{
		{"EOF, closed twice", func() io.Reader { return strings.NewReader(usage) },
			func(b io.ReadCloser) { io.ReadAll(b); b.Close(); b.Close() }, 0},
		{"read past EOF", func() io.Reader { return strings.NewReader(usage) },
			func(b io.ReadCloser) { io.ReadAll(b); b.Read(make([]byte, 8)); b.Read(make([]byte, 8)); b.Close() }, 0},
		{"data with EOF", func() io.Reader { return &oneShot{body: usage} },
			func(b io.ReadCloser) { b.Read(make([]byte, 4096)); b.Close() }, 0},
		{"unread, closed twice", func() io.Reader { return strings.NewReader(usage) },
			func(b io.ReadCloser) { b.Close(); b.Close() }, 1},
		{"half read, closed thrice", func() io.Reader { return strings.NewReader(usage) },
			func(b io.ReadCloser) { b.Read(make([]byte, 5)); b.Close(); b.Close(); b.Close() }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var poolM, trM ratesemMetrics
			pool, err := clientpool.New(tokensTable(), clientpool.WithObserver(poolM.observe))
			if err != nil {
				t.Fatal(err)
			}
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(tc.body()), Request: r}, nil
			})
			tr := httpclient.NewPool(pool, httpclient.WithBase(base), httpclient.WithObserver(trM.observe))
			req := newRequest(t, "POST", "http://api.test/v1/chat", nil)
			req.Header.Set("X-Estimate", "60")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			tc.finish(resp.Body)
			if got := trM.count(); got != tc.want {
				t.Errorf("Transport: %d Unsettled events, want %d", got, tc.want)
			}
			if got := poolM.count(); got != tc.want {
				t.Errorf("Pool: %d Unsettled events, want %d", got, tc.want)
			}
			for _, k := range pool.Snapshot() {
				if k.InFlight != 0 {
					t.Errorf("%d in flight after the body was closed", k.InFlight)
				}
			}
		})
	}
	t.Run("40 concurrent", func(t *testing.T) {
		var poolM, trM ratesemMetrics
		table := tokensTable()
		table.Rules[0].Limit.N = 1 << 40
		pool, err := clientpool.New(table, clientpool.WithObserver(poolM.observe))
		if err != nil {
			t.Fatal(err)
		}
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(usage)), Request: r}, nil
		})
		tr := httpclient.NewPool(pool, httpclient.WithBase(base), httpclient.WithObserver(trM.observe))
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Go(func() {
				req := newRequest(t, "POST", "http://api.test/v1/chat", nil)
				req.Header.Set("X-Estimate", "60")
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				if i%2 == 0 {
					io.ReadAll(resp.Body)
				}
				var cw sync.WaitGroup
				for range 3 {
					cw.Go(func() { resp.Body.Close() })
				}
				cw.Wait()
			})
		}
		wg.Wait()
		if trM.count() != 20 || poolM.count() != 20 {
			t.Errorf("Unsettled events: Transport %d, Pool %d; want 20 each", trM.count(), poolM.count())
		}
	})
}

// ratesemMetrics counts Unsettled events.
type ratesemMetrics struct {
	mu sync.Mutex
	n  uint64
}

func (m *ratesemMetrics) observe(e ratesem.Event) {
	if e.Kind == ratesem.Unsettled {
		m.mu.Lock()
		m.n++
		m.mu.Unlock()
	}
}

func (m *ratesemMetrics) count() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// An observer (the Transport's or the Pool's) that panics on an Unsettled
// event: the panic reaches the caller of Close, and the call's units are
// released all the same.
func TestReview3UnsettledObserverPanicLeaksNothing(t *testing.T) {
	for _, who := range []string{"Transport", "Pool"} {
		t.Run(who, func(t *testing.T) {
			boom := func(e ratesem.Event) {
				if e.Kind == ratesem.Unsettled {
					panic("observer")
				}
			}
			var popts []clientpool.Option
			var topts []httpclient.Option
			if who == "Pool" {
				popts = append(popts, clientpool.WithObserver(boom))
			} else {
				topts = append(topts, httpclient.WithObserver(boom))
			}
			table := tokensTable()
			table.Rules[0].MaxUnitsInFlight = 60
			pool, err := clientpool.New(table, popts...)
			if err != nil {
				t.Fatal(err)
			}
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"usage":{"total_tokens":20}}`)), Request: r}, nil
			})
			tr := httpclient.NewPool(pool, append(topts, httpclient.WithBase(base))...)
			req := newRequest(t, "POST", "http://api.test/v1/chat", nil)
			req.Header.Set("X-Estimate", "60")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if caught(func() { resp.Body.Close() }) == nil {
				t.Fatal("no panic")
			}
			resp.Body.Close()
			for _, k := range pool.Snapshot() {
				if k.InFlight != 0 {
					t.Fatalf("%d in flight after the observer's panic", k.InFlight)
				}
			}
		})
	}
}

// Every error a caller of RoundTrip can meet has one "ratesem: " prefix,
// at the start, whatever it wraps: the zero Transport, a negative weight,
// the semaphore's refusals and deadline, the pool's ErrNoEndpoint,
// negative weight, too-heavy and unknown-rule errors, an Endpoint.Charges
// error that has its own prefix, a cancelled wait before a retry, a
// replay that fails, a base returning nil and nil.
func TestReview3RoundTripErrorsOnePrefix(t *testing.T) {
	ok := respond(200, nil, http.NoBody)
	throttled := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			io.ReadAll(r.Body)
			r.Body.Close()
		}
		return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"60"}}, Body: http.NoBody, Request: r}, nil
	})
	pool := func(table clientpool.Table) *clientpool.Pool { return mustPool(t, table) }
	rule := clientpool.Rule{Name: "r", Limit: window.Limit{N: 2, Per: time.Minute}}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	short, cancelShort := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancelShort()
	retryCtx, cancelRetry := context.WithCancel(context.Background())
	defer cancelRetry()
	sem := semaphore.New(1, time.Hour)
	if err := sem.Acquire(context.Background(), 1); err != nil { // full for an hour
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tr   http.RoundTripper
		req  func() *http.Request
	}{
		{"zero Transport", &httpclient.Transport{}, func() *http.Request { return newRequest(t, "GET", "http://api.test/x", nil) }},
		{"negative weight", httpclient.NewSelect(func(*http.Request) (httpclient.Limiter, int64) { return &fakeLimiter{}, -2 }, httpclient.WithBase(ok)),
			func() *http.Request { return newRequest(t, "GET", "http://api.test/x", nil) }},
		{"semaphore too heavy", httpclient.NewSelect(func(*http.Request) (httpclient.Limiter, int64) { return sem, 5 }, httpclient.WithBase(ok)),
			func() *http.Request { return newRequest(t, "GET", "http://api.test/x", nil) }},
		{"semaphore deadline", httpclient.New(sem, httpclient.WithBase(ok)),
			func() *http.Request { return newRequest(t, "GET", "http://api.test/x", nil).WithContext(short) }},
		{"semaphore cancelled", httpclient.New(sem, httpclient.WithBase(ok)),
			func() *http.Request { return newRequest(t, "GET", "http://api.test/x", nil).WithContext(cancelled) }},
		{"no endpoint", httpclient.NewPool(pool(clientpool.Table{Rules: []clientpool.Rule{rule},
			Endpoints: []clientpool.Endpoint{{Path: "/y", Costs: []clientpool.Cost{{Rule: "r"}}}}}), httpclient.WithBase(ok)),
			func() *http.Request { return newRequest(t, "GET", "http://api.test/x", nil) }},
		{"pool negative weight", httpclient.NewPool(pool(clientpool.Table{Rules: []clientpool.Rule{rule},
			Default: []clientpool.Cost{{Rule: "r", Weight: func(*http.Request) int64 { return -1 }}}}), httpclient.WithBase(ok)),
			func() *http.Request { return newRequest(t, "GET", "http://api.test/x", nil) }},
		{"pool too heavy", httpclient.NewPool(pool(clientpool.Table{Rules: []clientpool.Rule{rule},
			Default: []clientpool.Cost{{Rule: "r", Units: 3}}}), httpclient.WithBase(ok)),
			func() *http.Request { return newRequest(t, "GET", "http://api.test/x", nil) }},
		{"Charges error with its own prefix", httpclient.NewPool(pool(clientpool.Table{Rules: []clientpool.Rule{rule},
			Endpoints: []clientpool.Endpoint{{Path: "/x", Charges: func(*http.Request) ([]clientpool.Charge, error) {
				return nil, fmt.Errorf("%w: the batch has 0 orders", ratesem.ErrInvalidLimit)
			}}}}), httpclient.WithBase(ok)),
			func() *http.Request { return newRequest(t, "GET", "http://api.test/x", nil) }},
		{"Charges unknown rule", httpclient.NewPool(pool(clientpool.Table{Rules: []clientpool.Rule{rule},
			Endpoints: []clientpool.Endpoint{{Path: "/x", Charges: func(*http.Request) ([]clientpool.Charge, error) {
				return []clientpool.Charge{{Rule: "nope", Weight: 1}}, nil
			}}}}), httpclient.WithBase(ok)),
			func() *http.Request { return newRequest(t, "GET", "http://api.test/x", nil) }},
		{"retry wait cancelled", httpclient.New(&fakeLimiter{}, httpclient.WithBase(roundTripFunc(func(r *http.Request) (*http.Response, error) {
			cancelRetry() // the wait for the retry ends at once
			return throttled(r)
		})), httpclient.WithMaxRetries(1)),
			func() *http.Request { return newRequest(t, "GET", "http://api.test/x", nil).WithContext(retryCtx) }},
		{"replay fails", httpclient.New(&fakeLimiter{}, httpclient.WithBase(throttled), httpclient.WithMaxRetries(1), httpclient.WithMaxRetryAfter(time.Millisecond)),
			func() *http.Request {
				r := newRequest(t, "POST", "http://api.test/x", strings.NewReader("x"))
				r.GetBody = func() (io.ReadCloser, error) { return nil, fmt.Errorf("%w: gone", ratesem.ErrClosed) }
				return r
			}},
		{"base nil, nil", httpclient.New(&fakeLimiter{}, httpclient.WithBase(roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, nil }))),
			func() *http.Request { return newRequest(t, "GET", "http://api.test/x", nil) }},
	} {
		resp, err := tc.tr.RoundTrip(tc.req())
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "ratesem: ") || strings.Count(msg, "ratesem:") != 1 {
			t.Errorf("%s: %q: want one \"ratesem: \" prefix", tc.name, msg)
		}
		if tc.name == "retry wait cancelled" && !strings.Contains(err.Error(), "waiting to retry") {
			t.Errorf("%s: %q: not the wait before the retry", tc.name, err)
		}
	}
}

// trailerBody sets the request's trailer when it reaches io.EOF, as a
// checksumming upload does.
type trailerBody struct {
	r   io.Reader
	req *http.Request
}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.req.Trailer.Set("X-Sum", "42")
	}
	return n, err
}

func (*trailerBody) Close() error { return nil }

// A body without GetBody that fills the request's Trailer as it is read
// (net/http sends the values the map holds once the body is read): the
// base sees the values, whether the Selector read the body first or not.
// Before the fix the clone sent in its place had a copy of the map, made
// before the body was read, so the trailer went out empty.
func TestReview3ReplayBodyTrailer(t *testing.T) {
	for _, read := range []bool{false, true} {
		var got string
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			io.ReadAll(r.Body)
			got = r.Trailer.Get("X-Sum")
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		})
		sel := func(*http.Request) (httpclient.Limiter, int64) { return &fakeLimiter{}, 1 }
		if read {
			var seen []byte
			var serr error
			sel = readBody(&fakeLimiter{}, &seen, &serr)
		}
		tr := httpclient.NewSelect(sel, httpclient.WithBase(base))
		req := newRequest(t, "POST", "http://api.test/x", nil)
		req.Body = &trailerBody{r: strings.NewReader("payload"), req: req}
		req.Trailer = http.Header{"X-Sum": nil}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got != "42" {
			t.Errorf("read by the Selector %v: the base saw trailer X-Sum %q, want 42", read, got)
		}
	}
}
