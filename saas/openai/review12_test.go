package openai_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/saas/openai"
)

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func reply(r *http.Request, h map[string]string) *http.Response {
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Request: r,
		Body: io.NopCloser(strings.NewReader(`{"usage":{"total_tokens":1}}`))}
	for k, v := range h {
		resp.Header.Set(k, v)
	}
	return resp
}

func chat(t *testing.T, c *http.Client, model string, maxTokens int) error {
	body := fmt.Sprintf(`{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, model, maxTokens)
	req, _ := http.NewRequest("POST", "http://api.test/v1/chat/completions", strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

// The catch-all rules are keyed by model, but their limit is learned per
// rule: once one unlisted model's reply taught a limit, another unlisted
// model whose limit was never learned is no longer admitted one call at a
// time (issue 12: "before the first response admits conservatively").
func TestReview12CatchAllSecondModelNotConservative(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pool, err := clientpool.New(openai.Table())
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		var inB, maxB atomic.Int64
		base := rtFunc(func(r *http.Request) (*http.Response, error) {
			b, _ := io.ReadAll(r.Body)
			if strings.Contains(string(b), `"model-b"`) {
				if n := inB.Add(1); n > maxB.Load() {
					maxB.Store(n)
				}
				<-release
				inB.Add(-1)
			}
			return reply(r, map[string]string{
				openai.HeaderLimitRequests: "10000", openai.HeaderRemainingRequests: "9999",
				openai.HeaderLimitTokens: "1000000", openai.HeaderRemainingTokens: "999000",
			}), nil
		})
		c := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(base))}
		if err := chat(t, c, "model-a", 10); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() { chat(t, c, "model-b", 10) })
		}
		synctest.Wait()
		got := maxB.Load()
		close(release)
		wg.Wait()
		if got > 1 {
			t.Errorf("model-b, whose limit was never learned, had %d calls in flight before its first reply, want 1", got)
		}
	})
}

// One unlisted model's small learned limit is applied to every unlisted
// model: a call of another model heavier than it fails with
// ErrWeightTooLarge, though that model's own limit was never learned.
func TestReview12CatchAllSmallLimitRefusesOtherModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pool, err := clientpool.New(openai.Table())
		if err != nil {
			t.Fatal(err)
		}
		base := rtFunc(func(r *http.Request) (*http.Response, error) {
			b, _ := io.ReadAll(r.Body)
			lim := "2000000"
			if strings.Contains(string(b), `"small"`) {
				lim = "1000"
			}
			return reply(r, map[string]string{
				openai.HeaderLimitRequests: "10000", openai.HeaderRemainingRequests: "9999",
				openai.HeaderLimitTokens: lim, openai.HeaderRemainingTokens: lim,
			}), nil
		})
		c := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(base))}
		if err := chat(t, c, "small", 10); err != nil {
			t.Fatal(err)
		}
		if err := chat(t, c, "big", 5000); errors.Is(err, ratesem.ErrWeightTooLarge) {
			t.Errorf("a call of model big (limit never learned, 2000000 at the server) refused by model small's limit: %v", err)
		}
	})
}

// An embeddings reply of many vectors is longer than the 1 MiB a Settle sees,
// and its usage object comes last: the call is not settled, so a call that
// cost more than its estimate (CJK text, code: CharEstimator's characters
// over 4 is below the truth, as its doc says, "rely on settling") is never
// debited, and the client counts less than the server. Here the first call
// is charged 1 token and really cost 5000 of the 6000 per minute; the
// second, charged 2000, must wait, but starts at once.
func TestReview12LongReplyNotSettled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pool, err := clientpool.New(openai.Table(openai.WithModel("emb", 1000, 6000)))
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		var arrivals [2]time.Time
		base := rtFunc(func(r *http.Request) (*http.Response, error) {
			i := calls.Add(1) - 1
			if i < 2 {
				arrivals[i] = time.Now()
			}
			data := strings.Repeat("0.0123456789,", (2<<20)/13)
			body := `{"object":"list","data":[{"embedding":[` + data + `0]}],"model":"emb","usage":{"prompt_tokens":5000,"total_tokens":5000}}`
			return &http.Response{StatusCode: 200, Header: http.Header{}, Request: r, Body: io.NopCloser(strings.NewReader(body))}, nil
		})
		c := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(base))}
		send := func(input string) {
			body := fmt.Sprintf(`{"model":"emb","input":%q}`, input)
			req, _ := http.NewRequest("POST", "http://api.test/v1/embeddings", strings.NewReader(body))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		send("漢字")                         // charged 1 token, costs 5000
		send(strings.Repeat("abcd", 2000)) // charged 2000
		if d := arrivals[1].Sub(arrivals[0]); d < time.Second {
			t.Errorf("second call started %v after the first, which really cost 5000 of 6000 tokens per minute: the 2 MiB reply was not settled", d)
		}
	})
}

// Every rule's Key (two per model, two catch-all) and the tokens Weight each
// read the whole request body again through GetBody (up to 32 MiB) and
// parse it as JSON: with 8 models given, classifying one request with a
// 1 MiB prompt reads and decodes it 19 times (19 MiB, a quarter second of
// CPU per call). The body should be read once per request.
func TestReview12BodyReadOncePerRequest(t *testing.T) {
	var opts []openai.Option
	for i := range 8 {
		opts = append(opts, openai.WithModel(fmt.Sprintf("m%d", i), 100, 100000))
	}
	pool, err := clientpool.New(openai.Table(opts...))
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"model":"m7","max_tokens":1,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("a", 1<<20))
	req, _ := http.NewRequest("POST", "http://api.test/v1/chat/completions", strings.NewReader(body))
	get, reads := req.GetBody, 0
	req.GetBody = func() (io.ReadCloser, error) { reads++; return get() }
	if _, err := pool.Classify(req); err != nil {
		t.Fatal(err)
	}
	if reads > 2 {
		t.Errorf("one request's body read %d times to classify it, want ≤ 2", reads)
	}
}
