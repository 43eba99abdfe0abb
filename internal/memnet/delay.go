package memnet

import (
	"bytes"
	"net"
	"sync"
	"time"
)

// Delay returns c with what is written to it delivered d after each
// Write, in order: a link whose one-way latency (this side to the other)
// is d. As on a real link, bytes written before Close still arrive, d after
// they were written, and then the connection closes; a Write after Close
// fails with net.ErrClosed.
func Delay(c net.Conn, d time.Duration) net.Conn {
	dc := &delayConn{Conn: c, d: d, q: make(chan chunk, 4096)}
	go dc.loop()
	return dc
}

type delayConn struct {
	net.Conn
	d      time.Duration
	mu     sync.Mutex // guards closed and sends on q
	closed bool
	q      chan chunk
}

type chunk struct {
	due time.Time
	b   []byte
}

// Write queues a copy of b for delivery d from now and returns len(b) at
// once (it blocks only when 4096 writes are queued); after Close it fails
// with net.ErrClosed. Safe for concurrent use.
func (c *delayConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	c.q <- chunk{time.Now().Add(c.d), bytes.Clone(b)}
	return len(b), nil
}

// loop delivers the chunks when due, then closes the connection once
// Close was called and every chunk written before it is delivered.
func (c *delayConn) loop() {
	defer c.Conn.Close()
	for ch := range c.q {
		time.Sleep(time.Until(ch.due))
		if _, err := c.Conn.Write(ch.b); err != nil {
			for range c.q { // drain: the link is gone
			}
			return
		}
	}
}

// Close stops further writes and returns nil at once; the bytes queued
// still arrive when due, then the underlying connection closes. Calling it
// again does nothing.
func (c *delayConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.q)
	}
	return nil
}
