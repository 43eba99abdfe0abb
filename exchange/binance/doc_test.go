package binance

import (
	"bytes"
	"flag"
	"fmt"
	"testing"
	"text/tabwriter"

	"github.com/ratesem/ratesem/internal/doctable"
	"github.com/ratesem/ratesem/window"
)

var update = flag.Bool("update", false, "rewrite the tables in doc.go from the code")

// rulesDoc renders the rule table of the package documentation.
func rulesDoc() []string {
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "Rule\tLimit\tKey\tUsage header\tPauses\tSection")
	for _, r := range rules {
		usage, pause := r.usage, "no"
		if usage == "" {
			usage = "-"
		}
		if r.pause {
			pause = "yes"
		}
		fmt.Fprintf(w, "%s\t%v\t%v\t%s\t%s\t%s\n", r.name, window.Limit{N: r.n, Per: r.per}, r.scope, usage, pause, r.section)
	}
	w.Flush()
	return doctable.Lines(b.String())
}

// endpointsDoc renders the endpoint table of the package documentation.
func endpointsDoc() []string {
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "Method\tPath\tREQUEST_WEIGHT\tORDERS\tSection")
	for _, e := range endpoints {
		weight := fmt.Sprint(e.weight)
		if e.weightFunc != nil {
			weight = e.weightDoc
		}
		orders := "-"
		if e.orders > 0 {
			orders = fmt.Sprint(e.orders)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.method, e.path, weight, orders, e.section)
	}
	fmt.Fprintln(w, "any\tother\t1\t-\t(Table.Default)")
	w.Flush()
	return doctable.Lines(b.String())
}

// TestDocTable checks that the tables in the package documentation are the
// ones the code has; with -update it rewrites them.
func TestDocTable(t *testing.T) {
	doctable.Check(t, "doc.go", map[string][]string{
		"// # Rules":     rulesDoc(),
		"// # Endpoints": endpointsDoc(),
	}, *update)
}
