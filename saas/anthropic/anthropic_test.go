package anthropic_test

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/saas/anthropic"
	"github.com/ratesem/ratesem/saas/saastest"
	"github.com/ratesem/ratesem/window"
)

const model = "claude-test"

// A batch of messages with large max_tokens and short replies, through the
// preset with its limits learned, is never rejected by the server's three
// token buckets; settling the output tokens (on average half of max_tokens
// is written) lets it use the output limit much better than the estimate
// alone.
func TestBatchAgainstServer(t *testing.T) {
	limits := saastest.AnthropicLimit{RPM: 1000, ITPM: 40000, OTPM: 8000}
	out := map[bool]float64{}
	for _, settle := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			opts := []anthropic.Option{anthropic.WithModel(model, 0, 0, 0)}
			if !settle {
				opts = append(opts, anthropic.WithoutSettling())
			}
			srv, pool := fanOut(t, limits, false, opts, jsonBody)
			defer srv.Close()
			if st := srv.Stats(); len(st.Rejected) != 0 {
				t.Fatalf("settle %v: rejected %v", settle, st.Rejected)
			}
			if v := srv.Violations(); len(v) != 0 {
				t.Fatalf("settle %v: %d violations", settle, len(v))
			}
			for kind, want := range map[string]int64{anthropic.Requests: limits.RPM, anthropic.InputTokens: limits.ITPM, anthropic.OutputTokens: limits.OTPM} {
				if l, _ := pool.Limit(anthropic.Rule(kind, model)); l != (window.Limit{N: want, Per: time.Minute}) {
					t.Errorf("%s learned %v, want %d per minute", kind, l, want)
				}
			}
			log := srv.Log()
			first, last := log[0].At, log[len(log)-1].At
			span := last.Sub(first)
			_, _, o := srv.Throughput(first.Add(span/5), last.Add(-span/5))
			out[settle] = o / float64(limits.OTPM)
			t.Logf("settle %v: %.1f%% of OTPM over %v", settle, 100*out[settle], span)
		})
	}
	if out[true] < 0.9 || !(out[false] < out[true]) {
		t.Errorf("output limit used: settled %.1f%%, estimate %.1f%%: want ≥ 90%% and more than the estimate's", 100*out[true], 100*out[false])
	}
}

// The input estimate is the prompt's characters over 4, rounded up.
func TestEstimator(t *testing.T) {
	body := `{"model":"m","max_tokens":10,"system":"abcd","messages":[{"role":"user","content":[{"type":"text","text":"efghi"}]}]}`
	if got := anthropic.Estimator([]byte(body)); got != 3 {
		t.Fatalf("Estimator = %d, want 3", got)
	}
}

// fanOut starts a quantizing or plain Anthropic server (in memory, seeded,
// with latencies of 0.5 to 1.5 s) enforcing limits for model, and sends it
// 200 messages requests of random prompts and max_tokens, 32 at a time,
// through a pool of anthropic.Table(opts...), each body made by body from
// the request's JSON value. It returns the server and the pool once every
// reply was read; the caller closes the server.
func fanOut(t *testing.T, limits saastest.AnthropicLimit, quantized bool, opts []anthropic.Option, body func(v any) io.Reader) (*saastest.AnthropicServer, *clientpool.Pool) {
	t.Helper()
	srv := saastest.NewAnthropic(saastest.AnthropicConfig{
		Models: map[string]saastest.AnthropicLimit{model: limits}, InMemory: true, Seed: 3, Quantized: quantized,
		Latency: func() time.Duration { return 500*time.Millisecond + time.Duration(rand.Int64N(int64(time.Second))) },
	})
	pool, err := clientpool.New(anthropic.Table(opts...))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(srv.Client().Transport))}
	rng := rand.New(rand.NewPCG(5, 5))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for range 200 {
		prompt, maxTokens := strings.Repeat("token ", 50+rng.IntN(300)), 200+rng.IntN(1800)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			v := map[string]any{"model": model, "max_tokens": maxTokens, "system": "be brief",
				"messages": []map[string]string{{"role": "user", "content": prompt}}}
			req, _ := http.NewRequest("POST", srv.URL()+"/v1/messages", body(v))
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	return srv, pool
}

// jsonBody is v in JSON, as a *bytes.Reader: http.NewRequest sets GetBody
// for it.
func jsonBody(v any) io.Reader {
	b, _ := json.Marshal(v)
	return bytes.NewReader(b)
}
