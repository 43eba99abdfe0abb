package req

import (
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
)

// A body Of cannot read (no GetBody, GetBody failing, a read failing) is
// Unread, never a parse of nothing: Parse(nil) gave 0 characters and 0
// max_tokens, a charge of 0.
func TestReview18OfUnread(t *testing.T) {
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	noGet, _ := http.NewRequest("POST", "http://x/", io.MultiReader(strings.NewReader(body)))
	failGet, _ := http.NewRequest("POST", "http://x/", strings.NewReader(body))
	failGet.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
	failRead, _ := http.NewRequest("POST", "http://x/", strings.NewReader(body))
	failRead.GetBody = func() (io.ReadCloser, error) {
		return io.NopCloser(io.MultiReader(strings.NewReader(body[:20]), errReader{})), nil
	}
	for name, r := range map[string]*http.Request{"no GetBody": noGet, "GetBody fails": failGet, "read fails": failRead} {
		if _, ok, q := Of(r); ok || !q.Unread || !q.Unbounded() || q.Model != "" {
			t.Errorf("%s: ok %v, %+v; want Unread", name, ok, q)
		}
	}
	ok, _ := http.NewRequest("POST", "http://x/", strings.NewReader(body))
	if _, read, q := Of(ok); !read || q.Unbounded() || q.Model != "m" || q.MaxTokens != 10 {
		t.Errorf("a readable body: %v %+v", read, q)
	}
	none, _ := http.NewRequest("GET", "http://x/", nil)
	if _, read, q := Of(none); !read || q.Unbounded() {
		t.Errorf("no body: %v %+v", read, q)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk gone") }

// Parse counts the messages and their names (the framing tokens an
// estimate adds), a name's characters with the prompt's.
func TestReview18ParseMessages(t *testing.T) {
	r := Parse([]byte(`{"messages":[{"role":"system","content":"ab"},{"role":"user","name":"bob","content":[{"type":"text","text":"cd"}]},{"role":"user"}]}`))
	if r.Messages != 3 || r.Names != 1 || r.Chars != 7 {
		t.Errorf("Parse = %+v, want 3 messages, 1 name, 7 chars", r)
	}
}

// UnboundedRule applies to an unbounded request only, at math.MaxInt64,
// against a fixed limit it can never fit.
func TestReview18UnboundedRule(t *testing.T) {
	rule := UnboundedRule("unread body", "src")
	noGet, _ := http.NewRequest("POST", "http://x/", io.MultiReader(strings.NewReader(`{}`)))
	ok, _ := http.NewRequest("POST", "http://x/", strings.NewReader(`{}`))
	if _, applies := rule.Key(noGet); !applies || rule.Weight(noGet) != math.MaxInt64 || rule.Learn != nil || rule.Limit.N != 1 {
		t.Errorf("unread body: applies %v, weight %d", applies, rule.Weight(noGet))
	}
	if _, applies := rule.Key(ok); applies {
		t.Error("a readable body falls under the rule")
	}
}
