package clientpool_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/window"
)

// A bad limit in a Table is data, not a bug in the caller's code: New
// returns an error matching ratesem.ErrInvalidLimit (the root doc's rule),
// and does not panic.
func TestNewBadLimitIsErrInvalidLimit(t *testing.T) {
	for _, r := range []clientpool.Rule{
		{Name: "zero", Limit: window.Limit{N: 0, Per: time.Second}},
		{Name: "neg", Limit: window.Limit{N: -5, Per: time.Second}},
		{Name: "noper", Limit: window.Limit{N: 5}},
		{Name: "negper", Limit: window.Limit{N: 5, Per: -time.Second}},
		{Name: "conc", Limit: window.Limit{N: 5, Per: time.Second}, MaxUnitsInFlight: -1},
	} {
		_, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{r}})
		if !errors.Is(err, ratesem.ErrInvalidLimit) {
			t.Errorf("rule %s: New error %v, want one matching ratesem.ErrInvalidLimit", r.Name, err)
		}
	}
}
