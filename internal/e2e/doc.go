// Package e2e holds the end-to-end tests of ratesem against hostile servers:
// fan-outs of hundreds to thousands of requests through httpclient (NewPool
// over a clientpool.Pool built from the exchange presets, and New over a
// semaphore.RateSemaphore) against the exchangetest servers in their hostile
// mode (absurd usage headers, garbage or missing Retry-After, spurious
// throttles, stalled bodies). They run on virtual time (testing/synctest,
// in-memory connections), so they are fast and deterministic.
//
// Each test asserts what ratesem promises whatever a server answers: the
// server's own log shows no rule exceeded by what the client sent
// (exchangetest.Offered), no pause lasts longer than the cap, RoundTrip
// returns when the headers arrive, every call finishes, and every permit is
// released exactly once.
//
// The package has no code outside its tests. The transports are built in one
// helper per preset (binanceTransport, okxTransport, plainTransport), the one
// place to adapt when httpclient's throttle hook changes.
package e2e
