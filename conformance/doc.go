// Package conformance holds no code: its tests are ratesem's conformance
// suite, which runs every front (semaphore.RateSemaphore, clientpool.Pool,
// httpclient.Transport over each) against both implementations of the
// bookkeeping, in process and in Redis (a real redis-server started by
// package redistest, and a 3-master Redis Cluster for the pool), and checks
// the same guarantees in both modes: the window invariant over every
// recorded start and end, FIFO and priority bounds, cancellation without
// trace, the concurrency cap, settle, pause, SetLimit, eviction refusal,
// the non-blocking decision that returns the wait, events, learned limits,
// and a virtual clock refused where it cannot be honoured.
//
// Every constructor and option the suite uses lives in modes_test.go, behind
// small factories; the guarantees' tests use only the fronts' methods.
// In process the scenarios run on virtual time (testing/synctest); over
// Redis, whose server's clock decides, on real time with short intervals,
// the checks allowing the margins the semantics give (see mode.tol,
// mode.slack, mode.lateness).
//
// mutants.sh shows the suite catching a broken bookkeeping of each mode.
package conformance
