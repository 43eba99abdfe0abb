package saastest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// reply is an answer read whole.
type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// do sends method url with body (none if body is "") and reads the answer.
func do(t *testing.T, c *http.Client, method, url, body string, hdr ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	rp := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &rp.body); err != nil {
			t.Fatalf("%s %s: body %q: %v", method, url, raw, err)
		}
	}
	return rp
}

// num reads header k as an integer.
func (r reply) num(t *testing.T, k string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(r.header.Get(k), 10, 64)
	if err != nil {
		t.Fatalf("header %s = %q: %v", k, r.header.Get(k), err)
	}
	return n
}

// field walks the JSON body along keys and returns the number there.
func (r reply) field(t *testing.T, keys ...string) int64 {
	t.Helper()
	var v any = r.body
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("body %s: no %v", r.raw, keys)
		}
		v = m[k]
	}
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("body %s: %v is %v, not a number", r.raw, keys, v)
	}
	return int64(f)
}

// str walks the JSON body along keys and returns the string there.
func (r reply) str(keys ...string) string {
	var v any = r.body
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	s, _ := v.(string)
	return s
}

func chat(model string, maxTokens int, content string) string {
	b, _ := json.Marshal(map[string]any{"model": model, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": content}}})
	return string(b)
}
