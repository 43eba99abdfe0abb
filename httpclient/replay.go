package httpclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// MaxReplayBody is the most bytes of a request body without GetBody that a
// Transport keeps in memory, so that its Selector (a clientpool Rule's Key
// or Weight, an Endpoint's Charges) can read the body through GetBody
// before the request is sent: 32 MiB.
const MaxReplayBody = 32 << 20

// The errors GetBody returns for a body it cannot give whole (without the
// "ratesem: " prefix: whoever calls GetBody wraps them).
var (
	errReplayTooLarge = fmt.Errorf("request body without GetBody longer than httpclient.MaxReplayBody (%d bytes): not read before it is sent", MaxReplayBody)
	errReplayStreamed = errors.New("request body without GetBody already sent: it cannot be read again")
)

// The states of a replayBody.
const (
	replayFresh    = iota // nothing read
	replayFilling         // GetBody is reading the body into buf
	replayWhole           // buf is the whole body
	replayOver            // buf is the first MaxReplayBody+1 bytes; the rest is in rc
	replayFailed          // reading stopped at err after buf
	replayStreamed        // Read went past buf to rc (or never buffered)
	replayPanicked        // reading panicked with panicked after buf
)

// replayBody is the body of the clone a Transport sends in place of a
// request whose body has no GetBody (withReplayBody). The body is read only
// when GetBody is called (by the Selector, or by a retry): then up to
// MaxReplayBody+1 bytes of it, once, into buf. Read gives buf, then the
// rest of the caller's body, so the base transport sends the caller's bytes
// unchanged; GetBody gives buf again while it holds the whole body.
type replayBody struct {
	rc  io.ReadCloser   // the caller's body
	ctx context.Context // the request's: GetBody stops waiting when it is done

	mu    sync.Mutex
	state int
	buf   []byte // written once by fill, read-only after done is closed
	err   error  // the read error of replayFailed
	// panicked is what the caller's body panicked with (replayPanicked):
	// GetBody and Read panic with it again on their caller's goroutine,
	// where it can be recovered, as a direct read's panic could.
	panicked any
	size     int64         // the request's ContentLength: fill's first allocation
	off      int           // how much of buf Read has given
	done     chan struct{} // closed when fill ends
}

// withReplayBody returns req itself when its body can be replayed (none, or
// GetBody), and otherwise a clone (the caller's request is not modified)
// whose Body is a replayBody over req.Body and whose GetBody reads it.
func withReplayBody(req *http.Request) *http.Request {
	if req.Body == nil || req.Body == http.NoBody || req.GetBody != nil {
		return req
	}
	b := &replayBody{rc: req.Body, ctx: req.Context(), size: req.ContentLength}
	r := req.Clone(req.Context())
	r.Body, r.GetBody = b, b.getBody
	// The caller's body may fill the Trailer's values as it is read (net/http
	// sends what the map holds then): share the map, as the body is shared,
	// not Clone's copy of it made before.
	r.Trailer = req.Trailer
	return r
}

// getBody is the clone's GetBody: a reader of the whole body, read into
// memory on the first call (up to MaxReplayBody+1 bytes, never more), or
// an error when the body is longer, failed to read, was already sent
// unbuffered, or the request's context ended while it was read.
func (b *replayBody) getBody() (io.ReadCloser, error) {
	b.mu.Lock()
	if b.state == replayFresh {
		b.state, b.done = replayFilling, make(chan struct{})
		go b.fill()
	}
	done := b.done
	b.mu.Unlock()
	if done != nil {
		// A body from a pipe may stall: the wait ends with the request.
		select {
		case <-done:
		case <-b.ctx.Done():
			return nil, fmt.Errorf("reading the request body: %w", b.ctx.Err())
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case replayWhole:
		return io.NopCloser(bytes.NewReader(b.buf)), nil
	case replayOver:
		return nil, errReplayTooLarge
	case replayFailed:
		return nil, fmt.Errorf("reading the request body: %w", b.err)
	case replayPanicked:
		panic(b.panicked)
	}
	return nil, errReplayStreamed
}

// fill reads the body into buf, at most MaxReplayBody+1 bytes. A panic of
// the caller's body is kept for GetBody and Read to raise again: on fill's
// own goroutine nobody could recover it.
func (b *replayBody) fill() {
	var buf []byte
	var err error
	ok := false
	defer func() {
		var p any
		if !ok {
			p = recover()
			if p == nil { // runtime.Goexit; not expected of a Read
				p = errors.New("request body's Read exited its goroutine")
			}
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		b.buf = buf
		switch {
		case !ok:
			b.state, b.panicked = replayPanicked, p
		case err != nil:
			b.state, b.err = replayFailed, err
		case len(buf) > MaxReplayBody:
			b.state = replayOver
		default:
			b.state = replayWhole
		}
		close(b.done)
	}()
	buf, err = readUpTo(b.rc, MaxReplayBody+1, b.size)
	ok = true
}

// readUpTo reads r to io.EOF or limit bytes, whichever comes first, like
// io.ReadAll of an io.LimitReader; when size (a ContentLength) is within
// limit it is the first allocation, so that a body of the size announced
// is read into one buffer of that size (io.ReadAll's growing buffers
// allocated 72 MiB for a 30 MiB body, and held up to twice it at once).
func readUpTo(r io.Reader, limit, size int64) ([]byte, error) {
	lr := io.LimitReader(r, limit)
	if size <= 0 || size >= limit {
		return io.ReadAll(lr)
	}
	buf := make([]byte, 0, size+1) // +1: room to read io.EOF without growing
	for {
		n, err := lr.Read(buf[len(buf):cap(buf)])
		if n < 0 || n > cap(buf)-len(buf) {
			return buf, errors.New("request body's Read returned an invalid count")
		}
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // longer than announced
		}
	}
}

// whole reports whether GetBody gives the whole body (it was read whole).
func (b *replayBody) whole() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == replayWhole
}

// Read gives what GetBody buffered, then the rest of the caller's body.
// Reads are sequential (one reader, the base transport).
func (b *replayBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.state == replayFilling {
		done := b.done
		b.mu.Unlock()
		<-done // as a direct read of the caller's body would wait
		b.mu.Lock()
	}
	if b.off < len(b.buf) {
		n := copy(p, b.buf[b.off:])
		b.off += n
		b.mu.Unlock()
		return n, nil
	}
	switch b.state {
	case replayWhole:
		b.mu.Unlock()
		return 0, io.EOF
	case replayFailed:
		err := b.err
		b.mu.Unlock()
		return 0, err
	case replayPanicked:
		p := b.panicked
		b.mu.Unlock()
		panic(p)
	}
	b.state = replayStreamed
	b.mu.Unlock()
	return b.rc.Read(p)
}

// Close closes the caller's body (which also ends a fill blocked on a pipe).
func (b *replayBody) Close() error { return b.rc.Close() }
