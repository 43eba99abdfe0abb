package exchangetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// netServer is the HTTP side shared by OKXServer and BinanceServer: an
// httptest.Server on TCP loopback or on in-memory connections, and the
// clients handed out for it.
type netServer struct {
	hs  *httptest.Server
	mem *memListener // nil on TCP

	stop chan struct{} // closed by close, ending stalled bodies

	mu      sync.Mutex
	clients map[string]*http.Client // by client IP
	closed  bool
}

func newNetServer(host string, h http.Handler, inMemory bool) *netServer {
	n := &netServer{clients: make(map[string]*http.Client), stop: make(chan struct{})}
	if inMemory {
		n.mem = newMemListener(host)
		n.hs = &httptest.Server{Listener: n.mem, Config: &http.Server{Handler: h}}
		n.hs.Start()
	} else {
		n.hs = httptest.NewServer(h)
	}
	return n
}

func (n *netServer) url() string { return n.hs.URL }

// clientFrom returns the client whose connections come from ip, creating it
// on first use.
func (n *netServer) clientFrom(ip string) *http.Client {
	addr := net.ParseIP(ip)
	if addr == nil {
		panic(fmt.Sprintf("exchangetest: ClientFrom: %q is not an IP address", ip))
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

// close shuts the server down (waiting for the handlers, as httptest does)
// and closes the idle connections of every client handed out.
func (n *netServer) close() {
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

var errMemListenerClosed = errors.New("exchangetest: in-memory server closed")

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

// remoteIP returns the host part of r.RemoteAddr (all of it if it has no
// port).
func remoteIP(r *http.Request) string {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return ip
}

// reply is an answer decided under a server's lock and written after the
// configured latency.
type reply struct {
	status int
	header map[string]string
	body   []byte // JSON unless text is set
	text   bool
	code   string // the exchange's code in body, for the log

	// Set by the hostile mode (hostile.alter).
	hostile    bool
	extra      http.Header   // set after header; a key without values deletes
	stall      time.Duration // stall the body after stallAfter bytes; < 0: until the end
	stallAfter int
}

// sleepLatency sleeps for latency() if latency is set, and reports false if
// the request's context ended first (the client is gone).
func sleepLatency(ctx context.Context, latency func() time.Duration) bool {
	if latency == nil {
		return true
	}
	d := latency()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// write answers rp on w; a stalled body (hostile mode) ends early when ctx
// ends or stop is closed.
func (rp reply) write(ctx context.Context, w http.ResponseWriter, stop <-chan struct{}) {
	h := w.Header()
	for k, v := range rp.header {
		h.Set(k, v)
	}
	if rp.text {
		h.Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Content-Length", strconv.Itoa(len(rp.body)))
	for k, vs := range rp.extra {
		if len(vs) == 0 {
			delete(h, k)
		} else {
			h[k] = vs
		}
	}
	w.WriteHeader(rp.status)
	rp.writeBody(ctx, w, stop)
}
