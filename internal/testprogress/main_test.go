package main

import (
	"strings"
	"testing"
)

// The progress shows each package as it ends (not in go test's order),
// slow tests, failed tests with their output, builds that failed, and the
// skip reasons counted; the status is 1 on any failure.
func TestRun(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"m/b"}`,
		`{"Action":"run","Package":"m/b","Test":"TestSlow"}`,
		`{"Action":"pass","Package":"m/b","Test":"TestSlow","Elapsed":6.5}`,
		`{"Action":"run","Package":"m/b","Test":"TestRedis"}`,
		`{"Action":"output","Package":"m/b","Test":"TestRedis","Output":"=== RUN   TestRedis\n"}`,
		`{"Action":"output","Package":"m/b","Test":"TestRedis","Output":"    x_test.go:9: needs a redis-server\n"}`,
		`{"Action":"skip","Package":"m/b","Test":"TestRedis","Elapsed":0}`,
		`{"Action":"pass","Package":"m/b","Elapsed":7}`,
		`{"Action":"output","Package":"m","Test":"TestBad","Output":"    y_test.go:3: got 2, want 1\n"}`,
		`{"Action":"fail","Package":"m","Test":"TestBad","Elapsed":0.1}`,
		`{"Action":"pass","Package":"m","Test":"TestGood","Elapsed":0.1}`,
		`{"Action":"fail","Package":"m","Elapsed":0.3}`,
		`{"ImportPath":"m/c [m/c.test]","Action":"build-output","Output":"c.go:1: syntax error\n"}`,
		`{"ImportPath":"m/c [m/c.test]","Action":"build-fail"}`,
		`not json: a message of go's own`,
	}, "\n")
	var out strings.Builder
	code := run(strings.NewReader(in), &out, "m")
	got := out.String()
	for _, want := range []string{
		"      b TestSlow passed (6.50s)\n",
		"ok    b ",
		"1 passed, 1 skipped",
		"--- FAIL m TestBad (0.10s)\n        y_test.go:3: got 2, want 1\n",
		"FAIL  m ",
		"FAIL  c [m/c.test] [build failed]\n    c.go:1: syntax error\n",
		"not json: a message of go's own",
		"   1  needs a redis-server",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "ok    b") > strings.Index(got, "FAIL  m ") {
		t.Errorf("packages not shown in the order they ended:\n%s", got)
	}
	if code != 1 {
		t.Errorf("status %d, want 1", code)
	}

	out.Reset()
	if code := run(strings.NewReader(`{"Action":"pass","Package":"m","Elapsed":1}`), &out, "m"); code != 0 {
		t.Errorf("all passed: status %d, want 0:\n%s", code, out.String())
	}
	out.Reset()
	if code := run(strings.NewReader(""), &out, "m"); code != 1 || !strings.Contains(out.String(), "no test results") {
		t.Errorf("no input: status %d, want 1:\n%s", code, out.String())
	}
}
