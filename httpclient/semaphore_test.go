package httpclient_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/semaphore"
)

var _ httpclient.Limiter = (*semaphore.RateSemaphore)(nil)

// TestWithRateSemaphore wires the transport to a real RateSemaphore on a mock
// clock: the slot is held until Body.Close, the completion window counts from
// that instant, and a 429 with Retry-After pauses the semaphore.
func TestWithRateSemaphore(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "30")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"code":"0"}`)
	}))
	defer srv.Close()

	mock := clock.NewMock()
	sem := semaphore.New(1, time.Second, semaphore.WithClock(mock))
	tr := httpclient.New(sem, httpclient.WithClock(mock)) // an HTTP-date Retry-After is read on the mock
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	assert.Equal(t, int64(1), sem.Stats().InFlight, "held while the body is open")
	mock.Add(500 * time.Millisecond)
	_, _ = io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, int64(0), sem.Stats().InFlight)

	// Ended at 0.5s on the mock: the next call may start at 1.5s.
	mock.Add(999 * time.Millisecond)
	assert.False(t, sem.TryAcquire(1), "admitted before end + interval")
	mock.Add(time.Millisecond)
	require.True(t, sem.TryAcquire(1))
	sem.Release(1)

	mock.Add(time.Second)
	status = http.StatusTooManyRequests
	resp, err = client.Get(srv.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NoError(t, resp.Body.Close())
	// 30 s and the jitter of backoff.Spread: at most 3.05 s more.
	pu := sem.Stats().PausedUntil
	assert.True(t, !pu.Before(mock.Now().Add(30*time.Second)) && !pu.After(mock.Now().Add(33050*time.Millisecond)),
		"PausedUntil = %v; want now + 30s..33.05s", pu)
}
