package openai_test

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/saas/openai"
)

// The default estimate is OpenAI's charge at arrival: the larger of
// max_tokens and the prompt's estimate (its characters over 4, rounded up,
// plus the framing tokens: 4 for the one message, 3 for the reply).
func ExampleCharEstimator() {
	short := `{"model":"gpt-4o-mini","max_tokens":256,"messages":[{"role":"user","content":"Summarise the plot of Hamlet."}]}`
	fmt.Println(openai.CharEstimator(nil, []byte(short))) // max(256, 8+4+3)
	long := `{"model":"gpt-4o-mini","max_tokens":256,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 400) + `"}]}`
	fmt.Println(openai.CharEstimator(nil, []byte(long))) // max(256, 500+4+3)
	// Output:
	// 256
	// 507
}

// A model's limits, learned from its first reply: no limit is given up
// front.
func ExampleTable() {
	pool, err := clientpool.New(openai.Table(openai.WithModel("gpt-4o-mini", 0, 0)))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: httpclient.NewPool(pool)}
	_ = client // client.Do(req) for every request of the batch
	l, _ := pool.Limit(openai.RuleTokens("gpt-4o-mini"))
	fmt.Printf("tokens per %v before the first reply: %d (unknown: one request at a time)\n", l.Per, l.N)
	// Output: tokens per 1m0s before the first reply: 0 (unknown: one request at a time)
}
