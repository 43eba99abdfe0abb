package req

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestCount(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "42": 42, "999999999999999999": 999999999999999999} {
		if n, ok := Count(s); !ok || n != want {
			t.Errorf("Count(%q) = %d, %v", s, n, ok)
		}
	}
	for _, s := range []string{"", "-1", "+1", " 1", "1.5", "1e3", "٣", "9999999999999999999"} {
		if _, ok := Count(s); ok {
			t.Errorf("Count(%q) accepted", s)
		}
	}
}

func TestUsage(t *testing.T) {
	cases := []struct {
		body string
		want int64
		ok   bool
	}{
		{`{"usage":{"total_tokens":12,"prompt_tokens_details":{"cached_tokens":3}}}`, 12, true},
		{`{"usage":{"input_tokens":5,"output_tokens":7}}`, 5, true},
		{`{"usage":{"total_tokens":-1}}`, 0, false},
		{`{"usage":{"total_tokens":"12"}}`, 0, false},
		{`{"usage":{"total_tokens":1e3}}`, 0, false},
		{`{"usage":{"total_tokens":99999999999999999999}}`, 0, false},
		{`{"id":"x"}`, 0, false},
		{`{"usage":`, 0, false},
		{``, 0, false},
	}
	for _, c := range cases {
		name := "total_tokens"
		if strings.Contains(c.body, "input_tokens") {
			name = "input_tokens"
		}
		n, ok := Usage([]byte(c.body), name)
		if n != c.want || ok != c.ok {
			t.Errorf("Usage(%s) = %d, %v; want %d, %v", c.body, n, ok, c.want, c.ok)
		}
	}
}

func TestBody(t *testing.T) {
	r, _ := http.NewRequest("POST", "http://x/", strings.NewReader(`{"model":"m"}`))
	b, ok := Body(r)
	if !ok || string(b) != `{"model":"m"}` {
		t.Fatalf("Body = %q, %v", b, ok)
	}
	if again, _ := Body(r); string(again) != string(b) {
		t.Fatal("Body consumed the request's body")
	}
	r.GetBody = nil
	if _, ok := Body(r); ok {
		t.Fatal("a body without GetBody was read")
	}
	big, _ := http.NewRequest("POST", "http://x/", strings.NewReader(strings.Repeat("a", MaxBody+10)))
	b, _ = Body(big)
	if len(b) != MaxBody+1 || !Parse(b).TooLarge {
		t.Fatalf("a body past MaxBody: read %d bytes, TooLarge %v", len(b), Parse(b).TooLarge)
	}
}

func TestScaled(t *testing.T) {
	for _, f := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if got := Scaled(time.Minute, f); got != time.Minute {
			t.Errorf("Scaled(1m, %v) = %v", f, got)
		}
	}
	if got := Scaled(time.Minute, 60); got != time.Second {
		t.Errorf("Scaled(1m, 60) = %v", got)
	}
	if got := Scaled(time.Minute, 1e300); got != time.Microsecond {
		t.Errorf("Scaled(1m, 1e300) = %v", got)
	}
}

// LearnBucket: a limit that is absent, 0 or not a count says nothing; a
// remaining that is absent or malformed is left out (-1), one above the
// limit is kept (the pool reads it as nothing used); no reset is read.
func TestLearnBucket(t *testing.T) {
	learn := LearnBucket("x-limit", "x-remaining")
	h := func(limit, remaining string) http.Header {
		x := http.Header{}
		if limit != "" {
			x.Set("x-limit", limit)
		}
		if remaining != "" {
			x.Set("x-remaining", remaining)
		}
		x.Set("x-reset", "6m0s")
		return x
	}
	for _, lim := range []string{"", "0", "-1", "1e9", "99999999999999999999", "١٠"} {
		if in, ok := learn(h(lim, "5"), time.Now()); ok {
			t.Errorf("limit %q taught %+v", lim, in)
		}
	}
	for rem, want := range map[string]int64{"": -1, "x": -1, "-3": -1, "7": 7, "900": 900} {
		in, ok := learn(h("100", rem), time.Now())
		if !ok || in.Limit.N != 100 || in.Remaining != want || !in.Reset.IsZero() {
			t.Errorf("remaining %q: %+v, %v; want remaining %d", rem, in, ok, want)
		}
	}
}
