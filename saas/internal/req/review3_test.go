package req

import (
	"bytes"
	"io"
	"net/http"
	"runtime"
	"testing"

	"github.com/ratesem/ratesem/httpclient"
)

// A request body of a known ContentLength is copied for its estimate into
// one buffer of that size: a 30 MiB prompt allocates 30 MiB, not the
// 72 MiB of a buffer grown as it reads (on top of the Transport's own
// buffer of a body without GetBody).
func TestReview3BodyAllocatesContentLengthOnce(t *testing.T) {
	const size = 30 << 20
	r, err := http.NewRequest("POST", "http://api.test/v1/chat/completions", bytes.NewReader(make([]byte, size)))
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b, ok := Body(r)
	runtime.ReadMemStats(&after)
	if !ok || len(b) != size {
		t.Fatalf("Body = %d bytes, %v; want %d, true", len(b), ok, size)
	}
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("%.1f MiB allocated", float64(got)/(1<<20))
	if got > size+size/8 {
		t.Errorf("a %d MiB body allocated %.1f MiB to be read, want about %d", size>>20, float64(got)/(1<<20), size>>20)
	}
}

// The same through httpclient's replayed body of unknown length (a body
// without GetBody, through NewPool): its GetBody's reader tells its
// length, so Body allocates it once (was 71.7 MiB).
func TestReview3BodyAllocatesReplayedOnce(t *testing.T) {
	const size = 30 << 20
	var got uint64
	var n int
	base := roundTrip(func(r *http.Request) (*http.Response, error) {
		io.Copy(io.Discard, r.Body)
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	tr := httpclient.NewSelect(func(r *http.Request) (httpclient.Limiter, int64) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		// GetBody's own buffer first, then Body's copy of it.
		rc, _ := r.GetBody()
		io.Copy(io.Discard, rc)
		runtime.ReadMemStats(&after)
		replay := after.TotalAlloc - before.TotalAlloc
		b, _ := Body(r)
		n = len(b)
		runtime.ReadMemStats(&after)
		got = after.TotalAlloc - before.TotalAlloc - replay
		return nil, 1
	}, httpclient.WithBase(base))
	req, _ := http.NewRequest("POST", "http://api.test/v1/chat/completions", io.MultiReader(bytes.NewReader(make([]byte, size))))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Logf("%.1f MiB allocated by Body", float64(got)/(1<<20))
	if n != size || got > size+size/8 {
		t.Errorf("Body read %d bytes, allocating %.1f MiB; want %d bytes in about %d MiB", n, float64(got)/(1<<20), size, size>>20)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
