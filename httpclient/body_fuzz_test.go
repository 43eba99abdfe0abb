package httpclient_test

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/ratesem/ratesem/httpclient"
)

// chunkReader returns body in reads whose sizes cycle through sizes (0
// means a read of 0 bytes and no error, never twice in a row, so that a
// reader that never ends is not what is tested here).
type chunkReader struct {
	body  []byte
	sizes []byte
	i     int
	empty bool // the last read returned 0 bytes
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.body) == 0 {
		return 0, io.EOF
	}
	n := len(p)
	if len(c.sizes) > 0 {
		n = min(n, int(c.sizes[c.i%len(c.sizes)]))
		c.i++
	}
	if n == 0 && c.empty {
		n = 1
	}
	c.empty = n == 0
	n = copy(p, c.body[:min(n, len(c.body))])
	c.body = c.body[n:]
	return n, nil
}

func (c *chunkReader) Close() error { return nil }

// FuzzBodyPrefix: however the body arrives (any chunking, any size), the
// caller reads it whole and unchanged, the hook sees exactly its first
// PeekSize bytes once (or all of it when shorter), and the units are
// released exactly once, after the hook, whether the caller reads to EOF or
// closes after readLen bytes.
func FuzzBodyPrefix(f *testing.F) {
	f.Add([]byte(`{"code":"50011"}`), []byte{1, 3, 0, 7}, uint16(0xffff))
	f.Add(bytes.Repeat([]byte("["), 2000), []byte{255}, uint16(100))
	f.Add([]byte{}, []byte{}, uint16(0))
	f.Fuzz(func(t *testing.T, body, sizes []byte, readLen uint16) {
		lim := &fakeLimiter{}
		var mu sync.Mutex
		var stages [][]byte
		var heldAtCheck int64
		tr := httpclient.New(lim, httpclient.WithBase(respond(200, nil, &chunkReader{body: bytes.Clone(body), sizes: sizes})), httpclient.WithThrottledBody(func(_ int, _ http.Header, b []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			stages = append(stages, bytes.Clone(b))
			if b != nil {
				heldAtCheck, _, _, _ = lim.state()
			}
			return false
		}))
		resp, err := tr.RoundTrip(newRequest(t, http.MethodGet, "http://example.test/", nil))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(io.LimitReader(resp.Body, int64(readLen)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, body[:min(len(body), int(readLen))]) {
			t.Fatalf("the caller read %d bytes that differ from the body", len(got))
		}
		if err := resp.Body.Close(); err != nil {
			t.Fatal(err)
		}
		held, _, rel, _ := lim.state()
		if held != 0 || rel != 1 {
			t.Fatalf("held %d after %d releases", held, rel)
		}
		if len(stages) != 2 || stages[0] != nil || stages[1] == nil {
			t.Fatalf("hook called %d times (%q)", len(stages), stages)
		}
		seen := min(len(got), httpclient.PeekSize)
		if !bytes.Equal(stages[1], body[:seen]) && len(got) >= httpclient.PeekSize {
			t.Fatalf("the hook saw %d bytes, want the first %d", len(stages[1]), seen)
		}
		if len(stages[1]) > httpclient.PeekSize || !bytes.HasPrefix(body, stages[1]) {
			t.Fatalf("the hook saw %d bytes that are not a prefix of the body within PeekSize", len(stages[1]))
		}
		if heldAtCheck != 1 {
			t.Fatal("the hook ran after the release")
		}
	})
}
