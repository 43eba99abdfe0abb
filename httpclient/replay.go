package httpclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"

	"github.com/ratesem/ratesem/internal/peek"
)

// maxReplayBody is the most bytes of a request body without GetBody that a
// Transport keeps in memory, so that its Selector (a clientpool Rule's Key
// or Weight, an Endpoint's Charges) can read the body through GetBody
// before the request is sent: 32 MiB.
const maxReplayBody = peek.MaxReplay // 32 MiB

// The errors GetBody returns for a body it cannot give whole (without the
// "ratesem: " prefix: whoever calls GetBody wraps them).
var (
	errReplayTooLarge = fmt.Errorf("request body without GetBody longer than %d bytes: not read before it is sent", maxReplayBody)
	errReplayStreamed = errors.New("request body without GetBody already sent: it cannot be read again")
)

// The states of a replayBody.
const (
	replayFresh   = iota // nothing read
	replayFilling        // GetBody is reading the body into chunks
	replayDone           // the outcome is in getErr, readErr and panicked
)

// replayBody is the body of the clone a Transport sends in place of a
// request whose body has no GetBody (withReplayBody). The body is read only
// when GetBody is called (by the Selector, or by a retry): then up to
// maxReplayBody+1 bytes of it, once, into chunks. Read gives chunks, then
// the rest of the caller's body, so the base transport sends the caller's
// bytes unchanged; GetBody gives chunks again while they hold the whole
// body.
type replayBody struct {
	rc   io.ReadCloser   // the caller's body
	ctx  context.Context // the request's: GetBody stops waiting when it is done
	size int64           // the request's ContentLength: readChunks' first chunk

	mu    sync.Mutex
	state int
	done  chan struct{} // closed when fill ends
	// chunks hold the bytes read (see readChunks); written once by fill,
	// read-only after done is closed. rest is what Read has still to give
	// of them.
	chunks, rest net.Buffers
	// Once fill ended, or Read went to the caller's body before any GetBody:
	// what GetBody returns (nil: the chunks are the whole body), and what
	// Read returns after the chunks (nil: the rest of the caller's body,
	// which GetBody can then never give).
	getErr, readErr error
	// panicked is what the caller's body panicked with: GetBody and Read
	// panic with it again on their caller's goroutine, where it can be
	// recovered, as a direct read's panic could.
	panicked any
}

// withReplayBody returns req itself when its body can be replayed (none, or
// GetBody), and otherwise a clone (the caller's request is not modified)
// whose Body is a replayBody over req.Body and whose GetBody reads it.
func withReplayBody(req *http.Request) *http.Request {
	if req.Body == nil || req.Body == http.NoBody || req.GetBody != nil {
		return req
	}
	b := &replayBody{rc: req.Body, ctx: req.Context(), size: req.ContentLength}
	// The caller's body may fill the Trailer's values as it is read (net/http
	// sends what the map holds then): share the map, as the body is shared,
	// not Clone's copy of it made before.
	r := req.Clone(req.Context())
	r.Body, r.GetBody, r.Trailer = b, b.getBody, req.Trailer
	return r
}

// getBody is the clone's GetBody: a reader of the whole body, read into
// memory on the first call (up to maxReplayBody+1 bytes, never more), or
// an error when the body is longer, failed to read, was already sent
// unbuffered, or the request's context ended while it was read.
func (b *replayBody) getBody() (io.ReadCloser, error) {
	b.mu.Lock()
	if b.state == replayFresh {
		b.state, b.done = replayFilling, make(chan struct{})
		go b.fill()
	}
	done := b.done // nil when Read went to the caller's body unbuffered
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
	if b.panicked != nil {
		panic(b.panicked)
	}
	if b.getErr != nil {
		return nil, b.getErr
	}
	return &chunkReader{slices.Clone(b.chunks)}, nil
}

// fill reads the body into chunks, at most maxReplayBody+1 bytes, and sets
// the outcome. A panic of the caller's body is kept for GetBody and Read to
// raise again: on fill's own goroutine nobody could recover it.
func (b *replayBody) fill() {
	var p any = errors.New("request body's Read exited its goroutine") // until readChunks returns
	var chunks [][]byte
	var n int64
	var err error
	defer func() {
		if p != nil {
			if r := recover(); r != nil { // nil: runtime.Goexit, not expected of a Read
				p = r
			}
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		b.chunks, b.rest, b.state, b.panicked = chunks, slices.Clone(chunks), replayDone, p
		switch {
		case err != nil:
			b.getErr, b.readErr = fmt.Errorf("reading the request body: %w", err), err
		case n > maxReplayBody: // the rest is in rc
			b.getErr = errReplayTooLarge
		default:
			b.readErr = io.EOF
		}
		close(b.done)
	}()
	chunks, n, err = readChunks(b.rc, maxReplayBody+1, b.size)
	p = nil
}

// The sizes of the chunks readChunks reads into: the first, then doubled
// up to the largest.
const (
	firstChunk = 32 << 10
	maxChunk   = 4 << 20
)

// readChunks reads r to io.EOF or limit bytes, whichever comes first, into
// chunks of growing size (firstChunk, doubled up to maxChunk; or, when
// size, a ContentLength, is known, size+1 first, to see io.EOF in one, up
// to maxChunk), each full but the last; n is their total. A body is held in about
// its own size (a 30 MiB body of unknown length in 33 MiB), where
// io.ReadAll's growing buffer allocated 72 MiB and held up to twice the
// body while it grew. err is the read's error (not io.EOF), after the
// bytes before it.
func readChunks(r io.Reader, limit, size int64) (chunks [][]byte, n int64, err error) {
	next := int64(firstChunk)
	if size > 0 {
		// Trusted up to maxChunk: a ContentLength that says more than the
		// body holds costs no more than that.
		next = min(size+1, maxChunk)
	}
	for n < limit && err == nil {
		c := make([]byte, min(next, limit-n))
		m := 0
		for m < len(c) && err == nil {
			var k int
			k, err = r.Read(c[m:])
			if k < 0 || k > len(c)-m {
				k, err = 0, errors.New("request body's Read returned an invalid count")
			}
			m += k
		}
		if m > 0 {
			chunks = append(chunks, c[:m:m])
			n += int64(m)
		}
		next = min(2*next, maxChunk)
	}
	if err == io.EOF {
		err = nil
	}
	return chunks, n, err
}

// chunkReader reads the chunks in order (net.Buffers' Read and WriteTo): the
// body GetBody gives. Its chunks are its own slice of the shared,
// read-only chunks.
type chunkReader struct{ net.Buffers }

// Len returns the bytes left, so that a reader of the whole body (the
// saas presets') can allocate them at once.
func (r *chunkReader) Len() int {
	n := 0
	for _, c := range r.Buffers {
		n += len(c)
	}
	return n
}

// Close does nothing: the chunks belong to the replayBody.
func (*chunkReader) Close() error { return nil }

// whole reports whether GetBody gives the whole body (it was read whole).
func (b *replayBody) whole() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == replayDone && b.getErr == nil && b.panicked == nil
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
	if len(b.rest) > 0 {
		n, _ := b.rest.Read(p)
		b.mu.Unlock()
		return n, nil
	}
	err, panicked := b.readErr, b.panicked
	if err == nil && panicked == nil {
		b.state, b.getErr = replayDone, errReplayStreamed
	}
	b.mu.Unlock()
	if panicked != nil {
		panic(panicked)
	}
	if err != nil {
		return 0, err
	}
	return b.rc.Read(p)
}

// Close closes the caller's body (which also ends a fill blocked on a pipe).
func (b *replayBody) Close() error { return b.rc.Close() }
