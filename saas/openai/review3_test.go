package openai_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/internal/peek"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/saas/openai"
)

// A request whose body bounds no charge (its read failed, or it is past
// 32 MiB) is refused, not sent, in process and over Redis alike: the error
// matches ratesem.ErrWeightTooLarge, has one "ratesem: " prefix, names
// RuleUnreadBody and says what to do; over Redis it leaves no key behind,
// and the next request that can be read goes through.
func TestReview3UnreadBodyRefusedAlike(t *testing.T) {
	bodies := map[string]func() io.Reader{
		"read fails": func() io.Reader {
			return io.MultiReader(strings.NewReader(`{"model":"gpt-4o-mini",`), errReader{})
		},
		"past 32 MiB": func() io.Reader {
			return io.MultiReader(strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"`),
				io.LimitReader(zeros{}, peek.MaxReplay), strings.NewReader(`"}]}`))
		},
	}
	for _, mode := range []string{"in process", "redis"} {
		for name, body := range bodies {
			t.Run(mode+"/"+name, func(t *testing.T) {
				var opts []clientpool.Option
				var c *goredis.Client
				if mode == "redis" {
					c = goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
					t.Cleanup(func() { c.Close() })
					opts = append(opts, redisrate.Shared(c, "r3"))
				}
				pool, err := clientpool.New(openai.Table(openai.WithModel("gpt-4o-mini", 100, 100000), openai.WithOtherModels(50, 10000)), opts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { pool.Close() })
				var sent atomic.Int64
				base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
					sent.Add(1)
					io.Copy(io.Discard, r.Body)
					r.Body.Close()
					return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
				})
				client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(base))}
				keys := func() []string {
					if c == nil {
						return nil
					}
					ks, err := c.Keys(context.Background(), "*").Result()
					if err != nil {
						t.Fatal(err)
					}
					return ks
				}
				before := keys()
				req, _ := http.NewRequest("POST", "http://api.test/v1/chat/completions", body())
				_, err = client.Do(req)
				if !errors.Is(err, ratesem.ErrWeightTooLarge) {
					t.Fatalf("err = %v, want ErrWeightTooLarge", err)
				}
				msg := err.Error()
				t.Log(msg)
				if strings.Count(msg, "ratesem:") != 1 || !strings.Contains(msg, openai.RuleUnreadBody) {
					t.Errorf("%q: want one ratesem: prefix and the rule's name", msg)
				}
				// The advice for an over-heavy weight cannot be followed here:
				// no limit admits math.MaxInt64.
				if strings.Contains(msg, "raise the rule's limit") || !strings.Contains(msg, "refuses") {
					t.Errorf("%q: want the refusal said as one, not advice no limit can follow", msg)
				}
				if sent.Load() != 0 {
					t.Errorf("sent %d requests", sent.Load())
				}
				if after := keys(); strings.Join(after, ",") != strings.Join(before, ",") {
					t.Errorf("Redis keys %v after the refusal, were %v", after, before)
				}
				ok, _ := http.NewRequest("POST", "http://api.test/v1/chat/completions",
					strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
				resp, err := client.Do(ok)
				if err != nil {
					t.Fatalf("a readable request after the refusal: %v", err)
				}
				resp.Body.Close()
			})
		}
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk gone") }

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A body that stalls (a pipe nobody writes) under a request deadline: the
// read for the estimate waits until the deadline, and RoundTrip then
// returns the context's error (errors.Is DeadlineExceeded, as the
// Transport's doc promises for a wait the context ended), not the refusal
// of RuleUnreadBody as if the body were unreadable; the pipe is closed.
func TestReview3StalledBodyEndsWithDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pool, err := clientpool.New(openai.Table(openai.WithModel("gpt-4o-mini", 100, 100000)))
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		tr := httpclient.NewPool(pool, httpclient.WithBase(roundTripFunc(func(*http.Request) (*http.Response, error) {
			t.Error("sent")
			return nil, errors.New("sent")
		})))
		pr, pw := io.Pipe()
		defer pw.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://api.test/v1/chat/completions", pr)
		_, err = tr.RoundTrip(req)
		if !errors.Is(err, context.DeadlineExceeded) || strings.Count(err.Error(), "ratesem:") != 1 {
			t.Errorf("RoundTrip = %v; want the deadline, one ratesem: prefix", err)
		}
		if _, err := pw.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("the caller's pipe is still open: %v", err)
		}
	})
}

// The preset can be shared over Redis once every limit is given: the
// catch-all rules' with WithOtherModels (on 3c9e6ad's successors they were
// always learned, so clientpool.New refused every openai.Table in Redis
// mode, with nothing the preset let the caller change). Without them the
// fleet learns them (issue 19). A request for a model not given is
// charged under the catch-all rules, keyed by its model.
func TestReview3SharedOverRedis(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { c.Close() })
	// Without WithOtherModels the catch-all rules' limits are learned by
	// the fleet together (issue 19): accepted.
	if p, err := clientpool.New(openai.Table(openai.WithModel("gpt-4o-mini", 100, 100000)), redisrate.Shared(c, "a")); err != nil {
		t.Errorf("without WithOtherModels: %v; want the limits learned over Redis", err)
	} else {
		p.Close()
	}
	pool, err := clientpool.New(openai.Table(openai.WithModel("gpt-4o-mini", 100, 100000), openai.WithOtherModels(50, 10000)), redisrate.Shared(c, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	req, _ := http.NewRequest("POST", "http://api.test/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4.1","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`))
	cs, err := pool.Classify(req)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]clientpool.Charge{}
	for _, ch := range cs {
		got[ch.Rule] = ch
	}
	if r, tok := got[openai.RuleRequestsOther], got[openai.RuleTokensOther]; len(cs) != 4 || r.Key != "gpt-4.1" || r.Weight != 1 || tok.Key != "gpt-4.1" || tok.Weight != 100 {
		t.Fatalf("charges %v; want 1 request and 100 tokens under the other-model rules, keyed gpt-4.1", cs)
	}
	// and the same under their quanta (issue 21)
	if r, tok := got[openai.RuleQuantum(openai.RuleRequestsOther)], got[openai.RuleQuantum(openai.RuleTokensOther)]; r.Key != "gpt-4.1" || r.Weight != 1 || tok.Key != "gpt-4.1" || tok.Weight != 100 {
		t.Fatalf("charges %v; want 1 request and 100 tokens under the other-model quanta, keyed gpt-4.1", cs)
	}
	tk, err := pool.Acquire(context.Background(), cs...)
	if err != nil {
		t.Fatal(err)
	}
	tk.Release()
}

// Classifying a request parses its body once: the rules' keys, the
// unread-body rule and the default estimate share the parse req.Of keeps
// (CharEstimator parsed the body a second time, doubling what a large
// prompt allocates: 8 MiB of prompt allocated 56 MiB to classify, now 32).
func TestReview3ClassifyParsesOnce(t *testing.T) {
	const size = 8 << 20
	for _, opts := range [][]openai.Option{nil, {openai.WithoutSettling()}} {
		pool, err := clientpool.New(openai.Table(append(opts, openai.WithModel("gpt-4o-mini", 100, 1<<40))...))
		if err != nil {
			t.Fatal(err)
		}
		body := `{"model":"gpt-4o-mini","max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("a", size) + `"}]}`
		req, _ := http.NewRequest("POST", "http://api.test/v1/chat/completions", strings.NewReader(body))
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		cs, err := pool.Classify(req)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		var tokens int64
		for _, c := range cs {
			if c.Rule == openai.RuleTokens("gpt-4o-mini") {
				tokens = c.Weight
			}
		}
		want := int64(size/4 + 4 + 3)
		if len(opts) > 0 {
			want += 10
		}
		if tokens != want {
			t.Errorf("charged %d tokens, want %d", tokens, want)
		}
		got := after.TotalAlloc - before.TotalAlloc
		t.Logf("%d MiB prompt: %.0f MiB allocated to classify", size>>20, float64(got)/(1<<20))
		if got > 6*size {
			t.Errorf("a %d MiB prompt allocated %.0f MiB to classify, want at most %d (one parse)", size>>20, float64(got)/(1<<20), 6*size>>20)
		}
		pool.Close()
	}
}
