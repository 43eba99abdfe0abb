// Package doctable keeps a table in a package's documentation equal to the
// one its code holds: the presets in exchange/ list their limits in their doc
// comments, and a test compares them with the table literals (and rewrites
// them with -update).
package doctable

import (
	"os"
	"strings"
	"testing"
)

// Lines splits tabwriter output into lines without trailing blanks.
func Lines(s string) []string {
	out := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range out {
		out[i] = strings.TrimRight(l, " ")
	}
	return out
}

// Check checks, in file, the first code block ("//\t" lines) after each
// heading line against its table; with update it rewrites them instead.
func Check(t testing.TB, file string, tables map[string][]string, update bool) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Split(string(src), "\n")
	for heading, table := range tables {
		want := make([]string, len(table))
		for i, l := range table {
			want[i] = "//\t" + l
		}
		start := -1
		for i, l := range text {
			if l == heading {
				start = i
				break
			}
		}
		if start < 0 {
			t.Fatalf("%s: no heading %q", file, heading)
		}
		for start < len(text) && !strings.HasPrefix(text[start], "//\t") {
			start++
		}
		end := start
		for end < len(text) && strings.HasPrefix(text[end], "//\t") {
			end++
		}
		got := text[start:end]
		if strings.Join(got, "\n") == strings.Join(want, "\n") {
			continue
		}
		if !update {
			t.Errorf("%s: the table under %q is not the code's; run go test -run TestDocTable -update, or paste:\n%s",
				file, heading, strings.Join(want, "\n"))
			continue
		}
		text = append(text[:start], append(want, text[end:]...)...)
	}
	if update {
		if err := os.WriteFile(file, []byte(strings.Join(text, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
