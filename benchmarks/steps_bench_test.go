package benchmarks

// BenchmarkRstoreSteps splits the server time of rstore's admission script
// (internal/rstore/script.go) into its steps, to show where it goes:
//
//	go test -run XXX -bench 'RstoreSteps$' -benchtime 3000x -count 3 .
//
// The script text is read from the source of internal/rstore (the constant
// prelude, found with go/parser), so the steps follow the script as it is.
// The prefixes are those of the general path (the prelude's helpers:
// loadall, prepare, check); since rstore commit 3e05f73 a call whose
// charges all fit on the stored counts (and a single GCRA or completion
// charge) takes a flat fast path instead, so for those the admit row is the
// fast path and the rows above it describe the general path only. For each contender of
// BenchmarkRedis (GCRA, completion with a 1 ms lease, the three-rule
// Binance order), the KEYS and ARGV of one real Store.Admit are captured
// (a go-redis hook) and sent again, serially, to cumulative prefixes of
// the script, each ending in `return 1`:
//
//   - return1: `return 1`, with the same KEYS and ARGV (the floor);
//   - header: the prelude's first lines (ARGV[4], the instant);
//   - prelude: the whole prelude (it defines its ~15 local functions and
//     the FIELDS table on every run);
//   - load: + loadall (one HMGET of 15 fields per charge, the spec check,
//     15 tonumber);
//   - prepare: + prepare of every charge (leases swept, log pruned,
//     windows rolled, bucket refilled);
//   - check: + check of every charge;
//   - admit: the whole admission script through Store.Admit (+ commit and
//     save: ZADD of the lease, HSET of the changed fields, PEXPIREs).
//
// Each row starts with one real admit (the keys' TTLs run while the
// prefixes write nothing), and a row lasts well under a second (-benchtime
// 3000x).
//
// The prefixes up to check must write nothing, so that they see the state
// the last admit left: in them every redis.call goes through a wrapper that
// skips the write commands (ZADD, ZREM, ZREMRANGEBYSCORE, HSET, HDEL,
// HINCRBY, PEXPIRE), so their rows count the reads and the Lua work, and
// the writes all land in the step from check to admit (plus the wrapper's
// own small cost: compare header with return1). They also run at a frozen
// instant (ARGV[1] = the last admit's instant, which the script takes
// instead of TIME), or else, with the state frozen, more and more of the
// log would fall out of the window as the benchmark runs; so TIME (one
// redis.call, ~1 µs) is in the admit row only. The metric is srv-exec-µs/op: the server's commandstats time
// inside EVALSHA per op; a step's cost is its row less the row before.

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesem/ratesem/internal/rstore"
	"github.com/ratesem/ratesem/window"
)

// readOnlyCalls defines rc, redis.call without the writes.
const readOnlyCalls = `
local W = {ZADD = 1, ZREM = 1, ZREMRANGEBYSCORE = 1, HSET = 1, HDEL = 1, HINCRBY = 1, PEXPIRE = 1, DEL = 1, SET = 1}
local function rc(cmd, ...) if W[string.upper(cmd)] then return 0 end return redis.call(cmd, ...) end
`

// rstorePrelude returns the prelude of the scripts (the constant prelude:
// the helper functions of the general path) from internal/rstore/script.go.
func rstorePrelude(b *testing.B) string {
	fs := token.NewFileSet()
	f, err := parser.ParseFile(fs, "../internal/rstore/script.go", nil, 0)
	if err != nil {
		b.Fatal(err)
	}
	var prelude string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 || vs.Names[0].Name != "prelude" {
			return true
		}
		l, ok := vs.Values[0].(*ast.BasicLit)
		if !ok || l.Kind != token.STRING {
			b.Fatalf("prelude is not a string literal at %v", fs.Position(vs.Pos()))
		}
		if prelude, err = strconv.Unquote(l.Value); err != nil {
			b.Fatal(err)
		}
		return false
	})
	if prelude == "" {
		b.Skip("no constant prelude in internal/rstore/script.go: the steps need updating")
	}
	for _, fn := range []string{"loadall(", "prepare(", "check(", "local function fdiv"} {
		if !strings.Contains(prelude, fn) {
			b.Skipf("the prelude has no %s: the steps need updating", fn)
		}
	}
	return prelude
}

// argsCapture records the arguments of the last EVALSHA or EVAL.
type argsCapture struct{ args []any }

func (a *argsCapture) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (a *argsCapture) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}
func (a *argsCapture) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			a.args = append([]any(nil), cmd.Args()...)
		}
		return next(ctx, cmd)
	}
}

func BenchmarkRstoreSteps(b *testing.B) {
	addr, ownServer := startRedis(b)
	if !ownServer {
		b.Skip("needs a server of its own (reads commandstats)")
	}
	capt := &argsCapture{}
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	rdb.AddHook(capt)
	b.Cleanup(func() { _ = rdb.Close() })
	prelude := rstorePrelude(b)
	// The prefixes must leave the state as the last admit left it, so
	// their writes are skipped: every redis.call goes through rc, which
	// answers 0 to a write command without sending it.
	prelude = readOnlyCalls + strings.ReplaceAll(prelude, "redis.call(", "rc(")
	header, _, ok := strings.Cut(prelude, "local function fdiv")
	if !ok {
		b.Fatal("prelude: no `local function fdiv`")
	}
	steps := []struct{ name, text string }{
		{"return1", "return 1"},
		{"header", header + "\nreturn 1"},
		{"prelude", prelude + "\nreturn 1"},
		{"load", prelude + "\nlocal Ls = loadall(true)\nreturn 1"},
		{"prepare", prelude + "\nlocal Ls = loadall(true)\nfor i = 1, NC do prepare(Ls[i]) end\nreturn 1"},
		{"check", prelude + "\nlocal Ls = loadall(true)\nfor i = 1, NC do prepare(Ls[i]); check(Ls[i]) end\nreturn 1"},
	}
	gcra := rstore.Spec{Kind: rstore.GCRA, Limit: window.Limit{N: 1_000_000, Per: time.Second}, Burst: 1_000_000}
	completion := rstore.Spec{Kind: rstore.Completion, Limit: window.Limit{N: 1 << 40, Per: time.Second}}
	contenders := []struct {
		name    string
		charges func() ([]rstore.Charge, error)
		lease   time.Duration
	}{
		{"gcra", oneCharge(gcra), 0},
		{"completion", oneCharge(completion), time.Millisecond},
		{"binance3", binanceOrder, time.Millisecond},
	}
	ctx := context.Background()
	for _, c := range contenders {
		st, err := rstore.New(rdb, fmt.Sprintf("steps-%d-%s", time.Now().UnixNano(), c.name), rstore.Options{Lease: c.lease})
		if err != nil {
			b.Fatal(err)
		}
		cs, err := c.charges()
		if err != nil {
			b.Fatal(err)
		}
		var last time.Time
		admit := func() error {
			d, err := st.Admit(ctx, "binance:203.0.113.7", cs)
			if err == nil && !d.OK {
				err = fmt.Errorf("refused: %+v", d)
			}
			last = d.Now
			return err
		}
		// A second of admissions, so the window's sets hold what they hold
		// in BenchmarkRedis.
		for end := time.Now().Add(time.Second); time.Now().Before(end); {
			if err := admit(); err != nil {
				b.Fatal(err)
			}
		}
		// fresh admits once more (the keys' TTLs run, and a prefix writes
		// nothing) and returns its KEYS and ARGV: evalsha sha numkeys
		// keys... argv..., with ARGV[1] set to its instant.
		fresh := func(b *testing.B) []any {
			if err := admit(); err != nil {
				b.Fatal(err)
			}
			args := capt.args
			nk, ok := args[2].(int)
			if !ok || len(args) < 4+nk {
				b.Fatalf("captured %v", args)
			}
			args[3+nk] = strconv.FormatInt(last.UnixMicro(), 10)
			return args
		}
		b.Run(c.name, func(b *testing.B) {
			for _, s := range steps {
				sc := goredis.NewScript(s.text)
				if err := sc.Load(ctx, rdb).Err(); err != nil {
					b.Fatalf("%s: %v", s.name, err)
				}
				b.Run(s.name, func(b *testing.B) {
					a := append([]any{"evalsha", sc.Hash()}, fresh(b)[2:]...)
					// The prefixes assume the general path's KEYS/ARGV
					// layout (that of rstore c879bcd); a store whose
					// admission no longer matches it is reported, not
					// measured.
					if err := rdb.Do(ctx, a...).Err(); err != nil {
						b.Skipf("%s: the general path no longer takes this call's KEYS/ARGV (%v): the steps need updating", s.name, err)
					}
					runSteps(b, rdb, func() error { return rdb.Do(ctx, a...).Err() })
				})
			}
			b.Run("admit", func(b *testing.B) { runSteps(b, rdb, admit) })
		})
	}
}

func runSteps(b *testing.B, rdb *goredis.Client, op func() error) {
	ctx := context.Background()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	s := readServerStats(b, rdb)
	b.ReportMetric(float64(s.scriptUsec)/float64(b.N), "srv-exec-µs/op")
	b.ReportMetric(float64(s.calls)/float64(b.N)-1, "redis.calls/op")
}
