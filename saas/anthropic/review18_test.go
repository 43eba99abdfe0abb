package anthropic_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/saas/anthropic"
	"github.com/ratesem/ratesem/saas/saastest"
)

// Issue 18: a request on a body without GetBody was charged 0 input and 0
// output tokens, keyed to model "": 160–166 of 200 were rejected by the
// server. Through httpclient.NewPool the body is read once and sent
// unchanged: no rejection.
func TestReview18UnreplayableBodiesBatch(t *testing.T) {
	kinds := map[string]func(v any) io.Reader{
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
	limits := saastest.AnthropicLimit{RPM: 1000, ITPM: 40000, OTPM: 8000}
	for name, mk := range kinds {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, _ := fanOut(t, limits, false, []anthropic.Option{anthropic.WithModel(model, 0, 0, 0)}, mk)
				defer srv.Close()
				if st := srv.Stats(); len(st.Rejected) != 0 || st.Accepted != 200 {
					t.Fatalf("%+v: want 200 accepted, none rejected", st)
				}
				if v := srv.Violations(); len(v) != 0 {
					t.Fatalf("%d violations", len(v))
				}
			})
		})
	}
}

// A body that cannot be read (no GetBody, classified by the pool directly;
// or failing mid-read through the transport) is refused at once, never
// charged 0 and never sent.
func TestReview18UnreadBodyRefused(t *testing.T) {
	pool, err := clientpool.New(anthropic.Table(anthropic.WithModel(model, 50, 30000, 8000)))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"` + model + `","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequest("POST", "http://api.test/v1/messages", io.MultiReader(strings.NewReader(body)))
	charges, err := pool.Classify(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Acquire(context.Background(), charges...); !errors.Is(err, ratesem.ErrWeightTooLarge) || !strings.Contains(err.Error(), anthropic.RuleUnreadBody) {
		t.Fatalf("Acquire(%v) = %v, want ErrWeightTooLarge under %q", charges, err, anthropic.RuleUnreadBody)
	}

	sent := 0
	base := roundTrip(func(r *http.Request) (*http.Response, error) {
		sent++
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithBase(base))}
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(body[:40]))
		pw.CloseWithError(errors.New("encoder failed"))
	}()
	req, _ = http.NewRequest("POST", "http://api.test/v1/messages", pr)
	if resp, err := client.Do(req); !errors.Is(err, ratesem.ErrWeightTooLarge) || sent != 0 {
		if err == nil {
			resp.Body.Close()
		}
		t.Fatalf("a body failing mid-read: err %v, sent %d; want ErrWeightTooLarge, not sent", err, sent)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
