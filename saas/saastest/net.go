package saastest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
)

// netServer is the HTTP side of every server: an httptest.Server on TCP
// loopback, or on in-memory pipes (net.Pipe) that work inside a
// testing/synctest bubble, and the one client handed out for it.
type netServer struct {
	hs     *httptest.Server
	mem    *memListener // nil on TCP
	once   sync.Once
	client *http.Client
}

func newNetServer(host string, h http.Handler, inMemory bool) *netServer {
	n := &netServer{}
	if inMemory {
		n.mem = &memListener{addr: memAddr(host), conns: make(chan net.Conn), done: make(chan struct{})}
		n.hs = &httptest.Server{Listener: n.mem, Config: &http.Server{Handler: h}}
		n.hs.Start()
	} else {
		n.hs = httptest.NewServer(h)
	}
	return n
}

// clientOf returns the server's client, made on first use: over TCP the
// httptest client, in memory one that dials the pipes.
func (n *netServer) clientOf() *http.Client {
	n.once.Do(func() {
		if n.mem == nil {
			n.client = n.hs.Client()
			return
		}
		mem := n.mem
		tr := &http.Transport{MaxIdleConnsPerHost: 256, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return mem.dial(ctx)
		}}
		n.client = &http.Client{Transport: tr}
	})
	return n.client
}

// close shuts the server down (waiting for the handlers) and closes the
// idle connections of its client.
func (n *netServer) close() {
	n.hs.Close()
	if c := n.clientOf(); c != nil {
		c.CloseIdleConnections()
	}
}

// memListener is a net.Listener of in-memory pipes, dialled through dial.
type memListener struct {
	addr  memAddr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// memAddr is a memListener's address: a host under the reserved top-level
// domain .invalid, so it never resolves by accident.
type memAddr string

// Network implements net.Addr: "memory".
func (a memAddr) Network() string { return "memory" }

// String implements net.Addr.
func (a memAddr) String() string { return string(a) }

// Accept implements net.Listener: it blocks until a client dials or the
// listener is closed (then net.ErrClosed).
func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l *memListener) Addr() net.Addr { return l.addr }

var errMemClosed = errors.New("saastest: in-memory server closed")

// loopback is the client address the server sees on in-memory connections.
var loopback = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}

func (l *memListener) dial(ctx context.Context) (net.Conn, error) {
	c, s := net.Pipe()
	select {
	case l.conns <- &memConn{Conn: s, local: l.addr, remote: loopback}:
		return &memConn{Conn: c, local: loopback, remote: l.addr}, nil
	case <-l.done:
		c.Close()
		s.Close()
		return nil, errMemClosed
	case <-ctx.Done():
		c.Close()
		s.Close()
		return nil, ctx.Err()
	}
}

// memConn is one end of a pipe with network addresses.
type memConn struct {
	net.Conn
	local, remote net.Addr
}

// LocalAddr implements net.Conn.
func (c *memConn) LocalAddr() net.Addr { return c.local }

// RemoteAddr implements net.Conn.
func (c *memConn) RemoteAddr() net.Addr { return c.remote }
