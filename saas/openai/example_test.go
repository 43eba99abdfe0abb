package openai_test

import (
	"fmt"
	"net/http"

	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/httpclient"
	"github.com/ratesem/ratesem/saas/openai"
)

// The default estimate: the prompt's characters over 4, plus max_tokens.
func ExampleCharEstimator() {
	body := `{"model":"gpt-4o-mini","max_tokens":256,"messages":[{"role":"user","content":"Summarise the plot of Hamlet."}]}`
	fmt.Println(openai.CharEstimator(nil, []byte(body)))
	// Output: 264
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
