package exchangetest_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratesem/ratesem/exchange/exchangetest"
)

func TestClientsAreReusedPerIP(t *testing.T) {
	s := newOKX(t, exchangetest.OKXConfig{}, nil)
	assert.Same(t, s.Client(), s.ClientFrom("127.0.0.1"))
	assert.Same(t, s.ClientFrom("10.0.0.1"), s.ClientFrom("10.0.0.1"))
	assert.NotSame(t, s.ClientFrom("10.0.0.1"), s.ClientFrom("10.0.0.2"))
	assert.Panics(t, func() { s.ClientFrom("not-an-ip") })
	b := newBinance(t, exchangetest.BinanceConfig{}, nil)
	assert.Panics(t, func() { b.ClientFrom("") })
}

// TestInMemoryRealTime: in-memory servers also work outside a synctest
// bubble, and each ClientFrom IP, IPv6 included, reaches the handler as
// the request's RemoteAddr.
func TestInMemoryRealTime(t *testing.T) {
	s := newBinance(t, exchangetest.BinanceConfig{InMemory: true}, nil)
	assert.Equal(t, "http://binance.exchangetest.invalid", s.URL())
	for _, ip := range []string{"127.0.0.1", "192.0.2.7", "2001:db8::1"} {
		resp, err := s.ClientFrom(ip).Get(s.URL() + "/api/v3/klines?symbol=BTCUSDT&interval=1m")
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "2", resp.Header.Get("X-MBX-USED-WEIGHT-1M"), "each IP has its own weight")
	}
	var ips []string
	for _, e := range s.Log() {
		ips = append(ips, e.IP)
	}
	assert.Equal(t, []string{"127.0.0.1", "192.0.2.7", "2001:db8::1"}, ips)

	// After Close, requests fail at once instead of hanging.
	s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/api/v3/exchangeInfo", nil)
	_, err := s.Client().Do(req)
	require.Error(t, err)
	assert.NoError(t, ctx.Err(), "failed before the timeout")
	assert.Len(t, s.Log(), 3, "the log stays readable after Close")
}
