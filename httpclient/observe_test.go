package httpclient_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/semaphore"
)

type eventLog struct {
	mu  sync.Mutex
	evs []ratesem.Event
}

func (l *eventLog) observe(e ratesem.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
}

func (l *eventLog) take() []ratesem.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	evs := l.evs
	l.evs = nil
	return evs
}

func (l *eventLog) kinds() []ratesem.EventKind {
	var ks []ratesem.EventKind
	for _, e := range l.take() {
		ks = append(ks, e.Kind)
	}
	return ks
}

// answers replies to the i-th request (from 0) with statuses[i] (the last
// one repeated) and the Retry-After retryAfter[i] when set.
func answers(statuses []int, retryAfter []string, body string) http.RoundTripper {
	var i atomic.Int64
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		k := int(i.Add(1) - 1)
		h := http.Header{}
		if k < len(retryAfter) && retryAfter[k] != "" {
			h.Set("Retry-After", retryAfter[k])
		}
		st := statuses[min(k, len(statuses)-1)]
		return &http.Response{StatusCode: st, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
	})
}

// A throttled request retried: admitted, throttled (429 with Retry-After:
// the pause and its source), retried (attempt 1, the pause slept), admitted
// again; all on virtual time.
func TestObserverThrottleRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log eventLog
		sem := semaphore.New(5, time.Second)
		tr := httpclient.New(sem, httpclient.WithBase(answers([]int{429, 200}, []string{"2"}, "{}")), httpclient.WithMaxRetries(1), httpclient.WithObserver(log.observe))
		begin := time.Now()
		roundTrip(t, tr)
		evs := log.take()
		require.Len(t, evs, 4, "%v", evs)
		assert.Equal(t, ratesem.Event{Kind: ratesem.Admitted, Weight: 1}, evs[0])
		th := evs[1]
		assert.Equal(t, ratesem.Throttled, th.Kind)
		assert.Equal(t, 429, th.Status)
		assert.Equal(t, ratesem.SourceRetryAfter, th.Source)
		assert.True(t, th.Pause >= 2*time.Second && th.Pause <= 3*time.Second, "pause %v", th.Pause)
		assert.Equal(t, ratesem.Event{Kind: ratesem.Retried, Attempt: 1, Wait: th.Pause, Status: 429}, evs[2])
		assert.Equal(t, ratesem.Admitted, evs[3].Kind)
		assert.Equal(t, th.Pause, time.Since(begin), "the retry starts when the pause ends")
	})
}

// A 429 without Retry-After reports the backoff as the source; a throttle
// only the body shows (OKX's 50011 with 200) reports the body, when the
// caller reads it; a 503 (not a throttle by default) reports nothing.
func TestObserverThrottleSources(t *testing.T) {
	var log eventLog
	lim := &fakeLimiter{}
	tr := httpclient.New(lim, httpclient.WithBase(answers([]int{429, 200, 503}, nil, `{"code":"50011"}`)), httpclient.WithThrottledBody(func(status int, h http.Header, body []byte) bool {
		return httpclient.DefaultThrottledBody(status, h, body) || strings.Contains(string(body), "50011") && status == 200
	}), httpclient.WithObserver(log.observe))
	roundTrip(t, tr)
	evs := log.take()
	require.Len(t, evs, 2)
	assert.Equal(t, ratesem.SourceBackoff, evs[1].Source)
	assert.Positive(t, evs[1].Pause)

	resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
	require.NoError(t, err)
	assert.Equal(t, []ratesem.EventKind{ratesem.Admitted}, log.kinds(), "nothing before the body is read")
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	evs = log.take()
	require.Len(t, evs, 1)
	assert.Equal(t, ratesem.Throttled, evs[0].Kind)
	assert.Equal(t, ratesem.SourceBody, evs[0].Source)
	assert.Equal(t, 200, evs[0].Status)

	roundTrip(t, tr) // 503
	assert.Equal(t, []ratesem.EventKind{ratesem.Admitted}, log.kinds())
}

// Acquire's failures: cancelled (the context), refused (ErrDeadline, a
// negative weight, which now matches ratesem.ErrNegativeWeight).
func TestObserverRefusedCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log eventLog
		sem := semaphore.New(1, time.Second)
		tr := httpclient.New(sem, httpclient.WithBase(answers([]int{200}, nil, "")), httpclient.WithObserver(log.observe))
		require.True(t, sem.TryAcquire(1)) // full: only a release makes room

		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		req := newRequest(t, http.MethodGet, "http://example.test/", nil).WithContext(ctx)
		_, err := tr.RoundTrip(req)
		require.ErrorIs(t, err, context.Canceled)
		evs := log.take()
		require.Len(t, evs, 1)
		assert.Equal(t, ratesem.Cancelled, evs[0].Kind)
		assert.Equal(t, 300*time.Millisecond, evs[0].Wait)
		assert.ErrorIs(t, evs[0].Err, context.Canceled)

		sem.Release(1) // the window now holds until 1s from here
		ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err = tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil).WithContext(ctx))
		require.ErrorIs(t, err, ratesem.ErrDeadline)
		evs = log.take()
		require.Len(t, evs, 1)
		assert.Equal(t, ratesem.Refused, evs[0].Kind)

		neg := httpclient.NewSelect(func(*http.Request) (httpclient.Limiter, int64) { return sem, -3 }, httpclient.WithBase(answers([]int{200}, nil, "")), httpclient.WithObserver(log.observe))
		_, err = neg.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
		require.ErrorIs(t, err, ratesem.ErrNegativeWeight)
		evs = log.take()
		require.Len(t, evs, 1)
		assert.Equal(t, ratesem.Event{Kind: ratesem.Refused, Weight: -3, Err: evs[0].Err}, evs[0])
	})
}

// Metrics fed by the Transport count a wave of throttles and retries.
func TestObserverTransportMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var m ratesem.Metrics
		tr := httpclient.New(semaphore.New(10, time.Second), httpclient.WithBase(answers([]int{429, 429, 200}, []string{"1", "1"}, "")), httpclient.WithMaxRetries(3), httpclient.WithObserver(m.Observe))
		roundTrip(t, tr)
		s := m.Snapshot()
		assert.Equal(t, [4]uint64{3, 2, 2, 0}, [4]uint64{s.Admitted, s.Throttled, s.Retried, s.Refused})
		assert.Equal(t, uint64(3), s.Wait.Count)
	})
}
