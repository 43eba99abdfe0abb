package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
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
	"github.com/ratesem/ratesem/internal/peek"
	"github.com/ratesem/ratesem/saas/openai"
	"github.com/ratesem/ratesem/saas/saastest"
)

// unreplayable returns the bodies of the issue that http.NewRequest gives
// no GetBody: each makes a reader of v's JSON.
func unreplayable() map[string]func(v any) io.Reader {
	return map[string]func(any) io.Reader{
		"io.MultiReader": func(v any) io.Reader {
			b, _ := json.Marshal(v)
			return io.MultiReader(bytes.NewReader(b))
		},
		"json.Encoder pipe": func(v any) io.Reader {
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(json.NewEncoder(pw).Encode(v)) }()
			return pr
		},
		"io.NopCloser(bytes.Buffer)": func(v any) io.Reader {
			b, _ := json.Marshal(v)
			return io.NopCloser(bytes.NewBuffer(b))
		},
	}
}

// Issue 18: a chat request on a body without GetBody was charged 0 tokens
// and keyed to model "": 281–290 of a 400-request batch at 40 000 TPM were
// rejected by the server. Through httpclient.NewPool the body is read once
// and sent unchanged: no rejection, every request charged under its model.
func TestReview18UnreplayableBodiesBatch(t *testing.T) {
	for name, body := range unreplayable() {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, _, _ := batchOf(t, 400, 7, saastest.OpenAILimit{RPM: 3000, TPM: 40000}, body, openai.WithModel(model, 0, 0))
				st := srv.Stats()
				if len(st.Rejected) != 0 || st.Accepted != 400 {
					t.Fatalf("%+v: want 400 accepted, none rejected", st)
				}
				if v := srv.Violations(); len(v) != 0 {
					t.Fatalf("%d violations", len(v))
				}
			})
		})
	}
}

// Issue 18: CharEstimator charged ceil(chars/4) + max_tokens; OpenAI
// charges the larger. A 60 000-character prompt with max_tokens 16 000 at
// 30 000 TPM was refused as too heavy (31 000 > 30 000) though the API
// accepts it, charged 16 000.
func TestReview18LargerOfMaxTokensAndPrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := saastest.NewOpenAI(saastest.OpenAIConfig{Models: map[string]saastest.OpenAILimit{model: {RPM: 100, TPM: 30000}}, InMemory: true})
		defer srv.Close()
		pool, err := clientpool.New(openai.Table(openai.WithModel(model, 100, 30000)))
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(srv.Client().Transport))}
		body := `{"model":"` + model + `","max_tokens":16000,"messages":[{"role":"user","content":"` + strings.Repeat("a", 60000) + `"}]}`
		req, _ := http.NewRequest("POST", srv.URL()+"/v1/chat/completions", strings.NewReader(body))
		charges, err := pool.Classify(req)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range charges {
			if c.Rule == openai.RuleTokens(model) && c.Weight != 16000 {
				t.Errorf("charged %v, want 16000 tokens: max(16000, 15000+4+3)", c)
			}
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("a call the API accepts: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || srv.Log()[0].Tokens != 16000 {
			t.Fatalf("status %d, server charged %d; want 200, 16000", resp.StatusCode, srv.Log()[0].Tokens)
		}
	})
}

// The framing tokens: a request of 40 one-character messages costs the
// server 10 + 40·4 + 3 = 173 tokens at arrival, not 10. A batch of them
// through the preset is never rejected.
func TestReview18FramingTokensBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := saastest.NewOpenAI(saastest.OpenAIConfig{Models: map[string]saastest.OpenAILimit{model: {RPM: 3000, TPM: 6000}}, InMemory: true,
			Latency: func() time.Duration { return 200*time.Millisecond + time.Duration(rand.Int64N(int64(time.Second))) }})
		defer srv.Close()
		pool, err := clientpool.New(openai.Table(openai.WithModel(model, 0, 0)))
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(srv.Client().Transport))}
		msgs := make([]map[string]string, 40)
		for i := range msgs {
			msgs[i] = map[string]string{"role": "user", "content": "x"}
		}
		body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 1, "messages": msgs})
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for range 5 {
					req, _ := http.NewRequest("POST", srv.URL()+"/v1/chat/completions", bytes.NewReader(body))
					resp, err := client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		if st := srv.Stats(); len(st.Rejected) != 0 || st.Accepted != 160 {
			t.Fatalf("%+v: want 160 accepted, none rejected", st)
		}
		if got := srv.Log()[0].Tokens; got != 173 {
			t.Errorf("server charged %d at arrival, want 173", got)
		}
	})
}

// endless is a body that never ends: it counts what was read of it.
type endless struct {
	read   atomic.Int64
	closed atomic.Bool
}

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	e.read.Add(int64(len(p)))
	return len(p), nil
}

func (e *endless) Close() error { e.closed.Store(true); return nil }

// failing gives its prefix, then err.
type failing struct {
	prefix io.Reader
	err    error
	closed atomic.Bool
}

func (f *failing) Read(p []byte) (int, error) {
	if n, _ := f.prefix.Read(p); n > 0 {
		return n, nil
	}
	return 0, f.err
}

func (f *failing) Close() error { f.closed.Store(true); return nil }

// Hostile bodies without GetBody through the preset: one past 32 MiB, one
// that never ends, one that fails mid-read are refused at once (never sent
// uncounted), their reads bounded and the bodies closed; invalid JSON and
// no body are sent, with exactly the caller's bytes; the caller's request
// is never modified.
func TestReview18HostileBodies(t *testing.T) {
	pool, err := clientpool.New(openai.Table(openai.WithModel(model, 100, 30000)))
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	var got []byte
	base := rtFunc(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		if r.Body != nil {
			got, _ = io.ReadAll(io.LimitReader(r.Body, 64<<20))
		}
		return reply(r, nil), nil
	})
	client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(base))}
	head := `{"model":"` + model + `","max_tokens":10,"messages":[{"role":"user","content":"`
	refused := func(name string, body io.ReadCloser) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://api.test/v1/chat/completions", body)
		before := sent.Load()
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, ratesem.ErrWeightTooLarge) || !strings.Contains(err.Error(), openai.RuleUnreadBody) {
			t.Errorf("%s: err %v, want ErrWeightTooLarge under %q", name, err, openai.RuleUnreadBody)
		}
		if sent.Load() != before {
			t.Errorf("%s: sent", name)
		}
		if req.Body != body || req.GetBody != nil {
			t.Errorf("%s: the caller's request was modified", name)
		}
	}

	huge := &failing{prefix: io.MultiReader(strings.NewReader(head), strings.NewReader(strings.Repeat("a", peek.MaxReplay)), strings.NewReader(`"}]}`)), err: io.EOF}
	refused("past 32 MiB", huge)
	if !huge.closed.Load() {
		t.Error("past 32 MiB: body not closed")
	}

	var never endless
	refused("never-ending", &never)
	if n := never.read.Load(); n > peek.MaxReplay+1 || !never.closed.Load() {
		t.Errorf("never-ending: %d bytes read (bound %d), closed %v", n, peek.MaxReplay+1, never.closed.Load())
	}

	broken := &failing{prefix: strings.NewReader(head + "abc"), err: errors.New("disk gone")}
	refused("failing mid-read", broken)
	if !broken.closed.Load() {
		t.Error("failing mid-read: body not closed")
	}

	for name, body := range map[string]string{"invalid JSON": `{"model": not json` + strings.Repeat("x", 5000), "no model": `{"messages":[]}`} {
		req, _ := http.NewRequest("POST", "http://api.test/v1/chat/completions", io.MultiReader(strings.NewReader(body)))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if string(got) != body {
			t.Errorf("%s: the base got %d bytes, not the caller's %d", name, len(got), len(body))
		}
	}

	req, _ := http.NewRequest("GET", "http://api.test/v1/models", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("no body: %v", err)
	}
	resp.Body.Close()
}

// A body without GetBody classified by the pool directly (no transport to
// read it) bounds no charge: the pool refuses it, never charges it 0.
func TestReview18UnreadBodyRefusedByThePool(t *testing.T) {
	pool, err := clientpool.New(openai.Table(openai.WithModel(model, 100, 30000)))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"` + model + `","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequest("POST", "http://api.test/v1/chat/completions", io.MultiReader(strings.NewReader(body)))
	charges, err := pool.Classify(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range charges {
		if c.Weight == 0 && c.Rule != openai.RuleRequestsOther {
			t.Errorf("charged %v", c)
		}
	}
	if _, err := pool.Acquire(context.Background(), charges...); !errors.Is(err, ratesem.ErrWeightTooLarge) {
		t.Fatalf("Acquire = %v, want ErrWeightTooLarge", err)
	}
}

// WithoutSettling keeps the estimate, so it charges what the call can
// cost in all (prompt + max_tokens); settling charges the arrival figure
// (the larger) and corrects it with the reply.
func TestReview18WithoutSettlingChargesTheWholeCall(t *testing.T) {
	body := `{"model":"` + model + `","max_tokens":1000,"messages":[{"role":"user","content":"` + strings.Repeat("a", 4000) + `"}]}`
	for _, c := range []struct {
		opts []openai.Option
		want int64
	}{
		{[]openai.Option{openai.WithModel(model, 100, 30000)}, 1007},                           // max(1000, 1000+4+3)
		{[]openai.Option{openai.WithModel(model, 100, 30000), openai.WithoutSettling()}, 2007}, // 1000+4+3 + 1000
	} {
		pool, err := clientpool.New(openai.Table(c.opts...))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("POST", "http://api.test/v1/chat/completions", strings.NewReader(body))
		charges, err := pool.Classify(req)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range charges {
			if ch.Rule == openai.RuleTokens(model) && ch.Weight != c.want {
				t.Errorf("%d options: charged %v, want %d", len(c.opts), ch, c.want)
			}
		}
	}
}
