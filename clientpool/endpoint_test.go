package clientpool_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// endpointTable has one rule per endpoint, named after the endpoint, so
// that the charges of a request name the endpoint it matched.
func endpointTable(eps ...clientpool.Endpoint) clientpool.Table {
	var t clientpool.Table
	seen := map[string]bool{}
	for i := range eps {
		name := eps[i].Method + " " + eps[i].Path
		if !seen[name] {
			seen[name] = true
			t.Rules = append(t.Rules, clientpool.Rule{Name: name, Limit: window.Limit{N: 1, Per: time.Minute}})
		}
		eps[i].Costs = []clientpool.Cost{{Rule: name, Units: 1}}
	}
	t.Endpoints = eps
	return t
}

// matched returns the rule (so the endpoint) req matched, "" when none.
func matched(t *testing.T, p *clientpool.Pool, method, url string) string {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := p.Classify(req)
	if errors.Is(err, ratesem.ErrNoEndpoint) {
		return ""
	}
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	if len(cs) != 1 {
		t.Fatalf("%s %s: charges %v, want one", method, url, cs)
	}
	return cs[0].Rule
}

// Endpoint paths are net/http.ServeMux patterns: a {name} segment matches
// one segment, {name...} the rest, a trailing slash a subtree, {$} the
// slash alone; the most specific pattern wins, a method beats none, GET
// also matches HEAD, and the request's path is cleaned first. On
// 3c9e6ad every path matched exactly, so /v1/items/{id} matched nothing.
func TestEndpointPatterns(t *testing.T) {
	p, err := clientpool.New(endpointTable(
		clientpool.Endpoint{Method: "GET", Path: "/v1/items/{id}"},
		clientpool.Endpoint{Method: "GET", Path: "/v1/items/special"},
		clientpool.Endpoint{Path: "/v1/items/{id}"},
		clientpool.Endpoint{Method: "GET", Path: "/v1/items/{id}/tags"},
		clientpool.Endpoint{Path: "/v1/files/{path...}"},
		clientpool.Endpoint{Path: "/v1/tree/"},
		clientpool.Endpoint{Path: "/v1/tree/{$}"},
		clientpool.Endpoint{Method: "POST", Path: "/api/v5/trade/order"},
	))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ method, url, want string }{
		{"GET", "http://h/v1/items/42", "GET /v1/items/{id}"},
		{"", "http://h/v1/items/42", "GET /v1/items/{id}"}, // a client's "" is GET
		{"HEAD", "http://h/v1/items/42", "GET /v1/items/{id}"},
		{"GET", "http://h/v1/items/special", "GET /v1/items/special"},
		{"DELETE", "http://h/v1/items/42", " /v1/items/{id}"},
		{"DELETE", "http://h/v1/items/special", " /v1/items/{id}"},
		{"GET", "http://h/v1/items/42/tags", "GET /v1/items/{id}/tags"},
		{"POST", "http://h/v1/items/42/tags", ""},
		{"GET", "http://h/v1/items/", ""}, // {id} is one non-empty segment
		{"GET", "http://h/v1/items/42/other", ""},
		{"GET", "http://h/v1/files/", " /v1/files/{path...}"},
		{"GET", "http://h/v1/files/a/b/c.txt", " /v1/files/{path...}"},
		{"GET", "http://h/v1/tree/", " /v1/tree/{$}"},
		{"GET", "http://h/v1/tree/x/y", " /v1/tree/"},
		{"GET", "http://h/v1/tree", ""}, // ServeMux would redirect it to /v1/tree/
		{"GET", "http://h/v1//items/./42", "GET /v1/items/{id}"},
		{"GET", "http://h/v1/x/../items/42", "GET /v1/items/{id}"},
		{"GET", "http://h/v1/items/a%2Fb", "GET /v1/items/{id}"}, // an escaped slash stays in its segment
		{"POST", "http://h/api/v5/trade/order?x=1", "POST /api/v5/trade/order"},
		{"GET", "http://h/api/v5/trade/order", ""},
		{"POST", "http://h/api/v5/trade/order/", ""},
		{"GET", "http://h/", ""},
		{"GET", "http://h", ""},
	} {
		if got := matched(t, p, tc.method, tc.url); got != tc.want {
			t.Errorf("%s %s matched %q, want %q", tc.method, tc.url, got, tc.want)
		}
	}
}

// New refuses patterns ServeMux refuses, naming the endpoint and what to do.
func TestEndpointPatternErrors(t *testing.T) {
	for _, tc := range []struct {
		eps  []clientpool.Endpoint
		want string
	}{
		{[]clientpool.Endpoint{{Path: "/v1/{a}/x"}, {Path: "/v1/x/{b}"}}, `endpoints "/v1/{a}/x" and "/v1/x/{b}" match some request in common and neither is more specific`},
		{[]clientpool.Endpoint{{Path: "/a"}, {Method: "GET", Path: "/b/{x}"}, {Method: "GET", Path: "/b/{y}"}}, `endpoints "GET /b/{x}" and "GET /b/{y}"`},
		{[]clientpool.Endpoint{{Path: "/v1/{id"}}, `endpoint "/v1/{id" is not a net/http.ServeMux pattern`},
		{[]clientpool.Endpoint{{Path: "/v1/{a...}/x"}}, `endpoint "/v1/{a...}/x" is not a net/http.ServeMux pattern`},
		{[]clientpool.Endpoint{{Path: "/v1/{id}/{id}"}}, `not a net/http.ServeMux pattern`},
		{[]clientpool.Endpoint{{Path: "v1/items"}}, `endpoint "v1/items": Path must start with "/"`},
		{[]clientpool.Endpoint{{Path: ""}}, `Path must start with "/"`},
		{[]clientpool.Endpoint{{Method: "GET /x", Path: "/y"}}, `is not an HTTP method`},
		{[]clientpool.Endpoint{{Method: "GET", Path: "/x"}, {Method: "GET", Path: "/x"}}, `endpoint "GET /x" listed twice`},
	} {
		_, err := clientpool.New(endpointTable(tc.eps...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want it to say %q", tc.eps, err, tc.want)
			continue
		}
		if strings.Count(err.Error(), "ratesem:") != 1 || !strings.HasPrefix(err.Error(), "ratesem: ") {
			t.Errorf("%q: want one ratesem: prefix", err)
		}
	}
}

// A request that matches no endpoint of a table without Default is an
// error matching ratesem.ErrNoEndpoint that says what to do, unless the
// table sets UnmatchedUnlimited; a Default charges it. On 3c9e6ad it was
// silently unlimited.
func TestUnmatchedRequest(t *testing.T) {
	rules := []clientpool.Rule{{Name: "r", Limit: window.Limit{N: 1, Per: time.Minute}}}
	eps := []clientpool.Endpoint{{Method: "GET", Path: "/v1/items/{id}", Costs: []clientpool.Cost{{Rule: "r"}}}}
	req, _ := http.NewRequest("GET", "http://h/v1/other", nil)

	p, err := clientpool.New(clientpool.Table{Rules: rules, Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := p.Classify(req)
	if !errors.Is(err, ratesem.ErrNoEndpoint) || cs != nil {
		t.Fatalf("charges %v, err %v; want ErrNoEndpoint", cs, err)
	}
	for _, want := range []string{"GET /v1/other", "add an Endpoint", "UnmatchedUnlimited"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if strings.Count(err.Error(), "ratesem:") != 1 {
		t.Errorf("%q: want one ratesem: prefix", err)
	}

	// A request without a URL (a Transport called directly) is refused,
	// not a panic.
	if _, err := p.Classify(&http.Request{Method: "GET"}); !errors.Is(err, ratesem.ErrNoEndpoint) {
		t.Fatalf("nil URL: err %v; want ErrNoEndpoint", err)
	}

	p, err = clientpool.New(clientpool.Table{Rules: rules, Endpoints: eps, UnmatchedUnlimited: true})
	if err != nil {
		t.Fatal(err)
	}
	if cs, err := p.Classify(req); err != nil || len(cs) != 0 {
		t.Fatalf("UnmatchedUnlimited: charges %v, err %v; want none", cs, err)
	}

	p, err = clientpool.New(clientpool.Table{Rules: rules, Endpoints: eps, Default: []clientpool.Cost{{Rule: "r", Units: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if cs, err := p.Classify(req); err != nil || len(cs) != 1 || cs[0].Rule != "r" {
		t.Fatalf("Default: charges %v, err %v; want r", cs, err)
	}

	// A table with no endpoints at all.
	p, err = clientpool.New(clientpool.Table{Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Classify(req); !errors.Is(err, ratesem.ErrNoEndpoint) {
		t.Fatalf("no endpoints: err %v; want ErrNoEndpoint", err)
	}
}

// A hostile or broken request path never panics the router nor costs more
// than its length: empty, relative, escaping above the root, invalid
// escapes, NUL bytes, 200 000 segments. What it matches is what ServeMux
// would match for its cleaned path.
func FuzzEndpointMatch(f *testing.F) {
	for _, s := range []string{"", "x", "/", "/v1/items/42", "/v1/items/../../../etc", "%zz", "/v1/items/%zz",
		"/v1/items/a\x00b", "//v1//items//42//", "/v1/files/" + strings.Repeat("a/", 1000), "/v1/items/%2F"} {
		f.Add("GET", s, "")
		f.Add("", s, s)
	}
	p, err := clientpool.New(endpointTable(
		clientpool.Endpoint{Method: "GET", Path: "/v1/items/{id}"},
		clientpool.Endpoint{Path: "/v1/files/{path...}"},
		clientpool.Endpoint{Path: "/v1/tree/"},
	))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path, raw string) {
		req := &http.Request{Method: method, URL: &url.URL{Path: path, RawPath: raw}}
		cs, err := p.Classify(req)
		if err != nil && !errors.Is(err, ratesem.ErrNoEndpoint) {
			t.Fatalf("%q %q %q: %v", method, path, raw, err)
		}
		if err == nil && len(cs) != 1 {
			t.Fatalf("%q %q %q: charges %v", method, path, raw, cs)
		}
	})
}

func TestEndpointMatchHugePath(t *testing.T) {
	p, err := clientpool.New(endpointTable(clientpool.Endpoint{Path: "/v1/files/{path...}"}))
	if err != nil {
		t.Fatal(err)
	}
	huge := "/v1/files" + strings.Repeat("/a", 200_000)
	start := time.Now()
	cs, err := p.Classify(&http.Request{Method: "GET", URL: &url.URL{Path: huge}})
	if err != nil || len(cs) != 1 {
		t.Fatalf("charges %v, err %v", cs, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a 400 kB path took %v", d)
	}
}

// Endpoints are net/http.ServeMux patterns; the most specific one wins. A
// request that matches none, in a Table without Default, is an error.
func ExampleEndpoint() {
	items := []clientpool.Cost{{Rule: "requests", Units: 1}}
	search := []clientpool.Cost{{Rule: "requests", Units: 10}}
	pool, err := clientpool.New(clientpool.Table{
		Rules: []clientpool.Rule{{Name: "requests", Limit: window.Limit{N: 600, Per: time.Minute}}},
		Endpoints: []clientpool.Endpoint{
			{Method: "GET", Path: "/v1/items/{id}", Costs: items},
			{Method: "GET", Path: "/v1/items/search", Costs: search}, // more specific than {id}
		},
	})
	if err != nil {
		panic(err)
	}
	for _, url := range []string{"https://api.example.com/v1/items/42", "https://api.example.com/v1/items/search", "https://api.example.com/v2/other"} {
		req, _ := http.NewRequest("GET", url, nil)
		charges, err := pool.Classify(req)
		fmt.Println(charges, errors.Is(err, ratesem.ErrNoEndpoint))
	}
	// Output:
	// [requests[]×1] false
	// [requests[]×10] false
	// [] true
}

// A Method spelt in lower case ("get") is refused at New: HTTP methods are
// case-sensitive, so it would match no request a client sends as GET, and
// those would fall silently to Default (or ErrNoEndpoint). Before the fix
// New accepted it and GET /v1/x was charged the Default's "/".
func TestReview3EndpointLowerCaseMethod(t *testing.T) {
	for _, m := range []string{"get", "Post", "dELETE", "head"} {
		_, err := clientpool.New(endpointTable(clientpool.Endpoint{Method: m, Path: "/v1/x"}, clientpool.Endpoint{Path: "/"}))
		if err == nil || !strings.Contains(err.Error(), strings.ToUpper(m)) || strings.Count(err.Error(), "ratesem:") != 1 {
			t.Errorf("Method %q: err %v; want it refused, naming %q", m, err, strings.ToUpper(m))
		}
	}
	// A method of the API's own, whatever its case, is the API's business.
	if _, err := clientpool.New(endpointTable(clientpool.Endpoint{Method: "PROPFIND", Path: "/v1/x"}, clientpool.Endpoint{Method: "purge", Path: "/v1/x"})); err != nil {
		t.Errorf("methods of the API's own: %v", err)
	}
}

// A Path that could never match is refused at New, not left dead: one
// with empty, "." or ".." segments ("//host/x" reads like a host part; a
// request's path is cleaned before it is matched, so no request reaches
// it), and one with a space or tab (ServeMux reads what comes before it as
// a method: "/a b" was refused as `invalid method "/a"` without a Method
// and accepted with one). Before the fix New accepted "//host/x",
// "/a/../b", "/a/./b" and "GET /a b".
func TestReview3EndpointPathNeverMatching(t *testing.T) {
	for _, e := range []clientpool.Endpoint{
		{Path: "//host/x"}, {Path: "/a/../b"}, {Path: "/a/./b"}, {Path: "/a//b/"}, {Method: "CONNECT", Path: "//x"},
		{Method: "GET", Path: "/a b"}, {Path: "/a b"}, {Method: "GET", Path: "/a\tb"},
	} {
		_, err := clientpool.New(endpointTable(e))
		if err == nil || strings.Count(err.Error(), "ratesem:") != 1 || !strings.Contains(err.Error(), "Path") {
			t.Errorf("%q %q: err %v; want it refused, naming the Path", e.Method, e.Path, err)
		}
	}
	for _, e := range []clientpool.Endpoint{{Path: "/"}, {Path: "/a/"}, {Path: "/a/{x}/"}, {Path: "/a/{$}"}, {Path: "/a/{rest...}"}, {Path: "/a.b/c..d/.e"}} {
		if _, err := clientpool.New(endpointTable(e)); err != nil {
			t.Errorf("%q: %v", e.Path, err)
		}
	}
}

// A dot segment written percent-encoded ("%2e%2e", RFC 3986 6.2.2.2: the
// same as "..") is removed as one: /v1/%2e%2e/admin is /admin, as a
// server normalising the path reads it. Before the fix it matched
// /v1/{a}/admin.
func TestReview3EndpointEncodedDotSegments(t *testing.T) {
	p, err := clientpool.New(endpointTable(clientpool.Endpoint{Path: "/v1/{a}/admin"}, clientpool.Endpoint{Path: "/admin"}, clientpool.Endpoint{Path: "/v1/{a}"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ raw, want string }{
		{"/v1/%2e%2e/admin", " /admin"},
		{"/v1/%2E%2e/admin", " /admin"},
		{"/v1/.%2e/admin", " /admin"},
		{"/v1/%2e/admin", " /v1/{a}"},
		{"/v1/%2e%2e%2e/admin", " /v1/{a}/admin"}, // "..." is a name
		{"/v1/a%2eb/admin", " /v1/{a}/admin"},
	} {
		u, err := url.Parse("http://h" + tc.raw)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := p.Classify(&http.Request{Method: "GET", URL: u})
		if err != nil || len(cs) != 1 || cs[0].Rule != tc.want {
			t.Errorf("%s: charges %v, %v; want %q", tc.raw, cs, err, tc.want)
		}
	}
}

// Classify from many goroutines at once, on clean and unclean paths, gives
// each request its own endpoint (run with -race).
func TestReview3ClassifyConcurrent(t *testing.T) {
	p, err := clientpool.New(endpointTable(clientpool.Endpoint{Method: "GET", Path: "/v1/items/{id}"},
		clientpool.Endpoint{Path: "/v1/files/{rest...}"}, clientpool.Endpoint{Method: "POST", Path: "/v1/items/special"}))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ method, url, want string }{
		{"GET", "http://h/v1/items/1", "GET /v1/items/{id}"},
		{"HEAD", "http://h/v1//items/./2", "GET /v1/items/{id}"},
		{"POST", "http://h/v1/items/special", "POST /v1/items/special"},
		{"PUT", "http://h/v1/files/a/../b/c", " /v1/files/{rest...}"},
	}
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 500 {
				tc := cases[(g+i)%len(cases)]
				req, _ := http.NewRequest(tc.method, tc.url, nil)
				cs, err := p.Classify(req)
				if err != nil || len(cs) != 1 || cs[0].Rule != tc.want {
					t.Errorf("%s %s: %v %v; want %q", tc.method, tc.url, cs, err, tc.want)
					return
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
}
