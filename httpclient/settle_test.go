package httpclient_test

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/window"
)

var totalTokens = regexp.MustCompile(`"total_tokens":(-?[0-9]+)`)

// tokensTable charges the estimate the request's X-Estimate header names
// and settles to the usage.total_tokens of the reply's JSON body.
func tokensTable() clientpool.Table {
	return clientpool.Table{
		Rules: []clientpool.Rule{{
			Name:  "tokens",
			Limit: window.Limit{N: 100, Per: time.Second},
			Weight: func(r *http.Request) int64 {
				n, _ := strconv.ParseInt(r.Header.Get("X-Estimate"), 10, 64)
				return n
			},
			Settle: func(_ http.Header, body []byte) (int64, bool) {
				// the last "total_tokens" of what was kept: the body's end
				m := totalTokens.FindAllSubmatch(body, -1)
				if m == nil {
					return 0, false
				}
				n, err := strconv.ParseInt(string(m[len(m)-1][1]), 10, 64)
				return n, err == nil
			},
		}},
		Default: []clientpool.Cost{{Rule: "tokens"}},
	}
}

// A call charged its estimate ends with the tokens its reply's usage says,
// as the caller reads the body: the next calls see the refund at once, also
// when the body is longer than MaxSettleBody (its end is kept). A body the
// caller does not read to its usage, a reply without one, a negative usage
// and a usage before the body's last MaxSettleBody bytes leave the
// estimate.
func TestPoolSettlesFromBody(t *testing.T) {
	cases := []struct {
		name   string
		body   string
		read   int // bytes the caller reads before Close; -1 all
		second bool
	}{
		{"usage read", `{"id":"x","usage":{"total_tokens":20}}`, -1, true},
		{"closed unread", `{"id":"x","usage":{"total_tokens":20}}`, 5, false},
		{"no usage", `{"id":"x"}`, -1, false},
		{"negative usage", `{"usage":{"total_tokens":-50}}`, -1, false},
		{"usage at the end of a body past MaxSettleBody", `{"pad":"` + strings.Repeat("a", 2*httpclient.MaxSettleBody) + `","usage":{"total_tokens":20}}`, -1, true},
		{"usage before the last MaxSettleBody bytes", `{"usage":{"total_tokens":20},"pad":"` + strings.Repeat("a", httpclient.MaxSettleBody) + `"}`, -1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
					return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(c.body)), Request: req}, nil
				})
				client := &http.Client{Transport: httpclient.NewPool(mustPool(t, tokensTable()), httpclient.WithBase(base))}
				send := func() time.Duration {
					start := time.Now()
					req, _ := http.NewRequest("POST", "http://api.test/v1/chat", bytes.NewReader(nil))
					req.Header.Set("X-Estimate", "60")
					resp, err := client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					if c.read < 0 {
						io.Copy(io.Discard, resp.Body)
					} else {
						io.CopyN(io.Discard, resp.Body, int64(c.read))
					}
					resp.Body.Close()
					return time.Since(start)
				}
				send()
				wait := send()
				if got := wait == 0; got != c.second {
					t.Fatalf("second call of 60 waited %v; settled to 20: want at once = %v", wait, c.second)
				}
			})
		})
	}
}
