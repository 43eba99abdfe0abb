package httpclient

import (
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ratesem/ratesem/internal/peek"
)

// body wraps a response body and releases the request's weight on the
// limiter exactly once: on the first io.EOF from Read or the first Close,
// whichever comes first. When check is set, it also keeps the first
// peekSize bytes that the caller's reads go through and calls check with
// them exactly once, at the first of: peekSize bytes seen, io.EOF, Close;
// always before the release. It never reads ahead of the caller, so a
// stalled body holds only the caller's own Read.
type body struct {
	rc       io.ReadCloser
	l        Limiter
	n        int64
	released atomic.Bool

	// mu guards prefix and check. It is never held across a Read or Close
	// of rc, so a Close from another goroutine can abort a blocked Read.
	mu     sync.Mutex
	check  func(prefix []byte) // nil once run (or when not wanted)
	prefix []byte

	// settle, when set, is shown the body's last keepMax bytes (of what the
	// caller read) before the units are released, and told whether the
	// caller's reads reached io.EOF. They are kept in keep, a
	// ring that never holds more than keepMax bytes (cap(keep) ≤ keepMax):
	// it grows as the body does until it holds keepMax bytes, then each
	// byte read overwrites the oldest, at keepAt.
	settle func(body []byte, eof bool)
	keep   []byte
	keepAt int // once len(keep) == keepMax: the index of the oldest byte
}

// keepMax is the most bytes of a body that settle is shown: its last ones.
const keepMax = peek.MaxSettle

// readWriteBody is used when the original body is also an io.Writer, as
// net/http's body of a 101 Switching Protocols response is; the caller's type
// assertion to io.ReadWriteCloser must keep working through the wrapper.
type readWriteBody struct {
	*body
	w io.Writer
}

// wrapBody returns rc wrapped so that Close or io.EOF releases n on l, after
// check (if not nil) has seen the body's first bytes.
func wrapBody(rc io.ReadCloser, l Limiter, n int64, check func([]byte), settle func([]byte, bool)) io.ReadCloser {
	b := &body{rc: rc, l: l, n: n, check: check, settle: settle}
	if w, ok := rc.(io.Writer); ok {
		return readWriteBody{body: b, w: w}
	}
	return b
}

// Read reads from the original body, keeps what passes for the check, and
// releases the weight at io.EOF.
func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	// A broken reader's count is kept within p; io.EOF is io.Reader's
	// contract: EOF itself, not wrapped.
	n = max(min(n, len(p)), 0)
	if err == io.EOF {
		defer b.release(true) // even if the check panics
	}
	b.seen(p[:n], err == io.EOF)
	return n, err
}

// seen keeps the first peekSize bytes of p not kept yet and runs the check
// once peekSize bytes were seen or when final is set.
func (b *body) seen(p []byte, final bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.settle != nil && len(p) > 0 {
		b.keepLast(p) // the usage of an LLM reply comes last
	}
	if b.check == nil {
		return
	}
	// The prefix is below peekSize here (the check ran when it got there).
	b.prefix = append(b.prefix, p[:min(peekSize-len(b.prefix), len(p))]...)
	if final || len(b.prefix) >= peekSize {
		check, prefix := b.check, b.prefix
		b.check, b.prefix = nil, nil
		if prefix == nil {
			prefix = []byte{} // the body stage: non-nil, even when empty
		}
		// Run under mu: a concurrent Close or EOF waits for it, so the
		// pause it may set comes before any release.
		check(prefix)
	}
}

// keepLast adds p to the ring of the body's last keepMax bytes. The ring
// grows (doubling, never past keepMax) while the body is shorter, then
// wraps: no byte is copied twice once it is full, and it never holds more
// than keepMax bytes, so a long streamed reply costs keepMax at most.
// b.mu must be held.
func (b *body) keepLast(p []byte) {
	p = p[max(len(p)-keepMax, 0):]
	if fill := min(len(p), keepMax-len(b.keep)); fill > 0 {
		// Still growing: the oldest byte is at 0.
		if n := len(b.keep) + fill; n > cap(b.keep) {
			b.keep = append(make([]byte, 0, min(max(n, 2*cap(b.keep), 512), keepMax)), b.keep...)
		}
		b.keep = append(b.keep, p[:fill]...)
		p = p[fill:]
	}
	for len(p) > 0 { // full: wrap the rest of p around
		c := copy(b.keep[b.keepAt:], p)
		p = p[c:]
		b.keepAt = (b.keepAt + c) % keepMax
	}
}

// kept returns the body's last keepMax bytes in order, turning the ring
// in place (no second buffer), and gives them up. b.mu must be held.
func (b *body) kept() []byte {
	k := b.keep
	if b.keepAt != 0 {
		slices.Reverse(k[:b.keepAt])
		slices.Reverse(k[b.keepAt:])
		slices.Reverse(k)
	}
	b.keep, b.keepAt = nil, 0
	return k
}

// Close closes the original body first, so the connection is back in the
// base transport's pool (or torn down) before another request may start,
// then runs the check on what was seen (if it has not run), then releases.
func (b *body) Close() error {
	err := b.rc.Close()
	defer b.release(false) // even if the check panics
	b.seen(nil, true)
	return err
}

// release gives the weight back once. Read and Close may run concurrently (a
// goroutine reading while another closes to abort it), and Close may follow
// EOF; the compare-and-swap makes exactly one of them release, since the
// limiter panics on over-release. eof tells a release at io.EOF.
func (b *body) release(eof bool) {
	if b.released.CompareAndSwap(false, true) {
		defer b.l.Release(b.n) // even if the settlement panics
		if b.settle != nil {
			b.mu.Lock()
			keep := b.kept()
			b.mu.Unlock()
			b.settle(keep, eof)
		}
	}
}

// Write writes to the original body (101 Switching Protocols).
func (b readWriteBody) Write(p []byte) (int, error) { return b.w.Write(p) }
