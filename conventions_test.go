package ratesem_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratesem/ratesem"
	"github.com/ratesem/ratesem/clientpool"
	"github.com/ratesem/ratesem/semaphore"
	"github.com/ratesem/ratesem/window"
)

// TestLimitsFromDataMatchErrInvalidLimit checks the package doc's rule: a
// limit that comes from data returns an error matching ErrInvalidLimit,
// whichever package returned it, with the "ratesem: " prefix.
func TestLimitsFromDataMatchErrInvalidLimit(t *testing.T) {
	bad := window.Limit{N: -1, Per: time.Second}
	_, errTable := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{{Name: "ip", Limit: bad}}})
	pool, err := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{{Name: "ip", Limit: window.Limit{N: 1, Per: time.Second}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, errParse := window.ParseLimit("-1/2s")
	for name, err := range map[string]error{
		"clientpool.New(Table)":   errTable,
		"Pool.SetLimit":           pool.SetLimit("ip", bad),
		"window.ParseLimit":       errParse,
		"RateSemaphore.SetLimit":  semaphore.New(1, time.Second).SetLimit(-1, time.Second),
		"RateSemaphore.SetLimit0": semaphore.New(1, time.Second).SetLimit(1, -time.Second),
	} {
		if !errors.Is(err, ratesem.ErrInvalidLimit) {
			t.Errorf("%s: %v, want an error matching ErrInvalidLimit", name, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "ratesem: ") {
			t.Errorf("%s: %q lacks the \"ratesem: \" prefix", name, err)
		}
	}
}

// TestLimitsAsNumbersPanic checks the other half of the rule: a limit passed
// to a constructor as numbers panics, as make does.
func TestLimitsAsNumbersPanic(t *testing.T) {
	for name, f := range map[string]func(){
		"semaphore.New":        func() { semaphore.New(-1, time.Second) },
		"window.NewCompletion": func() { window.NewCompletion(window.Limit{N: -1, Per: time.Second}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with a negative limit did not panic", name)
				}
			}()
			f()
		}()
	}
}
