package peek_test

import (
	"strings"
	"testing"

	"github.com/ratesem/ratesem/internal/peek"
)

func TestCode(t *testing.T) {
	cases := []struct{ body, want string }{
		{`{"code":"50011","msg":"x"}`, "50011"},
		{`{"code":-1015,"msg":"Too many new orders"}`, "-1015"},
		{`{"msg":"x","code":"50061"}`, "50061"},
		{`{"code":"50011","msg":"Rate li`, "50011"}, // cut short after the code
		{`{"data":{"code":"1"},"code":"0"}`, "0"},
		{`{"code":null}`, ""},
		{`{"code":{"a":1}}`, ""},
		{`[{"code":"1"}]`, ""},
		{`<html>`, ""},
		{``, ""},
		{`{"pad":"` + strings.Repeat("x", peek.Max) + `","code":"1"}`, ""}, // beyond Max
	}
	for _, c := range cases {
		if got := peek.Code([]byte(c.body)); got != c.want {
			t.Errorf("Code(%.40q) = %q, want %q", c.body, got, c.want)
		}
	}
}

// A 1 MB body or a deep nesting costs no more than its first Max bytes.
func TestCodeBoundedCost(t *testing.T) {
	for _, body := range []string{
		`{"a":` + strings.Repeat("[", 1<<20),
		`{"a":"` + strings.Repeat("x", 1<<20) + `"}`,
		strings.Repeat(`{"a":`, 1<<18),
	} {
		allocs := testing.AllocsPerRun(5, func() { peek.Code([]byte(body)) })
		if allocs > 200 {
			t.Errorf("Code on %d bytes: %.0f allocations, want a bounded few", len(body), allocs)
		}
	}
}

func BenchmarkCodeDeep(b *testing.B) {
	body := []byte(`{"a":` + strings.Repeat("[", 1<<20))
	b.ReportAllocs()
	for b.Loop() {
		peek.Code(body)
	}
}

// FuzzCode: no panic; the answer depends only on the first Max bytes; a
// found code is a JSON scalar's text (no quotes or braces around it).
func FuzzCode(f *testing.F) {
	for _, s := range []string{
		`{"code":"50011","msg":"Rate limit reached"}`,
		`{"code":-1015,"msg":"Too many new orders; current limit is 50 orders per 10 SECOND."}`,
		`{"code":1e999}`,
		`{"code":"\ud800"}`,
		`{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`,
		`{"code"`,
		`{`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := peek.Code(body)
		if len(body) > peek.Max {
			if again := peek.Code(body[:peek.Max]); again != got {
				t.Fatalf("Code looked beyond Max: %q vs %q on the prefix", got, again)
			}
		}
		if len(got) > peek.Max {
			t.Fatalf("a code of %d bytes from at most %d", len(got), peek.Max)
		}
	})
}

func BenchmarkCodeLong(b *testing.B) {
	body := []byte(`{"a":"` + strings.Repeat("x", 1<<20) + `"}`)
	b.ReportAllocs()
	for b.Loop() {
		peek.Code(body)
	}
}
