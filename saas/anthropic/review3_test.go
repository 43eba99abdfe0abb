package anthropic_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/redisrate"
	"github.com/ratesem/ratesem/redistest"
	"github.com/ratesem/ratesem/saas/anthropic"
)

// The preset can be shared over Redis, its catch-all rules' limits given
// with WithOtherModels or learned by the fleet (issue 19; before,
// clientpool.New refused a Table with a learned limit in Redis mode).
// A request for a model not given is charged under the catch-all rules,
// keyed by its model; one whose body cannot be read is refused by
// RuleUnreadBody as in process, with no Redis key written.
func TestReview3SharedOverRedis(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { c.Close() })
	// Without WithOtherModels the catch-all rules' limits are learned by
	// the fleet together (issue 19): accepted.
	if p, err := clientpool.New(anthropic.Table(anthropic.WithModel("claude-x", 50, 40000, 8000)), redisrate.Shared(c, "a")); err != nil {
		t.Errorf("without WithOtherModels: %v; want the limits learned over Redis", err)
	} else {
		p.Close()
	}
	pool, err := clientpool.New(anthropic.Table(anthropic.WithModel("claude-x", 50, 40000, 8000), anthropic.WithOtherModels(10, 20000, 4000)), redisrate.Shared(c, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	req, _ := http.NewRequest("POST", "http://api.test/v1/messages",
		strings.NewReader(`{"model":"claude-y","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`))
	cs, err := pool.Classify(req)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 6 {
		t.Fatalf("charges %v; want three, and their quanta (issue 21)", cs)
	}
	for _, ch := range cs {
		if ch.Key != "claude-y" || !strings.HasSuffix(ch.Rule, " other") {
			t.Errorf("charge %v; want the other-model rules keyed claude-y", ch)
		}
	}
	tk, err := pool.Acquire(context.Background(), cs...)
	if err != nil {
		t.Fatal(err)
	}
	tk.Release()

	keys := func() int {
		n, err := c.DBSize(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	before := keys()
	tr := httpclient.NewPool(pool, httpclient.WithBase(roundTripFunc(func(*http.Request) (*http.Response, error) {
		t.Error("sent")
		return nil, errors.New("sent")
	})))
	bad, _ := http.NewRequest("POST", "http://api.test/v1/messages", io.MultiReader(strings.NewReader(`{"model":`), failing{}))
	_, err = tr.RoundTrip(bad)
	if !errors.Is(err, ratesem.ErrWeightTooLarge) || !strings.Contains(err.Error(), anthropic.RuleUnreadBody) || strings.Contains(err.Error(), "raise the rule's limit") {
		t.Errorf("unreadable body: %v; want the refusal of %q", err, anthropic.RuleUnreadBody)
	}
	if after := keys(); after != before {
		t.Errorf("%d Redis keys after the refusal, %d before", after, before)
	}
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("disk gone") }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
