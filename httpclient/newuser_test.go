package httpclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/window"
)

// A request to a path the table does not list, under a table with no
// Default, is not sent: RoundTrip returns an error matching
// ratesem.ErrNoEndpoint with one "ratesem: " prefix, naming the request and
// what to do. An endpoint with a wildcard limits every path it matches. On
// 3c9e6ad, 5 calls to an unlisted path went out at once under a 1-per-
// minute rule, and /v1/items/{id} matched no request.
func TestPoolUnmatchedNotSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		table := clientpool.Table{
			Rules: []clientpool.Rule{{Name: "items", Limit: window.Limit{N: 1, Per: time.Minute}}},
			Endpoints: []clientpool.Endpoint{{Method: "GET", Path: "/v1/items/{id}",
				Costs: []clientpool.Cost{{Rule: "items"}}}},
		}
		var mu sync.Mutex
		var sent []string
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			sent = append(sent, req.URL.Path)
			mu.Unlock()
			return reply(req, 200, nil), nil
		})
		c := &http.Client{Transport: httpclient.NewPool(mustPool(t, table), httpclient.WithBase(base))}
		for range 5 {
			_, err := c.Get("http://api.test/v1/item/7") // misspelt
			if !errors.Is(err, ratesem.ErrNoEndpoint) {
				t.Fatalf("err %v; want ErrNoEndpoint", err)
			}
			if msg := err.Error(); strings.Count(msg, "ratesem: ") != 1 || !strings.Contains(msg, "GET /v1/item/7") || !strings.Contains(msg, "add an Endpoint") {
				t.Fatalf("%q: want one ratesem: prefix, the request and what to do", msg)
			}
		}
		start := time.Now()
		for i := range 3 {
			get(t, c, "http://api.test/v1/items/"+string(rune('1'+i)))
		}
		if len(sent) != 3 || time.Since(start) < 2*time.Minute {
			t.Fatalf("sent %v in %v; want the 3 item requests only, 1 per minute", sent, time.Since(start))
		}
	})
}

// The limiter's errors reach the caller with one "ratesem: " prefix (on
// 3c9e6ad: "ratesem: waiting for limiter: ratesem: ..." and "ratesem:
// Selector returned ratesem: negative weight").
func TestTransportErrorsOnePrefix(t *testing.T) {
	table := clientpool.Table{
		Rules:   []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 1, Per: time.Minute}}},
		Default: []clientpool.Cost{{Rule: "r", Units: 2}},
	}
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) { return reply(req, 200, nil), nil })
	_, err := httpclient.NewPool(mustPool(t, table), httpclient.WithBase(base)).RoundTrip(newRequest(t, "GET", "http://api.test/x", nil))
	if !errors.Is(err, ratesem.ErrWeightTooLarge) || strings.Count(err.Error(), "ratesem:") != 1 {
		t.Fatalf("%v: want ErrWeightTooLarge with one ratesem: prefix", err)
	}
	tr := httpclient.NewSelect(func(*http.Request) (httpclient.Limiter, int64) { return &fakeLimiter{}, -1 }, httpclient.WithBase(base))
	_, err = tr.RoundTrip(newRequest(t, "GET", "http://api.test/x", nil))
	if !errors.Is(err, ratesem.ErrNegativeWeight) || strings.Count(err.Error(), "ratesem:") != 1 {
		t.Fatalf("%v: want ErrNegativeWeight with one ratesem: prefix", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := newRequest(t, "GET", "http://api.test/x", nil).WithContext(ctx)
	_, err = httpclient.NewPool(mustPool(t, tokensTable()), httpclient.WithBase(base)).RoundTrip(req)
	if !errors.Is(err, context.Canceled) || strings.Count(err.Error(), "ratesem:") != 1 {
		t.Fatalf("%v: want context.Canceled with one ratesem: prefix", err)
	}
}

// A reply closed before its body was read to the end, whose kept part
// does not settle the call, is reported: an Unsettled event to the
// Transport's observer (one per response) and to the pool's (one per
// charge under a settling rule, with its rule, key and estimate), counted
// by ratesem.Metrics. A body read to its end, or whose usage was read
// before Close without reaching io.EOF (a json.Decoder), is not reported.
// On 3c9e6ad such a call kept its estimate with no sign.
func TestPoolUnreadBodyReported(t *testing.T) {
	body := `{"id":"x","usage":{"total_tokens":20}}`
	for _, tc := range []struct {
		name string
		read func(io.Reader)
		want bool
	}{
		{"closed unread", func(io.Reader) {}, true},
		{"closed after 5 bytes", func(r io.Reader) { io.CopyN(io.Discard, r, 5) }, true},
		{"read to EOF", func(r io.Reader) { io.Copy(io.Discard, r) }, false},
		{"decoded, no EOF", func(r io.Reader) { var v any; json.NewDecoder(r).Decode(&v) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var poolM, trM ratesem.Metrics
			var mu sync.Mutex
			var poolEvents []ratesem.Event
			pool, err := clientpool.New(tokensTable(), clientpool.WithObserver(func(e ratesem.Event) {
				poolM.Observe(e)
				if e.Kind == ratesem.Unsettled {
					mu.Lock()
					poolEvents = append(poolEvents, e)
					mu.Unlock()
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: int64(len(body)),
					Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
			})
			client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(base), httpclient.WithObserver(trM.Observe))}
			req, _ := http.NewRequest("POST", "http://api.test/v1/chat", bytes.NewReader(nil))
			req.Header.Set("X-Estimate", "60")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			tc.read(resp.Body)
			resp.Body.Close()
			want := uint64(0)
			if tc.want {
				want = 1
			}
			if got := trM.Snapshot().Unsettled; got != want {
				t.Errorf("Transport: %d Unsettled events, want %d", got, want)
			}
			if got := poolM.Snapshot().Unsettled; got != want {
				t.Errorf("Pool: %d Unsettled events, want %d", got, want)
			}
			if tc.want && (len(poolEvents) != 1 || poolEvents[0].Rule != "tokens" || poolEvents[0].Weight != 60) {
				t.Errorf("pool events %+v; want tokens, weight 60", poolEvents)
			}
			if ratesem.Unsettled.String() != "unsettled" {
				t.Errorf("Unsettled.String() = %q", ratesem.Unsettled.String())
			}
		})
	}
}
