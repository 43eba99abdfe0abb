// Package redistest runs a real redis-server for tests: a child process on a
// free loopback port, with no persistence, stopped when the test ends. Tests
// can stop it and start it again on the same port to play a Redis restart or
// an unreachable Redis.
//
// Without a redis-server binary on PATH the tests that need one are skipped
// with a message saying how to install it (apt-get install redis-server),
// except under CI (the environment variable CI set), where they fail: a CI
// run must not pass by skipping them. Under go test -short they are
// skipped too, installed or not: -short runs the in-process tests alone.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a start waits for PING to answer.
const startTimeout = 10 * time.Second

// Server is a redis-server child process that a test can stop and start
// again on the same port, made by Start or Launch (the zero Server is not
// usable). Its methods are safe for concurrent use.
type Server struct {
	t      testing.TB // nil for a launched server
	bin    string
	extra  []string // more redis-server arguments
	port   int
	dir    string
	ownDir bool // launched: Stop removes dir

	mu     sync.Mutex
	proc   *os.Process
	exited chan error // receives the running process's exit
}

// Start starts a redis-server child process for t on a free loopback port,
// with no RDB snapshots, no append-only file and bound to 127.0.0.1, and
// waits until it answers PING. The process is stopped in t.Cleanup. It
// skips t under -short (testing.Short), and when no redis-server binary is
// found (fails it then when CI is set).
//
// The server accepts DEBUG from loopback clients (enable-debug-command
// local), so tests can make it stall with DEBUG SLEEP. args are more
// redis-server arguments, e.g. "--maxmemory", "2mb", "--maxmemory-policy",
// "allkeys-lru". It is safe to call from parallel tests; each call starts
// its own server.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redistest: no redis-server on PATH; install it with `apt-get install redis-server`"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " [CI is set: not skipping]")
		}
		t.Skip(msg)
	}
	skipShort(t)
	s := &Server{t: t, bin: bin, dir: t.TempDir(), extra: args}
	var last error
	for range 5 { // a free port may be taken between probing and binding
		s.port, err = freePort()
		if err != nil {
			t.Fatalf("redistest: finding a free port: %v", err)
		}
		if last = s.start(); last == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("redistest: starting redis-server: %v", last)
	return nil
}

// skipShort skips t under go test -short: a test that starts Redis is not
// one of the fast ones.
func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("redistest: needs a redis-server, not started under -short (run go test without -short)")
	}
}

// Launch starts a redis-server child process on a free loopback port for a
// program rather than a test (examples/simulate uses it): the same settings
// as Start (no snapshots, no append-only file, bound to 127.0.0.1; on
// Linux it dies with its parent). It returns an error when no redis-server
// binary is found or the server does not answer PING within 10 s.
// The caller must call Stop, which also removes the server's directory.
// Start and Restart are for test servers only (they report through the
// test); they panic on a launched one.
func Launch(args ...string) (*Server, error) { return launch(args...) }

// launch is Launch with more redis-server arguments.
func launch(args ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redistest: no redis-server on PATH; install it with `apt-get install redis-server`")
	}
	dir, err := os.MkdirTemp("", "ratesem-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, ownDir: true, extra: args}
	var last error
	for range 5 { // a free port may be taken between probing and binding
		if s.port, err = freePort(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: finding a free port: %w", err)
		}
		if last = s.start(); last == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("redistest: starting redis-server: %w", last)
}

// Addr returns the server's address, 127.0.0.1:port. It stays the same
// across Stop and Start.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Stop stops the server process (SIGTERM, then SIGKILL after 5 s) and waits
// for it to exit. Everything the server held is lost: it keeps no
// snapshot. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	_ = s.proc.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.proc.Kill()
		<-s.exited
	}
	s.proc, s.exited = nil, nil
	if s.ownDir {
		os.RemoveAll(s.dir)
	}
}

// Start starts the server again on the same port, empty (no keys, no
// cached scripts), and waits until it answers PING (at most 10 s an
// attempt; it tries again every 100 ms, up to 50 times, while the old
// socket lingers). It fails the test if the server does not come up.
// Starting a running server does nothing.
func (s *Server) Start() {
	s.t.Helper()
	var err error
	for range 50 { // the old socket may linger for a moment
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restarting redis-server on port %d: %v", s.port, err)
}

// Restart is Stop followed by Start: the server comes back on the same
// port with no keys and no cached scripts.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.Start()
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return nil
	}
	out := &lockedBuffer{}
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", "",
		"--enable-debug-command", "local",
	)
	cmd.Args = append(cmd.Args, s.extra...)
	cmd.Stdout, cmd.Stderr = out, out
	orphanGuard(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(startTimeout)
	for {
		if ping(s.Addr()) == nil {
			s.proc, s.exited = cmd.Process, exited
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("redis-server exited (%v): %s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server did not answer PING within %v: %s", startTimeout, out.String())
		}
	}
}

func command(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil || len(line) == 0 || line[0] != '$' {
		return line, err
	}
	n, err := strconv.Atoi(line[1 : len(line)-2])
	if err != nil || n < 0 {
		return line, err
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	return string(body[:n]), nil
}

// ping sends PING in the inline protocol and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return errors.New("unexpected reply to PING: " + strconv.Quote(line))
	}
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// lockedBuffer collects the process's output; exec copies stdout and
// stderr from two goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it never fails.
func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
