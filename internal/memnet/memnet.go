// Package memnet serves the test servers of packages exchangetest and
// saastest: an httptest.Server on TCP loopback or on in-memory pipes, with
// clients that connect from a chosen IP address.
package memnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
)

// Server is an httptest.Server on TCP loopback or on in-memory
// connections, and the clients handed out for it.
type Server struct {
	hs  *httptest.Server
	mem *memListener // nil on TCP

	stop chan struct{} // closed by Close, ending stalled bodies

	mu      sync.Mutex
	clients map[string]*http.Client // by client IP
	closed  bool
}

// New starts a server of h: on TCP loopback, or, with inMemory, on
// in-memory pipes (net.Pipe) named host, which work inside a
// testing/synctest bubble where real sockets do not.
func New(host string, h http.Handler, inMemory bool) *Server {
	n := &Server{clients: make(map[string]*http.Client), stop: make(chan struct{})}
	if inMemory {
		n.mem = newMemListener(host)
		n.hs = &httptest.Server{Listener: n.mem, Config: &http.Server{Handler: h}}
		n.hs.Start()
	} else {
		n.hs = httptest.NewServer(h)
	}
	return n
}

// URL returns the server's base URL.
func (n *Server) URL() string { return n.hs.URL }

// Stop returns a channel closed when Close begins: handlers stop stalling
// bodies then.
func (n *Server) Stop() <-chan struct{} { return n.stop }

// ClientFrom returns the client whose connections come from ip, creating it
// on first use; it panics if ip is not an IP address.
func (n *Server) ClientFrom(ip string) *http.Client {
	addr := net.ParseIP(ip)
	if addr == nil {
		panic(fmt.Sprintf("ratesem: ClientFrom: %q is not an IP address", ip))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if c := n.clients[ip]; c != nil {
		return c
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	if n.mem != nil {
		mem := n.mem
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return mem.dial(ctx, addr) }
	} else {
		target := n.hs.Listener.Addr().String()
		d := &net.Dialer{}
		if !addr.Equal(net.IPv4(127, 0, 0, 1)) {
			d.LocalAddr = &net.TCPAddr{IP: addr}
		}
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, target)
		}
	}
	c := &http.Client{Transport: tr}
	n.clients[ip] = c
	if n.closed {
		tr.CloseIdleConnections()
	}
	return c
}

// Close shuts the server down (waiting for the handlers, as httptest does)
// and closes the idle connections of every client handed out.
func (n *Server) Close() {
	n.mu.Lock()
	if !n.closed {
		close(n.stop)
	}
	n.mu.Unlock()
	n.hs.Close()
	n.mu.Lock()
	n.closed = true
	clients := make([]*http.Client, 0, len(n.clients))
	for _, c := range n.clients {
		clients = append(clients, c)
	}
	n.mu.Unlock()
	for _, c := range clients {
		c.CloseIdleConnections()
	}
}

// memListener is a net.Listener whose connections are in-memory pipes
// (net.Pipe), dialled through dial. Connections made this way work inside
// a testing/synctest bubble, where real sockets do not.
type memListener struct {
	addr  memAddr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	port  atomic.Uint32
}

// memAddr is the address of a memListener: a host name under the reserved
// top-level domain .invalid, so it never resolves by accident.
type memAddr string

// Network implements net.Addr: "memory".
func (a memAddr) Network() string { return "memory" }

// String implements net.Addr: the address given (host:port).
func (a memAddr) String() string { return string(a) }

func newMemListener(host string) *memListener {
	return &memListener{addr: memAddr(host), conns: make(chan net.Conn), done: make(chan struct{})}
}

var errMemListenerClosed = errors.New("ratesem: in-memory server closed")

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

// Close implements net.Listener; pending and later Accepts fail.
func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l *memListener) Addr() net.Addr { return l.addr }

// dial connects a new pipe to the listener. The server side reports ip and
// a fresh port as its RemoteAddr, so handlers see the client IP as if it
// came over TCP.
func (l *memListener) dial(ctx context.Context, ip net.IP) (net.Conn, error) {
	port := 1024 + int(l.port.Add(1)%64000)
	client := &net.TCPAddr{IP: ip, Port: port}
	c, s := net.Pipe()
	sc := &memConn{Conn: s, local: l.addr, remote: client}
	cc := &memConn{Conn: c, local: client, remote: l.addr}
	select {
	case l.conns <- sc:
		return cc, nil
	case <-l.done:
		c.Close()
		s.Close()
		return nil, errMemListenerClosed
	case <-ctx.Done():
		c.Close()
		s.Close()
		return nil, ctx.Err()
	}
}

// memConn is one end of a pipe with the addresses of a network connection.
type memConn struct {
	net.Conn
	local, remote net.Addr
}

// LocalAddr implements net.Conn.
func (c *memConn) LocalAddr() net.Addr { return c.local }

// RemoteAddr implements net.Conn: the client IP the server sees.
func (c *memConn) RemoteAddr() net.Addr { return c.remote }
