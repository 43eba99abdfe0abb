package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratesem/ratesem/window"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRun runs the example on real time (about a second and a half: the
// server's Retry-After is 1 s) and checks that the log shows the queueing,
// the throttle with its source, the retry, and that the metrics add up.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	s, err := run(context.Background(), &out, 8, window.Limit{N: 4, Per: 100 * time.Millisecond}, false)
	if err != nil {
		t.Fatal(err)
	}
	log := out.String()
	for _, want := range []string{
		"msg=queued", "msg=admitted", "level=WARN msg=throttled", "source=retry-after", "status=429",
		"msg=retried", "attempt=1", "queue depth 0",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("no %q in the output:\n%s", want, log)
		}
	}
	if s.Admitted != 9 || s.Throttled != 1 || s.Retried != 1 || s.QueueDepth != 0 || s.Wait.Count != 9 {
		t.Errorf("metrics %+v; want 9 admitted (8 calls and a retry), 1 throttled, 1 retried, depth 0", s)
	}
}

// With -json every line of the log is a JSON object.
func TestRunJSON(t *testing.T) {
	var out bytes.Buffer
	if _, err := run(context.Background(), &out, 5, window.Limit{N: 10, Per: time.Second}, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	n := 0
	for _, l := range lines {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		n++
	}
	if n < 5 {
		t.Errorf("%d JSON lines; want at least one per call:\n%s", n, out.String())
	}
}
