package httpclient

import (
	"io"
	"sync/atomic"
)

// body wraps a response body and releases the request's weight on the
// limiter exactly once: on the first io.EOF from Read or the first Close,
// whichever comes first.
type body struct {
	rc       io.ReadCloser
	l        Limiter
	n        int64
	released atomic.Bool
}

// readWriteBody is used when the original body is also an io.Writer, as
// net/http's body of a 101 Switching Protocols response is; the caller's type
// assertion to io.ReadWriteCloser must keep working through the wrapper.
type readWriteBody struct {
	*body
	w io.Writer
}

// wrapBody returns rc wrapped so that Close or io.EOF releases n on l.
func wrapBody(rc io.ReadCloser, l Limiter, n int64) io.ReadCloser {
	b := &body{rc: rc, l: l, n: n}
	if w, ok := rc.(io.Writer); ok {
		return readWriteBody{body: b, w: w}
	}
	return b
}

// Read reads from the original body and releases the weight at io.EOF.
func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF { // io.Reader's contract: EOF itself, not wrapped
		b.release()
	}
	return n, err
}

// Close closes the original body first, so the connection is back in the
// base transport's pool (or torn down) before another request may start.
func (b *body) Close() error {
	err := b.rc.Close()
	b.release()
	return err
}

// release gives the weight back once. Read and Close may run concurrently (a
// goroutine reading while another closes to abort it), and Close may follow
// EOF; the compare-and-swap makes exactly one of them release, since the
// limiter panics on over-release.
func (b *body) release() {
	if b.released.CompareAndSwap(false, true) {
		b.l.Release(b.n)
	}
}

// Write writes to the original body (101 Switching Protocols).
func (b readWriteBody) Write(p []byte) (int, error) { return b.w.Write(p) }
