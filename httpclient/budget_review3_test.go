package httpclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratesem/ratesem/httpclient"
)

// A retry whose GetBody fails is never sent, and no Retried event reports
// it. A retry whose context ends during its sleep was reported (Retried
// comes before the sleep, ratesem.Event) but is never sent: the caller
// gets the context's error, the throttle took its token, nothing else
// moves, and the retry's fresh body is closed.
func TestRetriedOnlyForRetriesSent(t *testing.T) {
	srv := &budgetServer{}
	var rc retriedCounter
	tr := httpclient.New(&fakeLimiter{}, httpclient.WithBase(srv), httpclient.WithMaxRetries(3),
		httpclient.WithClock(instantClock{}), httpclient.WithObserver(rc.observe))
	req, _ := http.NewRequest(http.MethodPost, "http://api.test/x", strings.NewReader("a"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
	if _, err := tr.RoundTrip(req); err == nil {
		t.Fatal("no error from a failing GetBody")
	}
	if sent := srv.sends.Load() - 1; rc.n.Load() != sent {
		t.Errorf("%d Retried events for %d retries sent (GetBody failed)", rc.n.Load(), sent)
	}

	srv = &budgetServer{}
	rc = retriedCounter{}
	tr = httpclient.New(&fakeLimiter{}, httpclient.WithBase(srv), httpclient.WithMaxRetries(3),
		httpclient.WithClock(neverClock{}), httpclient.WithObserver(rc.observe))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, "http://api.test/x", strings.NewReader("a"))
	fresh := newRecordingBody("a")
	req.GetBody = func() (io.ReadCloser, error) { return fresh, nil }
	if resp, err := tr.RoundTrip(req); !errors.Is(err, context.DeadlineExceeded) || resp != nil {
		t.Fatalf("RoundTrip returned %v, %v; want nil and the context's deadline", resp, err)
	}
	if srv.sends.Load() != 1 || rc.n.Load() != 1 {
		t.Errorf("%d sends and %d Retried events, want 1 and 1 (reported before the sleep)", srv.sends.Load(), rc.n.Load())
	}
	if _, tok, _ := httpclient.BudgetKeys(tr); tok != 9000 {
		t.Errorf("the budget has %d thousandths, want 9000 (the throttle's token only)", tok)
	}
	if fresh.closes() != 1 {
		t.Errorf("the unsent retry's body was closed %d times, want 1", fresh.closes())
	}
}

// neverClock is a clock whose After never fires.
type neverClock struct{}

func (neverClock) Now() time.Time                       { return time.Now() }
func (neverClock) After(time.Duration) <-chan time.Time { return nil }
