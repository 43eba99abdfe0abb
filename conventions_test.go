package ratesem_test

import (
	"errors"
	"os"
	"os/exec"
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
