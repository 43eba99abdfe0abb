package httpclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratesem/ratesem/httpclient"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeLimiter records what Transport does with it. It admits at once unless
// acquireErr is set or ctx is already done, and panics on over-release like
// x/sync's semaphore, so a double release fails the test.
type fakeLimiter struct {
	acquireErr error

	mu       sync.Mutex
	held     int64
	acquires []int64
	releases []int64
	pauses   []time.Duration
}

var _ httpclient.Limiter = (*fakeLimiter)(nil)

func (f *fakeLimiter) Acquire(ctx context.Context, n int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if f.acquireErr != nil {
		return f.acquireErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held += n
	f.acquires = append(f.acquires, n)
	return nil
}

func (f *fakeLimiter) Release(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n > f.held {
		panic(fmt.Sprintf("fakeLimiter: released %d but %d held", n, f.held))
	}
	f.held -= n
	f.releases = append(f.releases, n)
}

func (f *fakeLimiter) PauseFor(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses = append(f.pauses, d)
}

// state returns a snapshot: units held, number of acquires and releases, and
// the pauses so far.
func (f *fakeLimiter) state() (held int64, acquires, releases int, pauses []time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held, len(f.acquires), len(f.releases), append([]time.Duration(nil), f.pauses...)
}

// blockingLimiter never admits: Acquire waits for ctx. Release and PauseFor
// must never be called.
type blockingLimiter struct{ entered chan struct{} }

func (b *blockingLimiter) Acquire(ctx context.Context, n int64) error {
	if b.entered != nil {
		close(b.entered)
	}
	<-ctx.Done()
	return ctx.Err()
}
func (*blockingLimiter) Release(n int64)          { panic("blockingLimiter: Release called") }
func (*blockingLimiter) PauseFor(d time.Duration) { panic("blockingLimiter: PauseFor called") }

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// recordingBody is a ReadCloser that counts Close calls.
type recordingBody struct {
	r      io.Reader
	mu     sync.Mutex
	closed int
}

func newRecordingBody(s string) *recordingBody { return &recordingBody{r: strings.NewReader(s)} }

func (b *recordingBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed > 0 {
		return 0, errors.New("read after close")
	}
	return b.r.Read(p)
}

func (b *recordingBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed++
	return nil
}

func (b *recordingBody) closes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// respond returns a Base that answers every request with status, headers h
// (may be nil) and body (nil for no body).
func respond(status int, h http.Header, body io.ReadCloser) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if h == nil {
			h = http.Header{}
		}
		return &http.Response{
			Status:     fmt.Sprintf("%d %s", status, http.StatusText(status)),
			StatusCode: status,
			Header:     h,
			Body:       body,
			Request:    req,
		}, nil
	})
}

func newRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, body)
	if err != nil {
		t.Fatalf("NewRequest: %v", err)
	}
	return req
}
