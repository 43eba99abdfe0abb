package grpcsem_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratesem/ratesem/grpcsem"
)

func TestParsePushback(t *testing.T) {
	const most = time.Duration(1<<63 - 1)
	for _, c := range []struct {
		in   []string
		want time.Duration
		ok   bool
	}{
		{[]string{"250"}, 250 * time.Millisecond, true},
		{[]string{" \t250 \t"}, 250 * time.Millisecond, true},
		{[]string{"0"}, 0, true},
		{[]string{"000000000000000000000000000001"}, time.Millisecond, true},
		{[]string{"9223372036854"}, 9223372036854 * time.Millisecond, true},
		{[]string{"9223372036855"}, most, true}, // the first that overflows in ns
		{[]string{"9223372036854775807"}, most, true},
		{[]string{strings.Repeat("9", 32)}, most, true},
		{[]string{strings.Repeat("9", 33)}, 0, false},
		{[]string{strings.Repeat("0", 100) + "1"}, 0, false},
		{nil, 0, false},
		{[]string{}, 0, false},
		{[]string{""}, 0, false},
		{[]string{"  "}, 0, false},
		{[]string{"-1"}, 0, false},
		{[]string{"-0"}, 0, false},
		{[]string{"+5"}, 0, false},
		{[]string{"1.5"}, 0, false},
		{[]string{"1e3"}, 0, false},
		{[]string{"0x10"}, 0, false},
		{[]string{"1_000"}, 0, false},
		{[]string{"١٢"}, 0, false},
		{[]string{"5\x00"}, 0, false},
		{[]string{"5 5"}, 0, false},
		{[]string{"soon"}, 0, false},
		{[]string{"10", "10"}, 0, false},
		{[]string{"10", ""}, 0, false},
	} {
		got, ok := grpcsem.ParsePushback(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("ParsePushback(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// TestParsePushbackAllocs checks that parsing allocates nothing.
func TestParsePushbackAllocs(t *testing.T) {
	in := []string{" 123456789012345678901234567890 "}
	if n := testing.AllocsPerRun(100, func() { grpcsem.ParsePushback(in) }); n != 0 {
		t.Errorf("ParsePushback allocates %v times", n)
	}
}

func FuzzParsePushback(f *testing.F) {
	for _, s := range []string{"250", "-1", "", "99999999999999999999999", " 7 ", "1.5", "١"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := grpcsem.ParsePushback([]string{s})
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("ParsePushback(%q) = %v, %v", s, d, ok)
		}
		if ok && strings.Trim(strings.Trim(s, " \t"), "0123456789") != "" {
			t.Fatalf("ParsePushback(%q) accepted a value that is not digits", s)
		}
	})
}

// TestRequest checks the request an RPC is classified as.
func TestRequest(t *testing.T) {
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-account", "7", "x-account", "8", "trace-bin", "\x00\x01")
	msg := wrapperspb.String("m")
	r := grpcsem.Request(ctx, "dns:///api:443", "/pkg.Svc/Get", msg)
	if r.Method != http.MethodPost || r.URL.Path != "/pkg.Svc/Get" || r.Host != "dns:///api:443" || r.URL.Host != "dns:///api:443" || r.ProtoMajor != 2 {
		t.Errorf("Request = %s %s host %q proto %d", r.Method, r.URL.Path, r.Host, r.ProtoMajor)
	}
	if got := r.Header.Values("X-Account"); len(got) != 2 || got[0] != "7" || got[1] != "8" {
		t.Errorf("X-Account = %q, want [7 8]", got)
	}
	if r.Header.Get("Trace-Bin") != "\x00\x01" {
		t.Errorf("binary metadata lost: %q", r.Header)
	}
	if grpcsem.Message(r) != msg {
		t.Errorf("Message = %v, want the request message", grpcsem.Message(r))
	}
	if s := grpcsem.Request(context.Background(), "", "/pkg.Svc/Watch", nil); grpcsem.Message(s) != nil || len(s.Header) != 0 {
		t.Errorf("a stream's request: Message %v, Header %v; want nil, empty", grpcsem.Message(s), s.Header)
	}
}
