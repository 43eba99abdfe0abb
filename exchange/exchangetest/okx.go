package exchangetest

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// OKXFundingRateHistoryPath is the path of OKX's public funding-rate-history
// endpoint (https://www.okx.com/docs-v5/en/#public-data-rest-api-get-funding-rate-history),
// the only route an [OKXServer] serves.
const OKXFundingRateHistoryPath = "/api/v5/public/funding-rate-history"

// Defaults of [OKXConfig], from OKX's documentation of the funding-rate-history
// endpoint: "Rate Limit: 10 requests per 2 seconds, Rate limit rule: IP +
// Instrument ID"
// (https://www.okx.com/docs-v5/en/#public-data-rest-api-get-funding-rate-history).
const (
	OKXFundingRateHistoryLimit  = 10
	OKXFundingRateHistoryWindow = 2 * time.Second
)

// Bodies the server answers with. The 429 body is OKX's error 50011.
const (
	okxTooManyRequestsBody = `{"code":"50011","msg":"Too Many Requests","data":[]}`
	okxMissingInstIDBody   = `{"code":"51000","msg":"Parameter instId error","data":[]}`
)

// OKXConfig configures [NewOKX]. The zero value reproduces OKX's documented
// rule for the funding-rate-history endpoint with no added latency.
type OKXConfig struct {
	// Limit is the number of requests admitted per Window per key
	// (client IP, instId). 0 means OKXFundingRateHistoryLimit (10).
	// Negative values are treated as 0.
	Limit int
	// Window is the length of the sliding window. 0 (or negative) means
	// OKXFundingRateHistoryWindow (2 s).
	Window time.Duration
	// Latency, if not nil, is called once per request after the rate-limit
	// decision has been made (so the request's arrival time is the moment OKX
	// would count it), and the handler sleeps that long before answering,
	// returning early if the request's context is cancelled. nil means no
	// latency; negative durations count as zero. It is called from many
	// goroutines at once and must be safe for concurrent use; see
	// FixedLatency and UniformLatency.
	Latency func() time.Duration
	// Now, if not nil, replaces time.Now as the source of arrival times (for
	// example clock.NewMock().Now from github.com/benbjohnson/clock), so a
	// test can place arrivals exactly at a window boundary. It is called
	// under the server's lock, must be safe for concurrent use, and must not
	// go backwards. Latency sleeps always use real time.
	Now func() time.Time
}

// OKXServer is a running httptest server that behaves like OKX's public
// GET /api/v5/public/funding-rate-history endpoint and enforces its rate limit
// exactly (see the package documentation and [NewOKX]). Use the embedded
// *httptest.Server for URL, Client and Close. All methods are safe for
// concurrent use, also while requests are being served.
type OKXServer struct {
	*httptest.Server

	limit   int
	window  time.Duration
	latency func() time.Duration
	now     func() time.Time

	mu        sync.Mutex
	accepted  map[Key][]time.Time // per key: arrival times of accepted requests in the current window, oldest first
	lastSweep time.Time
	arrivals  []Arrival
	rejected  int
}

// NewOKX starts and returns a server for OKX's funding-rate-history endpoint.
// The caller must call Close.
//
// Behaviour of the handler:
//   - Only GET OKXFundingRateHistoryPath is served; other paths get 404 and
//     other methods 405.
//   - A missing or empty instId query parameter gets HTTP 400 with
//     {"code":"51000","msg":"Parameter instId error","data":[]}.
//   - Otherwise the key is (host part of r.RemoteAddr, instId). The arrival
//     time t is read once at handler entry under the server's lock. The
//     request is accepted iff fewer than Limit accepted requests of the same
//     key arrived in (t−Window, t]. Accepted requests get HTTP 200 with an
//     OKX-shaped JSON body of funding-rate rows echoing instId; the others
//     get HTTP 429 with {"code":"50011","msg":"Too Many Requests","data":[]}.
//   - Rejected requests do not count toward the window: a client that keeps
//     retrying too fast is not locked out beyond the rule. (OKX does not
//     document either way; this choice makes the rule an exact bound on
//     accepted requests, which is what MaxInWindow checks.) Requests answered
//     400, 404 or 405 do not count either.
//   - Every request, whatever its status, is appended to the log returned by
//     Arrivals. Then the handler sleeps for Latency, if configured, and writes
//     the answer.
//
// Accepted timestamps older than Window are pruned, so the limiter's memory is
// bounded by the keys active within the last Window; the arrival log grows by
// one entry per request for the life of the server.
func NewOKX(cfg OKXConfig) *OKXServer {
	s := &OKXServer{
		limit:    cfg.Limit,
		window:   cfg.Window,
		latency:  cfg.Latency,
		now:      cfg.Now,
		accepted: make(map[Key][]time.Time),
	}
	if s.limit <= 0 {
		s.limit = OKXFundingRateHistoryLimit
	}
	if s.window <= 0 {
		s.window = OKXFundingRateHistoryWindow
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	return s
}

// Limit returns the number of requests admitted per Window per key, after
// defaults were applied.
func (s *OKXServer) Limit() int { return s.limit }

// Window returns the length of the sliding window, after defaults were applied.
func (s *OKXServer) Window() time.Duration { return s.window }

// FundingRateHistoryURL returns the full URL of the funding-rate-history
// endpoint on this server for instrument instID (query-escaped), e.g.
// "http://127.0.0.1:1234/api/v5/public/funding-rate-history?instId=BTC-USDT-SWAP".
func (s *OKXServer) FundingRateHistoryURL(instID string) string {
	return s.URL + OKXFundingRateHistoryPath + "?instId=" + url.QueryEscape(instID)
}

// Arrivals returns a copy of the log of every request received so far, in
// arrival order (the order of the decisions, so At is non-decreasing).
func (s *OKXServer) Arrivals() []Arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Arrival, len(s.arrivals))
	copy(out, s.arrivals)
	return out
}

// Rejected returns the number of requests answered 429 so far.
func (s *OKXServer) Rejected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rejected
}

// serveHTTP is the handler; see NewOKX.
func (s *OKXServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	instID := r.URL.Query().Get("instId")

	status := s.decide(ip, instID, r.URL.Path, r.Method)

	if s.latency != nil {
		if d := s.latency(); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return // the client is gone; nothing to answer
			}
		}
	}

	switch status {
	case http.StatusNotFound:
		http.NotFound(w, r)
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, http.StatusText(status), status)
	case http.StatusBadRequest:
		writeJSON(w, status, []byte(okxMissingInstIDBody))
	case http.StatusTooManyRequests:
		writeJSON(w, status, []byte(okxTooManyRequestsBody))
	default:
		writeJSON(w, http.StatusOK, fundingRateBody(instID))
	}
}

// decide reads the arrival time, makes the admission decision, logs the
// arrival and returns the status to answer, all under s.mu.
func (s *OKXServer) decide(ip, instID, path, method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()

	var status int
	switch {
	case path != OKXFundingRateHistoryPath:
		status = http.StatusNotFound
	case method != http.MethodGet:
		status = http.StatusMethodNotAllowed
	case instID == "":
		status = http.StatusBadRequest
	default:
		s.sweep(now)
		k := Key{IP: ip, InstID: instID}
		ts := s.prune(s.accepted[k], now)
		if len(ts) < s.limit {
			ts = append(ts, now)
			status = http.StatusOK
		} else {
			status = http.StatusTooManyRequests
			s.rejected++
		}
		s.accepted[k] = ts
	}
	s.arrivals = append(s.arrivals, Arrival{At: now, IP: ip, InstID: instID, Status: status})
	return status
}

// prune drops the leading timestamps that are outside (now−window, now].
func (s *OKXServer) prune(ts []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= s.window {
		i++
	}
	if i == len(ts) {
		return ts[:0] // reuse the backing array
	}
	return ts[i:]
}

// sweep prunes every key at most once per window and forgets keys with no
// accepted request inside the window, bounding memory by the active keys.
func (s *OKXServer) sweep(now time.Time) {
	if now.Sub(s.lastSweep) < s.window {
		return
	}
	s.lastSweep = now
	for k, ts := range s.accepted {
		if ts = s.prune(ts, now); len(ts) == 0 {
			delete(s.accepted, k)
		} else {
			s.accepted[k] = ts
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// okxFundingRate is one row of OKX's funding-rate-history response.
type okxFundingRate struct {
	InstID       string `json:"instId"`
	InstType     string `json:"instType"`
	FundingRate  string `json:"fundingRate"`
	RealizedRate string `json:"realizedRate"`
	FundingTime  string `json:"fundingTime"`
	Method       string `json:"method"`
}

type okxResponse struct {
	Code string           `json:"code"`
	Msg  string           `json:"msg"`
	Data []okxFundingRate `json:"data"`
}

// fundingRateBody returns a plausible successful answer: three funding
// periods, newest first, 8 hours apart.
func fundingRateBody(instID string) []byte {
	const first = int64(1700000000000) // ms since the Unix epoch
	const period = int64(8 * time.Hour / time.Millisecond)
	rates := []string{"0.0001", "0.00008", "-0.00002"}
	resp := okxResponse{Code: "0", Msg: "", Data: make([]okxFundingRate, len(rates))}
	for i, rate := range rates {
		resp.Data[i] = okxFundingRate{
			InstID:       instID,
			InstType:     "SWAP",
			FundingRate:  rate,
			RealizedRate: rate,
			FundingTime:  strconv.FormatInt(first-int64(i)*period, 10),
			Method:       "current_period",
		}
	}
	b, err := json.Marshal(resp)
	if err != nil {
		panic("exchangetest: encoding funding-rate body: " + err.Error()) // cannot happen: only strings
	}
	return b
}
