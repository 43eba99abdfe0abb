package window_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/window"
)

func TestParseLimit(t *testing.T) {
	good := []struct {
		in   string
		want window.Limit
		str  string
	}{
		{"10/2s", window.Limit{N: 10, Per: 2 * time.Second}, "10/2s"},
		{"6000/1m", window.Limit{N: 6000, Per: time.Minute}, "6000/1m"},
		{"100/10s", window.Limit{N: 100, Per: 10 * time.Second}, "100/10s"},
		{"1/500ms", window.Limit{N: 1, Per: 500 * time.Millisecond}, "1/500ms"},
		{"200000/24h", window.Limit{N: 200000, Per: 24 * time.Hour}, "200000/24h"},
		{" 5 / 1h30m ", window.Limit{N: 5, Per: 90 * time.Minute}, "5/90m"},
		{"10/s", window.Limit{N: 10, Per: time.Second}, "10/1s"},
		{"3/µs", window.Limit{N: 3, Per: time.Microsecond}, "3/1us"},
		{"7/1500ms", window.Limit{N: 7, Per: 1500 * time.Millisecond}, "7/1500ms"},
		{"9223372036854775807/1ns", window.Limit{N: 1<<63 - 1, Per: 1}, "9223372036854775807/1ns"},
	}
	for _, tc := range good {
		got, err := window.ParseLimit(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseLimit(%q) = %v, %v; want %v, nil", tc.in, got, err, tc.want)
			continue
		}
		if s := got.String(); s != tc.str {
			t.Errorf("ParseLimit(%q).String() = %q; want %q", tc.in, s, tc.str)
		}
	}

	bad := []string{
		"", "10", "10/", "/2s", "0/2s", "-1/2s", "+1/2s", "10/0s", "10/-2s",
		"10/2", "ten/2s", "10/2 s", "1.5/2s", "10/2s/3s", "10//2s",
		"99999999999999999999/1s", "1/9999999999999h", "1/2x", "1e3/1s",
	}
	for _, in := range bad {
		l, err := window.ParseLimit(in)
		if err == nil {
			t.Errorf("ParseLimit(%q) = %v, nil; want an error", in, l)
			continue
		}
		if !errors.Is(err, ratesem.ErrInvalidLimit) {
			t.Errorf("ParseLimit(%q) error %v does not match ratesem.ErrInvalidLimit", in, err)
		}
		if !strings.Contains(err.Error(), strconv.Quote(in)) {
			t.Errorf("ParseLimit(%q) error %q does not quote the input", in, err)
		}
		if l != (window.Limit{}) {
			t.Errorf("ParseLimit(%q) returned %v with its error; want the zero Limit", in, l)
		}
	}
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"10/2s", "6000/1m", "1/500ms", "200000/24h", "10/s", "0/1s", "1/0s", "x", "1/1µs", "5/1h30m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := window.ParseLimit(s)
		if err != nil {
			if !errors.Is(err, ratesem.ErrInvalidLimit) || !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("ParseLimit(%q) error %q: want ratesem.ErrInvalidLimit quoting the input", s, err)
			}
			return
		}
		if l.N <= 0 || l.Per <= 0 {
			t.Fatalf("ParseLimit(%q) = %+v: want positive fields", s, l)
		}
		back, err := window.ParseLimit(l.String())
		if err != nil || back != l {
			t.Fatalf("ParseLimit(%q) = %v; ParseLimit(%q) = %v, %v: no round trip", s, l, l.String(), back, err)
		}
	})
}
