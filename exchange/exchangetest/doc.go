// Package exchangetest provides in-process HTTP servers that behave like real
// exchange APIs and enforce their documented rate limits exactly, so that tests
// and examples can check a client's limiter against the rule it must obey
// without touching the network.
//
// The servers are built on [net/http/httptest]. Each one records every request
// it receives (an [Arrival]: the time the server counted it, the client IP,
// the rule key and the status it answered), and [MaxInWindow] computes, from
// such a log, the largest number of arrivals any sliding window held — the
// quantity the exchange's rule bounds.
//
// # OKX
//
// [NewOKX] starts a server for OKX's public endpoint
//
//	GET /api/v5/public/funding-rate-history?instId=BTC-USDT-SWAP
//
// whose documented limit is "Rate Limit: 10 requests per 2 seconds, Rate limit
// rule: IP + Instrument ID"
// (https://www.okx.com/docs-v5/en/#public-data-rest-api-get-funding-rate-history).
// Observed behaviour (seed 000 of this project) is an exact sliding window:
// for every instant t, at most 10 requests of one (IP, instId) pair arrive in
// any window of 2 s. The server admits a request arriving at t iff fewer than
// Limit accepted requests of the same key arrived in the half-open window
// (t−Window, t]; otherwise it answers HTTP 429 with OKX's error code 50011.
package exchangetest
