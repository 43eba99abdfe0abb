package main

import (
	"strings"
	"testing"
)

func TestParseAndMedians(t *testing.T) {
	runs := []string{`goos: linux
BenchmarkRedis/serial/redis_rate-Allow-2         	   10000	    100000 ns/op	        25.00 client-cpu-µs/op	     10000 decisions/s	         1.000 round-trips/op
BenchmarkRedis/serial/redisrate.NewSemaphore-Acquire+Release-2	    5000	    200000 ns/op	     5000 decisions/s	         2.000 round-trips/op
BenchmarkRedis/g16/redis_rate-Allow-2	10000	1 ns/op	40000 decisions/s
PASS`, `BenchmarkRedis/serial/redis_rate-Allow   	   10000	    100000 ns/op	     20000 decisions/s
BenchmarkRedis/serial/redisrate.NewSemaphore-Acquire+Release	    5000	    200000 ns/op	     4000 decisions/s	         1.000 round-trips/op`,
		`BenchmarkRedis/serial/redis_rate-Allow-8	1	1 ns/op	30000 decisions/s
BenchmarkRedis/serial/redisrate.NewSemaphore-Acquire+Release-8	1	1 ns/op	9000 decisions/s	3 round-trips/op`}
	s := &side{label: "x"}
	for _, r := range runs {
		res, err := parse(strings.NewReader(r))
		if err != nil {
			t.Fatal(err)
		}
		s.runs = append(s.runs, res)
	}
	const sem = "redisrate.NewSemaphore-Acquire+Release"
	if got := s.names(); len(got) != 2 || got[0] != reference || got[1] != sem {
		t.Fatalf("names = %q", got)
	}
	// The ratio is taken within each run (0.5, 0.2, 0.3), then the median.
	if v, ok := s.median(ratio("serial", sem)); !ok || v != 0.3 {
		t.Errorf("median ratio = %v, %v; want 0.3", v, ok)
	}
	if v, ok := s.median(metric("serial", sem, "decisions/s")); !ok || v != 5000 {
		t.Errorf("median calls/s = %v, %v; want 5000", v, ok)
	}
	if v, ok := s.median(metric("serial", sem, "round-trips/op")); !ok || v != 2 {
		t.Errorf("median round trips = %v, %v; want 2", v, ok)
	}
	// Reported in one run only: the median of what there is.
	if v, ok := s.median(metric("g16", reference, "decisions/s")); !ok || v != 40000 {
		t.Errorf("g16 = %v, %v; want 40000", v, ok)
	}
	if _, ok := s.median(ratio("g64", sem)); ok {
		t.Error("a level no run reported has a ratio")
	}
	if _, err := parse(strings.NewReader("PASS\n")); err == nil {
		t.Error("parse of no results: no error")
	}
}
