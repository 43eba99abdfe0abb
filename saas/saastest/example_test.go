package saastest_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/ratesem/ratesem/saas/saastest"
)

// A chat completion is charged max(max_tokens, ceil(chars/4)) tokens at
// arrival and settled to its usage.total_tokens when the reply is written.
func ExampleNewOpenAI() {
	s := saastest.NewOpenAI(saastest.OpenAIConfig{
		Default: saastest.OpenAILimit{RPM: 60, TPM: 1000},
		Scale:   60, // a minute lasts one second
	})
	defer s.Close()

	body := `{"model":"gpt-x","max_tokens":300,"messages":[{"role":"user","content":"Say hi."}]}`
	resp, err := s.Client().Post(s.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		fmt.Println(err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	e := s.Log()[0]
	fmt.Println("status:", resp.StatusCode)
	fmt.Println("charged at arrival:", e.Tokens)
	fmt.Println("settled:", e.Settled, e.TrueTokens <= 300+2)
	fmt.Println("limit:", resp.Header.Get("x-ratelimit-limit-tokens"))
	// Output:
	// status: 200
	// charged at arrival: 300
	// settled: true true
	// limit: 1000
}

// With an injected clock the GitHub primary window can be driven by hand:
// two requests against a limit of one, then the reset an hour later.
func ExampleNewGitHub() {
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := saastest.NewGitHub(saastest.GitHubConfig{Limit: 1, Clock: mock})
	defer s.Close()

	get := func() {
		req, _ := http.NewRequest("GET", s.URL()+"/repos/octo/hello/issues", nil)
		req.Header.Set("Authorization", "Bearer t1")
		resp, err := s.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "remaining", resp.Header.Get("x-ratelimit-remaining"),
			"reset", resp.Header.Get("x-ratelimit-reset"))
	}
	get()
	get()
	mock.Add(time.Hour)
	get()
	fmt.Println(s.Stats().Rejected[saastest.LimitPrimary], "rejected by the primary limit")
	// Output:
	// 200 remaining 0 reset 1767229200
	// 403 remaining 0 reset 1767229200
	// 200 remaining 0 reset 1767232800
	// 1 rejected by the primary limit
}
