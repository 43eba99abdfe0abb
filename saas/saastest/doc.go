// Package saastest provides in-process HTTP servers that behave like the
// OpenAI, Anthropic and GitHub REST APIs as far as rate limits go: each
// enforces its API's own algorithm exactly, speaks its headers and status
// codes, and logs every arrival, so that the presets of ratesem and the
// examples can be checked against the rule they must obey without touching
// the network.
//
// # Servers
//
//   - [NewOpenAI] (model read from
//     https://platform.openai.com/docs/guides/rate-limits): POST
//     /v1/chat/completions and /v1/embeddings; per model a requests bucket
//     (RPM) and a tokens bucket (TPM), refilled continuously. A request is
//     charged 1 request and max(max_tokens, ceil(chars/4) + its messages'
//     framing tokens) tokens at arrival (embeddings: ceil(chars/4)),
//     answered 429 with retry-after-ms and retry-after if a bucket lacks
//     its charge, and settled to its usage.total_tokens when the reply is
//     written. Headers
//     x-ratelimit-{limit,remaining,reset}-{requests,tokens}, resets as Go
//     durations ("6m0s").
//   - [NewAnthropic] (model read from
//     https://docs.anthropic.com/en/api/rate-limits): POST /v1/messages;
//     per model three token buckets, requests, input tokens and output
//     tokens per minute. Charged at arrival 1 request, the input estimate
//     ceil(chars/4) and max_tokens; 429 rate_limit_error with retry-after;
//     settled to usage.input_tokens and usage.output_tokens at the reply.
//     Headers anthropic-ratelimit-{requests,input-tokens,output-tokens,
//     tokens}-{limit,remaining,reset}, resets in RFC 3339.
//   - [NewGitHub] (model read from
//     https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api):
//     /repos, /users and /search; a primary limit per token (or client
//     IP) and resource in a window that starts at the first request and
//     lasts an hour (search: a minute), x-ratelimit-* headers with the
//     reset as Unix epoch seconds; secondary limits checked at arrival: 100
//     requests in flight, 900 points per minute per endpoint (GET 1, POST
//     5), 80 content-creating requests per minute and 500 per hour, 403 (or
//     429) with retry-after; with CPUTime, the limit on server time (90 s
//     of handler time per minute per token, 60 s of it for POST /graphql),
//     each request's time set by ServerTime (per route, or random).
//
// Where a page leaves the algorithm open, each server takes the strictest
// reasonable reading and its constructor's doc says which.
//
// # Token counts
//
// The LLM servers count no real tokens (no tokenizer): the estimate at
// arrival is ceil(chars/4), chars counted in Unicode code points (for an
// OpenAI chat request, plus the framing tokens of its messages); the
// "true" count the reply reports is that estimate plus a jitter of at most
// ±10% drawn from the text, and the output is drawn in [1, max_tokens] from
// the config's Seed and the request body. Both are deterministic: the same
// request always reports the same usage.
//
// # Log and checks
//
// Every request, accepted, refused or malformed, is logged as an [Entry]:
// arrival time on the server's clock, method, path, key (model or token),
// charges, settled counts, status and the limit that refused it (Limit*
// constants). Each server has Log, Stats and Violations (the accepted
// requests that broke a limit, recomputed from the log: empty unless the
// server is wrong); the LLM servers report the lowest bucket level seen
// (Lowest, negative in debt) and the requests and tokens per minute over a
// span (Throughput); the GitHub server the peak in flight, points per
// endpoint, content creations and server time (PeakInFlight, PeakPoints,
// PeakCreates, PeakCPU).
//
// # Time
//
// Each config's Clock is the server's clock (arrivals, refills, windows,
// latency); nil is the real clock, which a testing/synctest bubble makes
// virtual. Scale divides every window so that an example's minute lasts a
// second. With InMemory the server listens on in-memory pipes, so it works
// inside a synctest bubble (create it there and use its Client). Latency
// delays each answer after the decision, on the same clock; settlement and
// the end of "in flight" happen when the answer is written.
//
// # Hostile input
//
// Request bodies are read up to MaxBodyBytes (DefaultMaxBodyBytes, 1 MiB):
// a longer body is answered 400 without reading the rest. Malformed JSON,
// a missing, non-positive or oversized max_tokens and similar are answered
// 400 and charge nothing.
package saastest
