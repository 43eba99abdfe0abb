package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of three masters (no replicas), each a
// redis-server child process on a free loopback port, with the 16384
// slots split between them by redis-cli, made by StartCluster or
// LaunchCluster (the zero Cluster is not usable). Its methods are safe for
// concurrent use.
type Cluster struct {
	nodes [3]*Server
}

// clusterArgs are the redis-server arguments of a cluster node: its
// nodes.conf lives in the node's directory, so a node restarted on the
// same port comes back with the same id and slots; a node that misses for
// more than 1 s is taken as failed; the cluster keeps serving the slots of
// the nodes that answer (cluster-require-full-coverage no).
var clusterArgs = []string{
	"--cluster-enabled", "yes",
	"--cluster-config-file", "nodes.conf",
	"--cluster-node-timeout", "1000",
	"--cluster-require-full-coverage", "no",
}

// StartCluster starts a 3-master Redis Cluster for t, joins it with `redis-cli
// --cluster create … --cluster-replicas 0 --cluster-yes`, and waits (at most 10
// s) until every node reports cluster_state:ok. The nodes are stopped in
// t.Cleanup. It skips t under -short, and when redis-server or redis-cli
// is missing (fails it then when CI is set), as Start does. Without persistence, a restarted node comes
// back with its slots and without its keys.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		msg := "redistest: no redis-cli on PATH; install it with `apt-get install redis-tools`"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " [CI is set: not skipping]")
		}
		t.Skip(msg)
	}
	skipShort(t)
	c := &Cluster{}
	for i := range c.nodes {
		c.nodes[i] = Start(t, clusterArgs...)
	}
	if err := c.create(); err != nil {
		t.Fatal(err)
	}
	return c
}

// LaunchCluster is StartCluster for a program rather than a test
// (examples/fleet): the caller must call Stop.
func LaunchCluster() (*Cluster, error) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, errors.New("redistest: no redis-cli on PATH; install it with `apt-get install redis-tools`")
	}
	c := &Cluster{}
	for i := range c.nodes {
		s, err := launch(clusterArgs...)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.nodes[i] = s
	}
	if err := c.create(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// create joins the nodes and waits for the cluster to be ok.
func (c *Cluster) create() error {
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redistest: redis-cli --cluster create: %v: %s", err, out)
	}
	return c.waitOK()
}

// waitOK waits until every node reports cluster_state:ok and knows 3
// masters.
func (c *Cluster) waitOK() error {
	deadline := time.Now().Add(startTimeout)
	for {
		ok := true
		var last string
		for _, n := range c.nodes {
			line, err := command(n.Addr(), "CLUSTER INFO")
			last = line
			if err != nil || !strings.Contains(line, "cluster_state:ok") || !strings.Contains(line, "cluster_known_nodes:3") ||
				!strings.Contains(line, "cluster_slots_ok:16384") {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: cluster not ok within %v: %q", startTimeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Addrs returns the nodes' addresses (127.0.0.1:port), a seed list for a
// go-redis ClusterClient.
func (c *Cluster) Addrs() []string {
	a := make([]string, 0, len(c.nodes))
	for _, n := range c.nodes {
		if n != nil {
			a = append(a, n.Addr())
		}
	}
	return a
}

// Node returns node i (0 to 2), to stop and start it by hand; another i
// panics (index out of range).
func (c *Cluster) Node(i int) *Server { return c.nodes[i] }

// Restart stops node i and starts it again on the same port (with its
// nodes.conf: the same id and slots, none of its keys), and waits until the
// cluster is ok again (at most 10 s); it returns an error when it is not,
// and for a launched cluster. It blocks for the restart.
func (c *Cluster) Restart(i int) error {
	n := c.nodes[i]
	if n.t == nil {
		return errors.New("redistest: Restart of a launched cluster")
	}
	n.Stop()
	n.Start()
	return c.waitOK()
}

// Stop stops every node (see Server.Stop: it blocks up to 5 s per node);
// a launched cluster's directories are removed.
func (c *Cluster) Stop() {
	for _, n := range c.nodes {
		if n != nil {
			n.Stop()
		}
	}
}
