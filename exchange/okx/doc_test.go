package okx

import (
	"bytes"
	"flag"
	"fmt"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/ratesem/ratesem/internal/doctable"
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
	return doctable.Lines(b.String())
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
