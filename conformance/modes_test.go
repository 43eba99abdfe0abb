package conformance_test

// The adapter: the one file of the suite that calls constructors and
// options. Every test reaches the fronts through a mode's factories
// (mode.sem, mode.pool, mode.server) and the transports below, and uses
// only the fronts' methods; when constructors or options move (Redis
// options to package redisrate, window constructors returning
// window.Policy), this file alone changes.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/internal/memnet"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// policyKind names a window of package window, as a front's rate policy.
type policyKind int

const (
	completion  policyKind = iota // window.NewCompletion: the default
	startWindow                   // window.NewSlidingLog(margin): semaphore.WithStartWindow
	fixedWindow                   // window.NewFixedWindow
	gcra                          // window.NewGCRA(burst)
)

func (k policyKind) String() string {
	return [...]string{"completion", "start-window", "fixed-window", "gcra"}[k]
}

// policy returns a fresh window of kind k for l.
func (k policyKind) policy(l window.Limit, margin time.Duration, burst int64) window.Policy {
	switch k {
	case startWindow:
		return window.NewSlidingLog(l, margin)
	case fixedWindow:
		return window.NewFixedWindow(l)
	case gcra:
		return window.NewGCRA(l, burst)
	}
	return window.NewCompletion(l)
}

// semCfg says how to build a RateSemaphore of n units per Per.
type semCfg struct {
	policy      policyKind
	margin      time.Duration // startWindow
	burst       int64         // gcra: 0 means N
	maxInFlight int64         // WithMaxUnitsInFlight; 0: none
	observer    func(ratesem.Event)
	clock       ratesem.Clock // WithClock; nil: none
	evictionOK  bool          // WithEvictionAllowed
	addr        string        // Redis: a server of the test's own; "" the shared one
	name        string        // Redis: the limit's name; "" a name of its own
}

// ruleSpec is one rule of a Pool's table.
type ruleSpec struct {
	name        string
	limit       window.Limit
	policy      policyKind
	margin      time.Duration
	burst       int64
	maxInFlight int64
	learn       bool // learns its limit from X-RateLimit- headers (fixed windows)
}

// poolCfg says how to build a Pool over rules.
type poolCfg struct {
	observer   func(ratesem.Event)
	clock      ratesem.Clock
	evictionOK bool
	addr       string
	scope      string // Redis: the Table's Scope; "" a scope of its own
}

// table returns the clientpool.Table of rules; every request (Classify, a
// Transport) is charged one unit of every rule, key "".
func table(rules ...ruleSpec) clientpool.Table {
	var t clientpool.Table
	for _, r := range rules {
		rule := clientpool.Rule{Name: r.name, Limit: r.limit, MaxUnitsInFlight: r.maxInFlight}
		if r.policy != completion {
			r := r
			rule.Window = func(l window.Limit) window.Policy { return r.policy.policy(l, r.margin, r.burst) }
		}
		if r.learn {
			rule.Learn = clientpool.LearnRateLimit("X-RateLimit-", "", true)
		}
		t.Rules = append(t.Rules, rule)
		t.Default = append(t.Default, clientpool.Cost{Rule: r.name})
	}
	return t
}

// charge is one unit (or n) of rule under key.
func charge(rule, key string, n int64) clientpool.Charge {
	return clientpool.Charge{Rule: rule, Key: key, Weight: n}
}

// semStats is what the tests read of a semaphore's Stats.
type semStats struct {
	InFlight int64
	Waiting  int
	Admitted uint64
}

// semFront is a RateSemaphore as the tests see it.
type semFront struct {
	*semaphore.RateSemaphore
	t testing.TB
}

// Stats returns the counters the tests read.
func (s semFront) Stats() semStats {
	st := s.RateSemaphore.Stats()
	return semStats{InFlight: st.InFlight, Waiting: st.Waiting, Admitted: st.Admitted}
}

// begin admits a call of est units whose weight is settled when it ends:
// end(actual) releases it as a call of actual units.
func (s semFront) begin(ctx context.Context, est int64) (end func(actual int64), err error) {
	c, err := s.RateSemaphore.Begin(ctx, est)
	if err != nil {
		return nil, err
	}
	return c.End, nil
}

// TryAcquireWait is the non-blocking decision that returns the wait, as
// window.Limiter.TryN: (0, nil) with n units admitted; else, changing
// nothing, how long until they could be (> 0, nil), or ratesem.ErrInFlight
// when only calls in flight ending can make room.
func (s semFront) TryAcquireWait(n int64) (time.Duration, error) {
	return s.RateSemaphore.TryAcquireWait(n)
}

// poolFront is a Pool as the tests see it.
type poolFront struct {
	*clientpool.Pool
	t testing.TB
}

// TryAcquire is the pool's non-blocking decision that returns the wait:
// (a Ticket, 0, nil) when admitted; else, changing nothing, (nil, how long
// until the call could be admitted, nil), or ratesem.ErrInFlight when only
// calls in flight ending can make room.
func (p poolFront) TryAcquire(charges ...clientpool.Charge) (*clientpool.Ticket, time.Duration, error) {
	return p.Pool.TryAcquire(charges...)
}

// semTransport is an http.RoundTripper limited by s, sending through base.
func semTransport(s semFront, base http.RoundTripper) http.RoundTripper {
	return httpclient.New(s.RateSemaphore, httpclient.WithBase(base))
}

// poolTransport is an http.RoundTripper limited by p's table, sending
// through base.
func poolTransport(p poolFront, base http.RoundTripper) http.RoundTripper {
	return httpclient.NewPool(p.Pool, httpclient.WithBase(base))
}

// mode is one implementation of the bookkeeping, with the factories of
// the fronts over it.
type mode struct {
	name  string
	redis bool
	// cluster: Redis Cluster; sem is nil there (the pool alone runs on a
	// cluster).
	cluster bool
	// tol is how much sooner than Per a call's end may stop counting in
	// the completion check: 0 in process; over Redis, the rate difference
	// of Redis's TIME (the host's wall clock, which NTP may slew) and the
	// monotonic readings of the record.
	tol time.Duration
	// slack is how long after its admission a call's start may be
	// recorded, for the checks on starts alone (start and fixed windows,
	// GCRA): 0 in process, where the virtual clock stands still while the
	// caller runs; over Redis the time from the script's TIME to the
	// return of Acquire.
	slack time.Duration
	// scale is the Per of the scenarios: long in virtual time costs
	// nothing; over Redis short, for real time.
	per time.Duration

	sem    func(t *testing.T, n int64, per time.Duration, cfg semCfg) (semFront, error)
	pool   func(t *testing.T, rules []ruleSpec, cfg poolCfg) (poolFront, error)
	server func(t *testing.T, h http.Handler) http.RoundTripper
	// run runs a scenario: in process inside a testing/synctest bubble
	// (virtual time: every sleep and wait of the fronts is exact and
	// instant), over Redis on the real clock.
	run func(t *testing.T, f func(t *testing.T))
	// settle returns once the goroutines of the scenario that can block
	// have: in process at once (synctest.Wait); over Redis it sleeps
	// settleDelay, so that calls made before it are in the queues before
	// calls made after it.
	settle func()
}

// settleDelay is the real time the Redis modes give a goroutine to enter
// Acquire and queue; the FIFO tests order their calls this far apart.
const settleDelay = 40 * time.Millisecond

var modes = []mode{
	{
		name: "inproc", per: time.Second,
		sem: func(t *testing.T, n int64, per time.Duration, cfg semCfg) (semFront, error) {
			opts := semOpts(cfg)
			var s *semaphore.RateSemaphore
			switch cfg.policy {
			case completion:
				s = semaphore.New(n, per, opts...)
			case startWindow:
				s = semaphore.New(n, per, append(opts, semaphore.WithStartWindow(cfg.margin))...)
			default:
				s = semaphore.NewWithPolicy(cfg.policy.policy(window.Limit{N: n, Per: per}, cfg.margin, cfg.burst), opts...)
			}
			t.Cleanup(func() { s.Close() })
			return semFront{s, t}, nil
		},
		pool: func(t *testing.T, rules []ruleSpec, cfg poolCfg) (poolFront, error) {
			p, err := clientpool.New(table(rules...), poolOpts(cfg)...)
			if err != nil {
				return poolFront{}, err
			}
			t.Cleanup(func() { p.Close() })
			return poolFront{p, t}, nil
		},
		server: func(t *testing.T, h http.Handler) http.RoundTripper {
			srv := memnet.New("api.test", h, true)
			t.Cleanup(srv.Close)
			return srv.ClientFrom("127.0.0.1").Transport
		},
		run:    func(t *testing.T, f func(t *testing.T)) { synctest.Test(t, f) },
		settle: synctest.Wait,
	},
	{
		name: "redis", redis: true, per: 200 * time.Millisecond,
		tol: 2 * time.Millisecond, slack: 30 * time.Millisecond,
		sem: func(t *testing.T, n int64, per time.Duration, cfg semCfg) (semFront, error) {
			c := redisClient(t, cfg.addr)
			opts := semOpts(cfg)
			if cfg.evictionOK {
				opts = append(opts, redisrate.WithEvictionAllowed())
			}
			var s *semaphore.RateSemaphore
			var err error
			name := cfg.name
			if name == "" {
				name = uniqueName(t)
			}
			switch cfg.policy {
			case completion:
				s, err = redisrate.NewSemaphore(c, name, n, per, opts...)
			case startWindow:
				s, err = redisrate.NewSemaphore(c, name, n, per, append(opts, semaphore.WithStartWindow(cfg.margin))...)
			default:
				s, err = redisrate.NewSemaphoreWithPolicy(c, name,
					cfg.policy.policy(window.Limit{N: n, Per: per}, cfg.margin, cfg.burst), opts...)
			}
			if err != nil {
				return semFront{}, err
			}
			t.Cleanup(func() { s.Close() })
			return semFront{s, t}, nil
		},
		pool: func(t *testing.T, rules []ruleSpec, cfg poolCfg) (poolFront, error) {
			return redisPool(t, redisClient(t, cfg.addr), rules, cfg)
		},
		server: tcpServer,
		run:    func(t *testing.T, f func(t *testing.T)) { f(t) },
		settle: func() { time.Sleep(settleDelay) },
	},
	{
		name: "redis-cluster", redis: true, cluster: true, per: 200 * time.Millisecond,
		tol: 2 * time.Millisecond, slack: 30 * time.Millisecond,
		pool: func(t *testing.T, rules []ruleSpec, cfg poolCfg) (poolFront, error) {
			if cfg.addr != "" {
				t.Skip("a server of the test's own is a single node")
			}
			return redisPool(t, clusterClient(t), rules, cfg)
		},
		server: tcpServer,
		run:    func(t *testing.T, f func(t *testing.T)) { f(t) },
		settle: func() { time.Sleep(settleDelay) },
	},
}

func semOpts(cfg semCfg) []semaphore.Option {
	var opts []semaphore.Option
	if cfg.maxInFlight > 0 {
		opts = append(opts, semaphore.WithMaxUnitsInFlight(cfg.maxInFlight))
	}
	if cfg.observer != nil {
		opts = append(opts, semaphore.WithObserver(cfg.observer))
	}
	if cfg.clock != nil {
		opts = append(opts, semaphore.WithClock(cfg.clock))
	}
	return opts
}

func poolOpts(cfg poolCfg) []clientpool.Option {
	var opts []clientpool.Option
	if cfg.observer != nil {
		opts = append(opts, clientpool.WithObserver(cfg.observer))
	}
	if cfg.clock != nil {
		opts = append(opts, clientpool.WithClock(cfg.clock))
	}
	return opts
}

func redisPool(t *testing.T, c goredis.UniversalClient, rules []ruleSpec, cfg poolCfg) (poolFront, error) {
	opts := poolOpts(cfg)
	if cfg.evictionOK {
		opts = append(opts, redisrate.WithEvictionAllowed())
	}
	tb := table(rules...)
	tb.Scope = cfg.scope
	if tb.Scope == "" {
		tb.Scope = uniqueName(t)
	}
	p, err := clientpool.New(tb, append(opts, redisrate.Shared(c, "conformance"))...)
	if err != nil {
		return poolFront{}, err
	}
	t.Cleanup(func() { p.Close() })
	return poolFront{p, t}, nil
}

func tcpServer(t *testing.T, h http.Handler) http.RoundTripper {
	srv := memnet.New("api.test", h, false)
	t.Cleanup(srv.Close)
	return srv.ClientFrom("127.0.0.1").Transport
}

// The Redis servers shared by the suite: one redis-server and one 3-master
// cluster, started at first use and stopped by TestMain.
var shared struct {
	mu      sync.Mutex
	srv     *redistest.Server
	srvErr  error
	cl      *redistest.Cluster
	clErr   error
	started bool
}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.mu.Lock()
	if shared.srv != nil {
		shared.srv.Stop()
	}
	if shared.cl != nil {
		shared.cl.Stop()
	}
	shared.mu.Unlock()
	os.Exit(code)
}

// needRedis skips t under -short, and without a redis-server (fails it
// then when CI is set), as package redistest does.
func needRedis(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal(err)
	}
	t.Skip(err)
}

// redisClient returns a client of the server at addr, or of the shared
// server when addr is "".
func redisClient(t *testing.T, addr string) *goredis.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: in-process tests only")
	}
	if addr == "" {
		shared.mu.Lock()
		if shared.srv == nil && shared.srvErr == nil {
			shared.srv, shared.srvErr = redistest.Launch()
		}
		srv, err := shared.srv, shared.srvErr
		shared.mu.Unlock()
		needRedis(t, err)
		addr = srv.Addr()
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// clusterClient returns a client of the shared 3-master cluster.
func clusterClient(t *testing.T) *goredis.ClusterClient {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: in-process tests only")
	}
	shared.mu.Lock()
	if shared.cl == nil && shared.clErr == nil {
		shared.cl, shared.clErr = redistest.LaunchCluster()
	}
	cl, err := shared.cl, shared.clErr
	shared.mu.Unlock()
	needRedis(t, err)
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// evictingServer starts a redis-server of t's own whose maxmemory-policy
// lets it evict keys, and returns its address.
func evictingServer(t *testing.T) string {
	t.Helper()
	return redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru").Addr()
}

// mockClock returns a virtual clock the test advances by hand (a
// *clock.Mock), and the function that advances it.
func mockClock() (ratesem.Clock, func(time.Duration)) {
	m := clock.NewMock()
	return m, m.Add
}

var nameSeq atomic.Uint64

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// uniqueName is a Redis name no other test of the run uses.
func uniqueName(t *testing.T) string {
	return fmt.Sprintf("%s-%d", unsafeName.ReplaceAllString(t.Name(), "_"), nameSeq.Add(1))
}

// forModes runs f as a subtest per mode that has the front f needs; f
// runs its scenarios in m.run (no t.Run inside: a synctest bubble forbids
// it).
func forModes(t *testing.T, needPool bool, f func(t *testing.T, m mode)) {
	for _, m := range modes {
		if !needPool && m.sem == nil {
			continue
		}
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

// forModesRun is forModes with f run in m.run: one scenario per mode.
func forModesRun(t *testing.T, needPool bool, f func(t *testing.T, m mode)) {
	forModes(t, needPool, func(t *testing.T, m mode) { m.run(t, func(t *testing.T) { f(t, m) }) })
}

// mustSem builds a semaphore and fails t when it cannot.
func (m mode) mustSem(t *testing.T, n int64, per time.Duration, cfg semCfg) semFront {
	t.Helper()
	s, err := m.sem(t, n, per, cfg)
	if err != nil {
		t.Fatalf("%s: building the semaphore: %v", m.name, err)
	}
	return s
}

// mustPool builds a pool and fails t when it cannot.
func (m mode) mustPool(t *testing.T, cfg poolCfg, rules ...ruleSpec) poolFront {
	t.Helper()
	p, err := m.pool(t, rules, cfg)
	if err != nil {
		t.Fatalf("%s: building the pool: %v", m.name, err)
	}
	return p
}

// semFleet returns k handles on one limit: in process one semaphore k
// times (the goroutines of a process share it); over Redis k semaphores of
// one name, as k processes would hold.
func (m mode) semFleet(t *testing.T, k int, n int64, per time.Duration, cfg semCfg) []semFront {
	t.Helper()
	cfg.name = uniqueName(t)
	fleet := make([]semFront, k)
	for i := range fleet {
		if i == 0 || m.redis {
			fleet[i] = m.mustSem(t, n, per, cfg)
		} else {
			fleet[i] = fleet[0]
		}
	}
	return fleet
}

// poolFleet is semFleet for pools: over Redis k pools of one scope.
func (m mode) poolFleet(t *testing.T, k int, cfg poolCfg, rules ...ruleSpec) []poolFront {
	t.Helper()
	cfg.scope = uniqueName(t)
	fleet := make([]poolFront, k)
	for i := range fleet {
		if i == 0 || m.redis {
			fleet[i] = m.mustPool(t, cfg, rules...)
		} else {
			fleet[i] = fleet[0]
		}
	}
	return fleet
}

// lowPriority and highPriority mark the calls made with the context as of
// that priority class (ratesem.WithPriority).
func lowPriority(ctx context.Context) context.Context {
	return ratesem.WithPriority(ctx, ratesem.PriorityLow)
}

func highPriority(ctx context.Context) context.Context {
	return ratesem.WithPriority(ctx, ratesem.PriorityHigh)
}

// ticket is a Pool's admitted call.
type ticket = clientpool.Ticket
