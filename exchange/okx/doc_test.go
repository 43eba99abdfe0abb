package okx

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"text/tabwriter"
)

var update = flag.Bool("update", false, "rewrite the tables in doc.go from the code")

// rulesDoc renders the rule table of the package documentation.
func rulesDoc() []string {
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "Rule\tLimit\tKey\tPauses\tSection")
	for _, r := range rules {
		pause := "no"
		if r.pause {
			pause = "yes"
		}
		fmt.Fprintf(w, "%s\t%d/%v\t%v\t%s\t#%s\n", r.name, r.n, Per, r.scope, pause, r.section)
	}
	w.Flush()
	return lines(b.String())
}

// endpointsDoc renders the endpoint table of the package documentation.
func endpointsDoc() []string {
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "Method\tPath\tRules")
	for _, e := range endpoints {
		charges := strings.Join(e.rules, ", ")
		if e.how == perOrder {
			charges = fmt.Sprintf("%s (1 per order, per instId; 1 order: %s), %s (1 per order)",
				e.rules[0], RulePlaceOrder, e.rules[1])
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", e.method, e.path, charges)
	}
	w.Flush()
	return lines(b.String())
}

func lines(s string) []string {
	out := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range out {
		out[i] = strings.TrimRight(l, " ")
	}
	return out
}

// TestDocTable checks that the tables in the package documentation are the
// ones the code has; with -update it rewrites them.
func TestDocTable(t *testing.T) {
	checkDocTables(t, "doc.go", map[string][]string{
		"// # Rules":     rulesDoc(),
		"// # Endpoints": endpointsDoc(),
	})
}

// checkDocTables checks (or with -update rewrites) in file the first code
// block after each heading.
func checkDocTables(t *testing.T, file string, tables map[string][]string) {
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
		if !*update {
			t.Errorf("%s: the table under %q is not the code's; run go test -run TestDocTable -update, or paste:\n%s",
				file, heading, strings.Join(want, "\n"))
			continue
		}
		text = append(text[:start], append(want, text[end:]...)...)
	}
	if *update {
		if err := os.WriteFile(file, []byte(strings.Join(text, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
