package httpclient_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/httpclient"
)

// endlessBody never ends: it counts the bytes read of it.
type endlessBody struct {
	read   atomic.Int64
	closed atomic.Bool
}

func (e *endlessBody) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	e.read.Add(int64(len(p)))
	return len(p), nil
}

func (e *endlessBody) Close() error { e.closed.Store(true); return nil }

// readBody returns a Selector that reads each request's body through
// GetBody into *got (its error into *gerr) and charges weight 1 on lim.
func readBody(lim httpclient.Limiter, got *[]byte, gerr *error) httpclient.Selector {
	return func(r *http.Request) (httpclient.Limiter, int64) {
		if r.GetBody == nil {
			*gerr = errors.New("no GetBody")
			return lim, 1
		}
		rc, err := r.GetBody()
		if err != nil {
			*gerr = err
			return lim, 1
		}
		*got, *gerr = io.ReadAll(rc)
		return lim, 1
	}
}

// A body without GetBody: the Selector reads it whole through the clone's
// GetBody, the base gets the same bytes, and the caller's request is left
// as it was (Body, GetBody, and the response's Request).
func TestReplayBodyReadBySelector(t *testing.T) {
	payload := strings.Repeat("0123456789", 10000)
	body := newRecordingBody(payload)
	var seen []byte
	var serr error
	var sent []byte
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent, _ = io.ReadAll(r.Body)
		r.Body.Close()
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	tr := httpclient.NewSelect(readBody(&fakeLimiter{}, &seen, &serr), httpclient.WithBase(base))
	req := newRequest(t, "POST", "http://api.test/x", body)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if serr != nil || string(seen) != payload || string(sent) != payload {
		t.Fatalf("Selector read %d bytes (%v), base got %d; want %d each", len(seen), serr, len(sent), len(payload))
	}
	if req.Body != body || req.GetBody != nil || resp.Request != req {
		t.Fatal("the caller's request was modified, or the response names another")
	}
	if body.closes() != 1 {
		t.Errorf("caller's body closed %d times, want 1 (by the base)", body.closes())
	}
}

// A body nobody asks for is streamed as it is: not one byte read ahead.
func TestReplayBodyNotBufferedUnasked(t *testing.T) {
	var body endlessBody
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		io.CopyN(io.Discard, r.Body, 1<<20)
		r.Body.Close()
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	tr := httpclient.New(&fakeLimiter{}, httpclient.WithBase(base))
	resp, err := tr.RoundTrip(newRequest(t, "POST", "http://api.test/x", &body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := body.read.Load(); n != 1<<20 || !body.closed.Load() {
		t.Fatalf("read %d bytes of the body, closed %v; want exactly the base's 1 MiB, closed", n, body.closed.Load())
	}
}

// A body past MaxReplayBody (here: one that never ends): GetBody fails
// after reading MaxReplayBody+1 bytes, no more, and the base still gets
// the caller's bytes, those first and then the rest.
func TestReplayBodyBounded(t *testing.T) {
	var body endlessBody
	var seen []byte
	var serr error
	var sent int64
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent, _ = io.Copy(io.Discard, io.LimitReader(r.Body, httpclient.MaxReplayBody+100))
		r.Body.Close()
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	tr := httpclient.NewSelect(readBody(&fakeLimiter{}, &seen, &serr), httpclient.WithBase(base))
	req := newRequest(t, "POST", "http://api.test/x", &body)
	if body.read.Load() != 0 {
		t.Fatal("read before RoundTrip")
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if serr == nil || !strings.Contains(serr.Error(), "longer than 33554432 bytes") || seen != nil {
		t.Errorf("GetBody of an endless body: %d bytes, %v; want an error naming the bound, 33554432 bytes", len(seen), serr)
	}
	if sent != httpclient.MaxReplayBody+100 || body.read.Load() != httpclient.MaxReplayBody+100 {
		t.Errorf("base got %d bytes, %d read of the body; want %d both", sent, body.read.Load(), httpclient.MaxReplayBody+100)
	}
}

// A body whose read fails: GetBody says so, and the base gets the bytes
// before the failure, then the same error.
func TestReplayBodyReadFails(t *testing.T) {
	boom := errors.New("disk gone")
	body := io.NopCloser(io.MultiReader(strings.NewReader("prefix"), &failAfter{boom}))
	var seen []byte
	var serr, baseErr error
	var sent []byte
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent, baseErr = io.ReadAll(r.Body)
		return nil, baseErr
	})
	tr := httpclient.NewSelect(readBody(&fakeLimiter{}, &seen, &serr), httpclient.WithBase(base))
	_, err := tr.RoundTrip(newRequest(t, "POST", "http://api.test/x", body))
	if !errors.Is(serr, boom) || !errors.Is(err, boom) || string(sent) != "prefix" {
		t.Fatalf("GetBody error %v, RoundTrip error %v, base got %q; want %v each and \"prefix\"", serr, err, sent, boom)
	}
}

type failAfter struct{ err error }

func (f *failAfter) Read([]byte) (int, error) { return 0, f.err }

// GetBody on a body that stalls (a pipe nobody writes) waits only until
// the request's context is done; closing the request's body then ends the
// read (no goroutine left behind).
func TestReplayBodyStallEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pr, pw := io.Pipe()
		defer pw.Close()
		var seen []byte
		var serr error
		lim := &fakeLimiter{}
		sel := readBody(lim, &seen, &serr)
		tr := httpclient.NewSelect(func(r *http.Request) (httpclient.Limiter, int64) {
			l, n := sel(r)
			if serr != nil {
				lim.acquireErr = serr // the request is not sent
			}
			return l, n
		}, httpclient.WithBase(roundTripFunc(func(*http.Request) (*http.Response, error) {
			t.Error("sent")
			return nil, errors.New("sent")
		})))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://api.test/x", pr)
		start := time.Now()
		_, err := tr.RoundTrip(req)
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Fatalf("RoundTrip = %v after %v; want the deadline after 1s", err, time.Since(start))
		}
		if _, err := pw.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("the caller's pipe is still open: %v", err)
		}
	})
}

// A body without GetBody that the Selector read whole can be sent again
// (WithMaxRetries): the retry carries the same bytes. One not read cannot.
func TestReplayBodyRetried(t *testing.T) {
	for _, read := range []bool{true, false} {
		payload := `{"n":42}`
		var bodies []string
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			b, _ := io.ReadAll(r.Body)
			bodies = append(bodies, string(b))
			status := 200
			if len(bodies) == 1 {
				status = 429
			}
			return &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {"1"}}, Body: io.NopCloser(bytes.NewReader(nil)), Request: r}, nil
		})
		var seen []byte
		var serr error
		sel := readBody(&fakeLimiter{}, &seen, &serr)
		if !read {
			sel = func(*http.Request) (httpclient.Limiter, int64) { return &fakeLimiter{}, 1 }
		}
		tr := httpclient.NewSelect(sel, httpclient.WithBase(base), httpclient.WithMaxRetries(1), httpclient.WithMaxRetryAfter(time.Millisecond))
		resp, err := tr.RoundTrip(newRequest(t, "POST", "http://api.test/x", io.NopCloser(strings.NewReader(payload))))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := []string{payload, payload}
		if !read {
			want = want[:1]
		}
		if strings.Join(bodies, "|") != strings.Join(want, "|") {
			t.Errorf("read by the Selector %v: the base got %q, want %q", read, bodies, want)
		}
	}
}
