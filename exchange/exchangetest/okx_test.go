package exchangetest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem/exchange/exchangetest"
)

const (
	tooManyBody      = `{"code":"50011","msg":"Too Many Requests","data":[]}`
	missingInstIDMsg = `{"code":"51000","msg":"Parameter instId error","data":[]}`
)

// newOKX starts a server and a client of its own; both are closed at cleanup.
func newOKX(t *testing.T, cfg exchangetest.OKXConfig) (*exchangetest.OKXServer, *http.Client) {
	t.Helper()
	s := exchangetest.NewOKX(cfg)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(func() {
		c.CloseIdleConnections()
		s.Close()
	})
	return s, c
}

type result struct {
	status int
	ctype  string
	body   string
	err    error
}

func get(ctx context.Context, c *http.Client, url string) result {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return result{err: err}
	}
	return do(c, req)
}

func do(c *http.Client, req *http.Request) result {
	resp, err := c.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: string(b), err: err}
}

// getAll sends one request per URL, all at once, and returns the results in
// the order of urls.
func getAll(c *http.Client, urls []string) []result {
	out := make([]result, len(urls))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() {
			<-start
			out[i] = get(context.Background(), c, u)
		})
	}
	close(start)
	wg.Wait()
	return out
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

type okxBody struct {
	Code string `json:"code"`
	Msg  string `json:"msg"`
	Data []struct {
		InstID       string `json:"instId"`
		InstType     string `json:"instType"`
		FundingRate  string `json:"fundingRate"`
		RealizedRate string `json:"realizedRate"`
		FundingTime  string `json:"fundingTime"`
		Method       string `json:"method"`
	} `json:"data"`
}

func requireOKXSuccess(t *testing.T, r result, instID string) {
	t.Helper()
	require.NoError(t, r.err)
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Equal(t, "application/json", r.ctype)
	var b okxBody
	require.NoError(t, json.Unmarshal([]byte(r.body), &b), r.body)
	assert.Equal(t, "0", b.Code)
	assert.Equal(t, "", b.Msg)
	require.NotEmpty(t, b.Data)
	for _, row := range b.Data {
		assert.Equal(t, instID, row.InstID)
		assert.Equal(t, "SWAP", row.InstType)
		assert.NotEmpty(t, row.FundingRate)
		assert.NotEmpty(t, row.FundingTime)
		assert.Equal(t, "current_period", row.Method)
	}
	assert.Equal(t, "0.0001", b.Data[0].FundingRate)
	assert.Equal(t, "1700000000000", b.Data[0].FundingTime)
}

func requireTooMany(t *testing.T, r result) {
	t.Helper()
	require.NoError(t, r.err)
	require.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Equal(t, "application/json", r.ctype)
	assert.JSONEq(t, tooManyBody, r.body)
}

func TestOKXDefaults(t *testing.T) {
	s, _ := newOKX(t, exchangetest.OKXConfig{})
	assert.Equal(t, 10, s.Limit())
	assert.Equal(t, 2*time.Second, s.Window())
	assert.Equal(t, 10, exchangetest.OKXFundingRateHistoryLimit)
	assert.Equal(t, 2*time.Second, exchangetest.OKXFundingRateHistoryWindow)
	assert.Equal(t, s.URL+"/api/v5/public/funding-rate-history?instId=BTC-USDT-SWAP", s.FundingRateHistoryURL("BTC-USDT-SWAP"))
	assert.Equal(t, s.URL+"/api/v5/public/funding-rate-history?instId=a%26b", s.FundingRateHistoryURL("a&b"))
	assert.Empty(t, s.Arrivals())
	assert.Zero(t, s.Rejected())
}

// TestOKXTenAtOnceThenReject uses a window far longer than the test can take,
// so the 11th request is inside the window of the first ten whatever the
// scheduling.
func TestOKXTenAtOnceThenReject(t *testing.T) {
	s, c := newOKX(t, exchangetest.OKXConfig{Window: time.Hour})
	btc := s.FundingRateHistoryURL("BTC-USDT-SWAP")

	for _, r := range getAll(c, repeat(btc, 10)) {
		requireOKXSuccess(t, r, "BTC-USDT-SWAP")
	}
	requireTooMany(t, get(context.Background(), c, btc))
	assert.Equal(t, 1, s.Rejected())

	// Another instrument of the same IP is an independent key.
	eth := s.FundingRateHistoryURL("ETH-USDT-SWAP")
	for _, r := range getAll(c, repeat(eth, 10)) {
		requireOKXSuccess(t, r, "ETH-USDT-SWAP")
	}
	requireTooMany(t, get(context.Background(), c, eth))
	requireTooMany(t, get(context.Background(), c, btc))
	assert.Equal(t, 3, s.Rejected())

	arr := s.Arrivals()
	require.Len(t, arr, 23)
	for i, a := range arr {
		assert.Equal(t, "127.0.0.1", a.IP)
		if i > 0 {
			assert.False(t, a.At.Before(arr[i-1].At), "arrivals in order")
		}
	}
	assert.Equal(t, http.StatusTooManyRequests, arr[10].Status)
	assert.Equal(t, map[exchangetest.Key]int{
		{IP: "127.0.0.1", InstID: "BTC-USDT-SWAP"}: 10,
		{IP: "127.0.0.1", InstID: "ETH-USDT-SWAP"}: 10,
	}, exchangetest.MaxInWindow(arr, s.Window(), true))
	assert.Equal(t, map[exchangetest.Key]int{
		{IP: "127.0.0.1", InstID: "BTC-USDT-SWAP"}: 12,
		{IP: "127.0.0.1", InstID: "ETH-USDT-SWAP"}: 11,
	}, exchangetest.MaxInWindow(arr, s.Window(), false))
}

// TestOKXExactBoundary drives the arrival clock by hand (Now) with OKX's real
// rule, 10 per 2 s, and checks the half-open window (t-2s, t] to the
// nanosecond, including that rejected requests do not extend the window.
func TestOKXExactBoundary(t *testing.T) {
	mock := clock.NewMock()
	s, c := newOKX(t, exchangetest.OKXConfig{Now: mock.Now})
	btc := s.FundingRateHistoryURL("BTC-USDT-SWAP")
	ctx := context.Background()
	t0 := mock.Now()

	// t=0: 10 at once are accepted (all at the same instant), the 11th is not.
	for _, r := range getAll(c, repeat(btc, 10)) {
		requireOKXSuccess(t, r, "BTC-USDT-SWAP")
	}
	requireTooMany(t, get(ctx, c, btc))

	// t=0.1s: still rejected; this rejection must not count.
	mock.Add(100 * time.Millisecond)
	requireTooMany(t, get(ctx, c, btc))

	// t=2s-1ns: the first ten are still inside (t-2s, t].
	mock.Set(t0.Add(2*time.Second - 1))
	requireTooMany(t, get(ctx, c, btc))

	// t=2s: arrivals at exactly t-2s are outside, so ten more are accepted
	// (the rejections at 0 and 0.1 s did not count toward the window).
	mock.Set(t0.Add(2 * time.Second))
	for range 10 {
		requireOKXSuccess(t, get(ctx, c, btc), "BTC-USDT-SWAP")
	}
	requireTooMany(t, get(ctx, c, btc))
	assert.Equal(t, 4, s.Rejected())

	arr := s.Arrivals()
	require.Len(t, arr, 24)
	assert.Equal(t, t0, arr[0].At)
	assert.Equal(t, t0.Add(2*time.Second), arr[23].At)
	k := exchangetest.Key{IP: "127.0.0.1", InstID: "BTC-USDT-SWAP"}
	assert.Equal(t, 10, exchangetest.MaxInWindow(arr, 2*time.Second, true)[k])
	// Had the window been one nanosecond longer, 20 would have been inside.
	assert.Equal(t, 20, exchangetest.MaxInWindow(arr, 2*time.Second+1, true)[k])
}

// TestOKXWindowPassesRealTime uses a short real window. What happens inside
// the window depends on scheduling, so the test checks the server's decision
// against its own log, and after the window it waits until the log proves
// every accepted arrival is outside the window.
func TestOKXWindowPassesRealTime(t *testing.T) {
	const limit, window = 3, 50 * time.Millisecond
	s, c := newOKX(t, exchangetest.OKXConfig{Limit: limit, Window: window})
	u := s.FundingRateHistoryURL("BTC-USDT-SWAP")
	ctx := context.Background()

	for range limit { // nothing accepted before them: always accepted
		requireOKXSuccess(t, get(ctx, c, u), "BTC-USDT-SWAP")
	}
	fourth := get(ctx, c, u)
	require.NoError(t, fourth.err)

	arr := s.Arrivals()
	require.Len(t, arr, limit+1)
	inWindow := 0
	for _, a := range arr[:limit] {
		if arr[limit].At.Sub(a.At) < window {
			inWindow++
		}
	}
	if inWindow == limit {
		requireTooMany(t, fourth)
	} else {
		requireOKXSuccess(t, fourth, "BTC-USDT-SWAP")
	}
	assert.Equal(t, fourth.status, arr[limit].Status)

	// Wait until the window of the last accepted arrival has passed, with a
	// margin; then the key must admit a full Limit again, whatever the timing.
	last := arr[limit-1].At
	if fourth.status == http.StatusOK {
		last = arr[limit].At
	}
	time.Sleep(time.Until(last.Add(window + 10*time.Millisecond)))
	for range limit {
		requireOKXSuccess(t, get(ctx, c, u), "BTC-USDT-SWAP")
	}
	arr = s.Arrivals()
	assert.LessOrEqual(t, exchangetest.MaxInWindow(arr, window, true)[exchangetest.Key{IP: "127.0.0.1", InstID: "BTC-USDT-SWAP"}], limit)
}

// TestOKXKeyIncludesIP calls the handler directly with made-up remote
// addresses: the rule key is IP + instId.
func TestOKXKeyIncludesIP(t *testing.T) {
	s, _ := newOKX(t, exchangetest.OKXConfig{Limit: 2, Window: time.Hour})
	h := s.Config.Handler
	serve := func(remote, instID string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, exchangetest.OKXFundingRateHistoryPath+"?instId="+instID, nil)
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	assert.Equal(t, 200, serve("10.0.0.1:1000", "BTC-USDT-SWAP").Code)
	assert.Equal(t, 200, serve("10.0.0.1:1001", "BTC-USDT-SWAP").Code) // another port, same IP
	rec := serve("10.0.0.1:1002", "BTC-USDT-SWAP")
	assert.Equal(t, 429, rec.Code)
	assert.JSONEq(t, tooManyBody, rec.Body.String())
	assert.Equal(t, 200, serve("10.0.0.2:1000", "BTC-USDT-SWAP").Code)
	assert.Equal(t, 200, serve("10.0.0.2:1000", "BTC-USDT-SWAP").Code)
	assert.Equal(t, 429, serve("10.0.0.2:1000", "BTC-USDT-SWAP").Code)
	assert.Equal(t, 200, serve("[::1]:1000", "BTC-USDT-SWAP").Code)
	assert.Equal(t, 200, serve("10.0.0.1:1000", "ETH-USDT-SWAP").Code)

	arr := s.Arrivals()
	require.Len(t, arr, 8)
	assert.Equal(t, "10.0.0.1", arr[0].IP)
	assert.Equal(t, "::1", arr[6].IP)
	assert.Equal(t, 2, s.Rejected())
}

func TestOKXBadRequests(t *testing.T) {
	s, c := newOKX(t, exchangetest.OKXConfig{Limit: 1, Window: time.Hour})
	ctx := context.Background()

	for _, u := range []string{
		s.URL + exchangetest.OKXFundingRateHistoryPath,
		s.URL + exchangetest.OKXFundingRateHistoryPath + "?instId=",
		s.URL + exchangetest.OKXFundingRateHistoryPath + "?instType=SWAP",
	} {
		r := get(ctx, c, u)
		require.NoError(t, r.err)
		assert.Equal(t, http.StatusBadRequest, r.status, u)
		assert.Equal(t, "application/json", r.ctype)
		assert.JSONEq(t, missingInstIDMsg, r.body)
	}

	r := get(ctx, c, s.URL+"/api/v5/public/funding-rate?instId=BTC-USDT-SWAP")
	require.NoError(t, r.err)
	assert.Equal(t, http.StatusNotFound, r.status)
	r = get(ctx, c, s.URL+"/")
	require.NoError(t, r.err)
	assert.Equal(t, http.StatusNotFound, r.status)

	req, err := http.NewRequest(http.MethodPost, s.FundingRateHistoryURL("BTC-USDT-SWAP"), strings.NewReader("{}"))
	require.NoError(t, err)
	r = do(c, req)
	require.NoError(t, r.err)
	assert.Equal(t, http.StatusMethodNotAllowed, r.status)

	// None of these counted toward the limit of 1.
	requireOKXSuccess(t, get(ctx, c, s.FundingRateHistoryURL("BTC-USDT-SWAP")), "BTC-USDT-SWAP")
	assert.Zero(t, s.Rejected())

	var statuses []int
	for _, a := range s.Arrivals() {
		statuses = append(statuses, a.Status)
	}
	assert.Equal(t, []int{400, 400, 400, 404, 404, 405, 200}, statuses)
}

func TestOKXLatencyAfterDecision(t *testing.T) {
	const lat = 60 * time.Millisecond
	s, c := newOKX(t, exchangetest.OKXConfig{Latency: exchangetest.FixedLatency(lat)})
	sent := time.Now()
	r := get(context.Background(), c, s.FundingRateHistoryURL("BTC-USDT-SWAP"))
	received := time.Now()
	requireOKXSuccess(t, r, "BTC-USDT-SWAP")

	arr := s.Arrivals()
	require.Len(t, arr, 1)
	// The arrival is stamped before the latency: at least lat before the
	// answer was received, and not before the request was sent.
	assert.False(t, arr[0].At.Before(sent))
	assert.GreaterOrEqual(t, received.Sub(arr[0].At), lat)
}

// TestOKXLatencyRespectsCancel: with an hour of latency, a cancelled client
// must free the handler; otherwise Close (in cleanup) would block for an hour.
func TestOKXLatencyRespectsCancel(t *testing.T) {
	s, c := newOKX(t, exchangetest.OKXConfig{Latency: exchangetest.FixedLatency(time.Hour)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() { done <- get(ctx, c, s.FundingRateHistoryURL("BTC-USDT-SWAP")) }()

	// Cancel once the server has counted the request.
	require.Eventually(t, func() bool { return len(s.Arrivals()) == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	r := <-done
	require.ErrorIs(t, r.err, context.Canceled)

	closed := make(chan struct{})
	go func() {
		c.CloseIdleConnections()
		s.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("server did not close: handler ignored the request's cancellation")
	}
	arr := s.Arrivals()
	require.Len(t, arr, 1)
	assert.Equal(t, http.StatusOK, arr[0].Status, "the request was counted and admitted before the client left")
}

// TestOKXPropertyUnderLoad hammers the server from many goroutines and checks
// the rule on the server's own log: no key ever has more than Limit accepted
// arrivals in any window, and every rejection happened when exactly Limit
// accepted arrivals of its key were in its window (no needless rejection).
func TestOKXPropertyUnderLoad(t *testing.T) {
	const (
		limit      = 5
		window     = 30 * time.Millisecond
		goroutines = 16
		perG       = 40
	)
	s, c := newOKX(t, exchangetest.OKXConfig{
		Limit:   limit,
		Window:  window,
		Latency: exchangetest.UniformLatency(0, 2*time.Millisecond),
	})
	insts := []string{"BTC-USDT-SWAP", "ETH-USDT-SWAP", "SOL-USDT-SWAP", "DOGE-USDT-SWAP"}

	type got struct {
		inst   string
		status int
	}
	results := make([][]got, goroutines)
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 42))
			for range perG {
				inst := insts[r.IntN(len(insts))]
				res := get(context.Background(), c, s.FundingRateHistoryURL(inst))
				if res.err != nil {
					errs[g] = res.err
					return
				}
				results[g] = append(results[g], got{inst, res.status})
				if r.IntN(4) == 0 {
					time.Sleep(time.Duration(r.IntN(int(window))))
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}

	arr := s.Arrivals()
	require.Len(t, arr, goroutines*perG)

	// What the clients saw agrees with the log.
	clientOK, client429 := map[string]int{}, map[string]int{}
	for _, rs := range results {
		for _, r := range rs {
			switch r.status {
			case http.StatusOK:
				clientOK[r.inst]++
			case http.StatusTooManyRequests:
				client429[r.inst]++
			default:
				t.Fatalf("unexpected status %d", r.status)
			}
		}
	}
	logOK, log429 := map[string]int{}, map[string]int{}
	for _, a := range arr {
		if a.Accepted() {
			logOK[a.InstID]++
		} else {
			log429[a.InstID]++
		}
	}
	assert.Equal(t, clientOK, logOK)
	assert.Equal(t, client429, log429)
	total429 := 0
	for _, n := range log429 {
		total429 += n
	}
	assert.Equal(t, total429, s.Rejected())

	// Safety: the rule holds for accepted arrivals.
	for k, n := range exchangetest.MaxInWindow(arr, window, true) {
		assert.LessOrEqual(t, n, limit, "key %v", k)
	}
	// No needless rejection: each 429 had exactly Limit accepted arrivals of
	// its key in (t-window, t].
	for i, a := range arr {
		if i > 0 {
			require.False(t, a.At.Before(arr[i-1].At), "log in arrival order")
		}
		if a.Accepted() {
			continue
		}
		n := 0
		for _, b := range arr {
			if b.Accepted() && b.Key() == a.Key() && a.At.Sub(b.At) < window && !b.At.After(a.At) {
				n++
			}
		}
		assert.Equal(t, limit, n, "rejection at index %d (%v) without a full window", i, a.Key())
	}
	t.Logf("%d requests, %d rejected", len(arr), total429)
}

func ExampleNewOKX() {
	// OKX's rule for this endpoint is 10 requests per 2 s per (IP, instId).
	// A long window keeps this example's output independent of timing.
	s := exchangetest.NewOKX(exchangetest.OKXConfig{Window: time.Minute})
	defer s.Close()
	c := s.Client()

	for i := 1; i <= 11; i++ {
		resp, err := c.Get(s.FundingRateHistoryURL("BTC-USDT-SWAP"))
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			fmt.Println(i, resp.StatusCode, string(body))
		}
	}
	fmt.Println("rejected:", s.Rejected())
	fmt.Println("max accepted in any window:", exchangetest.MaxInWindow(s.Arrivals(), time.Minute, true))
	// Output:
	// 11 429 {"code":"50011","msg":"Too Many Requests","data":[]}
	// rejected: 1
	// max accepted in any window: map[{127.0.0.1 BTC-USDT-SWAP}:10]
}
