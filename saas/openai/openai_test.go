package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/ratesem/ratesem/saas/openai"
	"github.com/ratesem/ratesem/saas/saastest"
	"github.com/ratesem/ratesem/window"
)

const model = "gpt-test"

// batch sends calls chat completions with random prompts and max_tokens
// through the preset against the test server, on virtual time; it returns
// the server and the first and last arrival.
func batch(t *testing.T, calls int, seed uint64, limits saastest.OpenAILimit, opts ...openai.Option) (*saastest.OpenAIServer, time.Time, time.Time) {
	return batchOf(t, calls, seed, limits, nil, opts...)
}

// batchOf is batch with each request's body made by body from the JSON
// value (nil: a bytes.Reader, which http.NewRequest gives a GetBody).
func batchOf(t *testing.T, calls int, seed uint64, limits saastest.OpenAILimit, body func(v any) io.Reader, opts ...openai.Option) (*saastest.OpenAIServer, time.Time, time.Time) {
	if body == nil {
		body = func(v any) io.Reader { b, _ := json.Marshal(v); return bytes.NewReader(b) }
	}
	srv := saastest.NewOpenAI(saastest.OpenAIConfig{
		Models: map[string]saastest.OpenAILimit{model: limits}, InMemory: true, Seed: seed,
		Latency: func() time.Duration { return 300*time.Millisecond + time.Duration(rand.Int64N(int64(2*time.Second))) },
	})
	t.Cleanup(srv.Close)
	pool, err := clientpool.New(openai.Table(opts...))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(srv.Client().Transport))}
	rng := rand.New(rand.NewPCG(seed, 1))
	type job struct {
		prompt string
		max    int
	}
	jobs := make([]job, calls)
	for i := range jobs {
		jobs[i] = job{strings.Repeat("word ", 20+rng.IntN(400)), 50 + rng.IntN(800)}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64) // the batch's own concurrency
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			v := map[string]any{"model": model, "max_tokens": j.max,
				"messages": []map[string]string{{"role": "user", "content": j.prompt}}}
			req, _ := http.NewRequestWithContext(context.Background(), "POST", srv.URL()+"/v1/chat/completions", body(v))
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
	log := srv.Log()
	return srv, log[0].At, log[len(log)-1].At
}

// A batch through the preset, limits learned from the first reply, is never
// rejected, and in the steady state uses at least 90% of the tokens per
// minute (the binding limit) when it settles; without settling it uses
// much less, also without rejection.
func TestBatchAgainstServer(t *testing.T) {
	limits := saastest.OpenAILimit{RPM: 3000, TPM: 40000}
	var settled, estimate float64
	for _, c := range []struct {
		name string
		opts []openai.Option
		use  *float64
	}{
		{"settled, learned", []openai.Option{openai.WithModel(model, 0, 0)}, &settled},
		{"estimate only", []openai.Option{openai.WithModel(model, 0, 0), openai.WithoutSettling()}, &estimate},
	} {
		synctest.Test(t, func(t *testing.T) {
			srv, first, last := batch(t, 400, 7, limits, c.opts...)
			if st := srv.Stats(); len(st.Rejected) != 0 {
				t.Fatalf("%s: rejected %v", c.name, st.Rejected)
			}
			if v := srv.Violations(); len(v) != 0 {
				t.Fatalf("%s: %d violations", c.name, len(v))
			}
			// steady state: leave out the first and last 20% of the run
			span := last.Sub(first)
			_, tpm := srv.Throughput(first.Add(span/5), last.Add(-span/5))
			*c.use = tpm / float64(limits.TPM)
			t.Logf("%s: %.1f%% of TPM over %v", c.name, 100**c.use, span)
		})
	}
	if settled < 0.9 {
		t.Errorf("settled batch used %.1f%% of TPM, want ≥ 90%%", 100*settled)
	}
	if !(estimate < settled) {
		t.Errorf("settling did not help: %.1f%% vs %.1f%%", 100*settled, 100*estimate)
	}
}

// The rule's limit is learned from the first reply: one call in flight
// until then, the server's numbers after.
func TestLimitLearnedFromFirstReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := saastest.NewOpenAI(saastest.OpenAIConfig{Models: map[string]saastest.OpenAILimit{model: {RPM: 60, TPM: 9000}}, InMemory: true})
		defer srv.Close()
		pool, _ := clientpool.New(openai.Table(openai.WithModel(model, 0, 0)))
		client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(srv.Client().Transport))}
		body := fmt.Sprintf(`{"model":%q,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, model)
		req, _ := http.NewRequest("POST", srv.URL()+"/v1/chat/completions", strings.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		for rule, want := range map[string]int64{openai.RuleRequests(model): 60, openai.RuleTokens(model): 9000} {
			if l, _ := pool.Limit(rule); l != (window.Limit{N: want, Per: time.Minute}) {
				t.Errorf("%s learned %v, want %d per minute", rule, l, want)
			}
		}
	})
}

// The estimator charges what the server does at arrival, the larger of
// max_tokens and the prompt's estimate with its framing (4 per message, 1
// per name, 3 for the reply), and a hostile body does not wrap it.
func TestCharEstimator(t *testing.T) {
	for _, c := range []struct {
		body string
		want int64
	}{
		{`{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"12345678"}]}`, 100},                // max(100, 2+4+3)
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"12345678"}]}`, 9},                    // max(5, 2+4+3)
		{`{"model":"m","max_completion_tokens":7,"messages":[{"content":[{"type":"text","text":"abcde"}]}]}`, 9}, // max(7, 2+4+3)
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","name":"bob","content":"abcd"}]}`, 10},          // 7 chars: 2+4+1+3
		{`{"model":"m","max_tokens":1,"messages":[{"content":"a"},{"content":"b"},{"content":"c"}]}`, 16},        // 1+3·4+3
		{`{"model":"m","input":["abcd","efgh"]}`, 2},
		{`{"model":"m","max_tokens":16000,"messages":[{"content":"` + strings.Repeat("a", 60000) + `"}]}`, 16000}, // not 31007
		{`{"model":"m","max_tokens":9223372036854775807,"messages":[{"content":"abcd"}]}`, 1<<63 - 1},
		{`{"model":"m","max_tokens":-5,"messages":[{"content":"abcd"}]}`, 8},
		{`not json`, 2},
		{``, 0},
	} {
		if got := openai.CharEstimator(nil, []byte(c.body)); got != c.want {
			t.Errorf("CharEstimator(%s) = %d, want %d", c.body, got, c.want)
		}
	}
}
