package openai_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
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
				io.LimitReader(zeros{}, httpclient.MaxReplayBody), strings.NewReader(`"}]}`))
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
				pool, err := clientpool.New(sharable(openai.Table(openai.WithModel("gpt-4o-mini", 100, 100000))), opts...)
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

// sharable drops the catch-all rules of models not given (their limit is
// learned, which Redis mode refuses) from t, and their costs.
func sharable(t clientpool.Table) clientpool.Table {
	drop := map[string]bool{openai.RuleRequestsOther: true, openai.RuleTokensOther: true}
	var out clientpool.Table
	out = t
	out.Rules = nil
	for _, r := range t.Rules {
		if !drop[r.Name] {
			out.Rules = append(out.Rules, r)
		}
	}
	out.Default = nil
	for _, c := range t.Default {
		if !drop[c.Rule] {
			out.Default = append(out.Default, c)
		}
	}
	return out
}

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
