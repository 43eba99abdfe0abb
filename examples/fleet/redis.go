package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ratesem/ratesem/window/redis/redistest"
)

// redisStartTimeout bounds how long starting Redis may take.
const redisStartTimeout = 20 * time.Second

// startRedis starts the Redis the workers share: one redis-server (no
// persistence, on a free loopback port), or with cluster a Redis Cluster of
// three masters on three free loopback ports, made with redis-cli --cluster
// create. It returns the address the workers dial (comma-separated seed
// nodes for a cluster) and a function that stops every server and removes
// its files. The servers die with this process on Linux.
func startRedis(cluster bool) (addr string, stop func(), err error) {
	if !cluster {
		s, err := redistest.Launch()
		if err != nil {
			return "", nil, err
		}
		return s.Addr(), s.Stop, nil
	}
	return startCluster(3)
}

// startCluster starts n redis-server processes in cluster mode and joins
// them into one cluster of n masters, no replicas.
func startCluster(n int) (addr string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redis-server not found (apt-get install redis-server): %w", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return "", nil, fmt.Errorf("redis-cli not found (apt-get install redis-tools): %w", err)
	}
	dir, err := os.MkdirTemp("", "fleet-cluster-")
	if err != nil {
		return "", nil, err
	}
	var procs []*exec.Cmd
	stop = func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
		_ = os.RemoveAll(dir)
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	var addrs []string
	for i := range n {
		port, err := freePort()
		if err != nil {
			return "", nil, err
		}
		nodeDir := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(nodeDir, 0o755); err != nil {
			return "", nil, err
		}
		cmd := exec.Command(bin,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			"--dir", nodeDir, "--logfile", filepath.Join(nodeDir, "log"),
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
		dieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			return "", nil, err
		}
		procs = append(procs, cmd)
		a := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err := waitReply(a, "PING", "+PONG"); err != nil {
			return "", nil, fmt.Errorf("redis-server on %s: %w", a, err)
		}
		addrs = append(addrs, a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisStartTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	for _, a := range addrs {
		if err := waitReply(a, "CLUSTER INFO", "cluster_state:ok"); err != nil {
			return "", nil, fmt.Errorf("cluster node %s: %w", a, err)
		}
	}
	return strings.Join(addrs, ","), stop, nil
}

// waitReply sends cmd (inline protocol) to addr until the reply contains
// want, for at most redisStartTimeout.
func waitReply(addr, cmd, want string) error {
	deadline := time.Now().Add(redisStartTimeout)
	var last string
	for {
		reply, err := inline(addr, cmd)
		if err == nil && strings.Contains(reply, want) {
			return nil
		}
		last = fmt.Sprintf("%q, %v", reply, err)
		if time.Now().After(deadline) {
			return fmt.Errorf("no %q in the reply to %s within %v: last %s", want, cmd, redisStartTimeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// inline sends one inline command and returns the reply: its first line
// and, for a bulk string, the lines of its body.
func inline(addr, cmd string) (string, error) {
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
	if err != nil {
		return line, err
	}
	if !strings.HasPrefix(line, "$") {
		return line, nil
	}
	size, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || size < 0 {
		return line, errors.New("bad bulk reply " + strconv.Quote(line))
	}
	body := make([]byte, size)
	_, err = io.ReadFull(r, body)
	return string(body), err
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
