package ratesem_test

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// TestOnlyRedisrateLinksGoRedis checks the package doc's promise: a
// program that imports the in-process packages does not link go-redis;
// only redisrate does. It lists their dependencies with the go command.
func TestOnlyRedisrateLinksGoRedis(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no go command on PATH [CI is set: not skipping]")
		}
		t.Skip("no go command on PATH")
	}
	inProcess := []string{".", "./semaphore", "./clientpool", "./httpclient", "./window", "./exchange/binance", "./exchange/okx", "./saas/openai", "./saas/anthropic", "./saas/github"}
	out, err := exec.Command(goBin, append([]string{"list", "-deps"}, inProcess...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "go-redis") || strings.HasSuffix(p, "/internal/rstore") {
			t.Errorf("an in-process package depends on %s", p)
		}
	}
	out, err = exec.Command(goBin, "list", "-deps", "./redisrate").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if !strings.Contains(string(out), "github.com/redis/go-redis/v9\n") {
		t.Error("redisrate does not depend on go-redis: the check above proves nothing")
	}
}

// TestErrorfOnePrefix checks the package doc's rule that every message
// starts with one "ratesem: ": a message that wraps a sentinel of this
// package (whose own text starts with "ratesem: ") must not add another
// prefix in front ("ratesem: Acquire: ratesem: negative weight -1", as on
// 3c9e6ad); it starts with the sentinel instead ("%w: ..."). It reads the
// fmt.Errorf calls of every non-test Go file of the module.
func TestErrorfOnePrefix(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || nested(p+"/x") != ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		root := f.Name.Name == "ratesem"
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "Errorf" {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			format, _ := strconv.Unquote(lit.Value)
			if !strings.HasPrefix(format, "ratesem: ") || !strings.Contains(format, "%w") {
				return true
			}
			for _, a := range call.Args[1:] {
				name := ""
				switch a := a.(type) {
				case *ast.SelectorExpr:
					if x, ok := a.X.(*ast.Ident); ok && x.Name == "ratesem" {
						name = a.Sel.Name
					}
				case *ast.Ident:
					if root {
						name = a.Name
					}
				}
				if strings.HasPrefix(name, "Err") {
					t.Errorf("%s: %q wraps ratesem.%s after its own \"ratesem: \": start with %%w instead", fset.Position(call.Pos()), format, name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestErrorMessagesOnePrefix: the errors a caller meets first start with
// one "ratesem: " and say what failed (on 3c9e6ad several repeated the
// prefix: "ratesem: Acquire: ratesem: negative weight -1").
func TestErrorMessagesOnePrefix(t *testing.T) {
	ctx := context.Background()
	sem := semaphore.New(2, time.Second)
	_, errBegin := sem.Begin(ctx, -1)
	_, errTry := window.NewLimiter(window.NewTokenBucket(window.Limit{N: 1, Per: time.Second}, 1)).TryN(time.Now(), -1)
	rules := []clientpool.Rule{{Name: "ip", Limit: window.Limit{N: 2, Per: time.Second}}}
	pool, err := clientpool.New(clientpool.Table{Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	_, errNeg := pool.Acquire(ctx, clientpool.Charge{Rule: "ip", Weight: -3})
	_, errHeavy := pool.Acquire(ctx, clientpool.Charge{Rule: "ip", Weight: 3})
	_, errUnknown := pool.Acquire(ctx, clientpool.Charge{Rule: "nope", Weight: 1})
	tk, err := pool.Acquire(ctx, clientpool.Charge{Rule: "ip", Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	errSettle := tk.Settle("ip", -1)
	tk.Release()
	_, errRule := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{{Name: "ip", Limit: window.Limit{N: 0, Per: time.Second}}}})
	_, errCost := clientpool.New(clientpool.Table{Rules: rules, Default: []clientpool.Cost{{Rule: "ip", Units: -1}}})
	_, errInflight := clientpool.New(clientpool.Table{Rules: []clientpool.Rule{{Name: "ip", Limit: window.Limit{N: 1, Per: time.Second}, MaxUnitsInFlight: -1}}})
	negW, err := clientpool.New(clientpool.Table{Rules: rules, UnmatchedUnlimited: true, Endpoints: []clientpool.Endpoint{{Path: "/x",
		Costs: []clientpool.Cost{{Rule: "ip", Weight: func(*http.Request) int64 { return -1 }}}}}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://h/x", nil)
	_, errClassify := negW.Classify(req)
	for name, err := range map[string]error{
		"RateSemaphore.Acquire(-1)":    sem.Acquire(ctx, -1),
		"RateSemaphore.Acquire(3)":     sem.Acquire(ctx, 3),
		"RateSemaphore.Begin(-1)":      errBegin,
		"RateSemaphore.SetLimit(-1)":   sem.SetLimit(-1, time.Second),
		"Limiter.TryN(-1)":             errTry,
		"Pool.Acquire(-3)":             errNeg,
		"Pool.Acquire(3)":              errHeavy,
		"Pool.Acquire(unknown rule)":   errUnknown,
		"Ticket.Settle(-1)":            errSettle,
		"Pool.SetLimit(-1)":            pool.SetLimit("ip", window.Limit{N: -1, Per: time.Second}),
		"New(N 0)":                     errRule,
		"New(negative cost)":           errCost,
		"New(MaxUnitsInFlight -1)":     errInflight,
		"Classify(negative weight)":    errClassify,
		"Pool.Pause(unknown rule)":     pool.Pause("nope", "", time.Now()),
		"Pool.Reconcile(unknown rule)": pool.Reconcile("nope", "", 1),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "ratesem: ") || strings.Count(msg, "ratesem:") != 1 {
			t.Errorf("%s: %q: want one \"ratesem: \" prefix", name, msg)
		}
	}
	// Plain words, not the pool's notation ("ip[]×3" on 3c9e6ad).
	for _, err := range []error{errHeavy, errNeg} {
		if msg := err.Error(); strings.Contains(msg, "[]") || strings.Contains(msg, "×") || !strings.Contains(msg, `rule "ip"`) {
			t.Errorf("%q: want the rule named in words", msg)
		}
	}
	if msg := errHeavy.Error(); !strings.Contains(msg, "lower the weight or raise the rule's limit") {
		t.Errorf("%q: want what to do", msg)
	}
}
