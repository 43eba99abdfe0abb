package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// redisServer is a redis-server child process on a free loopback port, with
// no persistence.
type redisServer struct {
	Addr   string
	cmd    *exec.Cmd
	dir    string
	exited chan struct{}
	out    *syncBuffer
}

// startRedis starts redis-server on a free port of 127.0.0.1 and waits until
// it answers PING.
func startRedis(ctx context.Context) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("no redis-server on PATH: install it (apt-get install redis-server) or set REDIS_ADDR")
	}
	var last error
	for range 5 { // a free port may be taken between probing and binding
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		r, err := tryRedis(ctx, bin, port)
		if err == nil {
			return r, nil
		}
		last = err
	}
	return nil, fmt.Errorf("starting redis-server: %w", last)
}

func tryRedis(ctx context.Context, bin string, port int) (*redisServer, error) {
	dir, err := os.MkdirTemp("", "ratesem-simulate-redis-")
	if err != nil {
		return nil, err
	}
	r := &redisServer{
		Addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:    dir,
		exited: make(chan struct{}),
		out:    &syncBuffer{},
	}
	r.cmd = exec.Command(bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", dir,
		"--logfile", "",
	)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	dieWithParent(r.cmd)
	if err := r.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() {
		_ = r.cmd.Wait()
		close(r.exited)
	}()
	c := goredis.NewClient(&goredis.Options{Addr: r.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return r, nil
		}
		select {
		case <-r.exited:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server exited: %s", r.out.String())
		case <-ctx.Done():
			r.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("redis-server did not answer PING within 10s: %v: %s", err, r.out.String())
		}
	}
}

// stop sends SIGTERM (SIGKILL after 5 s), waits for the process to exit and
// removes its directory.
func (r *redisServer) stop() {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(5 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
	os.RemoveAll(r.dir)
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

// syncBuffer collects a child's output; exec copies stdout and stderr from
// two goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
