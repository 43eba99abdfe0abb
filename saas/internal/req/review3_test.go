package req

import (
	"bytes"
	"net/http"
	"runtime"
	"testing"
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
